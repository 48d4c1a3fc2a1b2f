"""``pkb leaderboard RUN [RUN ...]``: several runs side by side, as tables, JSON or an HTML page
(the numbers: :mod:`pkb_core.results.leaderboard`; what a RUN may be: :mod:`pkb_core.results.runs`)."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from pkb_core.cli.console import Section, show
from pkb_core.cli.report import interval_text
from pkb_core.contracts.verdict import VERDICTS
from pkb_core.results.leaderboard import MIN_PROBLEMS, SHOWN_P, leaderboard as make_leaderboard
from pkb_core.results.runs import read_run

#: The verdicts of the verdict mix (``pass`` has its own column); tables show those some row has.
MIX = [v for v in VERDICTS if v != "pass"]
#: What a cell says where a number needs timings there are not.
NA = "n/a"


@click.command()
@click.argument("runs", nargs=-1, required=True, metavar="RUN...", type=click.Path(path_type=Path))
@click.option("--label", "labels", multiple=True,
              help="A run's row label, in the order of the runs (repeat it; default: the run's model, else its "
                   "folder, and its backend).")
@click.option("--json", "json_", is_flag=True, help="Print the leaderboard as one JSON object.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write a self-contained HTML page (sortable tables, a chart) to this file.")
@click.option("--common", is_flag=True, help="Score every row on the problems all rows have.")
@click.option("--include-cpu", is_flag=True,
              help="Count host timings (CPU mode) in fast_p and the geomean speedup too (left out by default).")
def leaderboard(runs, labels, json_, html_file, common, include_cpu):
    """Several runs side by side: passed / total, fast_p, geomean speedup with its 95% interval and
    the verdicts, per run and setting, overall and by category.

    RUN is a run directory, a records file (JSON lines) or what `pkb run --json` printed. Runs of
    different machines, world sizes, timing modes or problem sets are said to be so, never pooled.
    """
    board = make_leaderboard([read_run(path) for path in runs], labels, include_cpu=include_cpu, common=common)
    if html_file:
        from pkb_core.cli.output_files import write_output_file
        from pkb_core.results.leaderboard_html import render_leaderboard_html

        page = render_leaderboard_html(board, sections(board) + [detail_section(board)],
                                       command=command_line(runs, labels, common, include_cpu, html_file))
        write_output_file(html_file, page, option="--html")
    if json_:
        click.echo(json.dumps(board, indent=2))
        return
    show(sections(board))
    if html_file:
        click.echo(f"\nHTML page: {html_file}")


def command_line(runs, labels, common, include_cpu, html_file) -> str:
    """The command that makes the page (printed on it)."""
    words = ["pkb", "leaderboard", *map(str, runs)]
    for label in labels:
        words += ["--label", label]
    words += ["--common"] * common + ["--include-cpu"] * include_cpu + ["--html", str(html_file)]
    return shlex.join(words)


def sections(board: dict) -> list[Section]:
    """The leaderboard (its notes under it), the verdict mix, and the categories."""
    rows = board["rows"]
    fast = [f"fast_{p} %" for p in SHOWN_P]
    mix = verdict_mix(board)
    out = [Section("Leaderboard", ["#", "run", "machine", "W", "timing", "problems", "passed", "pass %", *fast,
                                   "geomean", "95% interval"],
                   [[row["rank"], row["label"], machine_text(row), row["world_size"], row["timing"] or "unknown",
                     *_numbers(row["overall"])] for row in rows], notes=list(board["notes"])),
           Section("Verdicts", ["#", "run", "pass", *mix],
                   [[row["rank"], row["label"], row["overall"]["verdicts"]["pass"],
                     *[row["overall"]["verdicts"][v] for v in mix]] for row in rows],
                   notes=["unsupported records are not counted in passed / total; a verdict no row has is left "
                          "out (--json lists every one)"])]
    categories = board["categories"]
    out.append(Section("By category: passed / total", ["run", *categories],
                       [[row["label"], *[_passed(row["categories"].get(c)) for c in categories]] for row in rows]))
    if any(s["geomean_speedup"] is not None for row in rows for s in row["categories"].values()):
        out.append(Section("By category: fast_1 %", ["run", *categories],
                           [[row["label"], *[_fast(row["categories"].get(c), "1") for c in categories]]
                            for row in rows]))
        out.append(Section("By category: geomean speedup [95% interval]", ["run", *categories],
                           [[row["label"], *[_speed(row["categories"].get(c)) for c in categories]] for row in rows]))
    return out


def detail_section(board: dict) -> Section:
    """Every number of every row's categories, one line each (the HTML page's last table)."""
    fast = [f"fast_{p} %" for p in SHOWN_P]
    mix = verdict_mix(board)
    return Section("By category, every number", ["run", "category", "problems", "passed", "pass %", *fast, "geomean",
                                                 "95% interval", *mix],
                   [[row["label"], category, *_numbers(s), *[s["verdicts"][v] for v in mix]]
                    for row in board["rows"] for category, s in row["categories"].items()])


def verdict_mix(board: dict) -> list[str]:
    """The verdicts besides ``pass`` that some row has."""
    return [v for v in MIX if any(row["overall"]["verdicts"].get(v) for row in board["rows"])]


def machine_text(row: dict) -> str:
    machine = row["machine"] or "unknown"
    return f"{machine} (host timings)" if row["host_timings"] else machine


def _numbers(s: dict) -> list:
    """problems, passed, pass %, fast_p %..., geomean, its interval."""
    speed = s["geomean_speedup"]
    if speed is None:
        interval = ""
    elif s["geomean_ci"]:
        interval = interval_text(s["geomean_ci"])
    else:
        interval = f"{NA} (< {MIN_PROBLEMS} problems)"
    return [s["problems"], _passed(s), _pct(s["pass_rate"]), *[_fast(s, p) for p in SHOWN_P],
            NA if speed is None else round(speed, 3), interval]


def _passed(s) -> str:
    return "" if s is None else f"{s['passed']}/{s['total']}"


def _fast(s, p: str):
    if s is None:
        return ""
    value = s["fast_p"][p]
    return NA if value is None else round(100 * value, 1)


def _speed(s) -> str:
    if s is None:
        return ""
    if s["geomean_speedup"] is None:
        return NA
    return f"{s['geomean_speedup']:.3f} {interval_text(s['geomean_ci'])}".rstrip()


def _pct(value):
    return NA if value is None else round(100 * value, 1)
