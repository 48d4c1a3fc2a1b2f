"""Guards against solutions that cheat (shared/rigor.md rules 6-9).

* :class:`CollectiveGuard` — a candidate of a custom-kernel backend must move
  data itself. While it runs, every ``torch.distributed`` collective and
  point-to-point function (and the ``ProcessGroup`` methods behind them) is
  intercepted; a call makes the verdict ``flagged``. The harness's own calls
  (the CPU heap's barrier, agreement between ranks) run inside
  :func:`harness_call` and are not counted.
* :func:`static_scan` — a hint from the solution's source: which
  ``torch.distributed`` calls it mentions.
* :class:`TamperGuard` — identities of the functions the harness checks and
  times with, captured before any solution is imported and verified after
  each job: a solution that replaces them is ``flagged``.
"""
from __future__ import annotations

import contextlib
import re
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

#: torch.distributed functions that move data between ranks.
COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all", "all_to_all_single",
    "broadcast", "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter",
    "scatter_object_list", "gather", "gather_object", "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "barrier", "monitored_barrier", "all_gather_coalesced", "_all_gather_base", "_reduce_scatter_base",
)
#: ProcessGroup methods a solution could call directly.
GROUP_METHODS = ("allreduce", "allgather", "_allgather_base", "allgather_into_tensor_coalesced", "alltoall",
                 "alltoall_base", "broadcast", "reduce", "reduce_scatter", "_reduce_scatter_base", "scatter",
                 "gather", "send", "recv", "barrier")

_state = threading.local()


@contextlib.contextmanager
def harness_call():
    """Mark the enclosed torch.distributed calls as the harness's own."""
    previous = getattr(_state, "exempt", False)
    _state.exempt = True
    try:
        yield
    finally:
        _state.exempt = previous


class CollectiveGuard:
    """Counts torch.distributed calls made while :meth:`watching` is active."""

    def __init__(self):
        self.active = False
        self.calls: list[str] = []
        self._originals = {}

    def install(self) -> None:
        """Patch the module functions and ProcessGroup methods (once per process)."""
        import torch.distributed.distributed_c10d as c10d

        for name in COLLECTIVES:
            for module in (dist, c10d):
                original = getattr(module, name, None)
                if original is not None and (module, name) not in self._originals:
                    self._originals[(module, name)] = original
                    setattr(module, name, self._wrap(f"torch.distributed.{name}", original))
        for name in GROUP_METHODS:
            original = getattr(dist.ProcessGroup, name, None)
            if original is not None:
                try:
                    setattr(dist.ProcessGroup, name, self._wrap(f"ProcessGroup.{name}", original))
                    self._originals[(dist.ProcessGroup, name)] = original
                except (AttributeError, TypeError):  # some builds forbid it; the functions are still covered
                    pass

    def uninstall(self) -> None:
        for (owner, name), original in self._originals.items():
            setattr(owner, name, original)
        self._originals.clear()

    def _wrap(self, label, original):
        guard = self

        def wrapper(*args, **kwargs):
            if guard.active and not getattr(_state, "exempt", False):
                guard.calls.append(label)
            return original(*args, **kwargs)

        wrapper.__wrapped__ = original
        wrapper.__name__ = getattr(original, "__name__", label)
        return wrapper

    @contextlib.contextmanager
    def watching(self):
        self.active = True
        try:
            yield
        finally:
            self.active = False

    def take(self) -> str | None:
        """A one-line reason if calls were seen since the last take, else None."""
        calls, self.calls = self.calls, []
        if not calls:
            return None
        names = sorted(set(calls))
        return (f"the solution called {', '.join(names)} ({len(calls)} call(s)): a custom-kernel solution must "
                f"move data itself, not through NCCL/gloo")


_DIST_CALL = re.compile(r"\b(?:dist|distributed|torch\.distributed)\s*\.\s*(" + "|".join(COLLECTIVES) + r")\s*\(")


def static_scan(path) -> str | None:
    """A hint naming torch.distributed calls that appear in the solution's source."""
    if not path:
        return None
    try:
        found = sorted(set(_DIST_CALL.findall(Path(path).read_text(errors="replace"))))
    except OSError:
        return None
    return f"source mentions torch.distributed.{', '.join(found)}" if found else None


class TamperGuard:
    """Remembers the harness's timing and checking functions and notices replacements."""

    def __init__(self):
        from pkb_core import check, timing

        self._watched = {
            "pkb_core.check.compare": (check, "compare"),
            "pkb_core.check.compare_leaf": (check, "compare_leaf"),
            "pkb_core.timing.time_iterations": (timing, "time_iterations"),
            "pkb_core.timing.summarize": (timing, "summarize"),
            "time.perf_counter": (time, "perf_counter"),
            "torch.equal": (torch, "equal"),
            "torch.cuda.synchronize": (torch.cuda, "synchronize"),
            "torch.cuda.Event": (torch.cuda, "Event"),
            "torch.Tensor.__sub__": (torch.Tensor, "__sub__"),
        }
        self._identity = {name: getattr(owner, attr) for name, (owner, attr) in self._watched.items()}

    def changed(self) -> str | None:
        """A reason naming replaced functions (and restores them), or None."""
        replaced = []
        for name, (owner, attr) in self._watched.items():
            if getattr(owner, attr) is not self._identity[name]:
                replaced.append(name)
                setattr(owner, attr, self._identity[name])
        return f"the solution replaced {', '.join(replaced)}" if replaced else None
