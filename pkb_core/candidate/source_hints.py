"""A hint from a solution's source, added to a verdict: which ``torch.distributed`` calls it names.

Read from the file's text by the launcher (the file is never imported here).
It is only a hint: a custom-kernel solution's collectives fail in its sealed
process group whatever it names (:mod:`pkb_core.candidate.sealed`).
"""
from __future__ import annotations

import re

from pkb_core.problem.source import solution_text

#: torch.distributed functions that move data between ranks.
COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all", "all_to_all_single",
    "broadcast", "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter",
    "scatter_object_list", "gather", "gather_object", "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "all_gather_coalesced", "_all_gather_base", "_reduce_scatter_base",
)
_DIST_CALL = re.compile(r"\b(?:dist|distributed|torch\.distributed)\s*\.\s*(" + "|".join(COLLECTIVES) + r")\s*\(")


def collective_hint(path) -> str | None:
    """``"source mentions torch.distributed.all_reduce, ..."`` or None."""
    if not path:
        return None
    try:
        found = sorted(set(_DIST_CALL.findall(solution_text(path, errors="replace"))))
    except OSError:
        return None
    return f"source mentions torch.distributed.{', '.join(found)}" if found else None
