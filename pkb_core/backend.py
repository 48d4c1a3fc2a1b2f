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
        would bring (see :mod:`pkb_core.preload`). Called in the ``pkb``
        process by the launcher; must not import torch.
    """

    name: str
    devices: tuple = ("cuda",)
    requirements: Callable[[str], Optional[str]] = _always_available
    samples: Optional[Path] = None
    custom_kernels: bool = True
    description: str = ""
    preload: Callable[[], tuple] = _nothing_to_preload

    def unavailable_reason(self, device: str) -> Optional[str]:
        """Why this backend cannot run on ``device`` here (``None`` if it can)."""
        if device not in self.devices:
            wanted = " or ".join("an NVIDIA GPU" if d == "cuda" else d.upper() for d in self.devices)
            return f"backend {self.name!r} needs {wanted}"
        return self.requirements(device)


@dataclass
class WorkerContext:
    """What ``pkb_backend_init`` gets on each rank.

    ``device`` is a ``torch.device``; ``control_group`` is a gloo process group
    the harness uses for its own agreement and barriers (solutions must not
    use it); ``options`` holds the ``[backends.<name>]`` table of the config.
    """

    rank: int
    world_size: int
    local_rank: int
    device: Any
    control_group: Any
    run_dir: Path
    options: dict = field(default_factory=dict)
