"""Modules a backend serves to solution files only (BackendInfo.solution_modules),
and names it refuses (unsupported_modules): through `pkb run` on the CPU, with a
throwaway backend, so the builder and the sealed candidate processes are the real ones."""
import json
import sys

import pytest

BACKEND = '''
from pkb_core.plugin.backend import BackendInfo
from pkb_core.plugin.hookspecs import hookimpl

@hookimpl
def pkb_backend_info():
    return BackendInfo(name="servesmods", devices=("cpu",), custom_kernels=True,
                       solution_modules={"harness.helpers": "pkbtest_served_helpers"},
                       unsupported_modules={"harness.mc_runtime": "needs multicast, which this test backend lacks"})
'''

HELPERS = '''"""What the test backend serves as harness.helpers."""
import torch
from pkb_core.symmetric import handle_of

__all__ = ["sum_over_ranks"]


def sum_over_ranks(tensor):
    handle = handle_of(tensor)
    handle.barrier()
    out = torch.zeros_like(tensor)
    for peer in range(handle.world_size):
        out += handle.get_buffer(peer, tuple(tensor.shape), tensor.dtype)
    handle.barrier()
    return out


def _private():
    pass
'''

AT_IMPORT = '''
from harness.helpers import sum_over_ranks

def solution(tensor):
    return sum_over_ranks(tensor)
'''

LAZY = '''
def solution(tensor):
    import harness.helpers
    return harness.helpers.sum_over_ranks(tensor)
'''

REFUSED = '''
import torch
from harness.helpers import sum_over_ranks

def solution(tensor):
    from harness import mc_runtime
    return sum_over_ranks(tensor)
'''

DYNAMIC = '''
import importlib
runtime = importlib.import_module("harness." + "mc_runtime")  # not visible to the static check

def solution(tensor):
    return tensor
'''


@pytest.fixture
def servesmods(fake_dist, tmp_path, monkeypatch):
    fake_dist("pkbtest-servesmods", {"pkb.backends": {"servesmods": "pkbtest_servesmods"}},
              {"pkbtest_servesmods": BACKEND, "pkbtest_served_helpers": HELPERS})
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "solutions"
    folder.mkdir()
    for tag, source in (("atimport", AT_IMPORT), ("lazy", LAZY), ("refused", REFUSED), ("dynamic", DYNAMIC)):
        (folder / f"1_allreduce_{tag}.py").write_text(source)
    return folder


def test_served_modules_pass_statically_refused_ones_are_unsupported(pkb_invoke, servesmods, tmp_path):
    result = pkb_invoke("run", "--backend", "servesmods", "--solutions", servesmods, "--problem", "1",
                        "--trials", "1", "--nproc", "2", "--timeout", "60", "--out", tmp_path / "run", "--json")
    records = {r["solution"].rsplit("/", 1)[-1]: r for r in json.loads(result.stdout)["results"]}
    for name in ("1_allreduce_atimport.py", "1_allreduce_lazy.py"):
        assert records[name]["verdict"] == "pass", records[name].get("reason")
    refusal = "imports harness.mc_runtime: needs multicast, which this test backend lacks"
    refused, dynamic = records["1_allreduce_refused.py"], records["1_allreduce_dynamic.py"]
    assert refused["verdict"] == "unsupported" and refused["reason"].endswith(refusal), refused
    # Found only once the file's code ran: the process that says so may be the solution's own
    # forgery (docs/trust.md), so it is a compile error, which fails the run, with the same reason.
    assert dynamic["verdict"] == "compile-error" and refusal in dynamic["reason"], dynamic
    assert dynamic["reason"].endswith("(reported once its code was imported: a compile error, not unsupported)")
    assert "\n" not in refused["reason"] + dynamic["reason"]
    # unsupported rows are not counted against the backend
    report = pkb_invoke("report", tmp_path / "run", "--json")
    assert json.loads(report.stdout)["aggregates"]["unsupported"] == 1


def test_only_solution_code_is_served(servesmods, tmp_path):
    from pkb_core.candidate import solution_modules
    from pkb_core.candidate.solution import load_module

    solution_modules.withdraw()
    solution_modules.provide({"harness.helpers": "pkbtest_served_helpers"},
                             {"harness.mc_runtime": "needs multicast"})
    try:
        module = load_module(servesmods / "1_allreduce_atimport.py")
        import pkbtest_served_helpers

        assert module.sum_over_ranks is pkbtest_served_helpers.sum_over_ranks
        assert "harness" not in sys.modules and "harness.helpers" not in sys.modules
        with pytest.raises(ModuleNotFoundError):
            import harness.helpers  # noqa: F401 - this test is no solution
        names = set(load_module(servesmods / "1_allreduce_lazy.py").solution.__globals__)
        assert "harness" not in names
    finally:
        solution_modules.withdraw()


PKB_TRITON_TREE_FILE = '''
import torch
from utils.cuda_helpers import compile_cuda_extension  # PKB's Triton trees import it (and build CUDA)

def solution(tensor):
    return tensor
'''


def test_triton_backend_serves_pkb_cuda_helper_on_gpus_and_says_why_not_on_cpu(pkb_invoke, tmp_path, monkeypatch):
    """PKB's Triton trees import ``utils.cuda_helpers`` in 69 of 70 files. With pkb-cuda
    installed the triton backend serves it on GPUs, as the cuda backend does; in CPU mode
    the file is ``unsupported`` with the reason. (Both were ``ModuleNotFoundError: No module
    named 'utils'``, a compile error for every file.)"""
    pytest.importorskip("pkb_cuda")
    import pkb_triton.plugin as triton_plugin

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert triton_plugin.pkb_backend_info().solution_modules == {"utils.cuda_helpers": "pkb_cuda.pkb_helpers"}
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "solutions"
    folder.mkdir()
    (folder / "1_allreduce_triton.py").write_text(PKB_TRITON_TREE_FILE)
    result = pkb_invoke("run", "--backend", "triton", "--solutions", folder, "--problem", "1", "--trials", "1",
                        "--nproc", "2", "--timeout", "60", "--out", tmp_path / "run", "--json")
    (record,) = json.loads(result.stdout)["results"]
    assert record["verdict"] == "unsupported", record
    assert record["reason"] == "imports utils.cuda_helpers: " + triton_plugin.CPU_UNSUPPORTED["utils.cuda_helpers"]
