"""The process group of a custom-kernel candidate: ranks and a barrier, no transport.

A candidate of a custom-kernel backend must move data itself. Its processes
still need what solutions are written against (``dist.get_rank()``,
``dist.group.WORLD`` and its name for ``symm_mem.rendezvous``, subgroups from
the problem's inputs, ``dist.barrier()``), so the harness gives them a world
group whose only backend is torch's ``FakeProcessGroup`` with
``error_on_collective``: every collective, by any route (``torch.distributed``
functions, c10d dispatcher ops, functional collectives, the group's backend
object), ends in a C++ error, and point-to-point ops move nothing. There is no
NCCL or gloo communicator to reach, and after :func:`pkb_core.confine.lockdown.lock_down`
no new one can be built (both need new TCP connections).

``dist.barrier()`` keeps working: :func:`install_barrier` replaces it with
a :class:`pkb_core.harness.barrier.StoreBarrier`, a host barrier counted by the group's store keeper
(:mod:`pkb_core.keeper`: barriers are all it serves after the lockdown) that first waits
for this rank's device work (the ordering NCCL's barrier gives) and reports
each call to the launcher, which counts them in the record. That is a service
to the solution, not a guard: a solution that removes it only loses its own
barrier.
"""
from __future__ import annotations

BACKEND_NAME = "pkbsealed"
#: What the FakeProcessGroup says when a collective is attempted.
REFUSAL_TEXT = "FakeProcessGroup collective operation error"
#: The verdict reason when a solution's collective was refused.
REFUSAL_REASON = ("the solution called a torch.distributed collective; a custom-kernel solution must move data "
                  "itself (only dist.barrier() is provided)")


def _create_backend(store, rank, size, timeout):
    import torch._C._distributed_c10d as c10d

    options = c10d.FakeProcessGroup.Options()
    # Without the option (older torch) collectives return at once without
    # moving anything: still no transport, only a wrong answer instead of an error.
    if hasattr(options, "error_on_collective"):
        options.error_on_collective = True
    return c10d.FakeProcessGroup._create_internal(rank, size, options)


def register_backend() -> None:
    """Make ``init_process_group(backend="pkbsealed")`` available (idempotent)."""
    import torch.distributed as dist

    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["cpu", "cuda"])


def install_barrier(barrier) -> None:
    """Make ``torch.distributed.barrier`` ``barrier`` (a :class:`pkb_core.harness.barrier.StoreBarrier`)
    in this process."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    dist.barrier = barrier
    c10d.barrier = barrier


def is_refusal(exc: BaseException, _text: str = REFUSAL_TEXT) -> bool:
    """Whether ``exc`` (or its cause) is the sealed group refusing a collective.

    (``_text`` is bound when this module loads, before any solution: a
    solution that rewrites :data:`REFUSAL_TEXT` changes nothing here.)"""
    while exc is not None:
        if _text in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
