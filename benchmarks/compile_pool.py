"""Builds per hour of the compile phase: builders spawned (``pkb run``) against builders forked
warm from a zygote (the reward service's compile pool, ``pkb_core.launch.warm_builders``).

    python3 benchmarks/compile_pool.py FILES_DIR --backend triton [--workers N] [--device cpu]

Every file in FILES_DIR is built twice, once per way, each time with an empty cache of its
own (``PKB_CACHE_DIR`` in a temporary folder), so no build is a cache hit; the files are
built in parallel by ``--workers`` builders (default: the compile phase's own count for
this machine). Prints, per way, the wall time, builds per hour, how many built and the
median seconds of one build. Write a folder of distinct files first, e.g. with
``benchmarks/serve_stream.py`` (its ``files/``) or ``benchmarks/pkb_style_tree.py`` (CUDA).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def build_all(files: list[Path], problem_of, args, warm: bool) -> dict:
    from pkb_core.compile.phase import BuildPhase
    from pkb_core.compile.resources import default_workers
    from pkb_core.plugin.manager import get_backend_info, get_plugin_manager
    from pkb_core.launch.warm_builders import WarmBuilders

    info = get_backend_info(get_plugin_manager(), args.backend)
    with tempfile.TemporaryDirectory(prefix="pkb-pool-") as scratch:
        os.environ["PKB_CACHE_DIR"] = str(Path(scratch) / "cache")
        pool = WarmBuilders(Path(scratch) / "builders.log") if warm else None
        starter = pool.starter(args.backend, tuple(info.preload())) if pool else None
        phase = BuildPhase(backend=args.backend, device=args.device, run_dir=Path(scratch) / "run",
                           preload=tuple(info.preload()), workers=args.workers or default_workers(len(files)),
                           starter=starter)
        started = time.monotonic()
        try:
            results = phase.run([(str(path), problem_of(path)) for path in files])
        finally:
            if pool is not None:
                pool.stop()
        wall = time.monotonic() - started
    seconds = [r.seconds for r in results.values()]
    return {"wall": wall, "ok": sum(r.ok for r in results.values()), "median": statistics.median(seconds),
            "per_hour": len(files) / wall * 3600, "workers": phase.workers or default_workers(len(files))}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", type=Path)
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    from pkb_core.plugin.manager import get_plugin_manager
    from pkb_core.problem.registry import build_registry

    registry = build_registry(get_plugin_manager())
    files = sorted(args.files.glob("*.py"))

    def problem_of(path: Path) -> str:
        return str(registry.get(path.name.split("_", 1)[0]).path)

    for warm in (False, True):
        result = build_all(files, problem_of, args, warm)
        print(f"{'warm (forked)' if warm else 'cold (spawned)':15} {len(files)} files, {result['workers']} at once: "
              f"{result['wall']:.1f} s = {result['per_hour']:.0f} builds/hour; {result['ok']} built; "
              f"median {result['median']:.2f} s per build")
    return 0


if __name__ == "__main__":
    sys.exit(main())
