#!/usr/bin/env python3
"""Compile-check CUDA solutions: every ``pkb_cuda.compile`` call they make.

Usage::

    python backends/cuda/tools/compile_check.py                 # every sample but the _nvrtc ones, objects only (no GPU needed)
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
import os
import sys
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="solution files (default: the cuda samples)")
    parser.add_argument("--build", action="store_true", help="build and load for real (needs CUDA torch)")
    parser.add_argument("--no-bindings", action="store_true", help="skip compiling load_inline's main.cpp")
    parser.add_argument("--workdir", type=Path, default=None, help="keep objects and logs here")
    args = parser.parse_args(argv)

    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0a")
    from pkb_cuda.check import check_files
    from pkb_cuda.plugin import SAMPLES

    # The _nvrtc samples build no extension (NVRTC compiles their kernels at run time, through CuPy):
    # nothing here to compile-check.
    files = args.files or sorted((p for p in SAMPLES.glob("[0-9]*_*.py") if not p.stem.endswith("_nvrtc")),
                                 key=lambda p: int(p.name.split("_")[0]))
    failures = check_files(files, build=args.build, bindings=not args.no_bindings, workdir=args.workdir)
    print(f"{len(files) - failures}/{len(files)} compiled", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
