"""Which rank starts a correctness trial late: the launcher's choice for each trial.

A solution that reads a peer's memory without waiting for it (a missing barrier before it reads
what a peer writes, or after, so that it returns while a peer still reads its buffers) passes
wherever its ranks happen to run in step, as they do on the CPU and in most GPU calls. So from
the second trial on one rank of the group starts its call late (``late_rank``, in turn) and every
other rank, once its call has returned and its answer is packed, overwrites the buffers it was
handed (:mod:`pkb_core.candidate.stagger`): a rank that needed a late peer's data too early, or
a peer's input after that peer returned, reads what no correct call could and the trial fails,
with a reason that says so. The first trial runs in step (and pays the solution's first uses);
the timed windows, checked too, run in step as well.

This is a perturbation of the candidate's schedule, not a check: what decides the verdict is the
judge's comparison of the outputs, as in every trial.
"""
from __future__ import annotations


def late_rank(trial: int, world_size: int) -> int | None:
    """The rank that starts trial ``trial``'s call late (None: every rank in step): none in the
    first trial or alone, then each rank in turn from rank 1 (at W = 2 the second trial's late
    rank is 1, the third's 0)."""
    if trial == 0 or world_size < 2:
        return None
    return trial % world_size


def staggered_note(rank: int) -> str:
    """What a failure's reason adds where its trial was staggered."""
    return (f"rank {rank} started this trial's call late and the others overwrote their inputs once they returned: "
            f"a solution that reads a peer's memory without a barrier before or after fails here")
