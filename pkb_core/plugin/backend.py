"""What a backend plugin tells pkb about itself, and what its hooks receive."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional


def _always_available(device: str) -> Optional[str]:
    return None


def _nothing_to_preload() -> tuple:
    return ()


@dataclass(frozen=True)
class BackendInfo:
    """A backend's self-description, returned by ``pkb_backend_info``.

    :param name: what users type after ``--backend``.
    :param devices: device types it runs on (``"cuda"``, ``"cpu"``).
    :param requirements: ``requirements(device) -> None | str``: ``None`` when
        everything the backend needs on that device type is here, else one line
        naming what is missing. May import the backend's runtime.
    :param samples: directory of sample solutions named ``<id>_<name>.py``,
        evaluated by ``pkb run --backend NAME`` when no solution is given.
    :param custom_kernels: ``True`` when solutions must move data themselves
        (the no-NCCL guard applies); ``False`` for the reference backend.
    :param description: one line for ``pkb backends``.
    :param preload: ``preload() -> tuple of paths``: shared libraries every
        worker process of this backend loads (``RTLD_GLOBAL``) before it imports
        torch, so that the backend's build of a library wins over the one torch
        would bring (see :mod:`pkb_core.plugin.preload`). Called in the ``pkb``
        process by the launcher; must not import torch.
    :param prompt: ``prompt() -> BackendPrompt``: the backend's part of a
        generation prompt (how a solution is written, its helper API, worked
        examples; see :mod:`pkb_core.plugin.backend_prompt`). ``None``: prompts
        carry ``description`` as the only instructions. Called in the ``pkb``
        process; keep it cheap (read files, import no GPU runtime).
    :param multicast_patterns: regular expressions for the calls that create or
        reach NVLink multicast in this backend's libraries, where pkb cannot
        watch them run (CUDA templates, say), on top of the core's
        :data:`pkb_core.plugin.multicast.MULTICAST_PATTERNS`. Where multicast is
        off, the core makes a solution that calls one ``unsupported`` before
        anything is built (:mod:`pkb_core.plugin.multicast`), so a backend never
        checks it itself.
    :param solution_modules: ``{importable name: provider module}``: modules
        this backend serves to solution files under another harness's names
        (``{"utils.cuda_helpers": "pkb_cuda.pkb_helpers"}``); served only to
        solution code, installed nowhere (:mod:`pkb_core.candidate.solution_modules`).
    :param unsupported_modules: ``{importable name: reason}``: names a solution
        may import that this backend cannot serve; a file importing one gets
        the ``unsupported`` verdict with ``imports <name>: <reason>``.
    :param environment: environment variables this backend's worker processes
        and builders need besides the ones every solution-running process gets
        (:mod:`pkb_core.process.environment`: where Python, the toolchains and
        the GPU libraries are, pkb's own ``PKB_*``): names, or prefixes ending
        in ``*``. Those processes see nothing else of the launcher's
        environment, and never a name that looks like a credential.

    The core checks ``devices`` and ``requirements`` once, where a run starts
    (:meth:`unavailable_reason`); a backend's hooks need not check them again.
    """

    name: str
    devices: tuple = ("cuda",)
    requirements: Callable[[str], Optional[str]] = _always_available
    samples: Optional[Path] = None
    custom_kernels: bool = True
    description: str = ""
    preload: Callable[[], tuple] = _nothing_to_preload
    prompt: Optional[Callable[[], Any]] = None
    multicast_patterns: tuple = ()
    solution_modules: dict = field(default_factory=dict, hash=False)
    unsupported_modules: dict = field(default_factory=dict, hash=False)
    environment: tuple = ()

    def unavailable_reason(self, device: str) -> Optional[str]:
        """Why this backend cannot run on ``device`` here (``None`` if it can)."""
        if device not in self.devices:
            wanted = " or ".join("an NVIDIA GPU" if d == "cuda" else d.upper() for d in self.devices)
            return f"backend {self.name!r} needs {wanted}"
        return self.requirements(device)


@dataclass
class WorkerContext:
    """What ``pkb_backend_init`` gets in each of a candidate's processes.

    ``device`` is a ``torch.device``; ``options`` holds the ``[backends.<name>]``
    table of the config. ``store`` is the job's c10d store (the same on every
    rank), ``run_id`` a name unique to the job and the same on every rank (for
    shared-memory files and the like), and ``barrier()`` a barrier among the
    job's ranks: what a backend needs to set up a runtime collectively. The
    default process group is initialised; for a custom-kernel backend it is the
    sealed group of :mod:`pkb_core.candidate.sealed` (ranks and a barrier, no
    collectives), and the process is locked down (:mod:`pkb_core.confine.lockdown`)
    only after init, so init may still open connections of its own (an
    NVSHMEM bootstrap, say). ``control_group`` is the default group.
    """

    rank: int
    world_size: int
    local_rank: int
    device: Any
    control_group: Any
    run_dir: Path
    options: dict = field(default_factory=dict)
    store: Any = None
    run_id: str = ""
    barrier: Optional[Callable[[], None]] = None


@dataclass
class BuildContext:
    """The ``state`` a backend's compile hook gets in the compile phase.

    Made by the compile phase's builder (:mod:`pkb_core.compile.builder`).

    :ivar ahead_of_time: always ``True`` here; in a job the state is the
        backend's own (what ``pkb_backend_init`` returned).
    :ivar device: the device type the jobs will run on (no device is used here).
    :ivar options: the backend's ``[backends.<name>]`` table.
    """

    device: str
    options: dict = field(default_factory=dict)
    ahead_of_time: bool = True
    rank: int = 0
    world_size: int = 1
