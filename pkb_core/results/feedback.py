"""A record's feedback (:class:`pkb_core.contracts.feedback.Feedback`), made from what the
job concluded: the verdict and reason, the judge's structured finding of a wrong answer,
what was running when a job hung or died, and the timing of a pass.

:func:`job_record` calls :func:`feedback_of` for every record it makes, so the service's
records carry it as ``pkb run``'s do; a record written before feedback existed gets
the same from its reason alone (no mismatch detail). Everything is bounded: at most
:data:`COMPILER_LINES` compiler lines of :data:`LINE_CHARS` characters, a summary of
:data:`SUMMARY_CHARS`, the few elements the judge lists. Paths are cut to their file
names (a model knows its file by name; the machine's layout is none of its business).
"""
from __future__ import annotations

import re

from pkb_core.contracts.feedback import Element, Feedback, Mismatch, Perf
from pkb_core.contracts.record import Record
from pkb_core.contracts.verdict import Verdict

COMPILER_LINES = 20
LINE_CHARS = 300
SUMMARY_CHARS = 1200
#: A path to a source file: keep only its name.
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:/[^\s:'\"()/]+)+/([^\s:'\"()/]+\.(?:py|cu|cuh|h|hpp|cpp|c))\b")
#: Lines of a compiler's or importer's message worth a model's reading.
_ERROR = re.compile(r"error|exception|undefined|undeclared|not declared|expected|invalid|cannot|no member|"
                    r"raised|traceback", re.IGNORECASE)
#: ``... on trial 2: ...`` in a reason (the jobrun's prefix).
_TRIAL = re.compile(r"^trial (\d+): ")


def feedback_of(record: Record, *, finding: dict | None = None, running: str | None = None,
                trials_asked: int | None = None, solution=None) -> Feedback:
    """The feedback for ``record``.

    :param finding: the judge's structured detail of a wrong answer (an :class:`Outcome`'s).
    :param running: what was running when a job timed out, crashed or raised.
    :param trials_asked: the trials the job asked for (to say "2 of 5 passed").
    :param solution: the solution file's path, for the source lines a compile error names."""
    verdict, reason = record.verdict, short_paths(record.reason or "")
    parts: dict = {"verdict": verdict, "summary": _cut(reason, SUMMARY_CHARS), "trials": record.trials}
    if verdict == Verdict.COMPILE_ERROR:
        parts["compiler"] = compiler_lines(reason, _source(solution))
    elif verdict == Verdict.FAIL:
        parts["mismatch"] = mismatch(reason, finding)
    elif verdict == Verdict.FLAGGED:
        parts["rule"] = _cut(reason, SUMMARY_CHARS)
    elif verdict in (Verdict.TIMEOUT, Verdict.CRASH, Verdict.ERROR):
        parts["running"] = running
    if record.timed:
        sol = record.sol
        parts["perf"] = Perf(reference_ms=record.reference_ms, solution_ms=record.solution_ms,
                             speedup=record.speedup, speedup_ci=record.speedup_ci, difference=record.difference,
                             timing_mode=record.timing_mode, clock=record.clock,
                             floor_ms=sol and sol.floor_ms, bound=sol and sol.bound,
                             reference_sol_fraction=sol and sol.reference_fraction,
                             solution_sol_fraction=sol and sol.solution_fraction)
    if trials_asked is not None:
        parts["extra"] = {"trials_asked": trials_asked}
    return Feedback(**parts)


def short_paths(text: str) -> str:
    """``text`` with every path to a source file cut to the file's name."""
    return _PATH.sub(r"\1", text)


def compiler_lines(message: str, source: tuple[str, str] | None = None) -> tuple[str, ...]:
    """The lines of a build's message that say what is wrong, each followed by the
    source and caret lines a compiler prints under it; the first lines when none
    looks like an error. At most :data:`COMPILER_LINES`, each cut to :data:`LINE_CHARS`.

    :param source: ``(file name, text)`` of the solution: an error line naming
        ``<name>:<N>`` (or ``<name>", line N``) without a quote of the source under it
        gets that line of the file, as ``    N | text``."""
    lines = [line.rstrip() for line in short_paths(message).splitlines() if line.strip()]
    keep: list[int] = []
    for i, line in enumerate(lines):
        if _ERROR.search(line):
            keep.append(i)
            # The compiler's quote of the source and its caret, indented under the error.
            keep += [j for j in (i + 1, i + 2) if j < len(lines) and (lines[j][:1].isspace() or "^" in lines[j])]
    chosen = sorted(set(keep)) or list(range(len(lines)))
    out: list[str] = []
    for n, i in enumerate(chosen):
        out.append(lines[i])
        quoted = n + 1 < len(chosen) and chosen[n + 1] == i + 1 and lines[i + 1][:1].isspace()
        if source and not quoted:
            out += _quote(lines[i], *source)
    return tuple(_cut(line, LINE_CHARS) for line in out[:COMPILER_LINES])


def _quote(line: str, name: str, text: str) -> list[str]:
    """``["    N | <line N of the source>"]`` when ``line`` names a line of file ``name``."""
    found = re.search(rf"{re.escape(name)}(?::|\", line )(\d+)", line)
    source = text.splitlines()
    if not found or not 1 <= int(found.group(1)) <= len(source):
        return []
    number = int(found.group(1))
    return [f"    {number} | {source[number - 1].rstrip()}"]


def _source(path) -> tuple[str, str] | None:
    """``(name, text)`` of the solution file at ``path``, or None when it cannot be read."""
    from pathlib import Path

    try:
        return (Path(path).name, Path(path).read_text(errors="replace")) if path else None
    except OSError:
        return None


def mismatch(reason: str, finding: dict | None) -> Mismatch:
    """A wrong answer's :class:`Mismatch`: the judge's finding when there is one, else
    what the reason says (``[trial k: ]rank r: <output>: ...``)."""
    trial = _TRIAL.match(reason)
    rank = re.search(r"\brank (\d+): ", reason)
    base = {"trial": int(trial.group(1)) if trial else None, "rank": int(rank.group(1)) if rank else None}
    if not finding:
        after = reason[rank.end():] if rank else reason
        return Mismatch(**base, output=after.split(":", 1)[0][:80])
    elements = tuple(Element(index=tuple(int(i) for i in e.get("index", ())), got=str(e.get("got")),
                             expected=str(e.get("expected"))) for e in finding.get("elements", ())[:8])
    return Mismatch(
        rank=finding.get("rank", base["rank"]), output=str(finding.get("output", ""))[:80], trial=base["trial"],
        call=finding.get("call"), count=finding.get("count"), numel=finding.get("numel"),
        shape=tuple(finding["shape"]) if finding.get("shape") is not None else None, elements=elements,
        max_abs_err=finding.get("max_abs_err"), tolerance=_cut(str(finding["tolerance"]), LINE_CHARS)
        if finding.get("tolerance") else None)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
