"""`pkb leaderboard`: several runs side by side (pkb_core/results/leaderboard.py, runs.py, leaderboard_html.py).

Runs are records.jsonl files written here through pkb's own writer (append_record) from the
record contract, or the real records of PKB's trees under docs/benchmarks/data.
"""
import json
import math
import re
from pathlib import Path

import pytest

from pkb_core.contracts.record import Record
from pkb_core.contracts.verdict import VERDICTS
from pkb_core.results.leaderboard import MIN_PROBLEMS, geomean_interval, leaderboard
from pkb_core.results.leaderboard_html import sort_key
from pkb_core.results.records import append_record
from pkb_core.results.runs import read_run

ROOT = Path(__file__).resolve().parent.parent
TREES = ROOT / "docs" / "benchmarks" / "data" / "2026-11-25-h200x2-trees"
H200 = {"host": "vm", "device": "cuda", "gpu": "NVIDIA H200", "gpu_count": 2}
H100 = {"host": "vm", "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 2}
CPU = {"host": "vm", "device": "cpu", "cpu_count": 2}


def rec(pid, verdict="pass", speedup=None, *, ci=None, category="collective", backend="triton", world_size=2,
        machine=H200, folder="sols", timing="perf:window", size="default", sample=""):
    """One record as `pkb run` writes it; a speedup gets a narrow interval unless ``ci`` is given."""
    problem = f"{pid}_p{pid}"
    solution = f"{folder}/{problem}{sample}.py"
    fields = dict(key="|".join([problem, backend, solution, "0123456789", f"W{world_size}", size, "bf16", "eval",
                                timing]),
                  problem_id=pid, problem=problem, category=category, backend=backend, solution=solution,
                  world_size=world_size, size=size, dtype="bf16", mode="eval", verdict=verdict,
                  machine={} if verdict == "unsupported" else machine)
    if speedup is not None:
        low, high = ci or (speedup * 0.97, speedup * 1.03)
        reading = "faster" if low > 1 else "slower" if high < 1 else "no measurable difference"
        fields.update(reference_ms=1.0, solution_ms=1.0 / speedup, speedup=speedup, speedup_ci=(low, high),
                      difference=reading, timing_mode=timing.removeprefix("perf:").split("+")[0],
                      clock="host" if machine.get("device") == "cpu" else "device")
    return Record(**fields)


def nonzero(counts: dict) -> dict:
    return {verdict: n for verdict, n in counts.items() if n}


def write_run(path: Path, records) -> Path:
    for record in records:
        append_record(path, record)
    return path


@pytest.fixture
def two_runs(tmp_path):
    # A: 6 counted (4 pass: 2x, 3x, 1.02x inside the noise, 0.5x; 1 fail; 1 error) + 1 unsupported.
    a = write_run(tmp_path / "a", [
        rec(1, speedup=2.0, folder="model-a"), rec(2, speedup=3.0, folder="model-a", category="tensor-parallel"),
        rec(3, speedup=1.02, ci=(0.9, 1.1), folder="model-a"), rec(4, speedup=0.5, folder="model-a"),
        rec(5, "fail", folder="model-a"), rec(6, "error", folder="model-a", category="tensor-parallel"),
        rec(7, "unsupported", folder="model-a")])
    # B: the same seven problems, 6 pass at 1.5x, problem 6 a compile-error, 7 unsupported.
    b = write_run(tmp_path / "b", [rec(i, speedup=1.5, folder="model-b",
                                       category="tensor-parallel" if i in (2, 6) else "collective")
                                   for i in range(1, 6)]
                  + [rec(6, "compile-error", folder="model-b", category="tensor-parallel"),
                     rec(7, "unsupported", folder="model-b")])
    return a, b


def test_several_runs_side_by_side(two_runs):
    board = leaderboard([read_run(p) for p in two_runs])
    first, second = board["rows"]
    # B passes 5 of 6, A 4 of 6: B ranks first; labels are the solutions' folder and the backend.
    assert [r["label"] for r in board["rows"]] == ["model-b (triton)", "model-a (triton)"]
    assert [r["rank"] for r in board["rows"]] == [1, 2]
    a = second["overall"]
    assert (a["passed"], a["total"], a["problems"]) == (4, 6, 7)
    assert a["pass_rate"] == pytest.approx(4 / 6)
    # fast_1: 2x and 3x (1.02x is inside its noise, never fast); fast_2: 3x only (2.0 is not > 2).
    assert a["fast_p"] == pytest.approx({"0": 4 / 6, "1": 2 / 6, "1.5": 2 / 6, "2": 1 / 6})
    assert a["geomean_speedup"] == pytest.approx((2.0 * 3.0 * 1.02 * 0.5) ** 0.25)
    assert a["geomean_ci"] is None and a["timed_problems"] == 4 < MIN_PROBLEMS
    assert set(a["verdicts"]) == set(VERDICTS)  # every verdict, zeros too: the same keys in every row
    assert nonzero(a["verdicts"]) == {"pass": 4, "fail": 1, "error": 1, "unsupported": 1}
    b = first["overall"]
    assert (b["passed"], b["total"]) == (5, 6) and b["geomean_speedup"] == pytest.approx(1.5)
    assert b["geomean_ci"] == pytest.approx([1.5, 1.5])  # five problems, all 1.5x: no spread to draw
    assert b["verdicts"]["compile-error"] == 1
    # By category, each row over its own records.
    assert second["categories"]["tensor-parallel"]["passed"] == 1
    assert second["categories"]["tensor-parallel"]["total"] == 2
    assert first["categories"]["collective"]["passed"] == 4
    assert board["comparable"] and board["differences"] == []


def test_the_terminal_table(pkb_invoke, two_runs, monkeypatch):
    monkeypatch.setenv("PKB_PLAIN", "1")
    result = pkb_invoke("leaderboard", *two_runs, "--label", "A", "--label", "B")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    row_b = next(line for line in lines if line.startswith("1  B "))
    row_a = next(line for line in lines if line.startswith("2  A "))
    assert "5/6" in row_b and "83.3" in row_b and "1.5" in row_b
    assert "4/6" in row_a and "66.7" in row_a and f"n/a (< {MIN_PROBLEMS} problems)" in row_a
    assert "By category: passed / total" in result.output and "rows differ" not in result.output
    # The verdict mix shows the verdicts some row has: compile-error (B's), not crash (nobody's).
    verdict_header = lines[lines.index("Verdicts") + 1]
    assert "compile-error" in verdict_header and "fail" in verdict_header and "crash" not in verdict_header


def test_different_world_sizes_and_machines_are_rows_never_pooled(tmp_path):
    # One run at W2 and W4 on an H200 machine; another on H100s at W2.
    mixed = write_run(tmp_path / "mixed", [rec(1, speedup=2.0), rec(2, "fail"),
                                          rec(1, speedup=1.5, world_size=4), rec(2, speedup=1.2, world_size=4)])
    other = write_run(tmp_path / "h100", [rec(1, speedup=1.1, machine=H100), rec(2, speedup=1.3, machine=H100)])
    board = leaderboard([read_run(mixed), read_run(other)], labels=["mine", "theirs"])
    rows = {r["label"]: r for r in board["rows"]}
    assert set(rows) == {"mine (W2)", "mine (W4)", "theirs"}
    # Each row holds only its own setting's records: W2 passed 1 of 2, W4 2 of 2 (pooled would be 3 of 4).
    assert (rows["mine (W2)"]["overall"]["passed"], rows["mine (W2)"]["overall"]["total"]) == (1, 2)
    assert (rows["mine (W4)"]["overall"]["passed"], rows["mine (W4)"]["overall"]["total"]) == (2, 2)
    assert rows["mine (W4)"]["overall"]["geomean_speedup"] == pytest.approx((1.5 * 1.2) ** 0.5)
    assert rows["theirs"]["machine"] == "2x NVIDIA H100 80GB HBM3"
    found = {d["setting"]: d["values"] for d in board["differences"]}
    assert set(found) == {"machine", "world size"}
    assert found["world size"] == {"mine (W2)": 2, "mine (W4)": 4, "theirs": 2}
    assert not board["comparable"]
    notes = "\n".join(board["notes"])
    assert "rows differ in machine (2x NVIDIA H200: mine (W4), mine (W2); 2x NVIDIA H100 80GB HBM3: theirs)" in notes
    assert "rows differ in world size" in notes and "never pooled" in notes
    assert f"{mixed} holds records of 2 settings: one row each" in notes


def test_timing_modes_and_problem_sets_are_said(tmp_path, pkb_invoke, monkeypatch):
    timed = write_run(tmp_path / "timed", [rec(i, speedup=1.5) for i in (1, 2, 3)])
    checked = write_run(tmp_path / "checked", [rec(i, timing="check") for i in (2, 3, 4)])
    board = leaderboard([read_run(timed), read_run(checked)])
    found = {d["setting"]: d for d in board["differences"]}
    # Two runs of one solutions folder are told apart by their own folders' names.
    assert found["timing mode"]["values"] == {"sols in timed (triton)": "window", "sols in checked (triton)": "untimed"}
    assert found["problem set"]["values"] == {"sols in timed (triton)": 3, "sols in checked (triton)": 3}
    assert found["problem set"]["common"] == 2 and found["problem set"]["common_by_name"] == 2
    # --common scores both on problems 2 and 3 only.
    common = leaderboard([read_run(timed), read_run(checked)], common=True)
    assert [r["overall"]["total"] for r in common["rows"]] == [2, 2] and common["common"] == 2
    # The same problem at another size is another problem: said, not matched.
    tiny = write_run(tmp_path / "tiny", [rec(i, speedup=1.5, size="tiny") for i in (1, 2, 3)])
    sizes = leaderboard([read_run(timed), read_run(tiny)])
    assert {d["setting"]: (d["common"], d["common_by_name"]) for d in sizes["differences"]} == {"problem set": (0, 3)}
    assert any("3 in common by name alone: a problem at another size or dtype is another problem" in note
               for note in sizes["notes"])
    monkeypatch.setenv("PKB_PLAIN", "1")
    result = pkb_invoke("leaderboard", timed, checked)
    assert "rows differ in timing mode (window: sols in timed (triton); untimed: sols in checked (triton))" \
        in result.output
    assert "rows differ in problem set" in result.output and "2 problems in common" in result.output


def test_cpu_host_timings_are_labelled(tmp_path, pkb_invoke, monkeypatch):
    cpu = write_run(tmp_path / "cpu", [rec(i, speedup=0.05, machine=CPU) for i in range(1, 7)])
    gpu = write_run(tmp_path / "gpu", [rec(i, speedup=1.5) for i in range(1, 7)])
    board = leaderboard([read_run(cpu), read_run(gpu)])
    rows = {r["machine"]: r for r in board["rows"]}
    assert rows["cpu"]["host_timings"] and not rows["2x NVIDIA H200"]["host_timings"]
    assert board["host_timings"] == [rows["cpu"]["label"]]
    # Left out of the speed numbers by default, as pkb report does; counted with include_cpu.
    assert rows["cpu"]["overall"]["geomean_speedup"] is None and rows["cpu"]["overall"]["fast_p"]["1"] is None
    # An untimed CPU run has no timings to label.
    checked = write_run(tmp_path / "checked", [rec(1, machine=CPU, timing="check")])
    assert not leaderboard([read_run(checked)])["rows"][0]["host_timings"]
    counted = {r["machine"]: r for r in leaderboard([read_run(cpu)], include_cpu=True)["rows"]}
    assert counted["cpu"]["overall"]["geomean_speedup"] == pytest.approx(0.05)
    assert any("host timings (CPU mode)" in note and rows["cpu"]["label"] in note for note in board["notes"])
    monkeypatch.setenv("PKB_PLAIN", "1")
    output = pkb_invoke("leaderboard", cpu, gpu).output
    assert "cpu (host timings)" in output and "host timings (CPU mode)" in output


def test_the_json_shape(pkb_invoke, two_runs):
    result = pkb_invoke("leaderboard", *two_runs, "--json")
    assert result.exit_code == 0, result.output
    board = json.loads(result.output)
    assert set(board) == {"rows", "categories", "fast_p", "interval", "differences", "comparable", "common",
                          "include_cpu", "host_timings", "notes"}
    assert board["categories"] == ["collective", "tensor-parallel"] and board["fast_p"] == ["0", "1", "1.5", "2"]
    assert board["interval"] == {"of": "geomean speedup", "method": "percentile bootstrap over problems",
                                 "resamples": 2000, "seed": 0, "level": 0.95, "min_problems": MIN_PROBLEMS}
    row = board["rows"][0]
    assert {"rank", "label", "run", "backend", "model", "machine", "world_size", "timing", "host_timings",
            "overall", "categories"} <= set(row)
    assert set(row["overall"]) == {"problems", "total", "passed", "pass_rate", "fast_p", "geomean_speedup",
                                   "geomean_ci", "timed_correct", "timed_problems", "host_timed", "launcher_timed", "verdicts"}
    assert set(row["categories"]["collective"]) == set(row["overall"])
    assert row["run"] == str(two_runs[1]) and row["timing"] == "window" and row["world_size"] == 2


def test_the_geomean_interval_is_a_fixed_seed_bootstrap_over_problems():
    records = [rec(i, speedup=s) for i, s in enumerate([0.8, 1.1, 1.3, 2.0, 2.5, 4.0], 1)]
    (low, high), problems = geomean_interval(records)
    point = math.exp(sum(math.log(s) for s in [0.8, 1.1, 1.3, 2.0, 2.5, 4.0]) / 6)
    assert problems == 6 and 0.8 < low < point < high < 4.0
    assert geomean_interval(records)[0] == (low, high)  # the same seed: the same interval every time
    # A problem's samples stay together: two samples of one problem are one problem, not two.
    samples = records[:4] + [rec(1, speedup=0.8, sample="_b")]
    assert geomean_interval(samples) == (None, 4)


def test_html_is_self_contained_and_sortable(pkb_invoke, two_runs, tmp_path, monkeypatch):
    monkeypatch.setenv("PKB_PLAIN", "1")
    page = tmp_path / "board.html"
    result = pkb_invoke("leaderboard", *two_runs, "--html", page)
    assert result.exit_code == 0 and f"HTML page: {page}" in result.output
    text = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert "<link" not in text and "@import" not in text and "url(" not in text
    assert '<table class="sortable">' in text and "addEventListener('click'" in text
    assert "<svg" in text and text.count("<rect") >= 2  # a pass-rate bar per row at least
    assert "made by <code>pkb leaderboard" in text
    # The cells carry their sort keys: 5/6 by its fraction, numbers as numbers.
    assert '<td data-sort="0.8333333333333334">5/6</td>' in text
    assert sort_key("43/81") == repr(43 / 81) and sort_key(83.3) == "83.3" and sort_key("n/a") == ""
    assert sort_key("[0.912, 1.300]") == "0.912" and sort_key("0/0") == ""


@pytest.mark.parametrize("make, message", [
    (lambda folder: folder / "nope", "does not exist"),
    (lambda folder: folder, "no records.jsonl in it (not a run directory)"),
    (lambda folder: _write(folder / "junk.jsonl", "not json\n"), "junk.jsonl:1: not a pkb record"),
    (lambda folder: _write(folder / "empty.jsonl", "\n"), "no records in it"),
    (lambda folder: _write(folder / "binary.jsonl", b"\xff\xfe\x00"), "not a records file (not UTF-8 text)"),
])
def test_an_unreadable_or_missing_run_is_one_line_and_exit_1(pkb_invoke, two_runs, tmp_path, make, message):
    folder = tmp_path / "bad"
    folder.mkdir()
    bad = make(folder)
    result = pkb_invoke("leaderboard", two_runs[0], bad)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: run {bad}") and message in lines[0], result.output


def _write(path: Path, content) -> Path:
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return path


def test_more_labels_than_runs_is_a_usage_error(pkb_invoke, two_runs):
    result = pkb_invoke("leaderboard", two_runs[0], "--label", "x", "--label", "y")
    assert result.exit_code == 4 and "2 labels for 1 runs" in result.output


def test_pkb_run_json_output_and_a_pkb_tree_folder_name(tmp_path):
    # What `pkb run --json` prints, for solutions in a folder named as PKB names its trees.
    folder = "trees/solutions_cuda_bf16_h100_8_openai_gpt-5.5"
    records = [rec(1, backend="cuda", folder=folder), rec(2, "fail", backend="cuda", folder=folder)]
    path = _write(tmp_path / "run.json", json.dumps({"run_dir": "x", "results": [r.to_json() for r in records]}))
    run = read_run(path)
    assert len(run.records) == 2 and run.model == {"model": "gpt-5.5", "provider": "openai",
                                                   "from": "solutions_cuda_bf16_h100_8_openai_gpt-5.5"}
    assert leaderboard([run])["rows"][0]["label"] == "gpt-5.5 (cuda)"


def test_the_model_from_pkb_generates_record_beside_a_solution(tmp_path):
    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "1_p1.json").write_text(json.dumps({"model": {"provider": "openai", "model": "m-1", "temperature": 0}}))
    run = read_run(write_run(tmp_path / "run", [rec(1, folder=str(gen)), rec(2, folder=str(gen))]))
    assert run.model == {"model": "m-1", "provider": "openai", "from": str(gen / "1_p1.json")}
    assert leaderboard([run])["rows"][0]["label"] == "m-1 (triton)"


def test_a_refinement_loop_counts_each_problems_best_round(tmp_path):
    loop = tmp_path / "loop"
    for k, verdict in ((1, "fail"), (2, "pass")):
        append_record(loop, Record.from_json(dict(rec(1, verdict, sample=f"_r{k}").to_json(), round=k)))
    (loop / "loop.json").write_text(json.dumps({"model": "some-model", "provider": "openai"}))
    board = leaderboard([read_run(loop)])
    row = board["rows"][0]
    assert row["label"] == "some-model (triton)" and row["loop"]
    assert (row["overall"]["passed"], row["overall"]["total"]) == (1, 1)
    assert any("refinement loop" in note for note in board["notes"])


def test_pkbs_published_trees():
    """The records of docs/benchmarks/2026-11-25-h200x2-trees.md: the verdicts that page gives."""
    runs = [read_run(TREES / name) for name in ("call2-gpt-records-1.jsonl", "call3-gemini-triton.jsonl",
                                                 "call3-gemini-pk.jsonl")]
    board = leaderboard(runs, labels=["GPT-5.5", "Gemini Triton", "Gemini PK"])
    rows = {r["label"]: r["overall"] for r in board["rows"]}
    assert [r["label"] for r in board["rows"]] == ["GPT-5.5", "Gemini Triton", "Gemini PK"]
    assert nonzero(rows["GPT-5.5"]["verdicts"]) == {"pass": 43, "fail": 5, "error": 15, "compile-error": 13,
                                                    "timeout": 1, "unsupported": 1, "flagged": 4}
    assert nonzero(rows["Gemini Triton"]["verdicts"]) == {"pass": 32, "fail": 10, "error": 13, "compile-error": 6,
                                                          "crash": 1, "unsupported": 1, "flagged": 6}
    assert rows["Gemini PK"]["total"] == 0 and rows["Gemini PK"]["verdicts"]["unsupported"] == 56
    # Untimed (no --measure-perf): no fast_p above 0 and no geomean, never a made-up number.
    assert rows["GPT-5.5"]["fast_p"]["1"] is None and rows["GPT-5.5"]["geomean_speedup"] is None
    assert [d["setting"] for d in board["differences"]] == ["problem set"]


def test_html_into_a_folder_not_made_yet_makes_it_and_an_unwritable_path_is_one_line(pkb_invoke, two_runs, tmp_path):
    """--html into a missing folder was a traceback (exit 3) in report and leaderboard (a new user)."""
    page = tmp_path / "new" / "deeper" / "board.html"
    assert pkb_invoke("leaderboard", *two_runs, "--html", page).exit_code == 0 and page.is_file()
    report = tmp_path / "r" / "report.html"
    assert pkb_invoke("report", two_runs[0], "--html", report).exit_code == 0 and report.is_file()
    (tmp_path / "file").write_text("")
    result = pkb_invoke("leaderboard", *two_runs, "--html", tmp_path / "file" / "x.html")
    assert result.exit_code == 1 and result.output.strip().splitlines()[-1].startswith("Error: --html "), result.output
    assert "Traceback" not in result.output
