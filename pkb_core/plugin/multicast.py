"""The multicast guard: pkb refuses solutions that reach NVLink multicast.

Multicast (``cuMulticastCreate``, NVLS) can take a host's shared GPUs out of
service, and it is off on the machines pkb is measured on, so a solution
that calls it is a ``compile-error`` naming the call, before anything is
built or run. Backends add the spellings of their own libraries (the
ThunderKittens barrier and multicast pgls, say) as ``extra_patterns``.

``PKB_ALLOW_MULTICAST=1`` lifts the guard on machines where multicast is
safe: there its use is the user's choice, never pkb's default.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

ALLOW_MULTICAST_ENV = "PKB_ALLOW_MULTICAST"

#: Calls that reach NVLink multicast, in Python or CUDA source, whatever the
#: backend. Prose that merely mentions multicast does not match.
MULTICAST_PATTERNS = (
    r"\bget_multicast_\w+",         # nvshmem4py: get_multicast_tensor/array/buffer
    r"\bnvshmemx_mc_ptr\b",         # NVSHMEM's multicast address
    r"\bmultimem_\w+",              # torch.ops.symm_mem.multimem_*
    r"\bmultimem\s*<",              # ThunderKittens' multimem<T>
    r"\bcuMulticast\w*",            # the driver API itself
    r"\bmulticast_(create|bind)\w*",  # ThunderKittens' vmm helpers
    r"\bmulticast\s*=\s*True\b",    # TKParallelTensor(multicast=True)
)


def multicast_use(source: str, extra_patterns=()) -> str | None:
    """The first multicast call found in ``source`` (the matched text), or
    None; always None when ``PKB_ALLOW_MULTICAST=1``."""
    if os.environ.get(ALLOW_MULTICAST_ENV, "") not in ("", "0"):
        return None
    for pattern in (*MULTICAST_PATTERNS, *extra_patterns):
        match = re.search(pattern, source)
        if match:
            return match.group(0)
    return None


def refuse_solution_multicast(pm, solution) -> None:
    """The core's multicast rule for a job's solution file (``None``: the
    reference, never refused), with the spellings the one backend loaded in
    ``pm`` declares in ``BackendInfo.multicast_patterns``."""
    if solution is None:
        return
    from pkb_core.plugin.manager import backend_infos

    extra = tuple(pattern for info in backend_infos(pm).values() for pattern in info.multicast_patterns)
    refuse_multicast(solution, extra)


def refuse_multicast(path, extra_patterns=()) -> None:
    """Raise :class:`pkb_core.errors.CompileError` if the solution file at
    ``path`` calls a multicast API (see :func:`multicast_use`). A file that
    cannot be read is left to the solution loader, which reports it."""
    from pkb_core.errors import CompileError

    try:
        source = Path(path).read_text(errors="replace")
    except OSError:
        return
    found = multicast_use(source, extra_patterns)
    if found:
        raise CompileError(f"{path}: uses NVLink multicast ({found}), which pkb does not allow on this machine "
                           f"(set {ALLOW_MULTICAST_ENV}=1 where multicast is safe)")
