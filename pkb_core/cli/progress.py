"""Progress of ``pkb run``: one line per finished job, and a rich progress bar on a terminal.

The lines (``[i/n] problem  solution  verdict  speedup``, or the reason of a job that did not
pass) go to stderr as
before; when stderr is a terminal and ``rich`` is installed (and ``PKB_PLAIN``
is unset) they scroll above a live bar with the count and the elapsed time,
with every other line printed meanwhile (:meth:`JobProgress.echo`).
Pipes, CI logs and tests get the plain lines only.
"""
from __future__ import annotations

import os
import sys

import click

from pkb_core.contracts.verdict import Verdict
from pkb_core.errors import Terminated
from pkb_core.plugin.hookspecs import hookimpl


def stopped_by(stop: BaseException) -> str:
    """How a run was stopped, for its last line: ``interrupted`` (Ctrl-C) or ``terminated (SIGTERM)``."""
    return f"terminated ({stop.signal_name})" if isinstance(stop, Terminated) else "interrupted"


class JobProgress:
    """Call with each finished record, or register as a plugin of the run (it implements
    ``pkb_report_job``); the bar shows between :meth:`start` and :meth:`close`."""

    def __init__(self, total: int, quiet: bool = False, label=None, console=None):
        """:param label: ``label(record)``, the text after ``[i/n]`` (default: problem and solution).
        :param console: the rich console the bar draws on (default: one on stderr, when that is a
            terminal)."""
        self.total, self.done, self.quiet = total, 0, quiet
        self.label = label or (lambda record: f"{record.problem}  {record.solution}")
        self._console = console
        self._bar = None
        self._task = None

    def __call__(self, record: dict) -> None:
        self.done += 1
        if self.quiet:
            return
        extra = speedup_text(record) or reason_text(record)
        self.echo(f"[{self.done}/{self.total}] {self.label(record)}  {record.verdict}{'  ' + extra if extra else ''}")
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)

    def echo(self, line: str) -> None:
        """``line`` on stderr: above the bar while it shows, else plainly. A line printed while the
        bar shows must come through here (the compile phase's ``build [i/n]`` lines too): written
        past rich, it lands on the bar's own line, and the bar's next refresh draws over it."""
        if self._bar is None:
            click.echo(line, err=True)
        else:
            self._bar.console.print(line, highlight=False, markup=False)

    @hookimpl
    def pkb_report_job(self, record) -> None:
        self(record)

    def start(self) -> None:
        """Show the live bar (only on a terminal with rich; otherwise nothing changes)."""
        if self.quiet or self._bar is not None or (self._console is None and not _rich_on_stderr()):
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(TextColumn("jobs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             console=self._console or Console(stderr=True), transient=True)
        self._bar.start()
        self._task = self._bar.add_task("jobs", total=self.total, completed=self.done)

    def close(self) -> None:
        """Remove the bar (idempotent); the job lines stay."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def speedup_text(record) -> str:
    """A timed record's speedup as the job lines show it: ``1.23x [1.10, 1.38]  faster (host timing)``;
    ``""`` for a record that was not timed."""
    # A speedup is shown only with its interval; without one, only that it cannot be told.
    ci = record.speedup_ci
    parts = [f"{_ratio(record.speedup)}x [{_ratio(ci[0])}, {_ratio(ci[1])}]"] if record.speedup and ci else []
    if record.difference:
        parts.append(record.difference + (" (host timing)" if record.clock == "host" else ""))
    return "  ".join(parts)


def _ratio(value: float) -> str:
    """A speedup with two decimals, or two significant digits below 0.1 (0.003 read "0.00")."""
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"


#: How much of a reason a job line shows (the record keeps all of it).
REASON_CHARS = 240


def reason_text(record) -> str:
    """Why a job did not pass, as its line shows it (``pkb bench``'s table has no reason column,
    so this line is where a sweep says it); ``""`` for a passed job or one without a reason."""
    if record.verdict == Verdict.PASS or not record.reason:
        return ""
    reason = " ".join(str(record.reason).split())
    return reason if len(reason) <= REASON_CHARS else reason[:REASON_CHARS - 3] + "..."


def _rich_on_stderr() -> bool:
    if os.environ.get("PKB_PLAIN") or not sys.stderr.isatty():
        return False
    try:
        import rich.progress  # noqa: F401
    except ImportError:
        return False
    return True
