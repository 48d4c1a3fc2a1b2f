"""``pkb compare RUN_A RUN_B``: what got faster, slower or broke between two runs (see :mod:`pkb_core.results.compare`)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from pkb_core.results.compare import (DEFAULT_THRESHOLD, HOST_NOTE, compare_runs, counts, failures, host_timings,
                                     parse_fail_on, parse_percent, uncompared)
from pkb_core.cli.console import Section, show
from pkb_core.cli.report import interval_text
from pkb_core.results.report import load_run
from pkb_core.results.rounds import best_files, is_loop, rounds_side_by_side

HEADERS = ["problem", "solution", "W size dtype", "verdict", "A ms", "A 95%", "B ms", "B 95%", "change %",
           "speedup A", "speedup B", "status", "why"]
#: Under the table: how a change is read (the rule of pkb_core/results/compare.py).
RULE = ("a change counts when it exceeds the threshold and the medians' 95 % intervals do not overlap, nor "
        "(where the records have them) the speedups' intervals; otherwise it is no measurable difference")


@click.command()
@click.argument("run_a", type=click.Path(file_okay=False, path_type=Path))
@click.argument("run_b", type=click.Path(file_okay=False, path_type=Path))
@click.option("--threshold", default=None,
              help="Smallest relative change of the median that counts (default: the --fail-on percentage, "
                   f"else {DEFAULT_THRESHOLD:.0%}).")
@click.option("--fail-on", "fail_on", default=None,
              help="Exit 1 when a regression exceeds METRIC:PERCENT, e.g. median:5% (verdict regressions always do).")
@click.option("--json", "json_", is_flag=True, help="Print one JSON object.")
def compare(run_a, run_b, threshold, fail_on, json_):
    """Per-problem change of the solution's median time (and speedup) from RUN_A to RUN_B."""
    limit = parse_fail_on(fail_on) if fail_on else None
    if threshold is not None:
        threshold = parse_percent(threshold, "--threshold")
    else:
        threshold = limit[1] if limit else DEFAULT_THRESHOLD
    records_a, records_b = load_run(run_a), load_run(run_b)
    rounds = None
    if is_loop(records_a) and is_loop(records_b):
        # Two refinement loops: each problem's best round against the other's, and the curves.
        rounds = rounds_side_by_side(records_a, records_b)
        records_a, records_b = best_files(records_a), best_files(records_b)
    rows = compare_runs(records_a, records_b, threshold)
    failing = failures(rows, limit) if limit else []
    apart = uncompared(rows) if limit else []
    if json_:
        click.echo(json.dumps({"run_a": str(run_a), "run_b": str(run_b), "threshold": threshold,
                               "fail_on": fail_on, "counts": counts(rows), "rows": rows,
                               "failing": len(failing), "not_comparable": len(apart), "by_round": rounds,
                               "host_timings": host_timings(rows)}, indent=2))
    else:
        if rounds:
            show([Section("By round: pass rate and fast_1 after each round (each problem's best round so far)",
                          ["round", "pass A", "pass B", "fast_1 A", "fast_1 B"],
                          [[r["round"], _pct(r["pass_rate_a"]), _pct(r["pass_rate_b"]), _pct(r["fast_1_a"]),
                            _pct(r["fast_1_b"])] for r in rounds])])
        table = [[r["problem"], r["solution"], f"W{r['world_size']} {r['size']} {r['dtype']}", _verdicts(r),
                  r["median_a"], interval_text(r["median_ci_a"]), r["median_b"], interval_text(r["median_ci_b"]),
                  None if r["change"] is None else round(100 * r["change"], 2),
                  _speedup(r, "a"), _speedup(r, "b"), r["status"], r["why"]] for r in rows]
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts(rows).items()))
        host = host_timings(rows)
        notes = [f"{summary} (threshold {threshold:.1%})", RULE]
        if host:
            notes.append(f"{' and '.join(host)}: {HOST_NOTE}")
        show([Section(f"{run_a} -> {run_b}", HEADERS, table, notes=notes)])
        if limit:
            if failing:
                verdict = f"FAIL: {len(failing)} regression(s) exceed {fail_on}"
            elif apart:
                verdict = (f"FAIL: {len(apart)} row(s) not comparable (another clock or timing mode in one run): "
                           f"nothing to hold to {fail_on}")
            else:
                verdict = f"ok: no regression exceeds {fail_on}"
            click.echo(verdict)
    if failing or apart:
        raise SystemExit(1)


def _speedup(row, side: str) -> str:
    """``1.17 [0.981, 1.402] no measurable difference``: a speedup with its interval and reading, as
    pkb run shows it; records from before intervals show the bare ratio."""
    value, interval, reading = row[f"speedup_{side}"], row[f"speedup_ci_{side}"], row[f"difference_{side}"]
    if value is None:
        return reading or ""
    if not interval:
        return f"{value:.4g}"
    return f"{value:.4g} {interval_text(interval)} {reading or ''}".rstrip()


def _verdicts(row) -> str:
    a, b = row["verdict_a"] or "-", row["verdict_b"] or "-"
    return a if a == b else f"{a} -> {b}"


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"
