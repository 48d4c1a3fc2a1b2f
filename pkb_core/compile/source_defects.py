"""A submitted source that is no solution file before any build: empty, not UTF-8 text, too large.

A model's completion from which no code was extracted is an empty source; a
source cut in the middle of a character, or a client that decoded bytes with
``surrogateescape``, gives text that is not UTF-8; a runaway generation is
larger than a service keeps. Each is that one submission's ``compile-error``,
with the reason, exactly like a file that does not parse: the reward service
(:mod:`pkb_core.serve.intake`) records it as a job like any other, and
``pkb run``'s compile phase (:meth:`pkb_core.compile.phase.BuildPhase._refusals`) and
:func:`pkb_core.evaluate` return it, without starting a builder. So a batch of
completions gets one record per completion, whatever one of them holds.
"""
from __future__ import annotations


def source_bytes(source: str) -> bytes:
    """``source`` as UTF-8; characters UTF-8 cannot carry (lone surrogates) kept as their
    surrogate code units, so every text has bytes (for content digests)."""
    return source.encode("utf-8", "surrogatepass")


def source_defect(source: str, max_bytes: int | None = None) -> str | None:
    """Why ``source`` is no solution file before anything builds it (one line), or None.

    :param max_bytes: the largest source taken (None: no limit).
    """
    try:
        size = len(source.encode("utf-8"))
    except UnicodeEncodeError as exc:
        return (f"the source is not UTF-8 text: character {exc.start} is {source[exc.start]!r} "
                f"({exc.reason}); a solution file is UTF-8 Python")
    if max_bytes is not None and size > max_bytes:
        return f"the source is {size} bytes; this service takes at most {max_bytes}"
    if not source.strip():
        return "the source is empty: no code was submitted (a solution file defines solution(...))"
    return None


def file_defect(data: bytes) -> str | None:
    """Why a solution file's bytes ``data`` are no solution file before anything builds it (one
    line), or None: the same refusals as :func:`source_defect`, for a file read from disk."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"the file is not UTF-8 text ({exc.reason} at byte {exc.start}); a solution file is UTF-8 Python"
    return source_defect(text)
