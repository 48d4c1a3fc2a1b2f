"""The NVSHMEM backends (pkb-nvshmem: ``nvshmem`` and ``nvshmem4py``) on a machine without a GPU.

What runs here: both plugins load without their runtimes and describe
themselves (the BackendContract suite), refuse CPU mode in one line, name what
is missing on a GPU node, refuse at init where requirements fail or NVSHMEM
cannot start, set the NVSHMEM environment defaults without overriding the
user, restore numpy's ``row_stack`` for numba-cuda, refuse solutions that use
multicast, and lay out the nvshmem4py heap's handle like torch's. The kernels
themselves need a GPU; ``backends/nvshmem/tools/compile_check.py`` compiles
them without one (opt in here with PKB_NVSHMEM_COMPILE_CHECK=1).
"""
from __future__ import annotations

import ast
import ctypes
import inspect
import json
import os
import struct
import subprocess
import sys
import types
from pathlib import Path

import pytest

from pkb_core.errors import BackendUnavailable, CompileError, SolutionUnsupported
from pkb_core.testing import BackendContract

pkb_nvshmem = pytest.importorskip("pkb_nvshmem")

from pkb_nvshmem import common  # noqa: E402
from pkb_nvshmem import plugin as torch_plugin  # noqa: E402
from pkb_nvshmem.nvshmem4py import plugin as py_plugin  # noqa: E402

TOOL = Path(__file__).resolve().parents[1] / "tools" / "compile_check.py"
BACKENDS = ("nvshmem", "nvshmem4py")


class TestNvshmemBackend(BackendContract):
    backend = "nvshmem"


class TestNvshmem4pyBackend(BackendContract):
    backend = "nvshmem4py"


# ---------------------------------------------------------------------------
# loading, describing, refusing
# ---------------------------------------------------------------------------

def test_plugins_and_packages_import_light():
    code = ("import sys, pkb_nvshmem, pkb_nvshmem.plugin, pkb_nvshmem.nvshmem4py, pkb_nvshmem.nvshmem4py.plugin\n"
            "pkb_nvshmem.plugin.pkb_backend_info(); pkb_nvshmem.nvshmem4py.plugin.pkb_backend_info()\n"
            "heavy = [m for m in ('torch', 'triton', 'numba', 'numpy', 'nvshmem') if m in sys.modules]\n"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_one_distribution_two_backends(pkb_invoke):
    result = pkb_invoke("backends", "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)["backends"]}
    for name in BACKENDS:
        assert rows[name]["distribution"] == "pkb-nvshmem"
        assert rows[name]["available"] is False
        assert rows[name]["reason"] == f"backend '{name}' needs an NVIDIA GPU"
        assert rows[name]["devices"] == ["cuda"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pkb_run_on_cpu_exits_with_one_line(pkb_invoke, tmp_path, backend):
    result = pkb_invoke("run", "--backend", backend, "--out", tmp_path)  # conftest: PKB_DEVICE=cpu
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: backend '{backend}' needs an NVIDIA GPU"
    assert not (tmp_path / "records.jsonl").exists()


def test_pkb_backends_on_a_gpu_node_names_what_is_missing(pkb_invoke):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = pkb_invoke("backends", "--json", "--device", "cuda")
    rows = {r["name"]: r for r in json.loads(result.stdout)["backends"]}
    for name in BACKENDS:
        reason = rows[name]["reason"]
        assert rows[name]["available"] is False and reason and "\n" not in reason
        assert "CPU-only build" in reason or "no visible NVIDIA GPU" in reason


def _all_present(monkeypatch):
    """Pretend every runtime is here (each test then takes one away)."""
    monkeypatch.setattr(common, "cuda_missing", lambda: None)
    monkeypatch.setattr(common, "library_missing", lambda device_bitcode=False: None)
    monkeypatch.setattr(common, "module_missing", lambda name: False)
    fake = types.ModuleType("torch.distributed._symmetric_memory._nvshmem_triton")
    fake.signal_wait_until = object()
    monkeypatch.setitem(sys.modules, "torch.distributed._symmetric_memory._nvshmem_triton", fake)
    import torch.distributed._symmetric_memory as symm_mem

    monkeypatch.setattr(symm_mem, "is_nvshmem_available", lambda: True)
    monkeypatch.setitem(sys.modules, "nvshmem", types.ModuleType("nvshmem"))
    monkeypatch.setitem(sys.modules, "nvshmem.core", types.ModuleType("nvshmem.core"))


def test_requirements_pass_when_everything_is_there(monkeypatch):
    _all_present(monkeypatch)
    assert torch_plugin.requirements("cuda") is None
    assert py_plugin.requirements("cuda") is None


def test_requirements_name_a_missing_gpu(monkeypatch):
    _all_present(monkeypatch)
    monkeypatch.setattr(common, "cuda_missing", lambda: "torch.cuda.is_available() is False (no visible NVIDIA GPU)")
    for check in (torch_plugin.requirements, py_plugin.requirements):
        assert check("cuda") == "torch.cuda.is_available() is False (no visible NVIDIA GPU)"


def test_requirements_name_a_missing_nvshmem_library(monkeypatch, tmp_path):
    _all_present(monkeypatch)
    monkeypatch.undo()  # the real library search, pointed at an empty directory
    monkeypatch.setattr(common, "cuda_missing", lambda: None)
    monkeypatch.setattr(common, "nvshmem_lib_dirs", lambda: [tmp_path])
    reason = torch_plugin.requirements("cuda")
    assert reason.startswith("NVSHMEM library not found (libnvshmem_host.so and libnvshmem_device.bc")
    assert "nvidia-nvshmem-cu13" in reason and "\n" not in reason
    assert "NVSHMEM library not found (libnvshmem_host.so;" in py_plugin.requirements("cuda")


def test_requirements_name_missing_nvshmem4py_with_the_wheel_hint(monkeypatch):
    _all_present(monkeypatch)
    monkeypatch.setattr(common, "module_missing", lambda name: name == "nvshmem.core")
    reason = py_plugin.requirements("cuda")
    assert reason.startswith("nvshmem4py is not importable (no module nvshmem.core): carry the cp312 wheel")
    assert "--no-index --no-deps --target" in reason and "PYTHONPATH" in reason and "\n" not in reason


def test_requirements_name_a_broken_nvshmem4py(monkeypatch):
    _all_present(monkeypatch)
    monkeypatch.delitem(sys.modules, "nvshmem.core")
    broken = types.ModuleType("nvshmem")
    broken.__path__ = []  # a package without nvshmem.core's dependencies
    monkeypatch.setitem(sys.modules, "nvshmem", broken)
    reason = py_plugin.requirements("cuda")
    assert reason.startswith("nvshmem4py is not importable (ModuleNotFoundError: ") and "cp312 wheel" in reason


def test_requirements_name_missing_numba_cuda(monkeypatch):
    _all_present(monkeypatch)
    monkeypatch.setattr(common, "module_missing", lambda name: name == "numba_cuda")
    assert py_plugin.requirements("cuda").startswith("numba-cuda is missing")
    assert torch_plugin.requirements("cuda") is None  # the Triton style does not need it


def test_requirements_name_missing_cffi(monkeypatch):
    # The GPU image has no cffi; nvshmem4py's Numba bindings import it.
    _all_present(monkeypatch)
    monkeypatch.setattr(common, "module_missing", lambda name: name == "cffi")
    assert py_plugin.requirements("cuda").startswith("cffi is missing")
    assert torch_plugin.requirements("cuda") is None


def test_requirements_name_torch_without_nvshmem(monkeypatch):
    _all_present(monkeypatch)
    import torch.distributed._symmetric_memory as symm_mem

    monkeypatch.setattr(symm_mem, "is_nvshmem_available", lambda: False)
    assert torch_plugin.requirements("cuda") == "torch cannot load NVSHMEM (symm_mem.is_nvshmem_available() is False)"


class _Ctx:
    rank, world_size, local_rank = 0, 2, 0
    device = types.SimpleNamespace(type="cuda", index=0)
    control_group = store = None
    barrier = staticmethod(lambda: None)


@pytest.mark.parametrize("module", [torch_plugin, py_plugin])
def test_requirements_are_the_backend_info_the_core_checks(monkeypatch, module):
    monkeypatch.setattr(module, "requirements", lambda device: "NVSHMEM library not found (...)")
    assert module.pkb_backend_info().unavailable_reason("cuda") == "NVSHMEM library not found (...)"


def test_nvshmem_init_sets_env_defaults_then_refuses_a_used_symm_mem_backend(monkeypatch):
    """Init sets the NVSHMEM defaults first, then switches torch's symm_mem
    backend; when something already allocated, that fails in one line."""
    import torch.distributed._symmetric_memory as symm_mem

    for key in common.ENV_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(torch_plugin, "requirements", lambda device: None)
    monkeypatch.setattr(symm_mem, "get_backend", lambda device: "CUDA")

    def used(name):
        raise RuntimeError("Backend can not be changed after use")

    monkeypatch.setattr(symm_mem, "set_backend", used)
    with pytest.raises(BackendUnavailable) as refused:
        torch_plugin.pkb_backend_init(ctx=_Ctx())
    assert str(refused.value) == ("torch symm_mem could not switch to NVSHMEM (RuntimeError: Backend can not be "
                                  "changed after use): something allocated symmetric memory in this process first")
    for key, value in common.ENV_DEFAULTS.items():
        assert os.environ[key] == value


def test_nvshmem_init_switches_the_backend_before_the_first_allocation(monkeypatch):
    import torch.distributed._symmetric_memory as symm_mem

    from pkb_nvshmem import heap as heap_module

    events = []
    monkeypatch.setattr(torch_plugin, "requirements", lambda device: None)
    monkeypatch.setattr(symm_mem, "get_backend", lambda device: "CUDA")
    monkeypatch.setattr(symm_mem, "set_backend", lambda name: events.append(f"set_backend {name}"))

    def start(self):
        events.append("first allocation")
        raise RuntimeError("nvshmemx_init_attr failed")

    monkeypatch.setattr(heap_module.NvshmemHeap, "start", start)
    with pytest.raises(BackendUnavailable, match=r"^NVSHMEM bootstrap failed \(RuntimeError: nvshmemx_init_attr"):
        torch_plugin.pkb_backend_init(ctx=_Ctx())
    assert events == ["set_backend NVSHMEM", "first allocation"]


def test_nvshmem4py_init_failure_is_one_line(monkeypatch):
    for key in common.ENV_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(py_plugin, "requirements", lambda device: None)
    fake = types.ModuleType("nvshmem.core")
    monkeypatch.setitem(sys.modules, "nvshmem", types.ModuleType("nvshmem"))
    monkeypatch.setitem(sys.modules, "nvshmem.core", fake)
    sys.modules["nvshmem"].core = fake

    def no_device(local_rank):
        raise RuntimeError("cudaErrorNoDevice")

    monkeypatch.setattr(py_plugin, "_device", no_device)
    with pytest.raises(BackendUnavailable) as refused:
        py_plugin.pkb_backend_init(ctx=_Ctx())
    assert str(refused.value) == "nvshmem4py could not initialise NVSHMEM (RuntimeError: cudaErrorNoDevice)"
    assert os.environ["NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"] == "lo"


# ---------------------------------------------------------------------------
# environment defaults, library search, row_stack
# ---------------------------------------------------------------------------

def test_env_defaults_never_override_the_user():
    env = {"NVSHMEM_DISABLE_NVLS": "0", "NVSHMEM_DISABLE_LOCAL_ONLY_PROXY": "0"}
    added = common.apply_env_defaults(env)
    assert added == {"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo"}
    assert env == {"NVSHMEM_DISABLE_NVLS": "0", "NVSHMEM_DISABLE_LOCAL_ONLY_PROXY": "0",
                   "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo"}
    assert common.apply_env_defaults(env) == {}
    # Unset: no multicast teams, and no proxy thread polling a core where every peer is over NVLink
    # (pkb's watch for host work left running flagged every sample for it on 2xH200).
    assert common.apply_env_defaults({}) == {"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo", "NVSHMEM_DISABLE_NVLS": "1",
                                             "NVSHMEM_DISABLE_LOCAL_ONLY_PROXY": "1"}


def test_library_search_honours_nvshmem_lib_dir(monkeypatch, tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libnvshmem_host.so.3").write_bytes(b"")
    monkeypatch.setenv("NVSHMEM_LIB_DIR", str(lib))
    assert common.nvshmem_lib_dirs()[0] == lib
    assert common.find_nvshmem_lib() == lib
    assert common.find_nvshmem_lib(device_bitcode=True) != lib  # no bitcode there
    (lib / "libnvshmem_device.bc").write_bytes(b"")
    assert common.find_nvshmem_lib(device_bitcode=True) == lib
    assert common.library_missing(device_bitcode=True) is None


def _numpy_without_row_stack():
    import numpy as np

    stand_in = types.ModuleType("numpy")
    stand_in.vstack = np.vstack
    return stand_in, np


def test_row_stack_is_restored_as_a_separate_wrapper_of_vstack():
    stand_in, np = _numpy_without_row_stack()
    assert common.ensure_numpy_row_stack(stand_in) is True
    row_stack = stand_in.row_stack
    assert row_stack is not np.vstack and callable(row_stack)
    a, b = np.arange(3), np.arange(3, 6)
    assert (row_stack((a, b)) == np.vstack((a, b))).all()
    assert row_stack([a, b], dtype=np.float32).dtype == np.float32
    assert common.ensure_numpy_row_stack(stand_in) is False and stand_in.row_stack is row_stack


def test_row_stack_is_left_alone_where_numpy_has_it():
    np = pytest.importorskip("numpy")
    if not hasattr(np, "row_stack"):
        pytest.skip("this numpy has no row_stack (>= 2.5): the stand-in test covers it")
    before = np.row_stack
    assert common.ensure_numpy_row_stack() is False and np.row_stack is before


def test_row_stack_workaround_lets_numba_cuda_import():
    """numba-cuda overloads np.row_stack at import: simulate numpy 2.5 by
    deleting it, and check the import fails without the workaround only."""
    if common.module_missing("numba_cuda"):
        pytest.skip("numba-cuda is not installed")
    code = ("import numpy as np, sys\n"
            "np.__dict__.pop('row_stack', None)\n"
            "if sys.argv[1] == 'fix':\n"
            "    from pkb_nvshmem.common import ensure_numpy_row_stack; ensure_numpy_row_stack()\n"
            "import numba.cuda.np.arrayobj\n")
    fixed = subprocess.run([sys.executable, "-c", code, "fix"], capture_output=True, text=True)
    assert fixed.returncode == 0, fixed.stderr
    broken = subprocess.run([sys.executable, "-c", code, "nofix"], capture_output=True, text=True)
    assert "row_stack" in broken.stderr


# ---------------------------------------------------------------------------
# the multicast guard
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    "t = nvshmem.core.get_multicast_tensor(Teams.TEAM_WORLD, x)",
    "arr = nvd.get_multicast_array(team, a)",
    "cuMulticastCreate(&handle, &prop);",
    "void* p = nvshmemx_mc_ptr(team, x);",
])
def test_multicast_calls_are_found(source, monkeypatch):
    monkeypatch.delenv(common.ALLOW_MULTICAST_ENV, raising=False)
    assert common.multicast_use(source)


def test_prose_about_multicast_is_not_a_call(monkeypatch):
    monkeypatch.delenv(common.ALLOW_MULTICAST_ENV, raising=False)
    assert common.multicast_use('"""No multicast here: NVLink multicast is off."""') is None
    # torch's multicast is watched at run time (pkb_core.candidate.multicast_gate), not read from the source
    assert common.multicast_use("torch.ops.symm_mem.multimem_all_reduce_(x, 'sum', group)") is None
    monkeypatch.setenv(common.ALLOW_MULTICAST_ENV, "1")
    assert common.multicast_use("get_multicast_tensor(team, x)") is None


@pytest.mark.parametrize("module", [torch_plugin, py_plugin])
def test_the_core_refuses_multicast_solutions(module, tmp_path, monkeypatch):
    from pkb_core.plugin.manager import get_plugin_manager
    from pkb_core.plugin.multicast import refuse_solution_multicast

    monkeypatch.delenv(common.ALLOW_MULTICAST_ENV, raising=False)
    pm = get_plugin_manager(backend=module.NAME)
    bad = tmp_path / "1_allreduce.py"
    bad.write_text("import nvshmem.core as nvs\n\ndef solution(t):\n    return nvs.get_multicast_tensor(0, t)\n")
    with pytest.raises(SolutionUnsupported, match=r"^needs NVLink multicast; off on this machine .*calls "
                                                  r"get_multicast_tensor$"):
        refuse_solution_multicast(pm, str(bad))
    refuse_solution_multicast(pm, None)  # the reference
    for sample in sorted(module.SAMPLES.glob("*.py")):
        refuse_solution_multicast(pm, str(sample))


# ---------------------------------------------------------------------------
# heaps and helpers that do not need a GPU
# ---------------------------------------------------------------------------

def test_nvshmem4py_handle_has_torchs_layout():
    import torch

    from pkb_nvshmem.nvshmem4py.heap import SIGNAL_PAD_BYTES, Nvshmem4pyHandle

    buffer_size = 256
    peers = [torch.full((buffer_size + SIGNAL_PAD_BYTES,), p, dtype=torch.uint8) for p in range(3)]
    handle = Nvshmem4pyHandle(peers[1], peers, buffer_size, rank=1)
    assert (handle.rank, handle.world_size, handle.multicast_ptr) == (1, 3, 0)
    assert handle.buffer_ptrs == [p.data_ptr() for p in peers]
    assert handle.signal_pad_ptrs == [p.data_ptr() + buffer_size for p in peers]
    assert list(struct.unpack("3q", ctypes.string_at(handle.buffer_ptrs_dev, 24))) == handle.buffer_ptrs
    assert list(struct.unpack("3q", ctypes.string_at(handle.signal_pad_ptrs_dev, 24))) == handle.signal_pad_ptrs
    view = handle.get_buffer(2, (4, 2), torch.float16, storage_offset=3)
    assert view.shape == (4, 2) and view.data_ptr() == peers[2].data_ptr() + 6
    pad = handle.get_signal_pad(0)
    assert pad.dtype == torch.int32 and pad.numel() == SIGNAL_PAD_BYTES // 4
    assert pad.data_ptr() == peers[0].data_ptr() + buffer_size
    assert handle.get_signal_pad(0, (2, 3)).shape == (2, 3)


def test_nvshmem_handle_delegates_to_torch_and_fixes_barrier(monkeypatch):
    from pkb_nvshmem import heap as heap_module

    calls = []
    torch_handle = types.SimpleNamespace(rank=1, world_size=2, buffer_ptrs=[16, 32], barrier=lambda **k: None)
    handle = heap_module.NvshmemHandle(torch_handle, barrier=lambda: calls.append("job barrier"))
    assert (handle.rank, handle.world_size, handle.buffer_ptrs, handle.multicast_ptr) == (1, 2, [16, 32], 0)
    handle.barrier()
    # The job's barrier (device work first, then every rank), not torch's device-side one.
    assert calls == ["job barrier"] and handle.get_backend() == "NVSHMEM"


def test_helpers_outside_a_worker_say_so():
    import torch

    from pkb_core.symmetric import forget_allocations, register_allocation

    x = torch.zeros(8)
    register_allocation(x.data_ptr(), 32, types.SimpleNamespace(rank=0, world_size=2, buffer_ptrs=[x.data_ptr(), 0],
                                                                buffer_ptrs_dev=0))
    try:
        with pytest.raises(RuntimeError, match="needs a pkb worker of the nvshmem backend"):
            pkb_nvshmem.peers(x)
    finally:
        forget_allocations()
    with pytest.raises(LookupError):
        pkb_nvshmem.peers(torch.zeros(2))


def test_device_helpers_are_triton_functions():
    pytest.importorskip("triton")
    from triton.runtime.jit import JITFunction

    from pkb_nvshmem import lang

    assert isinstance(lang.barrier, JITFunction) and isinstance(lang.peer_ptr, JITFunction)
    assert pkb_nvshmem.barrier is lang.barrier


NVSHMEM_CONSTANTS = {"SIGNAL_SET": 9, "SIGNAL_ADD": 10, "CMP_EQ": 0, "CMP_NE": 1, "CMP_GT": 2, "CMP_LE": 3,
                     "CMP_LT": 4, "CMP_GE": 5}


def test_signal_constants_are_nvshmems():
    """NVSHMEM's own numbers (torch's docstrings give SET 0, ADD 5, GE 3: with
    those, signal_op adds and a >= wait becomes a <= wait)."""
    pytest.importorskip("triton")
    from pkb_nvshmem import lang

    assert {name: getattr(lang, name).value for name in NVSHMEM_CONSTANTS} == NVSHMEM_CONSTANTS


def test_signal_constants_match_the_nvshmem_headers():
    import re

    lib = common.find_nvshmem_lib()
    include = lib.parent / "include" if lib else None
    transport = include / "device_host_transport" / "nvshmem_common_transport.h" if include else None
    constants = include / "device_host_transport" / "nvshmem_constants.h" if include else None
    if not (transport and transport.is_file() and constants.is_file()):
        pytest.skip("NVSHMEM's headers are not installed (nvidia-nvshmem-cu13)")
    ops = dict(re.findall(r"NVSHMEM_(SIGNAL_\w+)\s*=\s*(\d+)", transport.read_text()))
    assert {k: int(v) for k, v in ops.items()} == {"SIGNAL_SET": 9, "SIGNAL_ADD": 10}
    body = re.search(r"enum nvshmemi_cmp_type \{(.*?)\}", constants.read_text(), re.S).group(1)
    names = [n for n in re.findall(r"NVSHMEM_(CMP_\w+)", body) if n != "CMP_SENTINEL"]
    assert {name: i for i, name in enumerate(names)} == {k: v for k, v in NVSHMEM_CONSTANTS.items() if "CMP" in k}


# ---------------------------------------------------------------------------
# the samples: all-reduce, all-gather, all-to-all per solution style
# ---------------------------------------------------------------------------

def _solution_args(path: Path):
    tree = ast.parse(path.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "solution")
    return [a.arg for a in fn.args.args]


@pytest.mark.parametrize("module", [torch_plugin, py_plugin])
def test_samples_have_the_reference_signature(pkb_pm, module):
    from pkb_core.problem.registry import build_registry

    registry = build_registry(pkb_pm)
    files = sorted(module.SAMPLES.glob("[0-9]*_*.py"), key=lambda p: int(p.name.split("_")[0]))
    assert [p.name for p in files] == ["1_allreduce.py", "2_allgather.py", "8_alltoall.py"]
    helper = "pkb_nvshmem.nvshmem4py" if module is py_plugin else "pkb_nvshmem"
    for path in files:
        reference = inspect.signature(registry.get(path.stem.split("_", 1)[0]).load().reference)
        assert _solution_args(path) == list(reference.parameters), path.name
        source = path.read_text()
        assert f"from {helper} import" in source
        assert "torch.distributed" not in source and "dist." not in source
        assert source.count("barrier(") >= 2, f"{path.name}: a barrier before and after"


@pytest.mark.skipif(os.environ.get("PKB_NVSHMEM_COMPILE_CHECK", "") in ("", "0"),
                    reason="set PKB_NVSHMEM_COMPILE_CHECK=1 (needs libnvshmem_device.bc; numba-cuda and "
                           "nvshmem4py for the nvshmem4py samples)")
def test_samples_compile_without_a_gpu():
    files = [str(p) for p in sorted(torch_plugin.SAMPLES.glob("*.py"))]
    if common.find_nvshmem_lib(device_bitcode=True) is None:
        pytest.skip("libnvshmem_device.bc not found")
    if not (common.module_missing("numba_cuda") or common.module_missing("nvshmem.core")):
        files += [str(p) for p in sorted(py_plugin.SAMPLES.glob("*.py"))]
    result = subprocess.run([sys.executable, str(TOOL), *files], capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ok    ") == len(files)


def test_ibgda_headers_are_shadowed_for_nvrtc(tmp_path):
    # NVSHMEM 3.4.5's build options turn on IBGDA, whose device header needs
    # rdma-core's infiniband/mlx5dv.h (absent on the GPU image): NVRTC failed
    # compiling nvshmem4py's shim. pkb puts a copy with IBGDA off first.
    from types import SimpleNamespace

    include = tmp_path / "nvshmem" / "include"
    (include / "non_abi").mkdir(parents=True)
    (include / "non_abi" / "nvshmem_build_options.h").write_text(
        "#pragma once\n#define NVSHMEM_IBGDA_SUPPORT\n#if defined NVSHMEM_HOSTLIB_ONLY\n#endif\n")
    config = SimpleNamespace(CUDA_NVRTC_EXTRA_SEARCH_PATHS=f"{include}:/cccl:/bindings")
    work = tmp_path / "shadow"
    assert common.shadow_ibgda_headers(config, work) == str(work)
    assert config.CUDA_NVRTC_EXTRA_SEARCH_PATHS == f"{work}:{include}:/cccl:/bindings"
    copy = (work / "non_abi" / "nvshmem_build_options.h").read_text()
    assert copy.rstrip().endswith("#undef NVSHMEM_IBGDA_SUPPORT_GPUMEM_ONLY")
    assert copy.index("#define NVSHMEM_IBGDA_SUPPORT") < copy.index("#undef NVSHMEM_IBGDA_SUPPORT\n")
    # Idempotent; nothing to do without IBGDA or without NVSHMEM headers.
    assert common.shadow_ibgda_headers(config, work) == str(work)
    assert config.CUDA_NVRTC_EXTRA_SEARCH_PATHS.count(str(work)) == 1
    (include / "non_abi" / "nvshmem_build_options.h").write_text("#pragma once\n")
    assert common.shadow_ibgda_headers(SimpleNamespace(CUDA_NVRTC_EXTRA_SEARCH_PATHS=str(include)),
                                       tmp_path / "other") is None
    assert common.shadow_ibgda_headers(SimpleNamespace(), tmp_path / "none") is None


# ---------------------------------------------------------------------------
# PKB_NVSHMEM4PY_HOME: nvshmem4py on an NVSHMEM of the user's choosing
# ---------------------------------------------------------------------------

def _nvshmem_tree(root: Path) -> Path:
    """A stand-in NVSHMEM tree in the wheel's layout (ROOT/nvidia/nvshmem)."""
    home = root / "nvidia" / "nvshmem"
    (home / "include").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "include" / "nvshmem.h").write_text("/* stand-in */\n")
    (home / "lib" / "libnvshmem_host.so.3").write_bytes(b"\x7fELF")
    return home


def test_home_is_checked_and_preloaded_only_when_complete(tmp_path):
    from pkb_nvshmem.nvshmem4py import home as h

    assert h.nvshmem_home({}) is None and h.preload({}) == ()
    tree = _nvshmem_tree(tmp_path)
    env = {h.HOME_ENV: str(tree)}
    assert h.home_missing(tree) is None
    assert h.preload(env) == (str(tree / "lib" / "libnvshmem_host.so.3"),)
    (tree / "lib" / "libnvshmem_host.so.3").unlink()
    reason = h.home_missing(tree)
    assert reason.startswith(f"PKB_NVSHMEM4PY_HOME={tree} has no lib/libnvshmem_host.so.3 (point it at")
    assert "\n" not in reason and h.preload(env) == ()


def test_requirements_check_the_home_instead_of_searching(monkeypatch, tmp_path):
    _all_present(monkeypatch)
    monkeypatch.setattr(common, "library_missing", lambda device_bitcode=False: "searched")
    tree = _nvshmem_tree(tmp_path)
    monkeypatch.setenv("PKB_NVSHMEM4PY_HOME", str(tree))
    assert py_plugin.requirements("cuda") is None
    (tree / "include" / "nvshmem.h").unlink()
    assert py_plugin.requirements("cuda").startswith(f"PKB_NVSHMEM4PY_HOME={tree} has no include/nvshmem.h")
    assert torch_plugin.requirements("cuda") == "searched"  # the torch backend ignores the home


def test_the_backend_names_its_preload(pkb_pm, monkeypatch, tmp_path):
    from pkb_core.plugin.manager import get_backend_info

    info = get_backend_info(pkb_pm, "nvshmem4py")
    monkeypatch.delenv("PKB_NVSHMEM4PY_HOME", raising=False)
    assert info.preload() == ()
    tree = _nvshmem_tree(tmp_path)
    monkeypatch.setenv("PKB_NVSHMEM4PY_HOME", str(tree))
    assert info.preload() == (str(tree / "lib" / "libnvshmem_host.so.3"),)
    assert get_backend_info(pkb_pm, "nvshmem").preload() == ()


def test_a_second_nvshmem_in_the_process_is_named(tmp_path):
    # 2xH200, 2026-11-22: torch had loaded its own 3.4.5 beside the home's 3.8.0.
    from pkb_nvshmem.nvshmem4py.home import loaded_elsewhere

    tree = _nvshmem_tree(tmp_path)
    ours = str(tree / "lib" / "libnvshmem_host.so.3")
    torchs = "/venv/site-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3"
    assert loaded_elsewhere(tree, [ours]) is None
    assert loaded_elsewhere(tree, []) is None
    assert loaded_elsewhere(tree, [torchs]) == \
        f"PKB_NVSHMEM4PY_HOME is set but this process loaded NVSHMEM from {torchs} instead of {ours}"
    assert "two NVSHMEM host libraries" in loaded_elsewhere(tree, [torchs, ours])


def test_init_refuses_when_the_home_library_is_not_the_loaded_one(monkeypatch, tmp_path):
    import pkb_core

    tree = _nvshmem_tree(tmp_path)
    monkeypatch.setenv("PKB_NVSHMEM4PY_HOME", str(tree))
    monkeypatch.setattr(py_plugin, "requirements", lambda device: None)
    monkeypatch.setattr(pkb_core, "preload_errors", lambda: {})  # whatever earlier tests of this process preloaded
    monkeypatch.setattr(pkb_core, "mapped_paths", lambda fragment: ["/other/libnvshmem_host.so.3"])
    with pytest.raises(BackendUnavailable, match="loaded NVSHMEM from /other/libnvshmem_host.so.3 instead of"):
        py_plugin.pkb_backend_init(ctx=_Ctx())
    monkeypatch.setattr(pkb_core, "preload_errors", lambda: {"/x/libnvshmem_host.so.3": "wrong ELF class"})
    with pytest.raises(BackendUnavailable) as refused:
        py_plugin.pkb_backend_init(ctx=_Ctx())
    assert str(refused.value) == "PKB_NVSHMEM4PY_HOME: could not load /x/libnvshmem_host.so.3 (wrong ELF class)"


def test_home_headers_replace_the_pip_ones_for_nvrtc(tmp_path):
    from types import SimpleNamespace

    from pkb_nvshmem.nvshmem4py.home import use_home_headers

    tree = _nvshmem_tree(tmp_path)
    config = SimpleNamespace(CUDA_NVRTC_EXTRA_SEARCH_PATHS="/pip/nvidia/nvshmem/include:/cccl:/bindings")
    assert use_home_headers(config, tree, "/pip/nvidia/nvshmem/include") == str(tree / "include")
    assert config.CUDA_NVRTC_EXTRA_SEARCH_PATHS == f"{tree / 'include'}:/cccl:/bindings"
    use_home_headers(config, tree, "/pip/nvidia/nvshmem/include")  # idempotent
    assert config.CUDA_NVRTC_EXTRA_SEARCH_PATHS == f"{tree / 'include'}:/cccl:/bindings"


def test_nvshmem_stream_wrappers_are_made_once_per_stream(monkeypatch):
    # A new NvshmemStream per barrier cost host time on every call (2xH200 profile).
    import torch

    from pkb_nvshmem.nvshmem4py import heap

    made = []
    fake = types.ModuleType("nvshmem.core")
    fake.NvshmemStream = lambda stream: made.append(stream) or ("wrapped", stream.cuda_stream)
    monkeypatch.setitem(sys.modules, "nvshmem", types.ModuleType("nvshmem"))
    monkeypatch.setitem(sys.modules, "nvshmem.core", fake)
    sys.modules["nvshmem"].core = fake
    monkeypatch.setattr(heap, "_STREAMS", {})
    current = types.SimpleNamespace(cuda_stream=7)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: current)
    assert heap.current_stream() == ("wrapped", 7) and heap.current_stream() == ("wrapped", 7)
    current = types.SimpleNamespace(cuda_stream=9)
    assert heap.current_stream() == ("wrapped", 9)
    assert [s.cuda_stream for s in made] == [7, 9]


@pytest.mark.parametrize("total,parts,itemsize", [(33554432, 132, 2), (67108864, 132, 1), (1000, 7, 4),
                                                   (5, 8, 2), (1, 1, 8), (255, 3, 1)])
def test_aligned_shares_cover_everything_and_start_256_bytes_apart(total, parts, itemsize):
    # The unrounded ceil(total / parts) put NVSHMEM gets at odd addresses.
    share = common.aligned_share(total, parts, itemsize)
    assert (share * itemsize) % common.SHARE_ALIGN == 0
    assert share * parts >= total                      # parts programs cover every element
    assert share - -(-total // parts) < common.SHARE_ALIGN // itemsize  # rounded up, no further


def test_aligned_share_falls_back_to_elements_for_odd_item_sizes():
    assert common.aligned_share(100, 3, itemsize=3) == 34
