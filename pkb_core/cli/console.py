"""Terminal output of titled tables: ``rich`` on a terminal, plain text otherwise.

Plain text (:func:`pkb_core.results.table.render_table`) is used whenever stdout is not
a TTY, ``rich`` is not installed, or ``PKB_PLAIN`` is set, so pipes, files and
tests always see the same stable text. Both forms show the same cells, and
neither is wider than the terminal (or ``$COLUMNS`` when set): long cells wrap.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import click

from pkb_core.results.table import AUTO, format_cell, numeric_column, render_table
from pkb_core.contracts.verdict import Verdict

#: Verdict colours in rich tables.
VERDICT_STYLES = {**{v.value: "red" for v in Verdict if v.failing}, Verdict.PASS.value: "green",
                  Verdict.FLAGGED.value: "yellow", Verdict.UNSUPPORTED.value: "dim", Verdict.CANCELLED.value: "dim",
                  Verdict.UNCHECKED.value: "dim",
                  # pkb compare's states of a job between two runs
                  "improved": "green", "regressed": "red"}

#: Widest column that rich must not squeeze (longer cells may wrap).
MAX_KEPT_WIDTH = 40
#: Least width left to the last column before rich may squeeze the others.
MIN_LAST_WIDTH = 20


@dataclass
class Section:
    """One titled table; ``notes`` are lines printed under it."""

    title: str
    headers: list
    rows: list
    notes: list = field(default_factory=list)


def use_rich() -> bool:
    """True when stdout is a terminal, rich is importable and PKB_PLAIN is unset."""
    if os.environ.get("PKB_PLAIN") or not sys.stdout.isatty():
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def plain_text(sections, width=AUTO) -> str:
    """The sections as plain text: title, table, notes, a blank line between sections."""
    blocks = []
    for s in sections:
        lines = [s.title, render_table(s.headers, s.rows, width=width)] if s.rows else [s.title, "(none)"]
        blocks.append("\n".join(lines + list(s.notes)))
    return "\n\n".join(blocks)


def show(sections) -> None:
    """Print the sections, with rich when :func:`use_rich` says so."""
    if not use_rich():
        click.echo(plain_text(sections))
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for s in sections:
        widths = [min(MAX_KEPT_WIDTH, max([len(h)] + [len(format_cell(r[i])) for r in s.rows]))
                  for i, h in enumerate(s.headers)]
        if sum(widths[:-1]) + 3 * len(widths) + MIN_LAST_WIDTH > console.width:
            # Too wide for rich's squeezing (it would break every name): the plain table,
            # whose long text columns wrap at this width.
            click.echo(plain_text([s], width=console.width) + "\n")
            continue
        table = Table(title=s.title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD)
        for i, header in enumerate(s.headers):
            last = i == len(widths) - 1  # the last column (notes, reasons) wraps; the others keep their width
            table.add_column(header, justify="right" if numeric_column(s.rows, i) else "left",
                             min_width=None if last else widths[i], no_wrap=not last)
        for values in s.rows:
            table.add_row(*[_rich_cell(v) for v in values])
        console.print(table)
        for note in s.notes:
            console.print(note, highlight=False)
        console.print()


def _rich_cell(value):
    from rich.text import Text

    text = format_cell(value)
    return Text(text, style=VERDICT_STYLES.get(text, ""))
