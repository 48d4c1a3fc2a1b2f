"""`pkb compare`: noise-aware verdicts and CI exit codes, on recorded run directories."""
import json

import pytest

from pkb_core.results.compare import compare_runs, parse_fail_on
from pkb_core.errors import PkbError
from pkb_core.results.report import load_run


@pytest.fixture
def runs(fixtures):
    return fixtures / "runs" / "samples", fixtures / "runs" / "samples_b"


def _statuses(rows):
    return {r["solution"]: r["status"] for r in rows}


def test_statuses(runs):
    rows = compare_runs(load_run(runs[0]), load_run(runs[1]))
    assert _statuses(rows) == {
        "1_allreduce_a.py": "regressed",       # +20 %, spreads of 2 % do not overlap
        "1_allreduce_b.py": "unchanged",       # +10 % but each run's p10-p90 spans 80 %
        "1_allreduce_c.py": "improved",        # fail -> pass
        "1_allreduce_d.py": "unchanged",       # timeout in both
        "2_allgather_a.py": "improved",        # -30 %
        "2_allgather_b.py": "unchanged",       # flagged in both
        "3_broadcast_a.py": "only in B",
        "7_reducescatter_a.py": "unchanged",   # +3 %, under the 5 % threshold
        "9_layernorm_backward_a.py": "regressed",  # pass -> fail
        "10_embedding_lookup_a.py": "only in A",
        "11_allgather_gemm_AT_a.py": "unchanged",
    }
    by_name = {r["solution"]: r for r in rows}
    assert by_name["1_allreduce_a.py"]["change"] == pytest.approx(0.2)
    assert "inside" in by_name["1_allreduce_b.py"]["why"]
    assert by_name["9_layernorm_backward_a.py"]["why"] == "verdict pass -> fail"


def test_a_cancelled_job_is_no_regression(runs):
    """Issue 55: the reward service's cancel says nothing about the solution; --fail-on never fails on it."""
    import attrs

    from pkb_core.results.compare import failures

    before = load_run(runs[0])
    after = [attrs.evolve(r, verdict="cancelled", reason="cancelled while it ran") if r.solution.endswith(
        ("9_layernorm_backward_a.py", "1_allreduce_c.py")) else r for r in load_run(runs[1])]
    rows = {r["solution"]: r for r in compare_runs(before, after)}
    for name in ("9_layernorm_backward_a.py", "1_allreduce_c.py"):  # were pass -> fail, fail -> pass
        assert rows[name]["status"] == "cancelled" and rows[name]["why"] == "cancelled in B: nothing was found to compare"
    assert rows["1_allreduce_a.py"]["status"] == "regressed"  # the others as before
    assert [r["solution"] for r in failures(list(rows.values()), ("median", 0.05))] == ["1_allreduce_a.py"]


def test_a_row_of_two_backends_says_so(runs):
    """Rows are matched by file name, which two backends' samples share: a pair that ran different
    backends keeps its status and says which ran where."""
    import attrs

    after = [attrs.evolve(r, backend="reference") for r in load_run(runs[1])]
    rows = {r["solution"]: r for r in compare_runs(load_run(runs[0]), after)}
    before = load_run(runs[0])[0].backend
    assert before != "reference"
    assert rows["1_allreduce_a.py"]["status"] == "regressed"
    assert rows["1_allreduce_a.py"]["why"].endswith(f"(A ran backend {before}, B backend reference)")
    same = {r["solution"]: r for r in compare_runs(load_run(runs[0]), load_run(runs[1]))}
    assert "ran backend" not in same["1_allreduce_a.py"]["why"]


def test_a_larger_threshold_hides_the_slowdown(runs):
    rows = compare_runs(load_run(runs[0]), load_run(runs[1]), threshold=0.25)
    assert _statuses(rows)["1_allreduce_a.py"] == "unchanged"


def test_exit_codes(pkb_invoke, runs):
    a, b = runs
    assert pkb_invoke("compare", a, a, "--fail-on", "median:5%").exit_code == 0
    assert pkb_invoke("compare", a, b).exit_code == 0  # no --fail-on: a report, never a failure
    result = pkb_invoke("compare", a, b, "--fail-on", "median:5%")
    assert result.exit_code == 1
    assert "FAIL: 2 regression(s) exceed median:5%" in result.output
    # At 25 % the 20 % slowdown no longer counts, but the broken verdict still fails the build.
    result = pkb_invoke("compare", a, b, "--fail-on", "median:25%", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["threshold"] == pytest.approx(0.25) and data["failing"] == 1
    assert data["counts"]["regressed"] == 1
    # The reverse direction has the 30 % slowdown of 2_allgather_a and a verdict regression (1_allreduce_c).
    result = pkb_invoke("compare", b, a, "--fail-on", "median:5%", "--json")
    assert result.exit_code == 1
    regressed = {r["solution"] for r in json.loads(result.stdout)["rows"] if r["status"] == "regressed"}
    assert regressed == {"2_allgather_a.py", "1_allreduce_c.py"}


def test_fail_on_parsing(pkb_invoke, runs):
    assert parse_fail_on("median:5%") == ("median", pytest.approx(0.05))
    assert parse_fail_on("median:2.5") == ("median", pytest.approx(0.025))
    for bad in ("median", "p90:5%", "median:fast"):
        with pytest.raises(PkbError):
            parse_fail_on(bad)
    result = pkb_invoke("compare", *runs, "--fail-on", "mean:5%")
    # refused before anything ran, as click refuses an option of the wrong type: a usage error
    assert result.exit_code == 4 and result.output.strip().splitlines()[-1].startswith("Error: --fail-on metric")


@pytest.fixture
def cpu_twice(fixtures):
    """The same code run twice in CPU mode (real records: tests/fixtures/runs/make_runs.py)."""
    return fixtures / "runs" / "cpu_twice_a", fixtures / "runs" / "cpu_twice_b"


def test_the_same_code_run_twice_on_cpu_is_no_regression(pkb_invoke, cpu_twice):
    """Host timings of one code moved by 18-132 % between two runs: no measurable difference, exit 0,
    and the output says they are host timings."""
    result = pkb_invoke("compare", *cpu_twice, "--fail-on", "median:5%")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == "ok: no regression exceeds median:5%"
    assert ("A and B: host timings (CPU mode, clock: host): they time gloo and Triton's interpreter on this host, "
            "not GPU kernels; a change says nothing about a GPU") in result.stdout
    data = json.loads(pkb_invoke("compare", *cpu_twice, "--fail-on", "median:5%", "--json").stdout)
    assert data["host_timings"] == ["A", "B"] and data["failing"] == 0
    rows = {r["solution"]: r for r in data["rows"]}
    assert {r["status"] for r in rows.values()} == {"unchanged"}
    assert all(r["change"] > 0.05 and r["why"].startswith("no measurable difference") for r in rows.values())
    # The medians' intervals overlap (inside the noise) ...
    assert "the medians' 95 % intervals overlap" in rows["7_reducescatter.py"]["why"]
    # ... or they do not, but the reference slowed as much: the paired speedups' intervals overlap.
    assert "the reference moved with it" in rows["1_allreduce.py"]["why"]
    assert rows["1_allreduce.py"]["median_ci_a"][1] < rows["1_allreduce.py"]["median_ci_b"][0]


def test_a_measurable_slowdown_of_host_timings_still_fails(pkb_invoke, cpu_twice, tmp_path):
    """Run A's records with the solution ten times slower, its speedup a tenth: a regression. (Host timings
    resolve only large changes: these speedups' intervals span up to 5x, and a change counts only once
    the speedups' intervals part too.)"""
    slower = tmp_path / "slower"
    slower.mkdir()
    lines = []
    for line in (cpu_twice[0] / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        r["solution_ms"] *= 10
        r["solution_ci_ms"] = [10 * v for v in r["solution_ci_ms"]]
        r["speedup"] /= 10
        r["speedup_ci"] = [v / 10 for v in r["speedup_ci"]]
        side = r["stats"]["modes"]["latency"]["candidate"]
        for name in ("min", "p10", "median", "p90", "max", "mean", "ci_low", "ci_high"):
            side[name] *= 10
        lines.append(json.dumps(r))
    (slower / "records.jsonl").write_text("\n".join(lines) + "\n")
    result = pkb_invoke("compare", cpu_twice[0], slower, "--fail-on", "median:5%", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["failing"] == 3 and {r["status"] for r in data["rows"]} == {"regressed"}
    assert all(r["why"] == "slower by 900.0%: the medians' 95 % intervals do not overlap, nor do the speedups'"
               for r in data["rows"])


def test_medians_of_two_timing_modes_are_not_compared(pkb_invoke, cpu_twice, tmp_path):
    """Run B's records as if their first --timing-mode had been another: not comparable, said so,
    never a regression (a new user's window-mode run against a latency-mode one read as 'the
    machine changed')."""
    other = tmp_path / "other"
    other.mkdir()
    lines = []
    for line in (cpu_twice[1] / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        r["timing_mode"] = "window" if r.get("timing_mode") != "window" else "latency"
        r["solution_ms"] *= 10
        r["solution_ci_ms"] = [10 * v for v in r["solution_ci_ms"]]
        lines.append(json.dumps(r))
    (other / "records.jsonl").write_text("\n".join(lines) + "\n")
    result = pkb_invoke("compare", cpu_twice[0], other, "--fail-on", "median:5%", "--json")
    data = json.loads(result.stdout)
    assert data["failing"] == 0 and {r["status"] for r in data["rows"]} == {"not comparable"}
    assert all(r["why"].startswith("not comparable: A's median is ") for r in data["rows"])
    assert {r["timing_mode_a"] for r in data["rows"]} != {r["timing_mode_b"] for r in data["rows"]}
    # Counted apart, and under --fail-on a comparison that compared nothing fails (a new user's
    # pass: it read "1 unchanged" and passed).
    assert data["not_comparable"] == len(data["rows"]) and result.exit_code == 1
    shown = pkb_invoke("compare", cpu_twice[0], other, "--fail-on", "median:5%")
    assert shown.exit_code == 1 and f"{len(data['rows'])} not comparable" in shown.stdout
    assert shown.stdout.strip().splitlines()[-1].startswith(f"FAIL: {len(data['rows'])} row(s) not comparable")
    assert pkb_invoke("compare", cpu_twice[0], other).exit_code == 0  # without --fail-on: a report
