"""``pkb report --html``: the report's tables as one self-contained HTML page.

No scripts, fonts, images or style sheets from elsewhere: the page opens the
same offline, in a CI artifact viewer or attached to an e-mail.
"""
from __future__ import annotations

import html

from pkb_core import __version__
from pkb_core.results.table import format_cell
from pkb_core.contracts.verdict import VERDICTS

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.pass { color: #17803d; } td.flagged { color: #a66a00; } td.unsupported { color: #888; }
td.fail, td.error, td.compile-error, td.timeout, td.crash { color: #c0262d; font-weight: 600; }
p.note { color: #555; font-size: 0.9em; }
"""


def render_html(summary: dict, sections) -> str:
    """A complete HTML document for ``summary`` (from :func:`pkb_core.results.report.summarize`)."""
    title = f"pkb report: {summary.get('run_dir') or 'run'}"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>", f'<p class="note">pkb {html.escape(__version__)}</p>']
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        parts.append(_table(section.headers, section.rows))
        parts += [f'<p class="note">{html.escape(note)}</p>' for note in section.notes]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def table_cell(value, sort_key: str | None = None) -> str:
    """One ``<td>``: ``value`` as the text tables show it, right-aligned when it is a number and
    coloured when it is a verdict; with ``sort_key``, the key a sortable table orders it by."""
    text = format_cell(value)
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    cls = "num" if numeric else (text if text in VERDICTS else "")
    attributes = (f' class="{cls}"' if cls else "") + \
        (f' data-sort="{html.escape(sort_key)}"' if sort_key is not None else "")
    return f"<td{attributes}>{html.escape(text)}</td>"


def _table(headers, rows) -> str:
    if not rows:
        return '<p class="note">(none)</p>'
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = ["<tr>" + "".join(table_cell(value) for value in row) + "</tr>" for row in rows]
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
