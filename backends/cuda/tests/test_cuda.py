"""The CUDA backend (pkb-cuda) on a machine without a GPU.

What runs here: the plugin loads and describes itself, refuses CPU mode in
one line, the cache key, the build lock and the CompileError path, the peer
pointer helper on the CPU shared-memory heap, and (when nvcc is installed)
that the device header and a broken source go through nvcc as expected. The
samples' kernels are compile-checked by backends/cuda/tools/compile_check.py
(minutes: torch's headers), not here, unless PKB_CUDA_COMPILE_CHECK=1.
"""
from __future__ import annotations

import ast
import ctypes
import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pkb_core.errors import CompileError
from pkb_core.testing import BackendContract

pkb_cuda = pytest.importorskip("pkb_cuda")

from pkb_cuda import build  # noqa: E402
from pkb_cuda.plugin import SAMPLES  # noqa: E402

HAVE_NVCC = pkb_cuda.find_nvcc() is not None
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc not installed")
SM90A = ["-gencode=arch=compute_90a,code=sm_90a"]


class TestCudaBackend(BackendContract):
    """The shared backend suite: on CPU it checks that `pkb run` refuses in one line."""

    backend = "cuda"


# ---------------------------------------------------------------------------
# the plugin and the CLI
# ---------------------------------------------------------------------------

def test_plugin_import_is_light():
    code = ("import sys, pkb_cuda.plugin\n"
            "heavy = [m for m in ('torch', 'triton') if m in sys.modules]\n"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_describes_itself(pkb_pm):
    from pkb_core.plugin.manager import backend_infos

    info = backend_infos(pkb_pm)["cuda"]
    assert info.devices == ("cuda",)
    assert info.custom_kernels
    assert info.samples == SAMPLES and info.samples.is_dir()
    assert info.unavailable_reason("cpu") == "backend 'cuda' needs an NVIDIA GPU"


def test_pkb_backends_says_why_not_on_cpu(pkb_invoke):
    result = pkb_invoke("backends", "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    row = {r["name"]: r for r in json.loads(result.stdout)["backends"]}["cuda"]
    assert row["available"] is False
    assert row["reason"] == "backend 'cuda' needs an NVIDIA GPU"
    assert row["distribution"] == "pkb-cuda"


def test_requirements_name_what_is_missing():
    import torch

    reason = pkb_cuda.missing("cuda")
    if torch.cuda.is_available() and HAVE_NVCC:
        pytest.skip("this machine has a GPU and nvcc")
    assert reason and "\n" not in reason
    if not torch.cuda.is_available():
        assert "torch" in reason
    if not HAVE_NVCC:
        assert "nvcc not found" in reason


def test_pkb_run_refuses_on_cpu_in_one_line(pkb_invoke, tmp_path):
    result = pkb_invoke("run", "--backend", "cuda", "--device", "cpu", "--problem", "1", "--out", tmp_path)
    assert result.exit_code == 1
    assert result.output.strip() == "Error: backend 'cuda' needs an NVIDIA GPU"
    assert not (tmp_path / "records.jsonl").exists()


def test_requirements_are_the_backend_info_the_core_checks(monkeypatch):
    from pkb_cuda import plugin

    monkeypatch.setattr(plugin, "requirements", lambda device: "nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    info = plugin.pkb_backend_info()
    assert info.unavailable_reason("cuda") == "nvcc not found (set CUDA_HOME or put nvcc on PATH)"
    assert info.unavailable_reason("cpu") == "backend 'cuda' needs an NVIDIA GPU"


# ---------------------------------------------------------------------------
# the samples: one per collective problem, with the reference's signature
# ---------------------------------------------------------------------------

def _solution_signature(path: Path):
    tree = ast.parse(path.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "solution")
    args = [a.arg for a in fn.args.args]
    defaults = [ast.literal_eval(d) for d in fn.args.defaults]
    return args, defaults, tree


def test_samples_cover_problems_1_to_8_with_the_reference_signature(pkb_pm):
    from pkb_core.problem.registry import build_registry

    registry = build_registry(pkb_pm)
    files = sorted(SAMPLES.glob("[0-9]*_*.py"), key=lambda p: (int(p.name.split("_")[0]), p.name))
    assert [p.name for p in files] == ["1_allreduce.py", "1_allreduce_nvrtc.py", "2_allgather.py",
                                       "2_allgather_nvrtc.py", "3_broadcast.py", "4_reduce.py", "5_scatter.py",
                                       "6_gather.py", "7_reducescatter.py", "7_reducescatter_nvrtc.py",
                                       "8_alltoall.py"]
    for path in files:
        reference = inspect.signature(registry.get(path.stem.split("_", 1)[0]).load().reference)
        args, defaults, tree = _solution_signature(path)
        assert args == list(reference.parameters), path.name
        ref_defaults = [p.default for p in reference.parameters.values() if p.default is not inspect.Parameter.empty]
        assert defaults == ref_defaults, path.name
        # Kernels are built through a helper (load_inline at import, or NVRTC on first use); no
        # torch.distributed in solutions.
        source = path.read_text()
        assert ("pkb_cuda.compile(" in source or "nvrtc.kernel(" in source) and "pkb_cuda.peers(" in source
        assert "torch.distributed" not in source and "dist." not in source
        assert source.count("pkb::barrier_block(") >= 2, f"{path.name}: barrier before and after"


# ---------------------------------------------------------------------------
# the cache key and the build protocol
# ---------------------------------------------------------------------------

SRC = "__global__ void k(float* x) { x[0] = 1.0f; }\n"
DECL = "void run(torch::Tensor x);"


def test_cache_key_is_stable_and_follows_sources_and_flags(monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    key = pkb_cuda.cache_key("k", SRC, DECL, ["run"])
    assert key == pkb_cuda.cache_key("k", SRC, DECL, ["run"])
    assert len(key) == 40 and all(c in "0123456789abcdef" for c in key)
    variants = [
        pkb_cuda.cache_key("k", SRC + "// edit\n", DECL, ["run"]),
        pkb_cuda.cache_key("k", SRC, DECL + " ", ["run"]),
        pkb_cuda.cache_key("k", SRC, DECL, ["run", "other"]),
        pkb_cuda.cache_key("k2", SRC, DECL, ["run"]),
        pkb_cuda.cache_key("k", SRC, DECL, ["run"], extra_cuda_cflags=["-O2"]),
        pkb_cuda.cache_key("k", SRC, DECL, ["run"], extra_cflags=["-O2"]),
        pkb_cuda.cache_key("k", SRC, DECL, ["run"], extra_ldflags=["-lcuda"]),
        pkb_cuda.cache_key("k", SRC, DECL, ["run"], prelude=False),
    ]
    assert len(set(variants)) == len(variants) and key not in variants
    # Explicitly passing the defaults is the same build.
    assert key == pkb_cuda.cache_key("k", SRC, DECL, ("run",), extra_cuda_cflags=list(pkb_cuda.DEFAULT_CUDA_CFLAGS))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    assert pkb_cuda.cache_key("k", SRC, DECL, ["run"]) != key


def test_cache_key_follows_the_toolchain():
    base = build.BuildSpec.make("k", SRC, DECL, ["run"], toolchain_info={"torch": "2.11.0+cu130", "nvcc": "13.0"})
    other_torch = build.BuildSpec.make("k", SRC, DECL, ["run"], toolchain_info={"torch": "2.12.0", "nvcc": "13.0"})
    other_nvcc = build.BuildSpec.make("k", SRC, DECL, ["run"], toolchain_info={"torch": "2.11.0+cu130", "nvcc": "12.8"})
    assert len({base.key, other_torch.key, other_nvcc.key}) == 3
    assert base.module_name.startswith("pkb_k_") and base.module_name.isidentifier()


def test_cache_dir_honours_pkb_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path))
    assert pkb_cuda.cache_dir() == tmp_path / "cuda"
    monkeypatch.delenv("PKB_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert pkb_cuda.cache_dir() == tmp_path / "xdg" / "pkb" / "cuda"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert pkb_cuda.cache_dir() == Path.home() / ".cache" / "pkb" / "cuda"


def test_name_must_be_an_identifier():
    with pytest.raises(ValueError):
        pkb_cuda.cache_key("all-reduce", SRC)


NINJA_LOG = """Error building extension 'pkb_bad_0123': [1/3] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile \
--dependency-output cuda.cuda.o.d -DTORCH_EXTENSION_NAME=pkb_bad_0123 -isystem /torch/include -c cuda.cu -o cuda.cuda.o
FAILED: cuda.cuda.o
/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -DTORCH_EXTENSION_NAME=pkb_bad_0123 -c cuda.cu -o cuda.cuda.o
bad.cu(4): error: identifier "undefined_thing" is undefined
    int y = undefined_thing;
            ^

bad.cu(7): warning #177-D: variable "z" was declared but never referenced

1 error detected in the compilation of "cuda.cu".
[2/3] c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=pkb_bad_0123 -c main.cpp -o main.o
ninja: build stopped: subcommand failed.
"""


def test_compiler_output_is_trimmed_to_the_errors():
    message = build.compile_message("bad", RuntimeError(NINJA_LOG))
    assert message.splitlines() == [
        "building the CUDA extension 'bad' failed:",
        'bad.cu(4): error: identifier "undefined_thing" is undefined',
        "    int y = undefined_thing;",
        "            ^",
    ]


def test_loading_failure_names_the_symbol():
    message = build.compile_message("k", ImportError("pkb_k.so: undefined symbol: _Z3runN2at6TensorE"))
    assert message.startswith("the CUDA extension 'k' built but did not load")
    assert "_Z3runN2at6TensorE" in message


def test_build_failure_is_a_compile_error_and_is_reused_by_waiting_ranks(monkeypatch, tmp_path):
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path))
    calls = []

    def failing_build(spec, build_dir, verbose):
        calls.append(spec.name)
        raise RuntimeError(NINJA_LOG)

    monkeypatch.setattr(build, "_load_inline", failing_build)
    with pytest.raises(CompileError) as first:
        pkb_cuda.compile("bad", SRC, DECL, ["run"])
    assert 'identifier "undefined_thing" is undefined' in str(first.value)
    assert "nvcc --generate" not in str(first.value)
    key = pkb_cuda.cache_key("bad", SRC, DECL, ["run"])
    assert (tmp_path / "cuda" / key / "pkb-failed.txt").read_text() == str(first.value)
    # A rank that waited on the lock gets the same error without building again.
    with pytest.raises(CompileError) as second:
        pkb_cuda.compile("bad", SRC, DECL, ["run"])
    assert str(second.value) == str(first.value) and calls == ["bad"]


def test_build_success_is_marked_and_memoised(monkeypatch, tmp_path):
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path))
    built = []
    monkeypatch.setattr(build, "_load_inline", lambda spec, build_dir, verbose: built.append(spec) or "module")
    source = SRC + "// memo test\n"
    assert pkb_cuda.compile("ok", source, DECL, ["run"]) == "module"
    assert pkb_cuda.compile("ok", source, DECL, ["run"]) == "module"
    assert len(built) == 1
    marker = json.loads((tmp_path / "cuda" / built[0].key / "pkb-ok.json").read_text())
    assert marker["key"] == built[0].key and marker["functions"] == ["run"]
    build._LOADED.pop(built[0].key)


LOCK_SCRIPT = textwrap.dedent("""
    import sys, time
    import pkb_cuda.build as b
    import pkb_cuda.toolchain

    pkb_cuda.toolchain.toolchain = lambda: {"torch": "fake"}  # keep torch out: a fast test

    def fake_load_inline(spec, build_dir, verbose):
        with open(sys.argv[1], "a") as f:
            f.write("built\\n")
        time.sleep(1.5)
        (build_dir / f"{spec.module_name}.so").write_text("not really a module")
        return "built-here"

    b._load_inline = fake_load_inline
    b.import_extension = lambda name, path: "loaded-from-cache"
    print(b.compile("locktest", "__global__ void k() {}", "", []))
""")


def test_one_process_builds_the_others_wait_and_load(tmp_path):
    script = tmp_path / "lock_script.py"
    script.write_text(LOCK_SCRIPT)
    counter = tmp_path / "builds.txt"
    env = dict(os.environ, PKB_CACHE_DIR=str(tmp_path / "cache"), TORCH_CUDA_ARCH_LIST="9.0a")
    procs = [subprocess.Popen([sys.executable, str(script), str(counter)], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outputs = sorted(p.communicate(timeout=120)[0].strip() for p in procs)
    assert all(p.returncode == 0 for p in procs)
    assert counter.read_text() == "built\n"
    assert outputs == ["built-here", "loaded-from-cache", "loaded-from-cache"]


READ_ONLY_CACHE_SCRIPT = textwrap.dedent("""
    import os, sys
    import pkb_cuda.build as b
    import pkb_cuda.toolchain
    from pkb_core.confine.lockdown import lock_down

    pkb_cuda.toolchain.toolchain = lambda: {"torch": "fake"}
    scratch = sys.argv[1]
    missing = lock_down(network=False, writable=[scratch])  # pkb's cache is read-only now, as in a job
    assert not any(gap.startswith("read-only") for gap in missing), missing
    os.environ["TMPDIR"] = scratch

    def fake_load_inline(spec, build_dir, verbose):
        (build_dir / f"{spec.module_name}.so").write_text("not really a module")
        return str(build_dir)

    b._load_inline = fake_load_inline
    print(b.compile("lazy_rank1", "__global__ void k() {}", "", []))
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="the lockdown's read-only mounts need root")
def test_a_build_in_a_job_with_a_read_only_cache_builds_in_its_temporary_folder(tmp_path):
    """A build the compile phase could not make ahead (PKB's GPT ring attention names its
    extension after the rank) raised ``Read-only file system`` in the job: it builds in the
    job's own temporary folder instead, and pkb's cache is left as it was."""
    script = tmp_path / "read_only_cache.py"
    script.write_text(READ_ONLY_CACHE_SCRIPT)
    cache, scratch = tmp_path / "cache", tmp_path / "scratch"
    (cache / "cuda").mkdir(parents=True)
    scratch.mkdir()
    env = dict(os.environ, PKB_CACHE_DIR=str(cache), TORCH_CUDA_ARCH_LIST="9.0a")
    done = subprocess.run([sys.executable, str(script), str(scratch)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    built_in = done.stdout.strip().splitlines()[-1]
    assert built_in.startswith(str(scratch / "pkb-cuda")), built_in
    assert not list((cache / "cuda").iterdir())


# ---------------------------------------------------------------------------
# nvcc: the device header assembles for sm_90a, errors keep nvcc's message
# ---------------------------------------------------------------------------

@needs_nvcc
def test_barrier_header_compiles_for_sm90a(tmp_path):
    from pkb_cuda.check import nvcc_object

    source = tmp_path / "barrier_test.cu"
    source.write_text(pkb_cuda.BARRIER_CUH + textwrap.dedent("""
        __global__ void pull(const uint64_t* buffers, uint32_t* const* pads, int64_t offset,
                             float* out, int rank, int world) {
          pkb::barrier_block(pads, rank, world, blockIdx.x);
          out[threadIdx.x] = pkb::peer_ptr<const float>(buffers, (rank + 1) % world, offset)[threadIdx.x];
          pkb::barrier_block(pads, rank, world, blockIdx.x);
        }
    """))
    nvcc_object(str(source), str(tmp_path / "barrier_test.o"), SM90A + ["-Xptxas", "-v"])
    assert (tmp_path / "barrier_test.o").stat().st_size > 0
    # The PTX holds the system-scope release/acquire compare-and-swaps.
    subprocess.run([pkb_cuda.find_nvcc(), "-ptx", str(source), "-o", str(tmp_path / "b.ptx"), "-arch=sm_90a"],
                   check=True)
    ptx = (tmp_path / "b.ptx").read_text()
    assert "atom.release.sys.global.cas.b32" in ptx and "atom.acquire.sys.global.cas.b32" in ptx


@needs_nvcc
def test_push_header_compiles_for_sm90a_with_volatile_loads(tmp_path):
    from pkb_cuda.check import nvcc_object

    source = tmp_path / "push_test.cu"
    source.write_text(pkb_cuda.BARRIER_CUH + pkb_cuda.PUSH_CUH + textwrap.dedent("""
        __global__ void echo(const uint4* in, pkb::PushScratch scratch, uint4* out, int64_t nvec) {
          const int epoch = scratch.epoch();
          const int64_t tid = threadIdx.x, threads = blockDim.x;
          for (int64_t i = tid; i < nvec; i += threads)
            for (int p = 0; p < scratch.world; ++p) scratch.slot(p, epoch, scratch.rank)[i] = pkb::push_clean<float>(in[i]);
          for (int64_t i = tid; i < nvec; i += threads)
            out[i] = pkb::push_receive<float>(scratch.slot(scratch.rank, epoch, (scratch.rank + 1) % scratch.world) + i);
          scratch.reset_last<float>(epoch, tid, threads);
          scratch.finish(epoch, nvec);
        }
    """))
    nvcc_object(str(source), str(tmp_path / "push_test.o"), SM90A)
    subprocess.run([pkb_cuda.find_nvcc(), "-ptx", str(source), "-o", str(tmp_path / "p.ptx"), "-arch=sm_90a"],
                   check=True)
    # A receiver's poll goes to memory each time (a peer's write lands there, not in L1).
    assert "ld.volatile.global.v4.u32" in (tmp_path / "p.ptx").read_text()


@pytest.mark.parametrize("dtype, slot_bytes, words", [
    ("uint8", 4096, "elements of 1 bytes have no sentinel"),
    ("float32", 4008, "slot_bytes 4008 is not a positive multiple of 16"),
    ("float32", 0, "slot_bytes 0 is not a positive multiple of 16"),
])
def test_push_scratch_refuses_what_the_protocol_cannot_carry_before_allocating(dtype, slot_bytes, words):
    import torch

    with pytest.raises(ValueError, match=words):
        pkb_cuda.push_scratch(torch.zeros(4, dtype=getattr(torch, dtype)), slot_bytes)


@needs_nvcc
def test_nvcc_error_becomes_compile_error_with_its_message(tmp_path):
    from pkb_cuda.check import nvcc_object

    source = tmp_path / "broken.cu"
    source.write_text('#line 1 "broken.cu"\n__global__ void k(float* x) {\n  x[0] = not_declared;\n}\n')
    with pytest.raises(CompileError) as info:
        nvcc_object(str(source), str(tmp_path / "broken.o"), SM90A, name="broken")
    message = str(info.value)
    assert message.startswith("building the CUDA extension 'broken' failed:")
    assert 'broken.cu(2): error: identifier "not_declared" is undefined' in message
    assert len(message.splitlines()) <= 6


@pytest.mark.skipif(not shutil.which("c++") or not shutil.which("nm"), reason="no host compiler or nm")
def test_binding_signature_mismatch_is_caught_without_linking(tmp_path):
    from pkb_cuda.check import check_bindings

    (tmp_path / "main.cpp").write_text("long run(long x);\nlong call() { return run(1); }\n")
    (tmp_path / "cuda.cpp").write_text("long run(int x) { return x; }\n")  # int, not long
    for name in ("main", "cuda"):
        subprocess.run(["c++", "-c", str(tmp_path / f"{name}.cpp"), "-o", str(tmp_path / f"{name}.o")], check=True)
    spec = build.BuildSpec.make("sig", SRC, "long run(long x);", ["run"], toolchain_info={})
    with pytest.raises(CompileError, match=r"run\(long\) is declared in cpp_source but cuda_source defines run\(int\)"):
        check_bindings(spec, str(tmp_path / "main.o"), str(tmp_path / "cuda.o"))
    (tmp_path / "cuda.cpp").write_text("long run(long x) { return x; }\n")
    subprocess.run(["c++", "-c", str(tmp_path / "cuda.cpp"), "-o", str(tmp_path / "cuda.o")], check=True)
    check_bindings(spec, str(tmp_path / "main.o"), str(tmp_path / "cuda.o"))


@pytest.mark.skipif(os.environ.get("PKB_CUDA_COMPILE_CHECK", "") in ("", "0") or not HAVE_NVCC,
                    reason="slow (torch headers): set PKB_CUDA_COMPILE_CHECK=1")
def test_samples_compile_check():
    tool = Path(pkb_cuda.__file__).parents[1] / "tools" / "compile_check.py"
    subprocess.run([sys.executable, str(tool)], check=True)


# ---------------------------------------------------------------------------
# peer pointers
# ---------------------------------------------------------------------------

@pytest.fixture
def one_rank_group():
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        from pkb_core.symmetric import forget_allocations

        forget_allocations()
        dist.destroy_process_group()


def _u64(address: int) -> int:
    return ctypes.c_uint64.from_address(address).value


def test_peers_on_the_cpu_shared_memory_heap(one_rank_group):
    import torch

    from pkb_core.symmetric import handle_of
    from pkb_core.symmetric.shm import SharedMemoryHeap

    heap = SharedMemoryHeap(0, 1, lambda: None, f"cudatest{os.getpid()}")
    x = heap.empty((8, 16), torch.float32)
    x.copy_(torch.arange(128, dtype=torch.float32).view(8, 16))
    handle = handle_of(x)
    p = pkb_cuda.peers(x)
    assert isinstance(p, pkb_cuda.Peers) and len(p) == 7
    assert (p.rank, p.world_size, p.offset, p.align) == (0, 1, 0, 16)
    assert p.max_blocks == handle.signal_pad_size // 4
    # The tables hold each rank's buffer base and signal pad.
    assert _u64(p.buffer_table) == handle.buffer_ptrs[0] == x.data_ptr()
    assert _u64(p.signal_table) == handle.signal_pad_ptrs[0]
    # A view: the offset is in bytes, peers' copies sit at base + offset, alignment follows.
    view = x.view(-1)[3:]
    q = pkb_cuda.peers(view)
    assert q.offset == 12 and q.align == 4 and q.buffer_table == p.buffer_table
    assert _u64(q.buffer_table) + q.offset == view.data_ptr()
    assert ctypes.c_float.from_address(_u64(q.buffer_table) + q.offset).value == 3.0
    assert pkb_cuda.peer_ptrs(view) == [view.data_ptr()]
    # Tensors outside the heap have no peers.
    with pytest.raises(LookupError):
        pkb_cuda.peers(torch.zeros(4))


def test_peer_offset_counts_from_the_table_base():
    """torch symm_mem's buffer_ptrs may be segment bases that lie before the
    allocation: the offset must be taken from buffer_ptrs[rank], and it is
    then valid for every peer's base."""
    import torch

    from pkb_core.symmetric import forget_allocations, register_allocation

    backing = torch.zeros(1024, dtype=torch.uint8)
    segment_base = backing.data_ptr()
    allocation = backing[256:]  # what the heap handed out, 256 bytes into the segment
    peer_base = 0x7F0000000000

    class FakeHandle:
        rank, world_size = 1, 2
        buffer_ptrs = [peer_base, segment_base]
        buffer_ptrs_dev, signal_pad_ptrs_dev = 0x1000, 0x2000
        signal_pad_size = 9216

    register_allocation(allocation.data_ptr(), allocation.numel(), FakeHandle())
    try:
        tensor = allocation[32:].view(torch.bfloat16)
        p = pkb_cuda.peers(tensor)
        assert p.offset == 256 + 32
        assert (p.rank, p.world_size, p.buffer_table, p.signal_table) == (1, 2, 0x1000, 0x2000)
        assert p.max_blocks == 9216 // 4 // 2 and p.align == 16
        assert pkb_cuda.peer_ptrs(tensor) == [peer_base + 288, tensor.data_ptr()]
    finally:
        forget_allocations()


# ---------------------------------------------------------------------------
# NVRTC through CuPy (pkb_cuda.nvrtc)
# ---------------------------------------------------------------------------

def test_nvrtc_source_is_the_helpers_made_nvrtc_safe_then_the_kernels():
    from pkb_cuda import nvrtc

    text = nvrtc.full_source("__global__ void k() {}")
    # NVRTC has no <cstdint> or <cuda_runtime.h>: the includes go, the integer names come from typedefs.
    assert "#include <cstdint>" not in text and "#include <cuda_runtime.h>" not in text
    assert "typedef unsigned long long uintptr_t;" in text and "namespace pkb" in text
    assert text.endswith("__global__ void k() {}") and nvrtc.full_source("x", prelude=False) == "x"


def test_nvrtc_options_add_the_toolkit_include_directory(tmp_path, monkeypatch):
    from pkb_cuda import nvrtc

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    (tmp_path / "include").mkdir()
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert nvrtc.compile_options(("-DX=1",)) == ("--std=c++17", f"-I{tmp_path / 'include'}", "-DX=1")


def test_nvrtc_without_cupy_is_one_line(monkeypatch):
    import builtins

    from pkb_core.errors import CompileError
    from pkb_cuda import nvrtc

    real_import = builtins.__import__

    def no_cupy(name, *args, **kwargs):
        if name == "cupy":
            raise ImportError("No module named 'cupy'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cupy)
    monkeypatch.setattr(nvrtc, "_MODULES", {})
    assert nvrtc.missing().startswith("the cuda backend's NVRTC helper (pkb_cuda.nvrtc) needs CuPy")
    with pytest.raises(CompileError) as refused:
        nvrtc.kernel("__global__ void k() {}", "k")
    assert "\n" not in str(refused.value) and "pip install cupy-cuda13x" in str(refused.value)


@pytest.mark.parametrize("name", ["1_allreduce_nvrtc", "2_allgather_nvrtc", "7_reducescatter_nvrtc"])
def test_nvrtc_samples_list_their_instantiations(name):
    source = (SAMPLES / f"{name}.py").read_text()
    tree = ast.parse(source)
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    assert {"SOURCE", "KERNELS"} <= assigned
    # No host C++ and no torch headers: what makes NVRTC fast.
    assert "torch/" not in source and "c10/" not in source and "PYBIND11" not in source
