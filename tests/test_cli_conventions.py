"""What a user of pytest and nccl-tests expects of the CLI: refused values named with their source,
resumable runs that say so, notices for dropped problems, pytest's exit statuses, -x, --junitxml,
nccl-tests-like bench output, tables that fit the terminal, one dependency list, XDG caches."""
import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"

PACK = '''
from pathlib import Path
from pkb_core import hookimpl

@hookimpl
def pkb_register_problems(register):
    register(Path(__file__).parent / "pkbtest_conv_problems")
'''

EVEN_ONLY = '''"""Sum of ranks, defined only at even world sizes (for tests)."""
import torch.distributed as dist

ID = 951
NAME = "even_only_conv"
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


def install_pack(fake_dist, files: dict):
    site = fake_dist("pkbtest-conv-pack", {"pkb.problems": {"convpack": "pkbtest_conv_pack"}},
                     {"pkbtest_conv_pack": PACK})
    (site / "pkbtest_conv_problems").mkdir()
    for name, text in files.items():
        (site / "pkbtest_conv_problems" / name).write_text(text)
    return site


def one_error_line(result, code):
    """The whole output is one ``Error: `` line and the exit status is ``code``."""
    lines = result.output.strip().splitlines()
    assert result.exit_code == code, result.output
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


def _records(path):
    path = Path(path) / "records.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# --- values that make no sense --------------------------------------------------------------------

BAD_VALUES = [
    (["run", "--trials", "0"], "--trials"),
    (["run", "--nproc", "0"], "--nproc"),
    (["run", "--nproc", "-1"], "--nproc"),
    (["run", "--warmup", "-1"], "--warmup"),
    (["run", "--iters", "0"], "--iters"),
    (["run", "--timeout", "-1"], "--timeout"),
    (["run", "--timeout", "0"], "--timeout"),
    (["run", "--build-timeout", "0"], "--build-timeout"),
    (["run", "--build-jobs", "0"], "--build-jobs"),
    (["run", "--nnodes", "0"], "--nnodes"),
    (["run", "--node-rank", "-1"], "--node-rank"),
    (["run", "--jobs-per-shard", "-1"], "--jobs-per-shard"),
    (["run", "--executor", "slurm", "--slurm-time", "0"], "--slurm-time"),
    (["run", "--executor", "slurm", "--slurm-cpus-per-task", "0"], "--slurm-cpus-per-task"),
    (["run", "--executor", "slurm", "--slurm-gpus-per-node", "-1"], "--slurm-gpus-per-node"),
    (["bench", "--backend", "reference", "--nproc", "0"], "--nproc"),
    (["bench", "--backend", "reference", "--trials", "0"], "--trials"),
    (["bench", "--backend", "reference", "--warmup", "-1"], "--warmup"),
    (["bench", "--backend", "reference", "--iters", "0"], "--iters"),
    (["bench", "--backend", "reference", "--timeout", "0"], "--timeout"),
    (["bench", "--backend", "reference", "--sizes", "0"], "--sizes"),
    (["bench", "--backend", "reference", "--sizes", "-4K"], "--sizes"),
    (["bench", "--backend", "reference", "--sizes", "lots"], "--sizes"),
    (["bench", "--backend", "reference", "--sizes", "4K,4096"], "--sizes"),  # one size twice: two jobs of one key
    (["bench", "--backend", "reference", "--sizes", "4K,,8K"], "--sizes"),  # the empty entry was dropped silently
    (["bench", "--backend", "reference", "--timing-mode", "latency,latency"], "--timing-mode"),
    (["build", "--backend", "reference", "--build-timeout", "-5"], "--build-timeout"),
    (["build", "--backend", "reference", "--build-jobs", "0"], "--build-jobs"),
    (["prompt", "--problem", "1", "--backend", "triton", "--nproc", "0"], "--nproc"),
    (["generate", "--problem", "1", "--backend", "triton", "--model", "m", "--temperature", "-1"], "--temperature"),
    (["generate", "--problem", "1", "--backend", "triton", "--model", "m", "--samples", "0"], "--samples"),
    (["inspect", ".", "--problem", "1", "--rank", "-1"], "--rank"),
    (["inspect", ".", "--problem", "1", "--values", "-1"], "--values"),
]


@pytest.mark.parametrize("args, option", BAD_VALUES, ids=[" ".join(a) for a, _ in BAD_VALUES])
def test_values_that_make_no_sense_are_refused(pkb_invoke, tmp_path, args, option):
    out = tmp_path / "out"
    result = pkb_invoke(*args, *(["--out", out] if args[0] in ("run", "bench") else []))
    assert one_error_line(result, 4).startswith(f"Error: Invalid value for '{option}'")
    assert not out.exists()  # refused before anything ran


def test_a_sweep_size_of_part_of_an_element_is_refused(pkb_invoke, tmp_path):
    """``--sizes 3`` ran as one 4-byte element labelled 3 bytes (a new user's pass, 2026-12-01)."""
    out = tmp_path / "out"
    result = pkb_invoke("bench", "--backend", "reference", "--sizes", "4K,3", "--dtype", "fp32", "--out", out)
    assert one_error_line(result, 4) == "Error: --sizes 3 is not a whole number of fp32 elements (4 bytes each)"
    assert not out.exists()


def test_an_error_spanning_lines_is_printed_on_one(pkb_invoke, fake_dist):
    """A plugin's (or a compiler's) message may hold newlines; the user still gets one `Error:` line."""
    fake_dist("pkbtest-twolines", {"pkb.backends": {"twolines": "pkbtest_twolines"}}, {"pkbtest_twolines": '''
from pkb_core.plugin.backend import BackendInfo
from pkb_core.plugin.hookspecs import hookimpl

@hookimpl
def pkb_backend_info():
    return BackendInfo(name="twolines", devices=("cpu",), requirements=lambda device: "needs libfoo\\n  (not found)")
'''})
    assert one_error_line(pkb_invoke("run", "--backend", "twolines"), 1) == "Error: needs libfoo (not found)"


#: For refusals that only a machine without a GPU gives.
NO_GPU = pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU may be visible here")


@pytest.mark.parametrize("args, code, message", [
    (["run", "--timing-mode", "latency,fast"], 4, "Error: Invalid value for '--timing-mode': unknown timing mode 'fast'"),
    (["run", "--timing-mode", "latency,,window"], 4, "Error: Invalid value for '--timing-mode': an empty name in "
                                                       "'latency,,window'"),
    (["run", "--timing-mode", "window,latency,window"], 4, "Error: Invalid value for '--timing-mode': timing mode "
                                                            "window given twice"),
    (["run", "--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"], 4, "Error: --node-rank 2 needs --nnodes > 2"),
    (["run", "--problem", "3", "--out", "FILE/run"], 1, "Error: cannot create the run directory"),
    (["run", "--problem", "3", "--junitxml", "FILE/junit.xml"], 1, "Error: the --junitxml folder"),
    (["run", "--solution", "DIR"], 1, "Error: solution file"),
    (["inspect", "DIR/nope", "--problem", "1"], 1, "Error: run directory"),
    # Typed values are the command line's, not the configuration's (there is none here).
    (["report", "FILE"], 4, "Error: Invalid value for 'RUN_DIR': Directory"),
    (["build", "x.py"], 4, "Error: Missing option '--backend'."),
    # click keeps the last of a repeated option: the first was dropped without a word.
    (["run", "--problem", "2", "--problem", "7"], 4, "Error: --problem is given more than once: it takes one list "
                                                     "(--problem 2,7)"),
    (["run", "--solution", "a.py", "--solution=b.py"], 4, "Error: --solution is given more than once: it takes one "
                                                           "value"),
    pytest.param(["build", "--backend", "cuda"], 1, "Error: backend 'cuda' needs an NVIDIA GPU", marks=NO_GPU),
    *[pytest.param(args, 1, "Error: --device cuda but no GPU is visible here", marks=NO_GPU)
      for args in (["calibrate", "--device", "cuda", "--no-noise"], ["run", "--device", "cuda"])],
])
def test_more_bad_input_is_one_line(pkb_invoke, tmp_path, monkeypatch, args, code, message):
    monkeypatch.chdir(tmp_path)  # where a run without --out would make runs/<time>
    (tmp_path / "file").write_text("")
    args = [a.replace("FILE", str(tmp_path / "file")).replace("DIR", str(tmp_path)) for a in args]
    result = pkb_invoke(*args)
    assert result.exit_code == code, result.output
    assert result.output.strip().splitlines()[-1].startswith(message), result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists(), "a refused run left its run directory"


def test_out_naming_a_file_says_it_is_a_file(pkb_invoke, tmp_path):
    """Issue 55: `--out FILE` said "File exists", where the news is that FILE is no folder."""
    file = tmp_path / "file"
    file.write_text("")
    assert one_error_line(pkb_invoke("run", "--problem", "3", "--out", file), 1) == \
        f"Error: the run directory {file} is a file, not a folder"
    assert one_error_line(pkb_invoke("run", "--problem", "3", "--out", file / "run"), 1) == \
        f"Error: cannot create the run directory {file / 'run'}: {file} is a file, not a folder"


def test_profile_needs_measure_perf(pkb_invoke, tmp_path):
    line = one_error_line(pkb_invoke("run", "--profile", "--out", tmp_path / "o"), 4)
    assert line == "Error: --profile needs --measure-perf (it profiles timed calls)"


def test_a_timekeeper_engine_that_does_not_exist_is_refused_before_any_job(pkb_invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("PKB_TIMEKEEPER", "fast")
    line = one_error_line(pkb_invoke("run", "--problem", "1", "--out", tmp_path / "o"), 4)
    assert line.startswith("Error: PKB_TIMEKEEPER='fast' is not one of auto, host, device"), line
    assert not (tmp_path / "o").exists()


def test_a_harness_copy_that_does_not_exist_is_refused_before_any_job(pkb_invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("PKB_HARNESS_COPIES", "dma")
    line = one_error_line(pkb_invoke("run", "--problem", "1", "--out", tmp_path / "o"), 4)
    assert line.startswith("Error: PKB_HARNESS_COPIES='dma' is not one of engine, kernels"), line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name, choices", [("PKB_CALL_EVENTS", "off, on"), ("PKB_GROUP_OFFSETS", "off, on")])
def test_a_window_diagnostic_setting_that_does_not_exist_is_refused_before_any_job(pkb_invoke, tmp_path, monkeypatch,
                                                                                    name, choices):
    monkeypatch.setenv(name, "maybe")
    line = one_error_line(pkb_invoke("run", "--problem", "1", "--out", tmp_path / "o"), 4)
    assert line.startswith(f"Error: {name}='maybe' is not one of {choices}"), line
    assert not (tmp_path / "o").exists()


def test_an_ipc_namespace_setting_that_does_not_exist_is_refused_before_any_job(pkb_invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("PKB_IPC_NAMESPACES", "maybe")
    line = one_error_line(pkb_invoke("run", "--problem", "1", "--out", tmp_path / "o"), 4)
    assert line.startswith("Error: PKB_IPC_NAMESPACES='maybe' is not one of auto, on, off"), line
    assert not (tmp_path / "o").exists()


def test_unknown_category_lists_the_categories(pkb_invoke):
    line = one_error_line(pkb_invoke("problems", "--category", "nosuch"), 1)
    assert line.startswith("Error: unknown category 'nosuch' (categories: collective (coll), tensor-parallel (tp)")
    tp = json.loads(pkb_invoke("problems", "--category", "tp", "--json").stdout)
    assert tp and {p["category"] for p in tp} == {"tensor-parallel"}


def test_unknown_command_and_option_are_usage_errors(pkb_invoke):
    assert one_error_line(pkb_invoke("nosuch"), 4) == "Error: No such command 'nosuch'."
    assert "Did you mean '--backend'?" in one_error_line(pkb_invoke("run", "--bakend", "x"), 4)


# --- pkb.toml and the environment ------------------------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ('[run]\nbakend = "triton"\n', "Error: pkb.toml: unknown key 'bakend' in [run] (did you mean 'backend'?)"),
    ('[rum]\nbackend = "triton"\n', "Error: pkb.toml: unknown table [rum] (did you mean [run]?)"),
    ('[run]\nzzz = 1\n', "Error: pkb.toml: unknown key 'zzz' in [run] (valid: backend, build_jobs,"),
    ('backend = "triton"\n', "Error: pkb.toml: unknown key 'backend' at the top (it holds tables: [backends],"),
    ('[run]\nproblem = "1"\nproblems = "2"\n', "Error: pkb.toml: [run] sets 'problems' twice ('problem' and 'problems')"),
])
def test_unknown_tables_and_keys_in_pkb_toml_are_refused(pkb_invoke, tmp_path, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkb.toml").write_text(text)
    for command in (["problems"], ["run", "--out", "o"]):  # every command, not just the one the table is for
        assert one_error_line(pkb_invoke(*command), 4).startswith(message)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("text, message", [
    ("measure_perf = 1", "1 is an integer, not true or false"),
    ("measure_perf = [true]", "[true] is a list, not true or false"),
    ('measure_perf = "banana"', '"banana" is a string that says neither yes nor no; it takes true or false (or '
                                'one of 0, 1, f, false, n, no, off, on, t, true, y, yes)'),
    ("timeout = [5]", "[5] is a list, not a number"),
    ("nproc = 2.5", "2.5 is a float, not an integer"),
    ("nproc = true", "true is a boolean, not an integer"),
    ("trials = true", "true is a boolean, not an integer"),
    ("backend = 3.5", "3.5 is a float, not a string"),
    ("problem = [1, 7.5]", "[1, 7.5] holds a float (7.5); it takes a non-empty list of strings and integers "
                            "(or one comma-separated string)"),
    ("problem = []", "[] is an empty list, not a non-empty list of strings and integers "
                      "(or one comma-separated string)"),
    ("slurm_option = [1]", "[1] is a list, not a list of strings"),
])
def test_a_value_of_the_wrong_toml_type_is_refused_in_one_line(pkb_invoke, tmp_path, monkeypatch, text, message):
    """Issue 55: these ended in a traceback, ran a truncated value, or read a list as its str()."""
    monkeypatch.chdir(tmp_path)
    key = text.split(" =")[0]
    (tmp_path / "pkb.toml").write_text(f"[run]\n{text}\n")
    for command in (["problems"], ["run", "--out", "o"]):
        assert one_error_line(pkb_invoke(*command), 4) == \
            f"Error: Invalid value for {key!r} in [run] of pkb.toml: {message}"
    assert not (tmp_path / "o").exists()


def test_toml_values_become_what_the_command_line_would_give(pkb_pm):
    from pkb_core.cli.config import command_defaults
    from pkb_core.cli.main import prepare
    from pkb_core.config import Config

    cli = prepare(pkb_pm, Config())
    config = Config({"run": {"problem": [1, "allgather"], "timing_mode": ["latency", "graph"], "nproc": 2,
                             "timeout": 30, "measure_perf": True, "slurm_option": "--x=1", "rdzv_id": 7},
                     "report": {"k": [1, 5]}, "inspect": {"problem": 7}}, "pkb.toml")
    defaults, _ = command_defaults(config, cli)
    assert defaults["run"] == {"problems": "1,allgather", "timing_modes": "latency,graph", "nproc": 2,
                               "job_timeout": 30, "measure_perf": True, "slurm_options": ["--x=1"], "rdzv_id": "7"}
    assert defaults["report"] == {"ks": "1,5"} and defaults["inspect"] == {"problem": "7"}


def test_help_works_while_the_configuration_is_wrong(pkb_invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkb.toml").write_text("[rum]\n")
    result = pkb_invoke("run", "--help")
    assert result.exit_code == 0 and "--exitfirst" in result.stdout and "--force" in result.stdout


def test_unknown_table_in_pyproject_names_its_spelling(pkb_invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.pkb.rum]\nbackend = "triton"\n')
    assert one_error_line(pkb_invoke("problems"), 4) == \
        "Error: pyproject.toml: unknown table [tool.pkb.rum] (did you mean [tool.pkb.run]?)"


def test_a_bad_value_names_where_it_came_from(pkb_invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkb.toml").write_text("[run]\nnproc = 0\n")
    assert one_error_line(pkb_invoke("run", "--out", "o"), 4) == \
        "Error: Invalid value for 'nproc' in [run] of pkb.toml: 0 is not in the range x>=1."
    (tmp_path / "pkb.toml").write_text('[run]\ntimeout = "soon"\n')  # keyed by the flag's name
    assert one_error_line(pkb_invoke("run", "--out", "o"), 4).startswith(
        "Error: Invalid value for 'timeout' in [run] of pkb.toml: 'soon' is not a valid float")
    (tmp_path / "pkb.toml").unlink()
    monkeypatch.setenv("PKB_RUN_NPROC", "-1")
    assert one_error_line(pkb_invoke("run", "--out", "o"), 4) == \
        "Error: Invalid value for PKB_RUN_NPROC (environment): -1 is not in the range x>=1."
    monkeypatch.delenv("PKB_RUN_NPROC")
    monkeypatch.setenv("PKB_RUN_TIMEOUT", "-5")  # the flag's name works as well as the parameter's
    assert one_error_line(pkb_invoke("run", "--out", "o"), 4) == \
        "Error: Invalid value for PKB_RUN_TIMEOUT (environment): -5.0 is not in the range x>0."
    monkeypatch.delenv("PKB_RUN_TIMEOUT")
    assert one_error_line(pkb_invoke("run", "--nproc", "0", "--out", "o"), 4) == \
        "Error: Invalid value for '--nproc': 0 is not in the range x>=1."
    (tmp_path / "pkb.toml").write_text("[prompt]\nnproc = 0\n")  # [prompt] gives `pkb generate` its defaults too
    assert one_error_line(pkb_invoke("generate", "--problem", "1", "--backend", "triton", "--model", "m"), 4) == \
        "Error: Invalid value for 'nproc' in [prompt] of pkb.toml: 0 is not in the range x>=1."
    (tmp_path / "pkb.toml").unlink()
    (tmp_path / "pyproject.toml").write_text('[tool.pkb.run]\ntrials = 0\n')
    assert one_error_line(pkb_invoke("run", "--out", "o"), 4) == \
        "Error: Invalid value for 'trials' in [tool.pkb.run] of pyproject.toml: 0 is not in the range x>=1."
    (tmp_path / "pyproject.toml").unlink()
    assert not (tmp_path / "o").exists()


def test_an_unknown_name_found_while_a_command_runs_names_where_it_came_from(pkb_invoke, tmp_path, monkeypatch):
    """A backend or problem is looked up once the command runs (a plugin's may be one), not while
    click reads the options: its error still says where a value nobody typed came from."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkb.toml").write_text('[run]\nbackend = "tritonn"\n')
    assert one_error_line(pkb_invoke("run", "--out", "o"), 1).endswith(
        "; the value came from 'backend' in [run] of pkb.toml")
    (tmp_path / "pkb.toml").write_text("[run]\nproblem = 999\n")
    assert one_error_line(pkb_invoke("run", "--out", "o"), 1) == \
        "Error: unknown problem '999' (see `pkb problems`); the value came from 'problem' in [run] of pkb.toml"
    (tmp_path / "pkb.toml").write_text('[bench]\nsizes = "4K,lots"\n')
    assert one_error_line(pkb_invoke("bench", "--backend", "triton", "--out", "o"), 4) == \
        "Error: Invalid value for 'sizes' in [bench] of pkb.toml: cannot read size 'lots' (use e.g. 4K, 1M, 256M)"
    (tmp_path / "pkb.toml").unlink()
    monkeypatch.setenv("PKB_RUN_BACKEND", "zz")
    assert one_error_line(pkb_invoke("run", "--out", "o"), 1).endswith(
        "; the value came from PKB_RUN_BACKEND (environment)")
    typed = one_error_line(pkb_invoke("run", "--backend", "zz", "--out", "o"), 1)
    assert typed.startswith("Error: unknown backend 'zz'") and "came from" not in typed
    assert not (tmp_path / "o").exists()


def test_flag_names_work_as_keys(pkb_invoke, fake_dist, tmp_path, monkeypatch):
    install_pack(fake_dist, {"951_even_only_conv.py": EVEN_ONLY})
    monkeypatch.chdir(tmp_path)
    # `problem` and `timeout` are the flags' names (--problem, --timeout); their parameters are
    # `problems` and `job_timeout`.
    (tmp_path / "pkb.toml").write_text('[run]\nproblem = "even_only_conv"\nnproc = 3\ntimeout = 30\n')
    result = pkb_invoke("run", "--out", "a", "--json")
    record = json.loads(result.stdout)["results"][0]
    assert (record["problem"], record["world_size"], record["verdict"]) == ("951_even_only_conv", 3, "unsupported")
    monkeypatch.setenv("PKB_RUN_PROBLEM", "nope")  # the environment wins over the file, by the flag's name too
    assert pkb_invoke("run", "--out", "b").output.strip().splitlines()[-1] == \
        "Error: unknown problem 'nope' (see `pkb problems`); the value came from PKB_RUN_PROBLEM (environment)"


# --- reruns, --force, notices -------------------------------------------------------------------------

def test_a_rerun_says_what_it_skips_and_force_reruns(pkb_invoke, tmp_path):
    out = tmp_path / "run"
    first = pkb_invoke("run", "--problem", "3", "--trials", "1", "--out", out)
    assert first.exit_code == 0, first.output
    assert "skipping" not in first.stderr
    (before,) = _records(out)
    again = pkb_invoke("run", "--problem", "3", "--trials", "1", "--out", out, "--save-outputs")
    assert f"skipping 1 recorded job(s) in {out} (use --force to rerun them)" in again.stderr
    assert "1 pass (1 of them recorded earlier, not run again)" in again.stdout
    assert not (out / "outputs").exists()  # skipped: --save-outputs saved nothing
    hint = one_error_line(pkb_invoke("inspect", out, "--problem", "3"), 1)
    assert "--save-outputs --force --out" in hint  # inspect's own hint now works
    forced = pkb_invoke("run", "--problem", "3", "--trials", "1", "--out", out, "--save-outputs", "--force")
    assert forced.exit_code == 0, forced.output
    assert "skipping" not in forced.stderr
    (after,) = _records(out)  # replaced, not appended
    assert after["key"] == before["key"] and after["datetime"] >= before["datetime"]
    assert after["seconds"] != before["seconds"] or after["datetime"] != before["datetime"]
    assert (out / "outputs").is_dir()
    shown = pkb_invoke("inspect", out, "--problem", "3")
    assert shown.exit_code == 0 and "check: candidate matches the reference" in shown.output


def test_problems_without_a_solution_are_named(pkb_invoke, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    shutil.copy(SOLUTIONS / "1_allreduce_symm_mem_style.py", folder / "1_allreduce_mine.py")
    result = pkb_invoke("run", "--problem", "1,3,broadcast,4", "--solutions", folder, "--trials", "1",
                        "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output
    assert (f"note: skipping 2 selected problem(s): 3_broadcast, 4_reduce (no solution file in {folder}; "
            "give --solution FILE or --solutions DIR to run them)") in result.stderr
    assert [r["problem"] for r in _records(tmp_path / "o")] == ["1_allreduce"]


def test_a_backends_missing_samples_are_named(pkb_invoke, tmp_path):
    result = pkb_invoke("run", "--backend", "triton", "--problem", "3,9,layernorm_backward,10", "--trials", "1",
                        "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert ("note: skipping 2 selected problem(s): 9_layernorm_backward, 10_embedding_lookup "
            "(backend triton has no sample for them;") in result.stderr
    assert [r["problem"] for r in _records(tmp_path)] == ["3_broadcast"]


# --- exit statuses, -x, --junitxml ---------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["run", "--problem", "2000-2100"], "Error: no problem matches '2000-2100'"),
    (["run", "--problem", "1", "--solutions", "EMPTY"], "Error: no solution files for the selected problems in"),
    (["run", "--problem", "9", "--backend", "triton"], "Error: no solution files for the selected problems among "
                                                       "backend triton's samples"),
    (["bench", "--problem", "9", "--backend", "reference"], "Error: no selected problem defines a sweep"),
])
def test_nothing_selected_exits_5(pkb_invoke, tmp_path, args, message):
    (tmp_path / "empty").mkdir()
    args = [str(tmp_path / "empty") if a == "EMPTY" else a for a in args]
    result = pkb_invoke(*args, "--out", tmp_path / "o")
    assert result.exit_code == 5, result.output
    assert result.output.strip().splitlines()[-1].startswith(message)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("files, words", [
    # A newcomer's file named a little off (skipped without a word before): named, with the naming
    # rule and the selected problem's file name.
    (("1_allredce.py", "allreduce_mine.py"), "it holds 1_allredce.py, allreduce_mine.py, but a solution is named "
                                             "after its problem, <id>_<name>.py or <id>_<name>_<anything>.py "
                                             "(1_allreduce.py;"),
    # Files all named for other problems: the folder has none for this one, and none is misnamed
    # (a new user's pass, 2026-12-01).
    (("3_broadcast.py",), "it holds files for other problems only (3_broadcast.py); a solution for these would be "
                          "named 1_allreduce.py or <id>_<name>_<anything>.py"),
])
def test_a_folder_without_the_problems_file_says_what_it_holds_and_the_names_pkb_looks_for(pkb_invoke, tmp_path,
                                                                                          files, words):
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in files:
        (folder / name).write_text("def solution(t):\n    return t\n")
    result = pkb_invoke("run", "--problem", "1", "--solutions", folder, "--out", tmp_path / "o")
    assert result.exit_code == 5, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"Error: no solution files for the selected problems in {folder}: {words}"), line


def test_a_solution_file_name_that_is_not_printable_is_refused_in_one_line(pkb_invoke, tmp_path):
    """A newline in a file name printed a line of its own, which read as another job's verdict."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "1_allreduce_x\n[1-1] 1_allreduce  y.py  pass  9.99x.py").write_text("def solution(t):\n    return t\n")
    result = pkb_invoke("run", "--problem", "1", "--solutions", folder, "--out", tmp_path / "o")
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines() == [
        "Error: solution file name '1_allreduce_x\\n[1-1] 1_allreduce y.py pass 9.99x.py' holds a character "
        "that is not printable (a newline, a control code): rename the file"], result.output


@pytest.mark.parametrize("target", ["/nonexistent/1_allreduce_z.py", "self"])
def test_a_dangling_link_or_a_link_loop_among_the_solutions_is_one_line(pkb_invoke, tmp_path, target):
    """Both ended in a traceback (a hostile review, 2026-12-01)."""
    folder = tmp_path / "mine"
    folder.mkdir()
    link = folder / "1_allreduce_z.py"
    link.symlink_to(link if target == "self" else target)
    result = pkb_invoke("run", "--problem", "1", "--solutions", folder, "--out", tmp_path / "o")
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines() == [
        f"Error: solution file {link} is not a file to read (a dangling link, a link loop or a folder)"]


def test_a_second_run_into_a_run_directory_in_use_is_refused_before_it_runs_anything(pkb_invoke, tmp_path):
    """Two runs into one --out each ran every job and appended its records beside the other's (a new
    user's pass, 2026-12-01): a live run holds its run directory; the next one is refused in one line
    (exit 4), and takes the folder once the holder is gone."""
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from pkb_core.process.folder_lock import FolderLock; "
        f"FolderLock.acquire(Path({str(run_dir)!r}), 'run.lock'); print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for command in (("run", "--backend", "reference", "--problem", "1"),
                        ("bench", "--backend", "reference", "--problem", "1", "--sizes", "4K")):
            result = pkb_invoke(*command, "--out", run_dir)
            assert result.exit_code == 4, result.output
            assert result.output.strip().splitlines()[-1] == (
                f"Error: the run directory {run_dir} is in use by another pkb run (pid {holder.pid}): wait for it, "
                "or give this one another --out"), result.output
        assert not (run_dir / "records.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    result = pkb_invoke("run", "--backend", "reference", "--problem", "1", "--trials", "1", "--out", run_dir)
    assert result.exit_code == 0, result.output


def test_too_few_rounds_to_tell_says_how_many_would(pkb_invoke, tmp_path):
    """``--iters 5`` read "too few rounds to tell" with nothing saying how many rounds an interval
    needs (a new user's pass, 2026-12-01): a note under the table says it."""
    result = pkb_invoke("run", "--backend", "reference", "--problem", "1", "--trials", "1", "--measure-perf",
                        "--iters", "5", "--min-iters", "5", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert "note: too few rounds to tell: a speedup's interval needs at least 6 timed rounds; raise --iters " \
           "(or --min-iters) for more" in result.output


def test_exitfirst_stops_after_the_first_failing_job(pkb_invoke, tmp_path):
    folder = tmp_path / "solutions"
    folder.mkdir()
    shutil.copy(SOLUTIONS / "1_allreduce_symm_mem_style.py", folder / "1_allreduce_a_good.py")
    shutil.copy(SOLUTIONS / "1_allreduce_wrong.py", folder / "1_allreduce_b_wrong.py")
    shutil.copy(SOLUTIONS / "1_allreduce_symm_mem_style.py", folder / "1_allreduce_c_good.py")
    out = tmp_path / "out"
    result = pkb_invoke("run", "--solutions", folder, "--problem", "1", "--trials", "1", "--out", out, "-x",
                        "--junitxml", tmp_path / "junit.xml")
    assert result.exit_code == 1, result.output
    assert [(Path(r["solution"]).name, r["verdict"]) for r in _records(out)] == \
        [("1_allreduce_a_good.py", "pass"), ("1_allreduce_b_wrong.py", "fail")]
    assert "stopped (-x/--exitfirst: 1_allreduce " in result.stderr
    assert "1_allreduce_b_wrong.py is fail); 1 job(s) not run" in result.stderr
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    # The next run into the same directory goes on with the job left.
    rest = pkb_invoke("run", "--solutions", folder, "--problem", "1", "--trials", "1", "--out", out)
    assert "skipping 2 recorded job(s)" in rest.stderr
    assert len(_records(out)) == 3 and rest.exit_code == 1  # the recorded failure still counts


def test_exitfirst_stops_at_a_compile_error_before_any_launch(pkb_invoke, tmp_path):
    folder = tmp_path / "solutions"
    folder.mkdir()
    shutil.copy(SOLUTIONS / "1_allreduce_syntax.py", folder / "1_allreduce_a_syntax.py")
    shutil.copy(SOLUTIONS / "1_allreduce_symm_mem_style.py", folder / "1_allreduce_b_good.py")
    out = tmp_path / "out"
    result = pkb_invoke("run", "--solutions", folder, "--problem", "1", "--out", out, "--exitfirst")
    assert result.exit_code == 1
    assert [r["verdict"] for r in _records(out)] == ["compile-error"]
    # No job was launched: each job's candidate group writes its own log from its start. (The
    # failing build was forked by the launch's zygote, whose output is the launch log.)
    assert not list(out.glob("logs/job-*.log"))


def test_unsupported_neither_fails_nor_stops_a_run(pkb_invoke, fake_dist, tmp_path):
    install_pack(fake_dist, {"951_even_only_conv.py": EVEN_ONLY})
    junit = tmp_path / "reports" / "junit.xml"
    result = pkb_invoke("run", "--problem", "even_only_conv,3", "--nproc", "3", "--trials", "1", "-x",
                        "--out", tmp_path / "o", "--junitxml", junit)
    assert result.exit_code == 0, result.output
    assert [r["verdict"] for r in _records(tmp_path / "o")] == ["unsupported", "pass"]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("skipped"), suite.get("failures")) == ("2", "1", "0")
    skipped = suite.find("testcase/skipped")
    assert skipped.get("type") == "unsupported" and "needs an even world size" in skipped.get("message")


def test_junitxml_has_one_testcase_per_job_by_verdict(pkb_invoke, tmp_path):
    folder = tmp_path / "solutions"
    folder.mkdir()
    for name in ("1_allreduce_symm_mem_style.py", "1_allreduce_wrong.py", "1_allreduce_syntax.py"):
        shutil.copy(SOLUTIONS / name, folder / name)
    junit = tmp_path / "junit.xml"
    result = pkb_invoke("run", "--solutions", folder, "--problem", "1", "--trials", "1", "--out", tmp_path / "o",
                        "--junitxml", junit)
    assert result.exit_code == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures"), suite.get("errors"),
            suite.get("skipped")) == ("pkb.reference", "3", "1", "1", "0")
    cases = {Path(c.get("name").split("[")[0]).name: c for c in suite.findall("testcase")}
    assert set(cases) == {"1_allreduce_symm_mem_style.py", "1_allreduce_wrong.py", "1_allreduce_syntax.py"}
    assert all(c.get("classname") == "reference.1_allreduce" and c.get("name").endswith("[W2-tiny-fp32]")
               for c in cases.values())
    assert list(cases["1_allreduce_symm_mem_style.py"]) == []
    failure = cases["1_allreduce_wrong.py"].find("failure")
    assert failure.get("type") == "fail" and "elements differ" in failure.get("message")
    error = cases["1_allreduce_syntax.py"].find("error")
    assert error.get("type") == "compile-error" and "syntax error" in error.text


def _interrupt_inside_a_hanging_job(command, cwd, out, sig=signal.SIGINT) -> None:
    """Run ``command`` (its --out ``out``), send it ``sig`` a few seconds into its first job (which
    hangs), and check it exits 2 (SIGINT; else 128 + the signal) saying the two jobs were not run
    and how to resume."""
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
    deadline = time.monotonic() + 120
    while not list((out / "logs").glob("launch-*.log")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(3)  # well inside the hanging job
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=90)
    if sig == signal.SIGINT:
        assert proc.returncode == 2, (stdout, stderr)
        assert stderr.strip().splitlines()[-1] == "Interrupted (Ctrl-C)"
        assert f"interrupted: 2 job(s) not run; the same command with --out {out} resumes" in stderr
    else:
        assert proc.returncode == 128 + sig, (stdout, stderr)
        assert stderr.strip().splitlines()[-1] == (f"terminated ({signal.Signals(sig).name}): 2 job(s) not run; "
                                                   f"the same command with --out {out} resumes")
    assert "Traceback" not in stderr


def test_ctrl_c_exits_2_and_the_run_resumes(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "pkb_core", "run", "--solution", str(SOLUTIONS / "1_allreduce_hang.py"),
               "--problem", "1,2", "--trials", "1", "--timeout", "100", "--out", str(out),
               "--junitxml", str(tmp_path / "junit.xml")]
    _interrupt_inside_a_hanging_job(command, tmp_path, out)
    assert ET.parse(tmp_path / "junit.xml").getroot().find("testsuite").get("tests") == "0"


def test_sigterm_says_what_did_not_run_and_how_to_resume_as_ctrl_c_does(tmp_path):
    """SIGTERM (timeout, SLURM, systemd) and SIGHUP ended a run without a word (a new user's pass,
    2026-12-02): now the table of what finished and the resume line, exit status 128 + the signal."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "pkb_core", "run", "--solution", str(SOLUTIONS / "1_allreduce_hang.py"),
               "--problem", "1,2", "--trials", "1", "--timeout", "100", "--out", str(out)]
    _interrupt_inside_a_hanging_job(command, tmp_path, out, sig=signal.SIGTERM)


def test_ctrl_c_in_bench_says_what_did_not_run_and_how_to_resume(tmp_path):
    """``pkb bench`` interrupted said only "Interrupted (Ctrl-C)" (a new user's pass, 2026-12-01),
    where its default --out is a new folder each time: it says, as pkb run does, how to resume."""
    folder = tmp_path / "solutions"
    folder.mkdir()
    shutil.copy(SOLUTIONS / "1_allreduce_hang.py", folder / "1_allreduce_hang.py")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "pkb_core", "bench", "--backend", "reference", "--solutions", str(folder),
               "--problem", "1", "--sizes", "4K,8K", "--no-baselines", "--timeout", "100", "--out", str(out)]
    _interrupt_inside_a_hanging_job(command, tmp_path, out)


def test_a_bug_is_an_internal_error_with_its_traceback(fake_dist, tmp_path):
    fake_dist("pkbtest-boom", {"pkb": {"boom": "pkbtest_boom"}}, {"pkbtest_boom": '''
import click
from pkb_core import hookimpl

@hookimpl
def pkb_register_commands(cli):
    @cli.command()
    def boom():
        raise RuntimeError("a bug")
'''})
    result = subprocess.run([sys.executable, "-m", "pkb_core", "boom"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 3
    assert "Traceback" in result.stderr and "RuntimeError: a bug" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("pkb: internal error")


def test_no_problem_pack_gives_a_hint(pkb_invoke, pkb_pm):
    for record in list(pkb_pm.records):
        if record.key.startswith("pkb.problems:") and not record.error:
            pkb_pm.unregister(name=record.key)
    for args in (["problems"], ["problems", "show", "1"], ["run", "--problem", "1"], ["run"]):
        line = pkb_invoke(*args, pm=pkb_pm).output.strip().splitlines()[-1]
        assert line.startswith("Error: no problem pack is installed") and "pip install -e problems" in line, line


# --- timings ---------------------------------------------------------------------------------------------

def test_cpu_mode_says_what_its_timings_are(pkb_invoke, tmp_path):
    untimed = pkb_invoke("run", "--problem", "3", "--trials", "1", "--out", tmp_path / "a")
    assert "ref ms" not in untimed.stdout
    assert "add --measure-perf to time the reference and the solutions" in untimed.stdout
    timed = pkb_invoke("run", "--problem", "3", "--trials", "1", "--measure-perf", "--warmup", "1", "--iters", "3",
                       "--out", tmp_path / "b")
    assert "ref ms" in timed.stdout and "speedup" in timed.stdout
    # Three calls are fewer than six rounds: no interval, so no speedup is shown, only why.
    assert "too few rounds to tell" in timed.stdout
    assert "CPU mode: times are host timings" in timed.stdout and "not GPU performance" in timed.stdout
    assert "Times are host timings, not GPU performance." in timed.stderr
    report = pkb_invoke("report", tmp_path / "b")
    assert "CPU mode: times are host timings" in report.stdout
    assert json.loads(pkb_invoke("report", tmp_path / "b", "--json").stdout)["cpu_timings"] is True


def test_bench_output_is_nccl_tests_like(pkb_invoke, tmp_path):
    args = ("bench", "--backend", "reference", "--problem", "1", "--sizes", "4K,8K", "--nproc", "2",
            "--trials", "1", "--warmup", "1", "--iters", "3", "--out", tmp_path)
    result = pkb_invoke(*args)
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[0].split()
    assert "NCCL" not in result.stdout
    # one column pair per timing mode: on CPU the headline, window mode
    assert ["gloo", "window", "us"] == header[4:7] and "GB/s" in header
    rows = result.stdout.splitlines()[2:4]
    assert all(re.search(r"\d+\.\d\d", row) for row in rows)
    assert not re.search(r"\d[eE][+-]\d", result.stdout)  # fixed point only
    assert re.fullmatch(r"# Avg bus bandwidth : \d+\.\d+ GB/s", result.stdout.strip().splitlines()[-1])
    assert re.search(r"^# Avg bus bandwidth of gloo : \d+\.\d+ GB/s$", result.stdout, re.M)
    # The speedup column is said under the table: a median of paired ratios, its interval on each job's line.
    assert "note: `x <mode>` is the mode's speedup, the median of the rounds' paired ratios" in result.stdout
    progress = [line for line in result.stderr.splitlines() if line.startswith("[")]
    assert [line.split("]")[0] + "]" for line in progress] == ["[1/2]", "[2/2]"]
    assert "1_allreduce  4K  reference  pass" in progress[0]
    again = pkb_invoke(*args, "--json")
    assert "skipping 2 recorded job(s)" in again.stderr
    data = json.loads(again.stdout)
    assert data["reference"] == "gloo" and data["avg_busbw_gbps"] > 0 and len(data["results"]) == 2


# --- tables -----------------------------------------------------------------------------------------------

def test_tables_fit_columns(pkb_invoke, monkeypatch):
    wide = pkb_invoke("problems").stdout  # a pipe without COLUMNS: whole lines
    assert max(len(line) for line in wide.splitlines()) > 120
    monkeypatch.setenv("COLUMNS", "80")
    narrow = pkb_invoke("problems").stdout
    assert max(len(line) for line in narrow.splitlines()) <= 80
    def letters(text):  # every character of the cells (the rule under the headers aside)
        return sorted("".join(line for line in text.splitlines() if set(line) - {"-", " "}).replace(" ", ""))

    assert letters(narrow) == letters(wide)  # wrapped, nothing lost
    monkeypatch.setenv("COLUMNS", "60")
    for args in (["backends", "--device", "cuda"], ["backends", "--device", "cpu"], ["plugins"]):
        text = pkb_invoke(*args).stdout
        assert max(len(line) for line in text.splitlines()) <= 60, text


def test_a_world_size_beyond_the_cores_warns_in_one_line(pkb_invoke, fake_dist, tmp_path):
    """CPU mode: more ranks than cores still runs (not an error), with one line saying why it will be slow."""
    install_pack(fake_dist, {"951_even_only_conv.py": EVEN_ONLY})
    cores = len(os.sched_getaffinity(0))
    crowded = cores + 1 if cores % 2 == 0 else cores + 2  # odd: the problem refuses it, nothing launches
    result = pkb_invoke("run", "--problem", "even_only_conv", "--nproc", crowded, "--out", tmp_path / "a")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: world size {crowded} is more than this machine's {cores} CPU core(s): in CPU "
                        "mode every rank is a process, so they take turns and jobs run slowly (raise --timeout "
                        "if they time out)"]
    result = pkb_invoke("run", "--problem", "even_only_conv", "--nproc", 2, "--out", tmp_path / "b")
    assert result.exit_code == 0 and "warning:" not in result.stderr


def test_one_rank_is_refused_where_it_would_check_nothing(pkb_invoke, tmp_path):
    """pkb runs no problem at one rank: --nproc 1 made every job unsupported and the run exit 0
    (a CI job could pass having checked nothing; a new user, 2026-12-02)."""
    bench = ["bench", "--backend", "reference", "--problem", "1", "--sizes", "4K"]
    for command in (["run", "--problem", "1,2"], bench):
        result = pkb_invoke(*command, "--nproc", 1, "--out", tmp_path / command[0])
        assert result.exit_code == 4, result.output
        assert result.output.strip().splitlines()[-1] == (
            "Error: --nproc 1: no selected problem runs at world size 1 (world size 1: needs at least 2 ranks "
            "(nothing is communicated at W = 1)); give --nproc 2 or more"), result.output
        assert not (tmp_path / command[0]).exists()


LONG_REASON = ("needs a world size that is a power of two and at least four, because its butterfly exchange "
               "pairs rank r with rank r xor 2^k at every step k; three ranks leave one of them without a partner")


def test_reasons_are_whole_in_a_pipe_and_wrapped_to_columns(pkb_invoke, fake_dist, tmp_path, monkeypatch):
    """docs/cli.md: output to a pipe is never cut unless $COLUMNS is set; then long cells wrap, whole."""
    install_pack(fake_dist, {"951_even_only_conv.py": EVEN_ONLY.replace('"needs an even world size"',
                                                                         repr(LONG_REASON))})
    run = pkb_invoke("run", "--problem", "even_only_conv", "--nproc", "3", "--out", tmp_path)
    report = pkb_invoke("report", tmp_path)
    for result in (run, report):
        assert result.exit_code == 0, result.output
        assert f"world size 3: {LONG_REASON}" in result.stdout
    monkeypatch.setenv("COLUMNS", "80")
    for args in (["run", "--problem", "even_only_conv", "--nproc", "3", "--out", tmp_path], ["report", tmp_path]):
        text = pkb_invoke(*args).stdout
        table = next(block for block in text.split("\n\n") if "world size 3:" in block)  # not the notes
        assert max(len(line) for line in table.splitlines()) <= 80, text
        assert "".join(LONG_REASON.split()) in "".join(text.split()), text  # wrapped, every word kept


def test_render_table_wraps_text_and_keeps_numbers():
    from pkb_core.results.table import render_table

    text = render_table(["id", "name", "notes"], [[1, "q" * 30, "word " * 40], [22, "b", ""]], width=50)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 50
    assert lines[2].startswith(" 1  ") and lines[-1].startswith("22  b")
    assert "".join(text.split()).count("q") == 30
    assert render_table(["x"], [[12345.678]], width=None).splitlines()[2] == "12346"
    assert render_table(["x"], [[0.5]], formats={0: ".2f"}).splitlines()[2] == "0.50"


# --- the cache, dependencies, problem files ------------------------------------------------------------------

def test_cache_dir_honours_pkb_cache_dir_then_xdg(monkeypatch, tmp_path):
    from pkb_core import cache_dir
    from pkb_core.cache import builds_dir

    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "own"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "own" and builds_dir() == tmp_path / "own" / "builds"
    monkeypatch.delenv("PKB_CACHE_DIR")
    assert cache_dir() == tmp_path / "xdg" / "pkb" and builds_dir() == tmp_path / "xdg" / "pkb" / "builds"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # the XDG spec: ignored
    assert cache_dir() == Path.home() / ".cache" / "pkb"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "pkb"


def test_the_tests_never_touch_the_users_cache():
    from pkb_core import cache_dir

    assert not str(cache_dir()).startswith(str(Path.home() / ".cache"))
    assert os.environ["PKB_CACHE_DIR"] == str(cache_dir())


def test_one_dependency_list():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {"test", "cluster", "plots"} <= set(project["optional-dependencies"])
    # Every runtime dependency pkb declares is one it imports (attrs: the contracts), and the
    # contracts' attrs is declared, not borrowed from whatever else is installed.
    declared = {re.split(r"[<>=;\[ ]", d, maxsplit=1)[0] for d in project["dependencies"]}
    imported = set()
    for path in ROOT.joinpath("pkb_core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    assert declared <= imported, declared - imported
    assert "attrs" in declared
    install = (ROOT / "scripts" / "install").read_text()
    pip_lines = [line for line in install.splitlines() if "pip install" in line]
    # torch first (when absent), then the distributions with the dependencies they declare.
    assert 'pip install -q "torch==2.13.0"' in pip_lines[0]
    assert len(pip_lines) == 2 and "--no-deps" not in pip_lines[1] and '-e ".[${EXTRAS}]"' in pip_lines[1]
    assert "-e problems" in pip_lines[1] and "backends/*/" in pip_lines[1]
    assert "test,cluster,plots" in install
    offline = (ROOT / "scripts" / "install-offline").read_text()
    assert "--no-deps --no-build-isolation -e . -e problems" in offline  # the GPU image: no network


def test_a_non_literal_sizes_is_named(tmp_path):
    from pkb_core.problem.contract import ProblemFileError, read_spec

    path = tmp_path / "1001_allreduce_max.py"
    path.write_text(_doc_example().replace('"default": {"n": 1048576}', '"default": {"n": 1 << 20}'))
    with pytest.raises(ProblemFileError, match=r"1001_allreduce_max.py:\d+: SIZES must be a literal \("):
        read_spec(path)


def _doc_example() -> str:
    doc = (ROOT / "docs" / "writing-a-problem.md").read_text()
    return re.search(r"## A worked example.*?```python\n(.*?)```", doc, re.S).group(1)


def test_the_worked_example_of_writing_a_problem_runs(pkb_invoke, fake_dist, tmp_path):
    from pkb_core.problem.contract import read_spec

    install_pack(fake_dist, {"1001_allreduce_max.py": _doc_example()})
    spec = read_spec(next(p for p in sys.path if "site-pkbtest-conv-pack" in p) + "/pkbtest_conv_problems/"
                     "1001_allreduce_max.py")
    assert spec.sizes["default"] == {"n": 1 << 20}
    result = pkb_invoke("run", "--problem", "allreduce_max", "--nproc", "3", "--trials", "2", "--out", tmp_path,
                        "--json")  # the doc's check
    assert result.exit_code == 0, result.output
    assert [r["verdict"] for r in json.loads(result.stdout)["results"]] == ["pass"]


def test_a_file_named_for_another_problem_says_so(pkb_invoke, tmp_path):
    """--problem wins over the file's name; the run says which it took (a new user's all-reduce
    file ran as problem 7 and only failed on a shape)."""
    from pkb_core.plugin.manager import backend_infos, get_plugin_manager

    samples = backend_infos(get_plugin_manager())["triton"].samples
    result = pkb_invoke("run", "--backend", "triton", "--solution", samples / "3_broadcast.py", "--problem", "4",
                        "--trials", "1", "--out", tmp_path / "run")
    assert "note: 3_broadcast.py is named for problem 3; it runs as 4_reduce, as --problem says" in result.stderr


def test_the_speedup_note_names_the_mode_the_table_is_read_in():
    """A new user could not tell which timing mode a `pkb run` table's times were (window by
    default, or what --timing-mode asked for): the note under it names it, and none where no record says."""
    from pkb_core.cli.run import speedup_note
    from pkb_core.contracts.record import Record

    def record(mode):
        return Record(key="k", problem_id=1, problem="1_allreduce", category="collective", backend="reference",
                      solution="reference", world_size=2, size="tiny", dtype="fp32", mode="eval", verdict="pass",
                      timing_mode=mode)

    assert "median time a call in window mode (the headline: the first --timing-mode that could time here, " \
        "window by default);" in speedup_note([record("window")])
    assert "in latency and window mode" in speedup_note([record("window"), record("latency")])
    assert speedup_note([record(None)]).startswith("note: ref ms and sol ms are each side's median time a call; ")


def test_a_mode_timed_beside_the_headline_is_shown_under_the_table():
    """A new user's `--timing-mode window,latency` showed window mode's table and nothing of
    latency's: each mode beside the headline gets a note with every job's speedup in it."""
    from pkb_core.cli.run import DIAGNOSTIC_SHOWN, diagnostic_notes
    from pkb_core.contracts.record import Record
    from pkb_core.contracts.timing import ModeTiming, Speedup, Timing

    def record(problem, modes):
        timing = Timing(modes={name: ModeTiming(speedup=Speedup(value=value, low=value - 0.1, high=value + 0.1))
                               if value else ModeTiming(unavailable="graph needs a GPU")
                               for name, value in modes.items()}, primary=next(iter(modes)))
        return Record(key=problem, problem_id=1, problem=problem, category="collective", backend="reference",
                      solution="reference", world_size=2, size="tiny", dtype="fp32", mode="eval", verdict="pass",
                      timing_mode=next(iter(modes)), stats=timing, speedup=next(iter(modes.values())))

    notes = diagnostic_notes([record("1_allreduce", {"window": 1.5, "latency": 1.25, "graph": None}),
                              record("2_allgather", {"window": 1.0})])
    assert notes == ["note: latency mode beside the headline (a diagnostic, never claimed): 1_allreduce reference "
                     "1.25x [1.15, 1.35] (records: stats.modes.latency)"]
    many = diagnostic_notes([record(f"{n}_p", {"window": 1.0, "latency": 1.0}) for n in range(DIAGNOSTIC_SHOWN + 2)])
    assert many[0].count("1.00x") == DIAGNOSTIC_SHOWN and ", and 2 more (records:" in many[0]
    assert diagnostic_notes([record("3_broadcast", {"window": 1.0})]) == []
    # A launcher clock at the head: the table's speedups are said to be unclaimed, window's beside it is the judge's.
    latency_first = diagnostic_notes([record("1_allreduce", {"latency": 1.5, "window": 1.1})])
    assert latency_first[0].startswith("note: window mode beside the headline (the judge's clock, not the headline "
                                       "here): 1_allreduce reference 1.10x")
    assert latency_first[1].startswith("note: the table's speedups in latency mode are a launcher clock's")
    assert "never claimed (claimed_speedup) nor counted by pkb report" in latency_first[1]
    # A record of a version that kept no timing mode (a rerun into an old run folder) names none, and breaks nothing.
    older = Record(key="o", problem_id=1, problem="1_allreduce", category="collective", backend="reference",
                   solution="reference", world_size=2, size="tiny", dtype="fp32", mode="eval", verdict="pass",
                   speedup=1.2)
    assert diagnostic_notes([older, record("1_allreduce", {"latency": 1.5})])[0].startswith(
        "note: the table's speedups in latency mode are")


def test_timing_options_without_measure_perf_are_said_to_be_ignored(pkb_invoke, tmp_path):
    """A new user's `--timing-mode window --warmup 3` without --measure-perf ran untimed, silently."""
    untimed = pkb_invoke("run", "--problem", "3", "--trials", "1", "--timing-mode", "window", "--warmup", "3",
                         "--out", tmp_path / "a")
    assert untimed.exit_code == 0, untimed.output
    assert "note: --timing-mode, --warmup shape the timing, and nothing is timed without --measure-perf: ignored" \
        in untimed.stderr
    plain = pkb_invoke("run", "--problem", "3", "--trials", "1", "--out", tmp_path / "b")
    assert "nothing is timed without" not in plain.stderr


def test_solutions_run_by_a_backend_nobody_chose_or_they_do_not_declare_say_so(pkb_invoke, tmp_path):
    """With no --backend, files run under the reference backend, where torch.distributed is allowed
    (a new user's first "pass" was a call to dist.all_reduce); a file's BACKEND = "name" (what pkb
    submit honours) that --backend contradicts is named."""
    folder = tmp_path / "sols"
    folder.mkdir()
    (folder / "1_allreduce.py").write_text('BACKEND = "triton"\nimport torch.distributed as dist\n\n\n'
                                           "def solution(tensor):\n    out = tensor.clone()\n"
                                           "    dist.all_reduce(out)\n    return out\n")
    unchosen = pkb_invoke("run", "--solutions", folder, "--trials", "1", "--out", tmp_path / "a")
    assert "note: no --backend given: these solutions run under the reference backend" in unchosen.stderr
    assert 'note: 1_allreduce.py declares BACKEND = "triton"; pkb run runs it by --backend (reference)' in unchosen.stderr
    chosen = pkb_invoke("run", "--backend", "reference", "--solutions", folder, "--trials", "1", "--out", tmp_path / "b")
    assert "no --backend given" not in chosen.stderr and "declares BACKEND" in chosen.stderr
    (folder / "1_allreduce.py").write_text((folder / "1_allreduce.py").read_text().replace('BACKEND = "triton"\n', ""))
    plain = pkb_invoke("run", "--backend", "reference", "--solutions", folder, "--trials", "1", "--out", tmp_path / "c")
    assert "note:" not in plain.stderr
