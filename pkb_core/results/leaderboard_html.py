"""``pkb leaderboard --html``: the leaderboard as one self-contained HTML page.

Everything is inline: the style, an SVG chart (pass rate, and the geomean speedup with its
interval, per row) and a few lines of script that sort a table by the column header clicked
(again: the other way). No fonts, images, scripts or style sheets from elsewhere: the page
opens the same offline, in a CI artifact viewer or attached to an e-mail. Without script
the tables read as printed, in rank order.
"""
from __future__ import annotations

import html
import math
import re

from pkb_core import __version__
from pkb_core.results.report_html import table_cell

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; cursor: pointer; user-select: none; white-space: nowrap; }
th:hover { background: #e6e6e6; }
th[aria-sort=ascending]::after { content: " \\25B2"; } th[aria-sort=descending]::after { content: " \\25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
p.note { color: #555; font-size: 0.9em; max-width: 70em; } code { background: #f3f3f3; padding: 1px 4px; }
svg text { font-family: system-ui, sans-serif; font-size: 12px; fill: #222; }
"""

# Sorts a table.sortable by the clicked header: numbers (a cell's data-sort) as numbers, text as
# text, empty cells last either way; a second click reverses.
_SCRIPT = """
function pkbKey(cell) {
  var v = cell ? cell.getAttribute('data-sort') : null;
  if (v === null || v === '') return null;
  var n = Number(v);
  return isNaN(n) ? v : n;
}
document.querySelectorAll('table.sortable th').forEach(function (th) {
  th.addEventListener('click', function () {
    var table = th.closest('table'), body = table.tBodies[0];
    var col = Array.prototype.indexOf.call(th.parentNode.children, th);
    var ascending = th.getAttribute('aria-sort') !== 'ascending';
    table.querySelectorAll('th').forEach(function (h) { h.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', ascending ? 'ascending' : 'descending');
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = pkbKey(a.cells[col]), y = pkbKey(b.cells[col]);
      if (x === y) return 0;
      if (x === null) return 1;
      if (y === null) return -1;
      var c = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x).localeCompare(String(y));
      return ascending ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""

#: The chart's geometry (px).
_BAR, _GAP, _PANEL, _PAD, _TOP = 18, 8, 300, 60, 34
_PASS_COLOUR, _FASTER, _SLOWER, _SAME = "#3b6fb6", "#17803d", "#c0262d", "#b8b8b8"


def render_leaderboard_html(board: dict, sections, command: str | None = None) -> str:
    """A complete HTML document: the settings the rows differ in, the chart, then ``sections``
    (titled tables with ``headers``, ``rows`` and ``notes``, the terminal's) as sortable tables."""
    title = "pkb leaderboard"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{title}</title><style>{_STYLE}</style></head><body>", f"<h1>{title}</h1>",
             f'<p class="note">pkb {html.escape(__version__)}'
             + (f"; made by <code>{html.escape(command)}</code>" if command else "") + "</p>"]
    parts += [f'<p class="note"><strong>{html.escape(note)}</strong></p>' for note in board["notes"]
              if note.startswith("rows differ")]
    parts.append("<h2>Pass rate and geomean speedup</h2>")
    parts.append(chart_svg(board["rows"]))
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        parts.append(sortable_table(section.headers, section.rows))
        parts += [f'<p class="note">{html.escape(note)}</p>' for note in section.notes]
    parts.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(parts) + "\n"


def sort_key(value) -> str:
    """A cell's ``data-sort``: its number (``43/81`` by its fraction, ``52.4`` and ``1.23x`` by the
    number, an interval by its low end), else its text; empty for an empty or ``n/a`` cell."""
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))
    text = str(value).strip()
    fraction = re.fullmatch(r"(\d+)/(\d+)", text)
    if fraction:
        total = int(fraction.group(2))
        return repr(int(fraction.group(1)) / total) if total else ""
    number = re.match(r"\[?\s*(-?\d+(?:\.\d+)?)", text)
    if number:
        return number.group(1)
    return "" if text.startswith("n/a") else text


def sortable_table(headers, rows) -> str:
    if not rows:
        return '<p class="note">(none)</p>'
    head = "".join(f'<th title="sort by {html.escape(str(h))}">{html.escape(str(h))}</th>' for h in headers)
    body = ["<tr>" + "".join(table_cell(value, sort_key(value)) for value in row) + "</tr>" for row in rows]
    return f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def chart_svg(rows) -> str:
    """Two bar panels per row, in rank order: the pass rate (0-100 %), and the geomean speedup on a
    log scale around 1x with its interval as a whisker (grey where the interval holds 1.0, as
    ``pkb plot`` draws a speedup it cannot tell from 1.0)."""
    label_width = min(420, 7 * max([len(_chart_label(r)) for r in rows] + [10]))
    low, high = _speed_range(rows)
    width = label_width + 2 * _PANEL + 3 * _PAD
    height = _TOP + len(rows) * (_BAR + _GAP) + 24
    x_pass = label_width + _PAD
    x_speed = x_pass + _PANEL + _PAD

    def at(speedup):  # x of a speedup on the log axis
        return x_speed + _PANEL * (math.log(speedup) - math.log(low)) / (math.log(high) - math.log(low))

    bottom = _TOP + len(rows) * (_BAR + _GAP)
    out = [f'<svg width="{width}" height="{height}" role="img" '
           f'aria-label="pass rate and geomean speedup per row">',
           f'<text x="{x_pass}" y="{_TOP - 14}">pass rate (%)</text>',
           f'<text x="{x_speed}" y="{_TOP - 14}">geomean speedup (log scale), 95 % interval</text>']
    for pct in (0, 25, 50, 75, 100):
        x = x_pass + _PANEL * pct / 100
        out.append(f'<line x1="{x:.1f}" y1="{_TOP - 4}" x2="{x:.1f}" y2="{bottom}" stroke="#e3e3e3"/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle">{pct}</text>')
    for tick in _ticks(low, high):
        x = at(tick)
        colour = "#555" if tick == 1 else "#e3e3e3"
        out.append(f'<line x1="{x:.1f}" y1="{_TOP - 4}" x2="{x:.1f}" y2="{bottom}" stroke="{colour}"/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle">{tick:g}x</text>')
    for i, row in enumerate(rows):
        y = _TOP + i * (_BAR + _GAP)
        middle = y + _BAR / 2 + 4
        overall = row["overall"]
        out.append(f'<text x="{label_width + _PAD - 6}" y="{middle:.1f}" text-anchor="end">'
                   f'{html.escape(_chart_label(row))}</text>')
        rate = overall["pass_rate"]
        if rate is None:  # nothing counted: every record unsupported
            out.append(f'<text x="{x_pass + 4}" y="{middle:.1f}" fill="#777">n/a (every record unsupported)</text>')
        else:
            out.append(f'<rect x="{x_pass}" y="{y}" width="{_PANEL * rate:.1f}" height="{_BAR}" '
                       f'fill="{_PASS_COLOUR}"><title>{html.escape(row["label"])}: {overall["passed"]}/'
                       f'{overall["total"]} passed</title></rect>')
            out.append(f'<text x="{x_pass + _PANEL * rate + 4:.1f}" y="{middle:.1f}">{100 * rate:.1f}</text>')
        speed = overall["geomean_speedup"]
        if speed is None:
            out.append(f'<text x="{at(1.0) + 4:.1f}" y="{middle:.1f}" fill="#777">n/a (no correct timed record'
                       + (" on a GPU" if row["host_timings"] else "")
                       + (" by the judge's clock" if overall.get("launcher_timed") else "") + ")</text>")
            continue
        interval = overall["geomean_ci"]
        colour = (_SAME if interval and interval[0] <= 1.0 <= interval[1] else _FASTER if speed > 1 else _SLOWER)
        left, right = sorted((at(1.0), at(speed)))
        out.append(f'<rect x="{left:.1f}" y="{y}" width="{max(right - left, 1):.1f}" height="{_BAR}" '
                   f'fill="{colour}"><title>{html.escape(row["label"])}: geomean {speed:.3f}x</title></rect>')
        if interval:
            a, b = at(interval[0]), at(interval[1])
            out.append(f'<line x1="{a:.1f}" y1="{middle - 4:.1f}" x2="{b:.1f}" y2="{middle - 4:.1f}" '
                       'stroke="#222" stroke-width="1.5"/>')
            for x in (a, b):
                out.append(f'<line x1="{x:.1f}" y1="{y + 3}" x2="{x:.1f}" y2="{y + _BAR - 3}" stroke="#222"/>')
        out.append(f'<text x="{max(right, at(interval[1]) if interval else right) + 4:.1f}" '
                   f'y="{middle:.1f}">{speed:.3f}x</text>')
    out.append("</svg>")
    return "\n".join(out)


def _chart_label(row) -> str:
    return row["label"] + (" [host timings]" if row["host_timings"] else "")


def _speed_range(rows) -> tuple[float, float]:
    """The log axis's ends: every geomean and interval end, and at least 0.5x to 2x."""
    values = [v for row in rows for v in [row["overall"]["geomean_speedup"], *(row["overall"]["geomean_ci"] or [])]
              if v]
    return min([0.5] + [v / 1.25 for v in values]), max([2.0] + [v * 1.25 for v in values])


def _ticks(low: float, high: float) -> list[float]:
    """Powers of two between the ends (1x always among them)."""
    return [2.0 ** k for k in range(math.ceil(math.log2(low)), math.floor(math.log2(high)) + 1)]
