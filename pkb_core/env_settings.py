"""Settings pkb reads from its environment (``PKB_TIMEKEEPER``, ``PKB_HARNESS_COPIES``,
``PKB_MASKED_SETS``, ``PKB_IPC_NAMESPACES``, ``PKB_CALL_EVENTS``, ``PKB_GROUP_OFFSETS``): each one value of a fixed list, checked by the command line before any job
starts (a wrong value would otherwise surface as every window-mode job's ``error``)."""
from __future__ import annotations

import os


def setting_from_env(name: str, choices: tuple, default: str, about: str) -> str:
    """The value of ``name`` (``default`` unset); ValueError, one line saying what the setting
    is (``about``), for a value not among ``choices``."""
    value = os.environ.get(name, default)
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(choices)} ({about})")
    return value
