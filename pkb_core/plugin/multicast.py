"""NVLink multicast: where pkb allows it, and what it refuses before a solution runs.

Multicast (``cuMulticastCreate``, NVLS) can take a host's shared GPUs out of
service, so pkb allows it only where the operator says so
(``PKB_ALLOW_MULTICAST=1``) and nothing else says no: a machine without a GPU,
or one whose environment turns it off (``NCCL_NVLS_ENABLE=0``,
``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``, ``NVSHMEM_DISABLE_NVLS=1``).
:func:`multicast_off` says why it is off, or None.

Where it is off, a solution that needs it is ``unsupported``, with the reason
:data:`NEEDS_MULTICAST` — decided by what the solution does, not by the names
in it:

* at run time (:mod:`pkb_core.candidate.multicast_gate`), for the entry points
  pkb can watch: a symmetric handle's ``multicast_ptr`` reads 0 (torch's own
  answer where there is none) and torch's multimem operations refuse. A file
  whose multicast path sits behind a ``multicast_ptr != 0`` check, a
  ``try``, or a kernel that checks its pointer runs its fallback; one that
  fails for want of it is ``unsupported``;
* before anything is built or run (:func:`refuse_multicast`, called by the
  compile phase), for the calls pkb cannot watch, made from CUDA or through
  other libraries: the driver's ``cuMulticast*``, NVSHMEM's multicast
  pointers (``nvshmemx_mc_ptr``, nvshmem4py's ``get_multicast_*``), and the
  spellings a backend declares for its own libraries
  (``BackendInfo.multicast_patterns``: ThunderKittens' multicast objects).

PTX ``multimem.*`` instructions are no reason by themselves: they need a
multicast address, which comes from one of the above.
"""
from __future__ import annotations

import os
import re

from pkb_core.problem.source import solution_text

ALLOW_MULTICAST_ENV = "PKB_ALLOW_MULTICAST"

#: The reason every multicast refusal starts with.
NEEDS_MULTICAST = "needs NVLink multicast; off on this machine"

#: Environment variables that turn multicast off, and the value that does.
DISABLING_ENV = (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1"))

#: Calls that create or reach NVLink multicast where pkb cannot watch them run
#: (CUDA source, NVSHMEM), whatever the backend. Prose that merely mentions
#: multicast does not match; torch's multicast is watched at run time instead.
MULTICAST_PATTERNS = (
    r"\bget_multicast_\w+",         # nvshmem4py: get_multicast_tensor/array/buffer
    r"\bnvshmemx_mc_ptr\b",         # NVSHMEM's multicast address
    r"\bcuMulticast\w*",            # the driver API itself
)

#: What a solution's source must name for its rank's word "I failed for want of
#: multicast" to be believed (:func:`multicast_claim_believable`).
_MULTICAST_WORDS = re.compile(r"multicast|multimem|\bmc_ptr\b|\bNVLS\b", re.IGNORECASE)


def multicast_off(device: str = "cuda", environ=None) -> str | None:
    """Why NVLink multicast is off for jobs on ``device`` (``cuda`` or ``cpu``), in
    a few words, or None where the operator allows it and nothing turns it off."""
    environ = os.environ if environ is None else environ
    if device != "cuda":
        return "no GPU"
    if environ.get(ALLOW_MULTICAST_ENV, "") in ("", "0"):
        return f"pkb allows it only with {ALLOW_MULTICAST_ENV}=1"
    for name, value in DISABLING_ENV:
        if environ.get(name, "").strip() == value:
            return f"{name}={value}"
    return None


def _first_call(source: str, extra_patterns=()) -> str | None:
    for pattern in (*MULTICAST_PATTERNS, *extra_patterns):
        match = re.search(pattern, source)
        if match:
            return match.group(0)
    return None


def multicast_use(source: str, extra_patterns=()) -> str | None:
    """The first call in ``source`` that creates or reaches multicast where pkb
    cannot watch it (the matched text), or None; always None with
    ``PKB_ALLOW_MULTICAST=1``."""
    if os.environ.get(ALLOW_MULTICAST_ENV, "") not in ("", "0"):
        return None
    return _first_call(source, extra_patterns)


def multicast_refusal(path, extra_patterns=(), device: str = "cuda") -> str | None:
    """The ``unsupported`` reason of the solution file at ``path`` where multicast
    is off and its source calls what pkb cannot watch (see the module docstring),
    or None. A file that cannot be read is left to the solution loader."""
    why = multicast_off(device)
    if why is None:
        return None
    try:
        source = solution_text(path, errors="replace")
    except OSError:
        return None
    found = _first_call(source, extra_patterns)
    if found is None:
        return None
    return f"{NEEDS_MULTICAST} ({why}): {path} calls {found}"


def refuse_multicast(path, extra_patterns=(), device: str = "cuda") -> None:
    """Raise :class:`pkb_core.errors.SolutionUnsupported` with
    :func:`multicast_refusal`'s reason, if there is one."""
    from pkb_core.errors import SolutionUnsupported

    reason = multicast_refusal(path, extra_patterns, device)
    if reason:
        raise SolutionUnsupported(reason)


def backend_patterns(pm) -> tuple:
    """The multicast spellings the backends loaded in ``pm`` declare."""
    from pkb_core.plugin.manager import backend_infos

    return tuple(pattern for info in backend_infos(pm).values() for pattern in info.multicast_patterns)


def refuse_solution_multicast(pm, solution, device: str = "cuda") -> None:
    """The core's up-front multicast rule for a job's solution file (``None``: the
    reference, never refused), with the spellings the one backend loaded in
    ``pm`` declares in ``BackendInfo.multicast_patterns``."""
    if solution is None:
        return
    refuse_multicast(solution, backend_patterns(pm), device)


def multicast_claim_believable(solution, device: str) -> bool:
    """Whether a candidate's word that its solution failed for want of multicast
    may make the job ``unsupported``: the launcher's own finding that multicast
    is off here, and a solution whose source names multicast at all. (What a
    process says after solution code ran in it may be that code's forgery; this
    bounds what a forgery can win.)"""
    if solution is None or multicast_off(device) is None:
        return False
    try:
        return bool(_MULTICAST_WORDS.search(_code_of(solution_text(solution, errors="replace"))))
    except OSError:
        return False


def _code_of(source: str) -> str:
    """``source`` without its comments and without pkb's own exception's name: a file that only
    imported ``MulticastUnavailable`` (to raise it itself) or named multicast in a comment had
    its claim believed (a hostile review, 2026-12-02). Strings stay: CUDA sources in them name
    ``multimem`` instructions. A source Python cannot tokenize is kept whole."""
    import io
    import tokenize

    try:
        kept = [token.string for token in tokenize.generate_tokens(io.StringIO(source).readline)
                if token.type != tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError, ValueError):
        kept = [source]
    return " ".join(kept).replace("MulticastUnavailable", "")
