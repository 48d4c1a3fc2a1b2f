"""The cache of build outcomes: each one's key, and its file, readable by the launcher alone.

:mod:`pkb_core.compile.phase` keeps each solution's outcome (built, or the
compiler's message) under :func:`outcome_key`: the file's content, the backend,
the device type, torch's and pkb's versions, the fingerprint of pkb's and the
plugins' code (:func:`code_fingerprint`) and the toolchain variables of
:data:`KEY_ENVIRONMENT`. A change to any of them builds the solution again.

An outcome holds a compiler's message about one solution (its source quoted,
its path), so it is no other job's to read: the folder
(:func:`pkb_core.cache.builds_dir`) is 0700 and each file 0600, the launcher's
user's (a candidate and a builder run as users of their own), and a builder has
the folder hidden too (:mod:`pkb_core.compile.builder`). The
launcher reads an outcome (:func:`read_outcome`) and passes a job what it needs:
its verdict and reason.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from pkb_core.cache import builds_dir
from pkb_core.compile.files import write_atomic
from pkb_core.contracts.build import BuildResult
from pkb_core.contracts.verdict import Verdict

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


def outcome_path(backend: str, solution: Path, device: str) -> Path:
    """The file of ``solution``'s outcome in the cache."""
    return builds_dir() / f"{outcome_key(backend, solution, device)}.json"


def read_outcome(path: Path, solution: str) -> BuildResult | None:
    """The outcome stored at ``path`` as ``solution``'s (None: none there, or unreadable)."""
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    message = stored.get("message", "")
    if stored.get("solution"):
        # The same content built from another path: the message names this job's file,
        # never the earlier one (another run's, or another client's of the service).
        message = message.replace(str(stored["solution"]), str(solution))
    return BuildResult(bool(stored["ok"]), message, 0.0, cached=True, verdict=failure_verdict(stored.get("verdict")))


def store_outcome(path: Path, solution: str, backend: str, result: BuildResult) -> None:
    """Store ``result`` at ``path``: in one rename, the file 0600 and its folder 0700 (see the
    module docstring; a folder an earlier pkb made 0755 is narrowed)."""
    folder = path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_mode & 0o077:
        os.chmod(folder, 0o700)
    # Two jobs of the same content may store the same outcome at once, from threads of the service.
    write_atomic(path, json.dumps({"ok": result.ok, "message": result.message, "seconds": result.seconds,
                                   "solution": solution, "backend": backend, "verdict": result.verdict}),
                 mode=0o600)


def failure_verdict(verdict) -> str:
    """The verdict of a failed build: ``unsupported`` where it said so, else ``compile-error``."""
    return Verdict.UNSUPPORTED if verdict == Verdict.UNSUPPORTED else Verdict.COMPILE_ERROR
