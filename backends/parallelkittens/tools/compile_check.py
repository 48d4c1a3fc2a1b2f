#!/usr/bin/env python3
"""Compile-check ThunderKittens solutions: every ``pkb_parallelkittens.compile`` call they make.

Usage::

    THUNDERKITTENS_ROOT=~/ThunderKittens python backends/parallelkittens/tools/compile_check.py
    python backends/parallelkittens/tools/compile_check.py FILE.py ...     # some solution files
    python backends/parallelkittens/tools/compile_check.py --world 8       # for another world size
    python backends/parallelkittens/tools/compile_check.py --build         # GPU machine: real builds

Default mode imports each file inside :func:`pkb_cuda.compile_only`: the CUDA
source (with ThunderKittens, sm_90a, C++20) goes through nvcc to an object,
load_inline's ``main.cpp`` through the host compiler (``--no-bindings``
skips it), and every bound function must be defined with the declared
signature. Nothing is linked or loaded, so no GPU or driver is needed (the
``-lcuda`` link is what needs one). ptxas's registers and spills are printed
per kernel.

``--build`` imports each file normally: the kernels are built with
load_inline into the CUDA backend's cache and loaded.

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
    spec = importlib.util.spec_from_file_location(f"pkb_pk_check_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _error_text(exc: BaseException) -> str:
    from pkb_core.errors import CompileError

    if isinstance(exc, CompileError):
        return str(exc)
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def check(files, world: int, build: bool = False, bindings: bool = True, workdir=None) -> int:
    """Compile-check ``files``; print one line per build; return the failure count."""
    import pkb_cuda

    os.environ["PKB_WORLD_SIZE"] = str(world)
    failures = 0
    for path in files:
        started = time.time()
        try:
            if build:
                _import(path)
                print(f"ok    {path.name}: built/loaded in {time.time() - started:.1f} s", flush=True)
                continue
            with pkb_cuda.compile_only(workdir=workdir, bindings=bindings) as results:
                _import(path)
            if not results:
                print(f"??    {path.name}: made no pkb_parallelkittens.compile call", flush=True)
                failures += 1
                continue
            for result in results:
                print(f"ok    {path.name}: {result.name} compiled for {world} ranks in {result.seconds:.1f} s "
                      f"({result.workdir})", flush=True)
                for k in result.kernels:
                    spill = f", spills {k.spill_stores}/{k.spill_loads} B" if k.spill_stores or k.spill_loads else ""
                    print(f"        {k.kernel}: {k.registers} registers{spill}", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on
            failures += 1
            print(f"FAIL  {path.name}:\n{_error_text(exc)}", flush=True)
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="solution files (default: the samples)")
    parser.add_argument("--world", type=int, default=2, help="world size to build for (default 2)")
    parser.add_argument("--build", action="store_true", help="build and load for real (needs CUDA torch)")
    parser.add_argument("--no-bindings", action="store_true", help="skip compiling load_inline's main.cpp")
    parser.add_argument("--workdir", type=Path, default=None, help="keep objects and logs here")
    args = parser.parse_args(argv)

    from pkb_parallelkittens.build import tk_missing
    from pkb_parallelkittens.plugin import SAMPLES

    missing = tk_missing()
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    files = args.files or sorted(SAMPLES.glob("[0-9]*_*.py"), key=lambda p: int(p.name.split("_")[0]))
    failures = check(files, args.world, build=args.build, bindings=not args.no_bindings, workdir=args.workdir)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
