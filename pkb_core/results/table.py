"""A plain-text table renderer (no dependency; output is stable for tests and pipes).

Tables fit the width they are given: by default ``$COLUMNS`` when set, else the
terminal's width when stdout is one (:func:`shutil.get_terminal_size`), else no
limit (a pipe or a file gets whole lines). Text columns that do not fit are
narrowed, widest first, and their cells wrap onto more lines; numbers never
wrap.
"""
from __future__ import annotations

import os
import shutil
import sys
import textwrap

#: Narrowest a text column gets when a table must fit (its header stays whole).
MIN_WIDTH = 8
#: ``width`` default of :func:`render_table`: :func:`terminal_width`.
AUTO = "auto"


def terminal_width() -> int | None:
    """``$COLUMNS`` when set, the terminal's width when stdout is a terminal, else ``None`` (no limit)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        if sys.stdout.isatty():
            return shutil.get_terminal_size().columns
    except (AttributeError, ValueError, OSError):
        pass
    return None


def render_table(headers, rows, width=AUTO, formats=None) -> str:
    """Columns padded to their widest cell; numbers right-aligned; at most ``width``
    characters a line (``None``: no limit) where the text columns can shrink that far.

    :param formats: ``{column index: format spec}`` for numbers, e.g. ``{4: ".2f"}``
        (default :func:`format_cell`: 4 significant digits, never an exponent for
        ordinary magnitudes).
    """
    formats = formats or {}
    cells = [[format_cell(v, formats.get(i)) for i, v in enumerate(row)] for row in rows]
    numeric = [numeric_column(rows, i) for i in range(len(headers))]
    natural = [len(h) for h in headers]
    for row in cells:
        natural = [max(w, *(len(part) for part in c.split("\n"))) for w, c in zip(natural, row)]
    widths = fit_widths(natural, headers, numeric, terminal_width() if width == AUTO else width)

    def lines(values, wrap=True):
        parts = [_wrap(v, w) if wrap else [v] for v, w in zip(values, widths)]
        height = max(len(p) for p in parts) if parts else 1
        for k in range(height):
            yield "  ".join((p[k] if k < len(p) else "").rjust(w) if num else (p[k] if k < len(p) else "").ljust(w)
                            for p, w, num in zip(parts, widths, numeric)).rstrip()

    out = list(lines(list(headers))) + ["  ".join("-" * w for w in widths).rstrip()]
    for row in cells:
        out += list(lines(row))
    return "\n".join(out)


def fit_widths(natural, headers, numeric, width) -> list[int]:
    """Column widths whose sum with the gaps is at most ``width``, narrowing the widest
    text column first (never below :data:`MIN_WIDTH` or its header's longest word)."""
    widths = list(natural)
    if width is None:
        return widths
    floor = [w if num else min(w, max(MIN_WIDTH, *(len(word) for word in (str(h).split() or [""]))))
             for w, h, num in zip(natural, headers, numeric)]
    excess = sum(widths) + 2 * (len(widths) - 1) - width
    while excess > 0:
        candidates = [i for i, w in enumerate(widths) if w > floor[i]]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: widths[i])
        others = [widths[i] for i in candidates if i != widest]
        # Narrow the widest column down to the next widest (or by the excess) in one step.
        step = min(excess, widths[widest] - max([floor[widest]] + others) or 1, widths[widest] - floor[widest])
        widths[widest] -= max(step, 1)
        excess -= max(step, 1)
    return widths


def _wrap(text: str, width: int) -> list[str]:
    out = []
    for part in text.split("\n"):
        if len(part) <= width:
            out.append(part)
        else:
            out += textwrap.wrap(part, width=width, break_long_words=True, break_on_hyphens=False) or [""]
    return out or [""]


def numeric_column(rows, index) -> bool:
    """Whether column ``index`` holds numbers only (empty cells aside) and at least one."""
    values = [row[index] for row in rows if row[index] not in (None, "")]
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def format_cell(value, spec: str | None = None) -> str:
    """The text of one cell (floats to 4 significant digits without an exponent from
    1e-4 up, or as ``spec`` says; None empty); the rich tables of
    :mod:`pkb_core.cli.console` and the HTML report use it too."""
    if value is None:
        return ""
    if isinstance(value, float):
        if spec:
            return format(value, spec)
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)
        if abs(value) >= 1e4:
            return f"{value:.0f}"
        return f"{value:.4g}"
    return str(value)
