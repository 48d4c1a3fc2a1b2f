"""`pkb report` and `pkb plot` on recorded run directories (tests/fixtures/runs, see make_runs.py there)."""
import json
import math
import subprocess
import sys

import pytest

from pkb_core.results.report import at_k, fast_p, geomean, load_run, pass_at_k, summarize


@pytest.fixture
def samples(fixtures):
    return fixtures / "runs" / "samples"


def test_aggregates_match_hand_computed_values(samples):
    # 10 records: 1 unsupported (not counted), 9 counted, 5 pass with speedups 2, 1.25, 0.5, 1, 4.
    agg = summarize(load_run(samples))["aggregates"]
    assert agg["count"] == 9 and agg["unsupported"] == 1
    assert agg["verdicts"] == {"error": 1, "fail": 1, "flagged": 1, "pass": 5, "timeout": 1, "unsupported": 1}
    assert agg["pass_rate"] == pytest.approx(5 / 9)
    # fast_p counts speedup > p strictly: 1.0 is not fast_1, 2.0 is not fast_2; flagged (10x) never counts.
    assert agg["fast_p"] == pytest.approx({"0": 5 / 9, "1": 3 / 9, "1.5": 2 / 9, "2": 1 / 9})
    assert agg["geomean_speedup"] == pytest.approx(5 ** (1 / 5))
    assert agg["timed_correct"] == 5


def test_cancelled_jobs_are_counted_apart_from_failures(samples):
    """Issue 55: a job the reward service cancelled is no failure of its solution."""
    import attrs

    records = load_run(samples)
    stopped = [attrs.evolve(r, key=r.key + "#stopped", verdict="cancelled", reason="cancelled while it ran")
               for r in records[:3]]
    agg = summarize(records + stopped)["aggregates"]
    assert agg["count"] == 9 and agg["unsupported"] == 1 and agg["cancelled"] == 3  # as without them
    assert agg["pass_rate"] == pytest.approx(5 / 9) and agg["verdicts"]["cancelled"] == 3


def test_a_file_run_again_into_the_same_folder_counts_once_by_its_last_record(samples):
    """A file that failed, was edited and passed has two records (its content is in the key): the
    report counted both, a pass rate of 50 % for a file that passes (a new user, 2026-12-02)."""
    import attrs

    records = load_run(samples)
    failed = next(r for r in records if r.verdict == "fail")
    fixed = attrs.evolve(failed, key=failed.key + "#edited", verdict="pass", reason="")
    agg = summarize(records + [fixed])["aggregates"]
    assert agg["count"] == 9 and agg["verdicts"]["pass"] == 6 and "fail" not in agg["verdicts"]
    assert agg["pass_rate"] == pytest.approx(6 / 9)


def test_the_geomean_label_says_what_it_counted(fixtures):
    """Issue 55: in CPU mode the host timings are left out, and the label says so beside its 0."""
    from pkb_core.cli.report import geomean_label

    # cpu_twice_a: real latency-mode records of CPU mode, host timings of the launcher's clock.
    host = summarize(load_run(fixtures / "runs" / "cpu_twice_a"))["aggregates"]
    assert geomean_label(host) == "geomean speedup (0 correct timed rows; 3 launcher-clock left out)"
    counted = summarize(load_run(fixtures / "runs" / "cpu_twice_a"), include_cpu=True)["aggregates"]
    assert geomean_label(counted) == "geomean speedup (0 correct timed rows; 3 launcher-clock left out)"
    window = summarize(load_run(fixtures / "runs" / "samples"))["aggregates"]
    assert geomean_label(window) == "geomean speedup (5 correct timed rows)"


def test_category_rollup(samples):
    categories = {c["category"]: c for c in summarize(load_run(samples))["categories"]}
    assert categories["collective"] == pytest.approx(
        {"category": "collective", "count": 7, "pass_rate": 4 / 7, "geomean_speedup": 1.25 ** 0.25, "fast_1": 2 / 7})
    assert categories["tensor-parallel"] == pytest.approx(
        {"category": "tensor-parallel", "count": 2, "pass_rate": 1 / 2, "geomean_speedup": 4.0, "fast_1": 1 / 2})


def test_pass_at_k_is_the_unbiased_estimator():
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                closed = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(closed)
    assert pass_at_k(4, 2, 1) == pytest.approx(0.5)       # pass@1 is c / n
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)     # 1 - C(2,2)/C(4,2)
    assert pass_at_k(5, 1, 5) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_at_k_over_problems_with_several_samples(samples):
    # Problems (n, c): 1_allreduce (4, 2), 2_allgather (2, 1), 7 (1, 1), 9 (1, 1), 10 (1, 0).
    result = at_k(load_run(samples))
    assert result["problems"] == 5 and result["max_n"] == 4
    assert list(result["k"]) == ["1", "2"]
    k1, k2 = result["k"]["1"], result["k"]["2"]
    assert k1["problems"] == 5 and k1["pass"] == pytest.approx((2 / 4 + 1 / 2 + 1 + 1 + 0) / 5)
    assert k1["fast_p"]["1"] == pytest.approx((2 / 4 + 0 + 0 + 1 + 0) / 5)
    assert k1["fast_p"]["2"] == pytest.approx(1 / 5)
    assert k2["problems"] == 2 and k2["pass"] == pytest.approx((5 / 6 + 1) / 2)
    assert k2["fast_p"]["1"] == pytest.approx((5 / 6 + 0) / 2)
    assert k2["fast_p"]["1.5"] == pytest.approx((1 - math.comb(3, 2) / math.comb(4, 2)) / 2)


def test_single_sample_runs_have_no_at_k_and_untimed_runs_no_fast_p():
    from pkb_core.contracts.record import Record

    common = dict(category="collective", backend="triton", world_size=2, size="tiny", dtype="fp32", mode="eval")
    records = [Record(key="a", problem_id=1, problem="1_allreduce", solution="a.py", verdict="pass", **common),
               Record(key="b", problem_id=2, problem="2_allgather", solution="b.py", verdict="fail", **common)]
    assert at_k(records) is None
    # The same file again (timed this time, into the same folder): still one sample, its last record.
    again = Record(key="a-timed", problem_id=1, problem="1_allreduce", solution="a.py", verdict="pass", **common)
    assert at_k([*records, again]) is None
    assert fast_p(records, 0) == 0.5 and fast_p(records, 1) is None
    assert fast_p(records[1:], 1) == 0.0  # nothing correct: nothing is fast, timed or not
    assert geomean([]) is None


def test_rows_carry_sol_and_bandwidth(samples):
    rows = {r["solution"]: r for r in summarize(load_run(samples))["rows"]}
    a = rows["1_allreduce_a.py"]
    assert a["reference_sol_pct"] == pytest.approx(25) and a["solution_sol_pct"] == pytest.approx(50)
    assert a["bound"] == "link"
    # 100 MB in 0.5 ms: algbw 200 GB/s, factor 1.0; allgather: 50 MB in 1 ms, factor 0.5.
    assert a["algbw_gbps"] == pytest.approx(200) and a["busbw_gbps"] == pytest.approx(200)
    assert rows["2_allgather_a.py"]["busbw_gbps"] == pytest.approx(25)
    assert rows["7_reducescatter_a.py"]["algbw_gbps"] is None
    assert rows["1_allreduce_b.py"]["flags"] == ["noisy reference", "noisy candidate"]
    assert rows["9_layernorm_backward_a.py"]["flags"] == ["throttled"]


def test_report_json_is_the_summary(pkb_invoke, samples):
    result = pkb_invoke("report", samples, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["aggregates"]["fast_p"]["1"] == pytest.approx(3 / 9)
    assert len(data["rows"]) == 10 and data["at_k"]["k"]["2"]["problems"] == 2
    assert data["plots"] == []


def test_report_text_and_custom_k(pkb_invoke, samples):
    result = pkb_invoke("report", samples, "--k", "1,3")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ("Results", "Aggregates", "By category", "pass@k", "1_allreduce_a.py", "throttled",
                 "fast_1.5 (correct and speedup > 1.5)    22.2%", "geomean speedup (5 correct timed rows)  1.380x"):
        assert text in out, text
    assert "\x1b[" not in out  # not a terminal: plain text, no colour codes
    at3 = [line for line in out.splitlines() if line.startswith("3 ")]
    # pass@3: only 1_allreduce has n >= 3: 1 - C(2,3)/C(4,3) = 1 -> 100 %.
    assert at3 and at3[0].split()[1:3] == ["1", "100"]


def test_report_html_is_self_contained(pkb_invoke, samples, tmp_path):
    page = tmp_path / "report.html"
    result = pkb_invoke("report", samples, "--html", page)
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "</html>" in text
    assert "<table>" in text and "1_allreduce_a.py" in text and '<td class="fail">fail</td>' in text
    assert "http://" not in text and "https://" not in text and "<script" not in text and "<link" not in text


def test_report_bad_input_is_one_line(pkb_invoke, tmp_path):
    result = pkb_invoke("report", tmp_path / "missing")
    assert result.exit_code == 1 and result.output.strip().splitlines()[-1].startswith("Error: run directory")
    tmp_path.joinpath("empty").mkdir()
    result = pkb_invoke("report", tmp_path / "empty")
    assert result.exit_code == 1 and "Error: no records in" in result.output
    result = pkb_invoke("report", tmp_path / "empty", "--k", "0")
    assert result.exit_code == 4 and "Error: --k" in result.output  # an option refused: a usage error


def test_plots_are_written(pkb_invoke, fixtures, tmp_path):
    pytest.importorskip("matplotlib")
    result = pkb_invoke("plot", fixtures / "runs" / "samples", "--out", tmp_path / "samples")
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in (tmp_path / "samples").iterdir())
    assert names == ["sol.png", "sol.svg", "speedup.png", "speedup.svg"]
    result = pkb_invoke("plot", fixtures / "runs" / "sweep", "--out", tmp_path / "sweep")
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in (tmp_path / "sweep").iterdir())
    assert names == ["sweep-1_allreduce.png", "sweep-1_allreduce.svg"]
    for path in list((tmp_path / "samples").iterdir()) + list((tmp_path / "sweep").iterdir()):
        assert path.stat().st_size > 1000, path
    assert (tmp_path / "sweep" / "sweep-1_allreduce.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "sweep" / "sweep-1_allreduce.svg").read_text()
    assert "NCCL (eager)" in svg and "NCCL (graph)" in svg and "symm_mem_one_shot (graph)" in svg


def _edited_run(source, folder, edit):
    """A copy of the run directory ``source`` with ``edit(record dict)`` applied to every record."""
    folder.mkdir()
    lines = [json.loads(line) for line in (source / "records.jsonl").read_text().splitlines()]
    for record in lines:
        edit(record)
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return folder


def test_speedup_plot_of_host_timings_shows_intervals_and_no_measurable_difference(pkb_invoke, fixtures,
                                                                                    tmp_path):
    """Each bar carries its 95 % interval; a bar whose interval holds 1.0 is drawn apart (grey, hatched)
    and named in the legend, so it never reads as a win; CPU-mode figures say they are host timings."""
    pytest.importorskip("matplotlib")
    cpu = fixtures / "runs" / "cpu_twice_a"  # three measurably slower solutions (real CPU-mode records)

    def same(record):  # 1_allreduce's speedup as a CPU run often reads it: 1.17x, not measurable
        record["timing_mode"] = "window"  # the judge's clock (the fixture's latency readings: the next test)
        if record["problem"] == "1_allreduce":
            record.update(speedup=1.17, speedup_ci=[0.81, 1.62], difference="no measurable difference")

    edited = _edited_run(cpu, tmp_path / "run", same)
    assert pkb_invoke("plot", edited, "--out", tmp_path / "plots").exit_code == 0
    svg = (tmp_path / "plots" / "speedup.svg").read_text()
    assert "host timing (CPU mode): not GPU kernel times" in svg
    assert svg.count('id="speedup-bar"') == 2 and svg.count('id="speedup-bar-no-measurable-difference"') == 1
    assert "no measurable difference (95 % interval holds 1.0)" in svg  # the legend says what grey means
    assert svg.count('<g id="speedup-interval"') >= 3  # an error bar per bar
    assert "host timing (CPU mode)" in (tmp_path / "plots" / "sol.svg").read_text()
    gpu = (fixtures / "runs" / "samples")  # GPU records from before intervals: no label, no grey bar
    assert pkb_invoke("plot", gpu, "--out", tmp_path / "gpu").exit_code == 0
    svg = (tmp_path / "gpu" / "speedup.svg").read_text()
    assert "host timing" not in svg and "no-measurable-difference" not in svg


def test_plots_mark_a_launcher_clocks_speedups(pkb_invoke, fixtures, tmp_path):
    """A speedup read by a launcher clock (a latency-headed record; a latency or graph line of a
    sweep) is drawn apart and named a diagnostic, never claimed: hollow bars, faint sweep lines."""
    pytest.importorskip("matplotlib")
    cpu = fixtures / "runs" / "cpu_twice_a"  # latency-headed records

    def judged(record):
        if record["problem"] == "1_allreduce":
            record["timing_mode"] = "window"

    assert pkb_invoke("plot", _edited_run(cpu, tmp_path / "run", judged), "--out", tmp_path / "plots").exit_code == 0
    svg = (tmp_path / "plots" / "speedup.svg").read_text()
    assert svg.count('id="speedup-bar-launcher-clock"') == 2 and svg.count('id="speedup-bar"') == 1
    assert "launcher clock: a diagnostic, never claimed" in svg
    assert pkb_invoke("plot", fixtures / "runs" / "sweep", "--out", tmp_path / "sweep").exit_code == 0
    svg = (tmp_path / "sweep" / "sweep-1_allreduce.svg").read_text()
    assert "1_allreduce.py (eager; launcher clock, not claimed)" in svg
    assert "1_allreduce.py (graph; launcher clock, not claimed)" in svg
    assert "NCCL (eager)" in svg  # the times' lines: a time, not a claim


def test_sweep_plot_names_gloo_in_cpu_mode(pkb_invoke, fixtures, tmp_path):
    pytest.importorskip("matplotlib")

    def on_the_host(record):
        record.update(clock="host", machine={"device": "cpu"})

    cpu = _edited_run(fixtures / "runs" / "sweep", tmp_path / "run", on_the_host)
    assert pkb_invoke("plot", cpu, "--out", tmp_path / "plots").exit_code == 0
    svg = (tmp_path / "plots" / "sweep-1_allreduce.svg").read_text()
    assert "gloo (eager)" in svg and "NCCL" not in svg and "host timing (CPU mode)" in svg


def test_the_sweep_plots_two_line_title_stays_above_the_panel_titles(fixtures):
    """Issue 55: on host timings the figure's title has a second line, which sat on "time" and
    "bus bandwidth"."""
    pytest.importorskip("matplotlib")
    import attrs
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pkb_core.results.plots import _sweep_figure

    rows = [attrs.evolve(r, clock="host") for r in load_run(fixtures / "runs" / "sweep")]
    fig = _sweep_figure(plt, "1_allreduce", rows)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        [title] = [t for t in fig.texts if "message-size sweep" in t.get_text()]
        assert title.get_text().count("\n") == 1
        above = title.get_window_extent(renderer)
        for ax in fig.axes:  # display coordinates: y grows upwards
            assert above.y0 >= ax.title.get_window_extent(renderer).y1, ax.get_title()
    finally:
        plt.close(fig)


def test_report_plots_flag_writes_into_the_run_dir(pkb_invoke, fixtures, tmp_path):
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    run.mkdir()
    (run / "records.jsonl").write_text((fixtures / "runs" / "samples" / "records.jsonl").read_text())
    result = pkb_invoke("report", run, "--plots", "--json")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["plots"]) == 4 and (run / "plots" / "speedup.png").exists()


def test_sweep_series_take_nccl_from_every_record(fixtures):
    from pkb_core.results.plots import _sweep_series

    series = {(label, mode): points for label, mode, points in _sweep_series(load_run(fixtures / "runs" / "sweep"))}
    labels = ("NCCL", "1_allreduce.py", "symm_mem_one_shot")
    assert set(series) == {(s, m) for s in labels for m in ("latency", "graph")}
    nccl = series[("NCCL", "latency")]
    assert [p[0] for p in nccl] == [4096, 65536, 1048576]
    # busbw = S / t * factor: 4096 B in 0.020 ms with factor 1.
    assert nccl[0][2] == pytest.approx(4096 / 20e-6 / 1e9)


def test_sweep_speedups_by_size_with_their_intervals(pkb_invoke, fixtures, tmp_path):
    """Issue 56: the sweep's figure has each solution's speedup over NCCL by size, the symm_mem
    baselines among them; a mode's own speedup with its interval where the record kept one (a
    window-mode reading here), else the ratio of the sides' medians."""
    from pkb_core.results.plots import _sweep_speedups

    def windowed(record):
        modes = record["stats"]["modes"]
        modes["window"] = {**modes["latency"], "speedup": {"value": 1.5, "low": 1.2, "high": 1.9, "rounds": 24}}

    run = _edited_run(fixtures / "runs" / "sweep", tmp_path / "run", windowed)
    rows = load_run(run)
    series = {(label, mode): points for label, mode, points in _sweep_speedups(rows)}
    assert set(series) == {(s, m) for s in ("1_allreduce.py", "symm_mem_one_shot") for m in ("window", "latency", "graph")}
    first = next(r for r in rows if r.size == "sweep:4096" and r.solution.endswith("1_allreduce.py"))
    latency = first.stats.modes["latency"]
    assert series[("1_allreduce.py", "latency")][0] == pytest.approx(
        (4096, latency.reference.median / latency.candidate.median, None, None))
    assert series[("1_allreduce.py", "window")][0] == (4096, 1.5, 1.2, 1.9)
    pytest.importorskip("matplotlib")
    assert pkb_invoke("plot", run, "--out", tmp_path / "plots").exit_code == 0
    svg = (tmp_path / "plots" / "sweep-1_allreduce.svg").read_text()
    assert "speedup over NCCL" in svg and "symm_mem_one_shot (window)" in svg


def test_plot_without_matplotlib_is_one_line(pkb_invoke, fixtures, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now raises ImportError
    result = pkb_invoke("plot", fixtures / "runs" / "samples")
    assert result.exit_code == 1
    assert result.output.strip() == "Error: plots need matplotlib: pip install matplotlib"


def test_cli_imports_no_plotting_or_rich():
    code = ("import sys, pkb_core.cli.main\n"
            "heavy = [m for m in ('matplotlib', 'rich') if m in sys.modules]\n"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_medians_interval_is_shown_as_its_reach_under_and_over_it(pkb_invoke, fixtures):
    """A median's interval is often lopsided: `±422 %` (its farther side alone) read to a new user
    as an interval reaching below zero. The table shows both sides; the JSON keeps both and the
    larger."""
    import json

    run = fixtures / "runs" / "cpu_twice_a"
    rows = json.loads(pkb_invoke("report", run, "--json").stdout)["rows"]
    for row in rows:
        below, above = row["reference_ci_reach_pct"]
        assert below >= 0 and above >= 0 and max(below, above) == pytest.approx(row["reference_ci_pct"])
        low, high = row["reference_ms"] * (1 - below / 100), row["reference_ms"] * (1 + above / 100)
        assert low < row["reference_ms"] < high
    text = pkb_invoke("report", run).stdout
    header = next(line for line in text.splitlines() if line.startswith("problem"))
    assert "ref -/+%" in header and "sol -/+%" in header and "±" not in header
    first = rows[0]["reference_ci_reach_pct"]
    assert f"-{first[0]:.0f}/+{first[1]:.0f}" in text or f"-{first[0]:.1f}/" in text


def test_a_rerun_that_skips_a_recorded_job_makes_it_the_files_newest(samples, tmp_path):
    """A file failed, passed once edited, then failed again as first written: the last run skipped
    its (recorded) fail, and the report counted the pass (a hostile review, 2026-12-02). A key
    written again takes its new place too."""
    import attrs

    from pkb_core.launch.plan import skip_recorded
    from pkb_core.results.records import RECORDS, append_record, read_records

    base = next(r for r in load_run(samples) if r.verdict == "fail")
    first = attrs.evolve(base, key=base.key + "#first")
    edited = attrs.evolve(base, key=base.key + "#edited", verdict="pass", reason="")
    for record in (first, edited):
        append_record(tmp_path, record)
    assert summarize(read_records(tmp_path))["aggregates"]["verdicts"] == {"pass": 1}
    assert set(skip_recorded(tmp_path, [first.key], force=False)) == {first.key}
    assert summarize(read_records(tmp_path))["aggregates"]["verdicts"] == {"fail": 1}
    assert len((tmp_path / RECORDS).read_text().splitlines()) == 2
    append_record(tmp_path, edited)  # the same key again (the service's records): its new place counts
    assert [r.key for r in read_records(tmp_path)] == [first.key, edited.key]
    assert summarize(read_records(tmp_path))["aggregates"]["verdicts"] == {"pass": 1}
