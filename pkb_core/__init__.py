"""pkb: benchmark multi-GPU kernels against PyTorch + torch.distributed references.

This module is pkb's public API: what backend plugins, problem packs and
solutions import. Everything else under ``pkb_core`` is internal and may move;
distributions import only the names below (a test checks the repository's
own). The names are resolved on first use, so ``import pkb_core`` stays light
(no torch, triton or CUDA bindings: ``pkb --help`` and ``pkb problems`` never
need them).

For backend plugins
    :func:`hookimpl` (mark hook implementations, see
    :mod:`pkb_core.plugin.hookspecs`), :class:`BackendInfo`, the types the
    hooks receive (:class:`WorkerContext` for init, :class:`BuildContext` as the
    compile hook's state in the compile phase, :class:`Problem` for compile) and
    :class:`Verdict`; for observers of a run (the ``pkb_report_*`` hooks):
    :class:`Record`, :class:`Reporter`, :class:`BuildResult`;
    :class:`BackendPrompt`, :class:`PromptExample`, the errors
    :class:`BackendUnavailable`, :class:`CompileError`, :class:`PkbError` and
    :func:`describe`, :func:`load_solution` and :func:`load_module` (import a
    solution file as the core does), the multicast rules (:data:`ALLOW_MULTICAST_ENV`,
    :data:`MULTICAST_PATTERNS`, :func:`multicast_use`, :func:`refuse_multicast`),
    preloaded libraries (:func:`mapped_paths`, :func:`preload_errors`), :func:`cache_dir` (the root of
    pkb's cache: ``$PKB_CACHE_DIR``, ``$XDG_CACHE_HOME/pkb`` or ``~/.cache/pkb``); for a backend's
    builds: :class:`PrecompiledHeader`, :func:`ensure_pch`, :func:`pch_flags` (pkb's precompiled
    headers), :func:`build_notice`, :func:`file_lock`, :func:`write_atomic` (a cache several builders fill);
    for a backend that runs kernels in an interpreter: :data:`LATE_READS` (a staggered trial's gate
    on the late rank's reads, told of each atomic operation and read).
For symmetric heaps
    :func:`handle_of`, :func:`peer_offset`, :func:`register_allocation`,
    :class:`MappedHandle`, :class:`SharedMemoryHeap`, :class:`TorchSymmetricHeap`.
For provider plugins (``pkb generate``)
    :class:`Completion`, :class:`ModelSettings`; :func:`refine`, the refinement loop
    of ``pkb generate --rounds N`` (docs/generation.md).
For problem packs
    :func:`matrix_for_bytes`, :class:`RunContext` (what ``inputs(ctx)`` receives).
For trainers, agents and scripts (docs/serve.md)
    :func:`evaluate` (one solution, in this process, no server); :class:`Client` and
    :class:`AsyncClient` (the reward service, ``pkb serve``), :class:`ServiceError`,
    and what they send and get: :class:`Submission`, :class:`JobView`, :class:`JobState`,
    :class:`Record`.
"""

__version__ = "0.1.0"

#: public name -> the internal module that defines it
_EXPORTS = {
    "hookimpl": "pkb_core.plugin.hookspecs",
    "BackendInfo": "pkb_core.plugin.backend",
    "WorkerContext": "pkb_core.plugin.backend",
    "BuildContext": "pkb_core.plugin.backend",
    "Problem": "pkb_core.problem.contract",
    "RunContext": "pkb_core.problem.contract",
    "Verdict": "pkb_core.contracts.verdict",
    "Record": "pkb_core.contracts.record",
    "Reporter": "pkb_core.plugin.reporter",
    "BuildResult": "pkb_core.contracts.build",
    "BackendPrompt": "pkb_core.plugin.backend_prompt",
    "PromptExample": "pkb_core.plugin.backend_prompt",
    "BackendUnavailable": "pkb_core.errors",
    "CompileError": "pkb_core.errors",
    "PkbError": "pkb_core.errors",
    "describe": "pkb_core.errors",
    "load_module": "pkb_core.candidate.solution",
    "load_solution": "pkb_core.candidate.solution",
    "LATE_READS": "pkb_core.candidate.late_reads",
    "Completion": "pkb_core.generate.providers",
    "refine": "pkb_core.refinement",
    "ModelSettings": "pkb_core.generate.providers",
    "ALLOW_MULTICAST_ENV": "pkb_core.plugin.multicast",
    "MULTICAST_PATTERNS": "pkb_core.plugin.multicast",
    "multicast_use": "pkb_core.plugin.multicast",
    "refuse_multicast": "pkb_core.plugin.multicast",
    "mapped_paths": "pkb_core.plugin.preload",
    "preload_errors": "pkb_core.plugin.preload",
    "handle_of": "pkb_core.symmetric",
    "peer_offset": "pkb_core.symmetric",
    "register_allocation": "pkb_core.symmetric",
    "MappedHandle": "pkb_core.symmetric.mapped",
    "SharedMemoryHeap": "pkb_core.symmetric.shm",
    "TorchSymmetricHeap": "pkb_core.symmetric.torch_heap",
    "matrix_for_bytes": "pkb_core.problem.contract",
    "cache_dir": "pkb_core.cache",
    "PrecompiledHeader": "pkb_core.compile.pch",
    "ensure_pch": "pkb_core.compile.pch",
    "pch_flags": "pkb_core.compile.pch",
    "build_notice": "pkb_core.compile.pch",
    "file_lock": "pkb_core.compile.files",
    "write_atomic": "pkb_core.compile.files",
    "evaluate": "pkb_core.evaluation",
    "Client": "pkb_core.client",
    "AsyncClient": "pkb_core.client",
    "ServiceError": "pkb_core.client",
    "Submission": "pkb_core.contracts.serve",
    "JobView": "pkb_core.contracts.serve",
    "JobState": "pkb_core.contracts.serve",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pkb_core' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
