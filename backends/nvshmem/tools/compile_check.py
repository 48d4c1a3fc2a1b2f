#!/usr/bin/env python3
"""Compile-check NVSHMEM solutions without a GPU: every kernel a file defines.

Usage::

    python backends/nvshmem/tools/compile_check.py                 # every sample of both backends
    python backends/nvshmem/tools/compile_check.py FILE.py ...     # some solution files
    python backends/nvshmem/tools/compile_check.py --world 4       # for another world size

``nvshmem`` files (Triton): each kernel wrapped by ``requires_nvshmem`` is
compiled with ``triton.compile`` for sm_90 down to a cubin, with NVSHMEM's
``libnvshmem_device.bc`` linked (found like torch finds it: ``NVSHMEM_LIB_DIR``
or the ``nvidia-nvshmem-cu13`` wheel). On a CPU build of torch, torch's Triton
bindings of NVSHMEM are only defined once ``has_triton()`` says yes, so the
tool makes it say yes before importing them. Argument types follow what a
launch would pass: pointers for ``out``/``x``/``tensor`` (``--dtype``,
default bf16), 64-bit ints for addresses (``ptrs``, ``signals``), 32-bit ints
otherwise; a constexpr takes the module constant of the same name, or the
world size for ``WORLD``.

``nvshmem4py`` files (Numba-CUDA): each ``@cuda.jit`` kernel is typed and
compiled to PTX for compute capability 9.0 with ``numba.cuda.compile`` (the
numpy ``row_stack`` workaround applied first; without a GPU the device query
Numba makes for device functions is answered with 9.0). Array arguments
(``out``, ``src``, ``dst``) are 1-D uint8 arrays, the others int64. NVSHMEM's
device library is linked only when a kernel is loaded on a GPU.

Nothing runs: this proves the kernels type-check and compile, not that they
are right. Files of a style whose compiler is not installed are skipped.
Exit status: 0 when every kernel checked compiled, 1 otherwise.
"""
from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "pkb_nvshmem"
TRITON_SAMPLES = ROOT / "samples"
NUMBA_SAMPLES = ROOT / "nvshmem4py" / "samples"
POINTER_ARGS = ("out", "x", "tensor", "src", "dst", "staging")
ADDRESS_ARGS = ("ptrs", "signals", "pads")


def _missing(module: str) -> bool:
    from pkb_nvshmem.common import module_missing

    return module_missing(module)


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(f"pkb_nvshmem_check_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prepare_triton() -> None:
    """Make torch define its Triton NVSHMEM bindings on a CPU-only build, and
    point torch's library finder at the device bitcode."""
    from pkb_nvshmem.common import find_nvshmem_lib

    lib = find_nvshmem_lib(device_bitcode=True)
    if lib is None:
        raise SystemExit("libnvshmem_device.bc not found: pip install nvidia-nvshmem-cu13 (or --target DIR and "
                         "set NVSHMEM_LIB_DIR=DIR/nvidia/nvshmem/lib)")
    os.environ.setdefault("NVSHMEM_LIB_DIR", str(lib))
    if "torch.distributed._symmetric_memory._nvshmem_triton" not in sys.modules:
        import torch.utils._triton as torch_triton

        torch_triton.has_triton = lambda: True


def check_triton(path: Path, world: int, dtype: str) -> list[str]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module = _import(path)
    done = []
    for name, kernel in vars(module).items():
        jit = getattr(kernel, "jit_func", None)
        libs = getattr(kernel, "extern_libs", None)
        if jit is None or libs is None:
            continue
        signature, constants = {}, {}
        for param in jit.params:
            if param.is_constexpr:
                signature[param.name] = "constexpr"
                constants[param.name] = world if param.name == "WORLD" else getattr(module, param.name)
            elif param.name in POINTER_ARGS:
                signature[param.name] = f"*{dtype}"
            elif param.name in ADDRESS_ARGS:
                signature[param.name] = "i64"
            else:
                signature[param.name] = "i32"
        started = time.time()
        compiled = triton.compile(ASTSource(jit, signature, constants), target=GPUTarget("cuda", 90, 32),
                                  options={"extern_libs": tuple(libs.items()), "num_warps": 8})
        linked = "nvshmemi_device_state_d" in compiled.asm["ptx"]
        done.append(f"{name}: cubin {len(compiled.asm['cubin'])} bytes in {time.time() - started:.1f} s"
                    f"{', NVSHMEM device library linked' if linked else ', calls no NVSHMEM function'}")
    return done


def prepare_numba() -> None:
    from pkb_nvshmem.common import ensure_numpy_row_stack

    ensure_numpy_row_stack()
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda

    if not cuda.is_available():
        class _Hopper:
            compute_capability = (9, 0)

        dispatcher.get_current_device = lambda: _Hopper()


def check_numba(path: Path) -> list[str]:
    from numba import cuda, types
    from numba.cuda.dispatcher import CUDADispatcher

    module = _import(path)
    done = []
    for name, kernel in vars(module).items():
        if not isinstance(kernel, CUDADispatcher):
            continue
        params = list(inspect.signature(kernel.py_func).parameters)
        sig = tuple(types.Array(types.uint8, 1, "C") if p in POINTER_ARGS else types.int64 for p in params)
        started = time.time()
        ptx, _ = cuda.compile(kernel.py_func, sig, device=False, abi="numba", cc=(9, 0), output="ptx")
        done.append(f"{name}: PTX {len(ptx)} chars in {time.time() - started:.1f} s")
    return done


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="solution files (default: every sample)")
    parser.add_argument("--world", type=int, default=2, help="world size for WORLD (default 2)")
    parser.add_argument("--dtype", default="bf16", help="Triton element type of tensor arguments (default bf16)")
    args = parser.parse_args(argv)
    files = args.files or sorted(TRITON_SAMPLES.glob("[0-9]*_*.py")) + sorted(NUMBA_SAMPLES.glob("[0-9]*_*.py"))
    failures = 0
    prepared = set()
    for path in files:
        numba_style = "nvshmem4py" in path.read_text()
        kind = "numba" if numba_style else "triton"
        if numba_style and (_missing("numba_cuda") or _missing("nvshmem.core")):
            print(f"skip  {path.name} ({kind}): numba-cuda or nvshmem4py is not installed", flush=True)
            continue
        try:
            if kind not in prepared:
                prepare_numba() if numba_style else prepare_triton()
                prepared.add(kind)
            done = check_numba(path) if numba_style else check_triton(path, args.world, args.dtype)
        except SystemExit:
            raise
        except Exception as exc:  # noqa: BLE001 - report and go on
            failures += 1
            print(f"FAIL  {path.name} ({kind}): {''.join(traceback.format_exception_only(type(exc), exc)).strip()}",
                  flush=True)
            continue
        if not done:
            failures += 1
            print(f"??    {path.name} ({kind}): no kernel found", flush=True)
        for line in done:
            print(f"ok    {path.name} ({kind}) {line}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
