"""What the launcher reads from a group's answers, shared by the trials and the timed rounds:
the ranks' combined finding and the slot sizes of a tree over the ranks."""
from __future__ import annotations

from pkb_core.harness.parcel import tensor_bytes


def slot_sizes(skeletons: list[dict]) -> list[int]:
    """Per tensor leaf, the largest byte count over the ranks' skeletons."""
    per_rank = [tensor_bytes(s) for s in skeletons]
    count = max(len(sizes) for sizes in per_rank)
    return [max((sizes[i] for sizes in per_rank if i < len(sizes)), default=0) for i in range(count)]


def combine(answers: list, label: str) -> tuple[str, str, dict | None] | None:
    """The first rank's ``(verdict, reason, finding)`` among the judge's
    :class:`pkb_core.contracts.messages.Finding` answers, else None; ``finding`` is the
    judge's structured detail (:class:`pkb_core.judge.check.Finding`) with the rank added, or None."""
    for rank, answer in enumerate(answers):
        if answer.verdict:
            finding = {**answer.finding, "rank": rank} if answer.finding else None
            return answer.verdict, f"{label} {rank}: {answer.reason}", finding
    return None
