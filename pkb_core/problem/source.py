"""A solution file's contents, read once per process.

One process meets a job's solution file several times: the plan keys the job by
its content, the compile phase keys its build, the static checks read its text
(unsupported imports, multicast calls, the collectives a verdict's hint names)
and the loader compiles it. They all read it here, once, and the contents are
kept while the file is unchanged: its size, modification time and inode, checked
with a ``stat`` (which reads nothing), so a file rewritten between two runs of
one process is read again. A candidate reads its file before its lockdown
(:func:`pkb_core.candidate.solution.keep_source`); where the file can no longer
be seen after it, the contents read then are used.
"""
from __future__ import annotations

import os
from pathlib import Path

#: The most files kept (a service plans thousands of submissions; a job needs its own only).
KEPT = 256

_KEPT: dict[str, tuple[tuple, bytes]] = {}


def read_solution(path) -> bytes:
    """The bytes of the file ``path``, read at most once while it is unchanged.

    :raises OSError: the file cannot be read and was never read by this process."""
    key = str(Path(path).resolve())
    try:
        info = os.stat(key)
    except OSError:
        if key in _KEPT:
            return _KEPT[key][1]
        raise
    stamp = (info.st_size, info.st_mtime_ns, info.st_ino)
    held = _KEPT.get(key)
    if held is None or held[0] != stamp:
        data = Path(key).read_bytes()
        _KEPT.pop(key, None)
        while len(_KEPT) >= KEPT:
            _KEPT.pop(next(iter(_KEPT)))
        _KEPT[key] = held = (stamp, data)
    return held[1]


def solution_text(path, errors: str = "strict") -> str:
    """The file's text, as :meth:`pathlib.Path.read_text` gives it (UTF-8, newlines made ``\\n``)."""
    text = read_solution(path).decode("utf-8", errors)
    return text.replace("\r\n", "\n").replace("\r", "\n")
