"""``pkb report`` and ``pkb plot``: a run directory as tables, JSON, HTML and charts."""
from __future__ import annotations

import json
from pathlib import Path

import click

from pkb_core.cli.console import Section, show
from pkb_core.cli.config_values import ListOption
from pkb_core.errors import BadOption
from pkb_core.results.report import FAST_P, load_run
from pkb_core.results.rounds import summarize_run

#: What an aggregate that needs timings says when there are none.
UNTIMED = "n/a (no timings)"
#: ... and when the only timings are host timings, left out.
HOST_ONLY = "n/a (host timings only: --include-cpu counts them)"
#: ... and when the only timings are a launcher clock's, never counted.
LAUNCHER_ONLY = "n/a (launcher-clock timings only: diagnostics, never counted; window mode is the judge's clock)"


@click.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "json_", is_flag=True, help="Print the report as one JSON object.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write a self-contained HTML page to this file.")
@click.option("--plots", is_flag=True, help="Also write PNG and SVG charts into RUN_DIR/plots (needs matplotlib).")
@click.option("--k", "ks", cls=ListOption, default=None,
              help="k values of pass@k, comma-separated (default: 1,2,5,10,... up to the most samples of any problem).")
@click.option("--include-cpu", is_flag=True,
              help="Count host timings (CPU mode) in fast_p and the geomean speedup too (left out by default).")
def report(run_dir, json_, html_file, plots, ks, include_cpu):
    """Per-problem results and aggregates (pass rate, fast_p, geomean speedup, pass@k) of a run."""
    ks = _parse_ks(ks)
    records = load_run(run_dir)
    summary = summarize_run(records, run_dir, ks=ks, include_cpu=include_cpu)
    if html_file:
        from pkb_core.cli.output_files import write_output_file
        from pkb_core.results.report_html import render_html

        write_output_file(html_file, render_html(summary, report_sections(summary)), option="--html")
    written = _write_plots(records, run_dir / "plots") if plots else []
    if json_:
        click.echo(json.dumps(dict(summary, plots=[str(p) for p in written]), indent=2))
        return
    show(report_sections(summary))
    if html_file:
        click.echo(f"\nHTML report: {html_file}")
    if written:
        click.echo(f"\n{len(written)} plot files in {run_dir / 'plots'}")


@click.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the charts (default RUN_DIR/plots).")
def plot(run_dir, out):
    """Charts of a run (PNG and SVG): speedup and % of SOL per problem, sweeps against message size."""
    records = load_run(run_dir)
    for path in _write_plots(records, out or run_dir / "plots"):
        click.echo(str(path))


def _write_plots(records, out_dir) -> list:
    from pkb_core.results.plots import write_plots

    return write_plots(records, out_dir)


def _parse_ks(text):
    if not text:
        return None
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise BadOption(f"--k wants comma-separated positive integers, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise BadOption(f"--k wants comma-separated positive integers, got {text!r}")
    return ks


def report_sections(summary: dict) -> list[Section]:
    """The report as titled tables (terminal and HTML show the same cells)."""
    sections = [_results_section(summary["rows"]), _aggregates_section(summary["aggregates"]),
                _categories_section(summary["categories"])]
    if summary.get("cpu_timings"):
        from pkb_core.cli.run import CPU_TIMING_NOTE

        sections[1].notes.append(CPU_TIMING_NOTE)
    if summary["at_k"]:
        sections.append(_at_k_section(summary["at_k"]))
    if summary.get("by_round"):
        sections[1].title = "Aggregates (each problem's best round)"
        sections.append(_by_round_section(summary["by_round"]))
    return sections


def _by_round_section(rounds) -> Section:
    ps = [f"{p:g}" for p in FAST_P if p > 0]
    rows = [[r["round"], r["checked"], r["problems"], r["passed"], _pct(r["pass_rate"])]
            + [_pct(r["fast_p"][p]) or UNTIMED for p in ps] + [_times(r["geomean_speedup"])] for r in rounds]
    return Section("By round (pkb generate --rounds)",
                   ["round", "files checked", "problems", "passed", "pass rate"] + [f"fast_{p}" for p in ps]
                   + ["geomean speedup"], rows,
                   notes=["after round k, a problem counts with its best round <= k (passed if any round "
                          "passed): docs/reports.md"])


#: (header, row field) of the per-problem table; empty columns are dropped.
RESULT_COLUMNS = [
    ("problem", "problem"), ("category", "category"), ("solution", "solution"), ("W", "world_size"),
    ("size", "size"), ("verdict", "verdict"), ("ref ms", "reference_ms"), ("ref -/+%", "reference_reach"),
    ("sol ms", "solution_ms"), ("sol -/+%", "solution_reach"), ("speedup", "speedup"),
    ("95% interval", "speedup_interval"), ("vs reference", "difference"), ("ref %SOL", "reference_sol_pct"), ("sol %SOL", "solution_sol_pct"),
    ("bound", "bound"), ("algbw GB/s", "algbw_gbps"), ("busbw GB/s", "busbw_gbps"), ("notes", "notes"),
]


def _results_section(rows) -> Section:
    table = []
    for r in rows:
        # The whole reason: a table that must fit a terminal wraps it (docs/cli.md, "Tables").
        notes = "; ".join([n for n in [r["reason"]] + r["flags"] if n])
        cells = dict(r, notes=notes, speedup_interval=interval_text(r.get("speedup_ci")),
                     reference_reach=reach_text(r.get("reference_ci_reach_pct")),
                     solution_reach=reach_text(r.get("solution_ci_reach_pct")))
        table.append([cells.get(field) for _, field in RESULT_COLUMNS])
    keep = [i for i, (header, _) in enumerate(RESULT_COLUMNS)
            if header in ("problem", "solution", "verdict") or any(row[i] not in (None, "") for row in table)]
    notes = []
    if any(r.get("speedup_ci") for r in rows):
        notes.append("-/+%: how far the median's 95 % interval reaches under and over it, in % of it (often "
                     "lopsided); 95% interval: the speedup's "
                     "(distribution-free, docs/timing.md); an interval containing 1.0 reads no measurable difference")
    return Section("Results", [RESULT_COLUMNS[i][0] for i in keep], [[row[i] for i in keep] for row in table],
                   notes=notes)


def reach_text(reach) -> str:
    """``-11/+422`` for a median's interval reaching 11 % under it and 422 % over, empty for None."""
    if not reach:
        return ""
    return f"-{reach[0]:.{_reach_digits(reach[0])}f}/+{reach[1]:.{_reach_digits(reach[1])}f}"


def _reach_digits(pct: float) -> int:
    return 1 if abs(pct) < 10 else 0


def interval_text(interval) -> str:
    """``[0.981, 1.020]`` for an interval, empty for None."""
    return "" if not interval or interval[0] is None else f"[{interval[0]:.3f}, {interval[1]:.3f}]"


def _aggregates_section(agg) -> Section:
    missing = UNTIMED
    if not agg["timed_correct"] and agg.get("host_timed") and not agg.get("include_cpu"):
        missing = HOST_ONLY  # what --include-cpu would count
    elif not agg["timed_correct"] and agg.get("launcher_timed"):
        missing = LAUNCHER_ONLY
    rows = [["rows counted", agg["count"]], ["unsupported (not counted)", agg["unsupported"]]]
    if agg.get("cancelled"):
        rows.append(["cancelled (not counted)", agg["cancelled"]])
    if agg.get("unchecked"):
        rows.append(["unchecked, --mode dryrun (not counted)", agg["unchecked"]])
    rows += [["verdicts", ", ".join(f"{n} {v}" for v, n in agg["verdicts"].items())],
             ["pass rate", _pct(agg["pass_rate"])]]
    rows += [[f"fast_{p:g} (correct and speedup > {p:g})", _pct(agg["fast_p"][f"{p:g}"]) or missing] for p in FAST_P]
    rows.append([geomean_label(agg), _times(agg["geomean_speedup"]) or missing])
    if agg.get("differences"):
        rows.append(["speedups by their interval", ", ".join(f"{n} {d}" for d, n in agg["differences"].items())])
    notes = ["fast_p counts a speedup only when its 95 % interval lies above 1.0: one that contains 1.0 is "
             "no measurable difference, neither a win nor a loss"]
    if agg.get("host_timed"):
        notes.append(f"{agg['host_timed']} correct rows carry host timings (CPU mode): "
                     + ("counted (--include-cpu)" if agg.get("include_cpu") else
                        "left out of fast_p and the geomean (--include-cpu counts them)"))
    return Section("Aggregates", ["metric", "value"], rows, notes=notes)


def geomean_label(agg) -> str:
    """What the geomean speedup is over: ``geomean speedup (3 correct timed rows)``, and the
    correct rows with host timings it leaves out (``; 4 host-timed left out``), so a count of 0
    beside rows that show speedups says why."""
    counted_rows = agg["timed_correct"]
    label = f"geomean speedup ({counted_rows} correct timed row{'' if counted_rows == 1 else 's'}"
    if agg.get("host_timed") and not agg.get("include_cpu"):
        label += f"; {agg['host_timed']} host-timed left out"
    if agg.get("launcher_timed"):
        label += f"; {agg['launcher_timed']} launcher-clock left out"
    return label + ")"


def _categories_section(categories) -> Section:
    rows = [[c["category"], c["count"], _pct_number(c["pass_rate"]), c["geomean_speedup"],
             _pct_number(c["fast_1"])] for c in categories]
    return Section("By category", ["category", "rows", "pass %", "geomean speedup", "fast_1 %"], rows)


def _at_k_section(at_k) -> Section:
    ps = [f"{p:g}" for p in FAST_P if p > 0]
    rows = [[int(k), v["problems"], _pct_number(v["pass"])] + [_pct_number(v["fast_p"][p]) for p in ps]
            for k, v in at_k["k"].items()]
    return Section("Samples per problem: pass@k, fast_p@k (unbiased estimator)",
                   ["k", "problems (n >= k)", "pass@k %"] + [f"fast_{p}@k %" for p in ps], rows,
                   notes=[f"{at_k['problems']} problems, up to {at_k['max_n']} samples each"])


def _pct(value):
    return "" if value is None else f"{100 * value:.1f}%"


def _pct_number(value):
    return None if value is None else round(100 * value, 2)


def _times(value):
    return "" if value is None else f"{value:.3f}x"
