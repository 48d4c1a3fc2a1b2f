#!/usr/bin/env python3
"""Compile-check CUDA solutions: every ``pkb_cuda.compile`` call they make.

Usage::

    python backends/cuda/tools/compile_check.py                 # every sample, objects only (no GPU needed)
    python backends/cuda/tools/compile_check.py FILE.py ...     # some solution files
    python backends/cuda/tools/compile_check.py --build         # GPU machine: real builds into the cache

Default mode imports each file inside :func:`pkb_cuda.compile_only`: the CUDA
source goes through nvcc to an object for the arch list (``TORCH_CUDA_ARCH_LIST``,
default ``9.0a`` here), load_inline's ``main.cpp`` through the host compiler
(``--no-bindings`` skips it: it is the slow half), and every bound function
must be defined with the declared signature. ptxas's registers and spills are
printed per kernel. Nothing is linked or loaded, so no GPU or driver is needed.

``--build`` imports each file normally: ``pkb_cuda.compile`` builds with
load_inline into the cache (``$PKB_CACHE_DIR/cuda``) and loads the module,
and the time is printed (a second run shows the cached load time).

Exit status: 0 when every file compiled, 1 otherwise.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import traceback
from pathlib import Path


def _import(path: Path):
    name = f"pkb_cuda_check_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _error_text(exc: BaseException) -> str:
    from pkb_core.errors import CompileError

    if isinstance(exc, CompileError):
        return str(exc)
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="solution files (default: the cuda samples)")
    parser.add_argument("--build", action="store_true", help="build and load for real (needs CUDA torch)")
    parser.add_argument("--no-bindings", action="store_true", help="skip compiling load_inline's main.cpp")
    parser.add_argument("--workdir", type=Path, default=None, help="keep objects and logs here")
    args = parser.parse_args(argv)

    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0a")
    import pkb_cuda
    from pkb_cuda.plugin import SAMPLES

    files = args.files or sorted(SAMPLES.glob("[0-9]*_*.py"), key=lambda p: int(p.name.split("_")[0]))
    failures = 0
    for path in files:
        started = time.time()
        try:
            if args.build:
                _import(path)
                print(f"ok    {path.name}: built/loaded in {time.time() - started:.1f} s", flush=True)
                continue
            with pkb_cuda.compile_only(workdir=args.workdir, bindings=not args.no_bindings) as results:
                _import(path)
            if not results:
                print(f"??    {path.name}: made no pkb_cuda.compile call", flush=True)
                failures += 1
                continue
            for result in results:
                print(f"ok    {path.name}: {result.name} compiled in {result.seconds:.1f} s ({result.workdir})",
                      flush=True)
                for k in result.kernels:
                    spills = f", spills {k.spill_stores}/{k.spill_loads} B st/ld" if (k.spill_stores or k.spill_loads) else ""
                    print(f"        {k.kernel}: {k.registers} registers{spills}", flush=True)
        except BaseException as exc:  # noqa: BLE001 - report and go on to the next file
            if isinstance(exc, KeyboardInterrupt):
                raise
            failures += 1
            print(f"FAIL  {path.name} ({time.time() - started:.1f} s):\n{_error_text(exc)}", flush=True)
    print(f"{len(files) - failures}/{len(files)} compiled", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
