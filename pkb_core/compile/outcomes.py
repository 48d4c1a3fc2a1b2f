"""The cache key of a build outcome: what the compile phase's outcome of one solution depends on.

:mod:`pkb_core.compile.phase` keeps each solution's outcome (built, or the
compiler's message) under :func:`outcome_key`: the file's content, the backend,
the device type, torch's and pkb's versions, the fingerprint of pkb's and the
plugins' code (:func:`code_fingerprint`) and the toolchain variables of
:data:`KEY_ENVIRONMENT`. A change to any of them builds the solution again.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

#: Environment variables that change what a build produces.
KEY_ENVIRONMENT = ("TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "CUDAHOSTCXX", "CXX", "PKB_NVSHMEM4PY_HOME")


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Which code of pkb's decides an outcome: the path, size and modification
    time of every Python file of ``pkb_core`` and of the packages behind the
    ``pkb.backends`` and ``pkb.problems`` entry points. A version number alone
    did not move when a backend learned to serve a module (a stale
    ``compile-error`` came back from the cache); an edit, an upgrade or a
    reinstall now does. Costs a few milliseconds, once per process."""
    import importlib.util

    from pkb_core.plugin.manager import BACKEND_GROUP, entry_points

    roots = {"pkb_core"}
    for group in (BACKEND_GROUP, "pkb.problems"):
        roots.update(ep.module.split(".")[0] for _, ep in entry_points(group))
    digest = hashlib.sha256()
    for root in sorted(roots):
        spec = importlib.util.find_spec(root)
        if spec is None or not spec.origin:
            continue
        # A package: its folder's files; a module of one file: that file (not its folder's).
        files = Path(spec.origin).parent.rglob("*.py") if spec.submodule_search_locations else [Path(spec.origin)]
        for path in sorted(files):
            stat = path.stat()
            digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def outcome_key(backend: str, solution: Path, device: str) -> str:
    """What a build's outcome depends on, as a hash."""
    import torch

    from pkb_core import __version__
    from pkb_core.problem.source import read_solution

    payload = {
        "backend": backend, "device": device, "source": hashlib.sha256(read_solution(solution)).hexdigest(),
        "torch": torch.__version__, "pkb": __version__, "code": code_fingerprint(),
        "env": {name: os.environ.get(name, "") for name in KEY_ENVIRONMENT},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]
