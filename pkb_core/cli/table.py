"""A plain-text table renderer (no dependency; output is stable for tests and pipes)."""
from __future__ import annotations


def render_table(headers, rows) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[format_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    numeric = [numeric_column(rows, i) for i in range(len(headers))]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(row) for row in cells]
    return "\n".join(out)


def numeric_column(rows, index) -> bool:
    """Whether column ``index`` holds numbers only (empty cells aside) and at least one."""
    values = [row[index] for row in rows if row[index] not in (None, "")]
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def format_cell(value) -> str:
    """The text of one cell (floats to 4 significant digits, None empty); the
    rich tables of :mod:`pkb_core.cli.console` and the HTML report use it too."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
