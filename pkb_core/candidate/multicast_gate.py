"""NVLink multicast at run time, where it is off: what the solution asked for, and
whether its failure was for want of it.

Where pkb does not allow multicast (:func:`pkb_core.plugin.multicast.multicast_off`),
a candidate installs this gate (:func:`install`) after its lockdown and before the
solution is imported:

* a symmetric handle's ``multicast_ptr`` (torch's ``_SymmetricMemory`` and every
  heap's handle class in this process) reads 0, torch's own answer where there is
  no multicast, and the read is remembered;
* ``_SymmetricMemory.has_multicast_support`` answers False;
* torch's multimem operations (``torch.ops.symm_mem.multimem_*``) raise
  :class:`~pkb_core.errors.MulticastUnavailable` naming the operation (remembered too).

A file with a working fallback therefore runs it, whatever its names: a
``multicast_ptr != 0`` check in Python, a ``try``/``except`` around a multimem
operation, a kernel that checks the pointer it is given. For a solution call that
raised, :func:`refusal` says whether it failed for want of multicast: the gate's
own refusal escaped the call, or, after the solution was handed a zero multicast
address, the call failed with a device fault (a kernel's ``multimem.*`` PTX on
address 0: an illegal memory access) or with an error that names multicast. The
candidate then reports the failure as multicast's (:class:`~pkb_core.errors.SolutionFailed`
``multicast_off``), and the launcher makes the job ``unsupported`` when it believes
it (:func:`pkb_core.plugin.multicast.multicast_claim_believable`).

This is no security boundary: the solution runs in this process and could undo
it. It only decides a verdict; machines keep multicast off through their
environment (``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` and the others).
"""
from __future__ import annotations

import re

from pkb_core.errors import MulticastUnavailable, where
from pkb_core.plugin.multicast import NEEDS_MULTICAST

#: Why multicast is off here (set by :func:`install`; None: the gate is not installed).
_WHY: str | None = None
#: What the solution asked for and was refused, in words (first ask first).
_DENIED: list[str] = []
#: The refusals the gate itself raised (the latest few): a ``MulticastUnavailable`` a solution made
#: and raised on its own, calling nothing refused, made a wrong file ``unsupported`` and so dropped
#: it out of every rate (a hostile review, 2026-12-02). Strong references: exceptions take no weak
#: ones, and a few are enough (a call raises one).
_RAISED: list[MulticastUnavailable] = []
_RAISED_KEPT = 16
#: Errors after a refused ask that are the device's answer to a null multicast address.
_DEVICE_FAULT = re.compile(r"CUDA error|illegal (memory access|address|instruction)|misaligned address|"
                           r"unspecified launch failure", re.IGNORECASE)
_NAMES_MULTICAST = re.compile(r"multicast|multimem|\bNVLS\b", re.IGNORECASE)


def install(why: str) -> None:
    """Refuse multicast in this process from now on (see the module docstring);
    ``why``: :func:`pkb_core.plugin.multicast.multicast_off`'s answer."""
    global _WHY
    from pkb_core.symmetric.handles import registered_handles
    from pkb_core.symmetric.mapped import MappedHandle

    _WHY = why
    _DENIED.clear()
    classes = {MappedHandle, *(type(handle) for handle in registered_handles())}
    try:
        from torch._C._distributed_c10d import _SymmetricMemory
    except ImportError:  # torch without distributed support: nothing of torch's to watch
        pass
    else:
        classes.add(_SymmetricMemory)
        _SymmetricMemory.has_multicast_support = staticmethod(lambda *args, **kwargs: False)
    for cls in classes:
        cls.multicast_ptr = property(_zero_multicast_ptr)
    _refuse_multimem_ops()


def _deny(what: str) -> None:
    if what not in _DENIED:
        _DENIED.append(what)


def _zero_multicast_ptr(handle) -> int:
    _deny("read a symmetric handle's multicast_ptr (0 here)")
    return 0


class _RefusedOp:
    """Stands for one of torch's multimem operations (and each of its overloads)."""

    def __init__(self, name: str):
        self._name = name

    def __call__(self, *args, **kwargs):
        _deny(f"called {self._name}")
        refused = MulticastUnavailable(f"{NEEDS_MULTICAST} ({_WHY}): it called {self._name}")
        _RAISED.append(refused)
        del _RAISED[:-_RAISED_KEPT]
        raise refused

    def __getattr__(self, overload):  # torch.ops.symm_mem.multimem_all_reduce_.default
        if overload.startswith("__"):
            raise AttributeError(overload)
        return self


def _refuse_multimem_ops() -> None:
    try:
        import torch
    except ImportError:
        return
    names = sorted({name.split("::", 1)[1].split(".", 1)[0] for name in torch._C._dispatch_get_all_op_names()
                    if name.startswith("symm_mem::multimem")})
    for name in names:
        setattr(torch.ops.symm_mem, name, _RefusedOp(f"torch.ops.symm_mem.{name}"))


def refusal(exc: BaseException, solution=None) -> str | None:
    """The ``unsupported`` reason when the solution call that raised ``exc`` failed
    for want of multicast (see the module docstring), naming the solution's own
    line (``solution``: its file); None otherwise, or where the gate is not installed."""
    if _WHY is None:
        return None
    seen = exc
    while seen is not None:
        if isinstance(seen, MulticastUnavailable) and any(seen is raised for raised in _RAISED):
            return f"{seen}{where(seen, solution, inner=False)}"
        seen = seen.__cause__ or seen.__context__
    if not _DENIED:
        return None
    text = str(exc)
    if _DEVICE_FAULT.search(text) or _NAMES_MULTICAST.search(text) or type(exc).__name__ == "AcceleratorError":
        first = text.strip().splitlines()[0] if text.strip() else ""
        return (f"{NEEDS_MULTICAST} ({_WHY}): it {_DENIED[0]}, then raised {type(exc).__name__}: {first}"
                f"{where(exc, solution)}")
    return None
