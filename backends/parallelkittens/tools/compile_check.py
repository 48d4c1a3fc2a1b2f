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
import os
import sys
from pathlib import Path


def check(files, world: int, build: bool = False, bindings: bool = True, workdir=None) -> int:
    """Compile-check ``files``; print one line per build; return the failure count."""
    from pkb_cuda.check import check_files

    os.environ["PKB_WORLD_SIZE"] = str(world)
    return check_files(files, build=build, bindings=bindings, workdir=workdir, label="pkb_parallelkittens",
                       detail=f" for {world} ranks")


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
