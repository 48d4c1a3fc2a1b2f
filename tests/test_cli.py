"""The CLI: listings, bad input as one clear line, configuration precedence."""
import json

import pytest

PACK = '''
from pathlib import Path
from pkb_core.plugin.hookspecs import hookimpl

@hookimpl
def pkb_register_problems(register):
    register(Path(__file__).parent / "pkbtest_problems")
'''

EVEN_ONLY = '''"""Sum of ranks, defined only at even world sizes (for tests)."""
import torch
import torch.distributed as dist

ID = 950
NAME = "even_only"
CATEGORY = "other"
ORIGIN = "test"
WORLD_SIZE = "even W"
SIZES = {"tiny": {"n": 4}, "default": {"n": 4}, "large": {"n": 4}}


def world_size_error(world_size, params):
    return None if world_size % 2 == 0 else "needs an even world size"


def inputs(ctx):
    return (ctx.exact(ctx.params["n"]),)


def reference(x):
    out = x.clone()
    dist.all_reduce(out)
    return out


def traffic(params, world_size, itemsize):
    return {"link_bytes": 0, "hbm_bytes": 0, "flops": 0}
'''


@pytest.fixture
def test_pack(fake_dist):
    site = fake_dist("pkbtest-pack", {"pkb.problems": {"testpack": "pkbtest_pack"}}, {"pkbtest_pack": PACK})
    (site / "pkbtest_problems").mkdir()
    (site / "pkbtest_problems" / "950_even_only.py").write_text(EVEN_ONLY)
    return site


def _error_line(result):
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1, result.output
    assert lines[-1].startswith("Error: "), result.output
    return lines[-1]


def test_problems_listing_and_show(pkb_invoke):
    listing = {p["id"]: p for p in json.loads(pkb_invoke("problems", "--json").stdout)}
    assert {"id": 1, "name": "allreduce", "category": "collective"}.items() <= listing[1].items()
    shown = pkb_invoke("problems", "show", "reducescatter").output
    assert "7_reducescatter" in shown and "size tiny" in shown and "def reference(tensor)" in shown
    # An exact problem's docstring tells of its integer inputs; the trials of every mantissa bit are said too.
    assert "every mantissa bit" in shown


def test_backends_listing_says_why_unavailable(pkb_invoke, fake_dist):
    fake_dist("pkbtest-needy", {"pkb.backends": {"needy": "pkbtest_needy"}}, {"pkbtest_needy": '''
from pkb_core.plugin.backend import BackendInfo
from pkb_core.plugin.hookspecs import hookimpl

@hookimpl
def pkb_backend_info():
    return BackendInfo(name="needy", devices=("cpu",), requirements=lambda device: "needs libfoo >= 2 (not found)")
'''})
    rows = {b["name"]: b for b in json.loads(pkb_invoke("backends", "--json").stdout)["backends"]}
    assert rows["needy"]["available"] is False and rows["needy"]["reason"] == "needs libfoo >= 2 (not found)"
    assert rows["reference"]["available"] is True
    assert _error_line(pkb_invoke("run", "--backend", "needy")) == "Error: needs libfoo >= 2 (not found)"


@pytest.mark.parametrize("args, message", [
    (["--problem", "nope"], "Error: unknown problem 'nope' (see `pkb problems`)"),
    (["--backend", "nope"], "Error: unknown backend 'nope' (choose one of:"),
    (["--backend", "tritn"], "Error: unknown backend 'tritn' (did you mean 'triton'? choose one of:"),
    (["--solution", "missing.py"], "Error: solution file missing.py does not exist"),
    (["--solutions", "missing_dir"], "Error: solutions directory missing_dir does not exist"),
    # a file where a folder goes (a new user's): not "does not exist", since it does
    (["--solutions", __file__], f"Error: solutions directory {__file__} is a file (give --solution FILE"),
])
def test_bad_input_is_one_line(pkb_invoke, tmp_path, args, message):
    assert _error_line(pkb_invoke("run", *args, "--out", tmp_path)).startswith(message)


def test_world_size_rule_gives_unsupported_without_a_launch(pkb_invoke, test_pack, tmp_path):
    result = pkb_invoke("run", "--problem", "even_only", "--nproc", "3", "--out", tmp_path, "--json")
    record = json.loads(result.stdout)["results"][0]
    assert record["verdict"] == "unsupported"
    assert record["reason"] == "world size 3: needs an even world size"
    assert not (tmp_path / "logs").exists()  # nothing was launched
    assert result.exit_code == 0


def test_config_file_env_and_flag_precedence(pkb_invoke, test_pack, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkb.toml").write_text('[run]\nproblems = "even_only"\nnproc = 3\ntrials = 1\n')
    from_file = json.loads(pkb_invoke("run", "--out", "a", "--json").stdout)["results"][0]
    assert from_file["world_size"] == 3 and from_file["verdict"] == "unsupported"
    monkeypatch.setenv("PKB_RUN_NPROC", "5")
    from_env = json.loads(pkb_invoke("run", "--out", "b", "--json").stdout)["results"][0]
    assert from_env["world_size"] == 5
    from_flag = json.loads(pkb_invoke("run", "--out", "c", "--json", "--nproc", "7").stdout)["results"][0]
    assert from_flag["world_size"] == 7


def test_malformed_config_is_one_line(tmp_path, monkeypatch):
    import subprocess
    import sys

    (tmp_path / "pkb.toml").write_text("[run\n")
    result = subprocess.run([sys.executable, "-m", "pkb_core", "problems"], cwd=tmp_path, capture_output=True,
                            text=True)
    assert result.returncode == 4  # a usage error, as every value refused before anything ran (docs/cli.md)
    assert result.stderr.strip().startswith("Error: cannot read pkb configuration")
    assert len(result.stderr.strip().splitlines()) == 1
