"""The ParallelKittens backend (pkb-parallelkittens) on a machine without a GPU.

What runs here: the plugin loads and describes itself (the BackendContract
suite), refuses CPU mode in one line, names a missing or broken
THUNDERKITTENS_ROOT, builds through the CUDA backend's compile helper with
ThunderKittens' flags (checked by intercepting it), refuses multicast, and
builds the per-rank address tables that become ``pkb::pk::pgl`` layouts.
With nvcc and a ThunderKittens checkout in THUNDERKITTENS_ROOT, the samples
are also compiled to objects for sm_90a (about a minute each: torch's and
ThunderKittens' headers); without them that test is skipped.
"""
from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from pkb_core.errors import BackendUnavailable, CompileError, SolutionUnsupported
from pkb_core.testing import BackendContract

pk = pytest.importorskip("pkb_parallelkittens")
pkb_cuda = pytest.importorskip("pkb_cuda")

from pkb_parallelkittens import build  # noqa: E402
from pkb_parallelkittens import plugin  # noqa: E402

TOOL = Path(__file__).resolve().parents[1] / "tools" / "compile_check.py"


class TestParallelKittensBackend(BackendContract):
    backend = "parallelkittens"


@pytest.fixture
def fake_tk(tmp_path, monkeypatch):
    """A directory that looks like a ThunderKittens checkout, as THUNDERKITTENS_ROOT."""
    root = tmp_path / "ThunderKittens"
    (root / "include").mkdir(parents=True)
    (root / "prototype").mkdir()
    (root / "include" / "kittens.cuh").write_text("#pragma once\n")
    monkeypatch.setenv("THUNDERKITTENS_ROOT", str(root))
    return root


# ---------------------------------------------------------------------------
# loading, describing, refusing
# ---------------------------------------------------------------------------

def test_plugin_and_package_import_light():
    code = ("import sys, pkb_parallelkittens, pkb_parallelkittens.plugin\n"
            "pkb_parallelkittens.plugin.pkb_backend_info()\n"
            "heavy = [m for m in ('torch', 'triton') if m in sys.modules]\n"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_pkb_backends_says_why_not_on_cpu(pkb_invoke):
    result = pkb_invoke("backends", "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    row = {r["name"]: r for r in json.loads(result.stdout)["backends"]}["parallelkittens"]
    assert row["available"] is False
    assert row["reason"] == "backend 'parallelkittens' needs an NVIDIA GPU"
    assert row["distribution"] == "pkb-parallelkittens"


def test_pkb_run_on_cpu_exits_with_one_line(pkb_invoke, tmp_path):
    result = pkb_invoke("run", "--backend", "parallelkittens", "--device", "cpu", "--out", tmp_path)
    assert result.exit_code == 1
    assert result.output.strip() == "Error: backend 'parallelkittens' needs an NVIDIA GPU"


def test_requirements_name_an_unset_thunderkittens_root(monkeypatch):
    monkeypatch.setattr("pkb_cuda.toolchain.missing", lambda device="cuda": None)
    monkeypatch.delenv("THUNDERKITTENS_ROOT", raising=False)
    reason = plugin.requirements("cuda")
    assert reason.startswith("THUNDERKITTENS_ROOT is not set") and "\n" not in reason


def test_requirements_name_a_checkout_without_kittens_cuh(monkeypatch, tmp_path):
    monkeypatch.setattr("pkb_cuda.toolchain.missing", lambda device="cuda": None)
    monkeypatch.setenv("THUNDERKITTENS_ROOT", str(tmp_path))
    assert plugin.requirements("cuda") == (f"$THUNDERKITTENS_ROOT/include/kittens.cuh is missing "
                                           f"(THUNDERKITTENS_ROOT={tmp_path})")


def test_requirements_add_what_the_cuda_backend_misses(monkeypatch, fake_tk):
    monkeypatch.setattr("pkb_cuda.toolchain.missing", lambda device="cuda": "nvcc not found (set CUDA_HOME)")
    assert plugin.requirements("cuda") == "nvcc not found (set CUDA_HOME)"
    monkeypatch.setattr("pkb_cuda.toolchain.missing", lambda device="cuda": None)
    assert plugin.requirements("cuda") is None


def test_requirements_are_the_backend_info_the_core_checks(monkeypatch):
    monkeypatch.setattr(plugin, "requirements", lambda device: "THUNDERKITTENS_ROOT is not set (...)")
    assert plugin.pkb_backend_info().unavailable_reason("cuda") == "THUNDERKITTENS_ROOT is not set (...)"


# ---------------------------------------------------------------------------
# compile(): the CUDA backend's helper with ThunderKittens' flags
# ---------------------------------------------------------------------------

def test_compile_without_thunderkittens_is_a_compile_error(monkeypatch):
    monkeypatch.delenv("THUNDERKITTENS_ROOT", raising=False)
    with pytest.raises(CompileError, match=r"extension 'k': THUNDERKITTENS_ROOT is not set"):
        pk.compile("k", "__global__ void k() {}")


def test_compile_goes_through_pkb_cuda_with_thunderkittens_flags(monkeypatch, fake_tk):
    calls = []
    monkeypatch.setattr(pkb_cuda, "compile", lambda *args, **kwargs: calls.append((args, kwargs)) or "module")
    monkeypatch.setenv("PKB_WORLD_SIZE", "4")
    assert pk.compile("k", "__global__ void k() {}", "void run();", ["run"]) == "module"
    (name, source, cpp, functions), options = calls[0]
    assert (name, cpp, functions) == ("k", "void run();", ["run"])
    assert source.index('#include "kittens.cuh"') < source.index("__global__ void k() {}")
    assert "namespace pk" in source and '#line 1 "k.cu"' in source
    flags = options["extra_cuda_cflags"]
    for flag in ("-std=c++20", "-DKITTENS_HOPPER", "-gencode=arch=compute_90a,code=sm_90a", "--use_fast_math",
                 "--expt-extended-lambda", "--expt-relaxed-constexpr", "-Xcompiler=-Wno-psabi",
                 "-Xcompiler=-fno-strict-aliasing", "-DNDEBUG", "-O3", "-DPKB_WORLD_SIZE=4"):
        assert flag in flags, flag
    assert any(f.startswith("-DPKB_TK_FINGERPRINT=0x") for f in flags)
    assert options["extra_include_paths"][:2] == [str(fake_tk / "include"), str(fake_tk / "prototype")]
    assert options["extra_ldflags"][0] == "-lcuda"
    assert options["prelude"] is True  # pkb_cuda.cuh: the CAS barrier
    pk.compile("k", "__global__ void k() {}", world=8, extra_cuda_cflags=["-lineinfo"])
    assert "-DPKB_WORLD_SIZE=8" in calls[1][1]["extra_cuda_cflags"]
    assert calls[1][1]["extra_cuda_cflags"][-1] == "-lineinfo"


def test_a_different_checkout_is_a_different_build(fake_tk):
    before = build.tk_fingerprint()
    assert before == build.tk_fingerprint()
    (fake_tk / "include" / "extra.cuh").write_text("// new\n")
    assert build.tk_fingerprint() != before


def test_world_size_comes_from_the_environment_outside_a_worker(monkeypatch):
    monkeypatch.delenv("PKB_WORLD_SIZE", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert build.world_size() == 2
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert build.world_size() == 3
    monkeypatch.setenv("PKB_WORLD_SIZE", "8")
    assert build.world_size() == 8


@pytest.mark.parametrize("source", [
    "using barrier = kittens::barrier_t<8>;",
    "barrier_all(G.barrier, {0}, dev_idx);",
    "signal_all(G.barrier, {0}, dev_idx);",
    "kittens::py::TKParallelTensor &output",
    "multimem<float2>::ld_reduce<reduce_op::ADD>(tmp, p);",
    "detail::vmm::multicast_create_handle(&h, &size, bytes, 8);",
    "cuMulticastCreate(&handle, &prop);",
    "T* p = G.output.mc_ptr;",
])
def test_multicast_is_refused_before_compiling(source, monkeypatch, fake_tk):
    monkeypatch.delenv("PKB_ALLOW_MULTICAST", raising=False)
    monkeypatch.setattr(pkb_cuda, "compile", lambda *a, **k: pytest.fail("compiled a multicast source"))
    with pytest.raises(CompileError, match="uses NVLink multicast"):
        pk.compile("k", source)


def test_multicast_guard_ignores_prose_and_can_be_lifted(monkeypatch):
    monkeypatch.delenv("PKB_ALLOW_MULTICAST", raising=False)
    assert pk.multicast_use("// no multicast: unicast pgls only") is None
    monkeypatch.setenv("PKB_ALLOW_MULTICAST", "1")
    assert pk.multicast_use("cuMulticastCreate(&h, &p);") is None


def test_the_core_refuses_solutions_with_thunderkittens_multicast(tmp_path, monkeypatch):
    from pkb_core.plugin.manager import get_plugin_manager
    from pkb_core.plugin.multicast import refuse_solution_multicast

    monkeypatch.delenv("PKB_ALLOW_MULTICAST", raising=False)
    pm = get_plugin_manager(backend="parallelkittens")
    bad = tmp_path / "2_allgather.py"
    bad.write_text('SRC = "barrier_all(G.barrier, {0}, G.dev_idx);"\n\ndef solution(tensor):\n    return tensor\n')
    with pytest.raises(SolutionUnsupported,
                       match=r"^needs NVLink multicast; off on this machine .*calls barrier_all\($"):
        refuse_solution_multicast(pm, str(bad))
    for sample in sorted(plugin.SAMPLES.glob("*.py")):
        refuse_solution_multicast(pm, str(sample))


# ---------------------------------------------------------------------------
# pgl arguments from the harness's symmetric inputs
# ---------------------------------------------------------------------------

def test_pgl_args_give_each_ranks_address(monkeypatch):
    import torch

    from pkb_core.symmetric import forget_allocations, register_allocation

    buffers = [torch.zeros(64, dtype=torch.uint8) for _ in range(3)]
    handle = types.SimpleNamespace(rank=1, world_size=3, buffer_ptrs=[b.data_ptr() for b in buffers],
                                   signal_pad_ptrs_dev=1234, signal_pad_size=4096)
    register_allocation(buffers[1].data_ptr(), 64, handle)
    try:
        args = pk.pgl_args(buffers[1][16:32])
        assert args.ptrs.dtype == torch.int64 and args.ptrs.device.type == "cpu"
        assert args.ptrs.tolist() == [b.data_ptr() + 16 for b in buffers]
        assert (args.pads, args.rank, args.world_size, args.max_blocks) == (1234, 1, 3, 4096 // 4 // 3)
        assert pk.pgl_args(buffers[1][16:32]).ptrs is args.ptrs  # cached per allocation and offset
        assert pk.pgl_args(buffers[1]).ptrs.tolist() == [b.data_ptr() for b in buffers]
    finally:
        forget_allocations()
    with pytest.raises(LookupError):
        pk.pgl_args(torch.zeros(4))


# ---------------------------------------------------------------------------
# the samples
# ---------------------------------------------------------------------------

def test_samples_have_the_reference_signature(pkb_pm):
    from pkb_core.problem.registry import build_registry

    registry = build_registry(pkb_pm)
    files = sorted(plugin.SAMPLES.glob("[0-9]*_*.py"), key=lambda p: int(p.name.split("_")[0]))
    assert [p.name for p in files] == ["1_allreduce.py", "2_allgather.py", "8_alltoall.py"]
    for path in files:
        reference = inspect.signature(registry.get(path.stem.split("_", 1)[0]).load().reference)
        tree = ast.parse(path.read_text())
        fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "solution")
        assert [a.arg for a in fn.args.args] == list(reference.parameters), path.name
        source = path.read_text()
        assert "pk.compile(" in source and "pk.pgl_args(" in source and "pkb::pk::make_pgl<" in source
        assert source.count("pkb::pk::barrier(") >= 2, f"{path.name}: barrier before and after"
        assert "torch.distributed" not in source and pk.multicast_use(source) is None


def _tk_ready():
    return pk.tk_missing() is None and pkb_cuda.find_nvcc() is not None


@pytest.mark.skipif(not _tk_ready(), reason="needs nvcc and a ThunderKittens checkout in THUNDERKITTENS_ROOT")
def test_samples_compile_for_sm90a(tmp_path):
    """Each sample's CUDA source through nvcc to an object (no link: -lcuda
    needs a driver), as load_inline would build it, for 2 ranks."""
    env = dict(os.environ, PKB_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, str(TOOL), "--no-bindings", "--workdir", str(tmp_path / "work")],
                            capture_output=True, text=True, env=env, timeout=3600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ok    ") == 3, result.stdout
