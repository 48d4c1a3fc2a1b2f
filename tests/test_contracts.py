"""The typed contracts between processes (pkb_core/contracts): one JSON form each, strict for
what pkb sends itself (jobs, batches), lenient for what outlives a pkb version (records,
calibrations), and one clear line for data that does not fit."""
from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from pkb_core.contracts.batch import Batch, LaunchSettings, Nodes
from pkb_core.contracts.calibration import Calibration, Link
from pkb_core.contracts.job import Built, Job
from pkb_core.contracts.record import Record
from pkb_core.contracts.serial import ContractError
from pkb_core.contracts.timing import ModeTiming, Speedup, Timing
from pkb_core.contracts.verdict import Verdict
from pkb_core.errors import PkbError


def _job(**changes) -> Job:
    fields = dict(key="1_allreduce|triton|a.py", slug="1_allreduce-a-W2-tiny", problem_id=1, problem="1_allreduce",
                  category="collective", problem_path="/p/1_allreduce.py", backend="triton", solution="/s/a.py",
                  solution_label="a.py", size="tiny", dtype="fp32", trials=3, mode="eval", measure_perf=True,
                  warmup=3, iters=20, min_iters=10, save_outputs=False, timing_modes=("latency", "graph"),
                  profile=False, params={"n": 4096})
    return Job(**{**fields, **changes})


def test_a_job_crosses_as_json_and_comes_back_equal():
    job = _job(compile=Built(seconds=1.25, cached=False))
    wire = json.loads(json.dumps(job.to_json()))
    assert wire["timing_modes"] == ["latency", "graph"] and wire["compile"] == {"seconds": 1.25, "cached": False}
    assert Job.from_json(wire) == job
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        job.trials = 1  # type: ignore[misc]


@pytest.mark.parametrize("change, message", [
    ({"trials": "3"}, "Job.trials: expected int, got str '3'"),
    ({"measure_perf": 1}, "Job.measure_perf: expected bool, got int '1'"),
    ({"iters": True}, "Job.iters: expected int, got bool 'True'"),
    ({"timing_modes": "latency"}, "Job.timing_modes: expected list or tuple, got str 'latency'"),
    ({"run_as": "root"}, "Job: unknown field 'run_as'"),
])
def test_a_job_that_does_not_fit_is_one_line_naming_the_field(change, message):
    with pytest.raises(ContractError) as caught:
        Job.from_json({**_job().to_json(), **change})
    assert str(caught.value) == message


def test_a_job_without_a_field_names_it():
    data = _job().to_json()
    del data["key"], data["params"]
    with pytest.raises(ContractError, match=r"^Job: missing fields 'key', 'params'$"):
        Job.from_json(data)


def test_a_batch_carries_jobs_and_settings_as_plain_json(tmp_path):
    calibration = Calibration(link_gbps=300.0, links=(Link(src=0, dst=1, issued_by="write", gbps=300.0),),
                              hbm_gbps=4000.0, matmul_tflops=700.0, matmul_dtype="bf16", method="test")
    settings = LaunchSettings(nproc=2, device="cpu", backend="triton", run_dir=str(tmp_path), job_timeout=60,
                              calibration=calibration, preload=["/lib/a.so"],
                              nodes=Nodes(nnodes=2, node_rank=0, endpoint="h:1", rdzv_id="x"))
    assert settings.run_dir == tmp_path and settings.preload == ("/lib/a.so",) and settings.world_size == 4
    batch = Batch(jobs=[_job(), _job(key="k2")], settings=settings)
    text = json.dumps(batch.to_json())  # no pickle: what a node reads is data
    back = Batch.from_json(json.loads(text))
    assert back == batch and isinstance(back.settings.run_dir, Path)
    assert back.settings.calibration.links[0].gbps == 300.0


def test_records_keep_fields_they_do_not_know_and_refuse_unknown_verdicts():
    record = Record(key="k", problem_id=1, problem="1_allreduce", category="collective", backend="triton",
                    solution="a.py", world_size=2, size="tiny", dtype="fp32", mode="eval", verdict=Verdict.PASS)
    data = record.to_json()
    assert "reference_ms" not in data and "stats" not in data  # untimed: no timing fields at all
    newer = dict(data, written_by_a_later_pkb={"x": 1})
    assert Record.from_json(newer).to_json() == newer
    with pytest.raises(ContractError, match=r"^Record.verdict: 'passed' is not one of pass, fail, "):
        Record.from_json(dict(data, verdict="passed"))


def test_a_timing_round_trips_with_its_modes():
    mode = ModeTiming(speedup=Speedup(value=1.5, rounds=3), stopped="cap", batches=3)
    timing = Timing(modes={"latency": mode, "graph": ModeTiming(unavailable="CUDA-graph mode needs a GPU")},
                    clock="host")
    data = json.loads(json.dumps(timing.to_json()))
    assert data["modes"]["graph"] == {"unavailable": "CUDA-graph mode needs a GPU"}
    assert Timing.from_json(data) == timing and Timing.from_json(data).headline == mode
    # The headline is the primary mode's, stored once.
    assert timing.speedup == mode.speedup and not {"reference", "candidate", "speedup"} & set(data)
    assert attrs.evolve(timing, primary="graph").speedup is None


def test_a_timing_that_stored_its_headline_twice_reads_it_from_its_modes_and_writes_it_back():
    side = {"min": 1.0, "p10": 1.0, "median": 1.0, "p90": 1.0, "max": 1.0, "mean": 1.0, "stddev": 0.0, "rounds": 20}
    old = {"modes": {"latency": {"reference": side, "candidate": dict(side, median=0.5)}}, "primary": "latency",
           "reference": side, "candidate": dict(side, median=0.5)}
    timing = Timing.from_json(old)
    assert timing.candidate.median == 0.5 and timing.reference.median == 1.0 and timing.speedup is None
    assert timing.to_json() == old


def test_claimed_speedup_is_null_unless_pkb_claims_a_difference():
    from pkb_core.conduct.intervals import speedup
    from pkb_core.conduct.intervals import summarize
    from pkb_core.results.records import job_record
    from pkb_core.contracts.job import Job

    job = Job(key="k", slug="k", problem_id=1, problem="1_allreduce", category="collective", problem_path="/p.py",
              backend="triton", solution=None, solution_label="k", size="tiny", dtype="fp32", trials=1,
              mode="eval", measure_perf=True, warmup=1, iters=30, min_iters=10, save_outputs=False,
              timing_modes=("window",), profile=False, params={})

    def record(ref, cand, mode_name="window"):
        pairs = list(zip(ref, cand))
        mode = ModeTiming(reference=summarize(ref, ref), candidate=summarize(cand, cand),
                          speedup=speedup(pairs), stopped="cap", batches=len(pairs))
        timing = Timing(modes={mode_name: mode}, primary=mode_name, clock="host")
        return job_record(job, 2, "pass", timing=timing)

    faster = record([2.0, 2.1, 2.05, 1.98, 2.02, 2.01], [1.0, 1.01, 0.99, 1.02, 1.0, 0.98])
    assert faster.difference == "faster" and faster.claimed_speedup == pytest.approx(faster.speedup)
    # A launcher-clock headline (its batches run in the candidate's process, which can fuse them)
    # is shown and read, never claimed: a reward reads the judge's clock alone.
    launcher = record([2.0, 2.1, 2.05, 1.98, 2.02, 2.01], [1.0, 1.01, 0.99, 1.02, 1.0, 0.98], "latency")
    assert launcher.difference == "faster" and launcher.speedup == pytest.approx(faster.speedup)
    assert launcher.claimed_speedup is None
    same = record([1.0, 1.2, 0.9, 1.1, 1.0, 0.95], [1.1, 0.9, 1.0, 1.05, 0.97, 1.02])
    assert same.difference == "no measurable difference" and same.claimed_speedup is None
    few = record([4.0] * 5, [1.0] * 5)  # five rounds: no interval, so no number either
    assert few.difference == "too few rounds to tell" and few.speedup is None and few.claimed_speedup is None
    assert Record.from_json(json.loads(json.dumps(few.to_json()))) == few


def test_a_record_of_an_older_pkb_with_a_cross_check_reads_back():
    # Written before times came from the launcher's clock: a crosscheck, no claimed_speedup, no
    # calls_per_batch; it reads back and writes back what it had.
    side = {"min": 1.0, "p10": 1.0, "median": 1.0, "p90": 1.0, "max": 1.0, "mean": 1.0, "stddev": 0.0, "rounds": 20}
    old = {"key": "k", "problem_id": 1, "problem": "1_allreduce", "category": "collective", "backend": "triton",
           "solution": "a.py", "world_size": 2, "size": "tiny", "dtype": "fp32", "mode": "eval", "verdict": "pass",
           "speedup": 0.003272, "difference": "no measurable difference", "reference_ms": 1.0, "solution_ms": 1.0,
           "stats": {"modes": {"latency": {"reference": side, "candidate": side,
                                           "speedup": {"value": 0.003272, "rounds": 2,
                                                       "difference": "no measurable difference"}}},
                     "primary": "latency",
                     "crosscheck": {"latency": {"reference_overhead_ms": 1.0, "candidate_overhead_ms": 1.2,
                                                "allowance_ms": 5.0, "reference_overhead_median_ms": 1.1,
                                                "candidate_overhead_median_ms": 1.3, "batches": 2, "flag": None}},
                     "reference": side, "candidate": side}}
    record = Record.from_json(old)
    data = record.to_json()
    assert {k: data[k] for k in old} == old and "claimed_speedup" not in data and record.claimed_speedup is None
    assert record.stats.crosscheck["latency"].allowance_ms == 5.0


def test_a_records_file_with_a_line_that_is_not_a_record_names_the_line(tmp_path):
    from pkb_core.results.records import RECORDS, read_records

    (tmp_path / RECORDS).write_text('{"key": "k"}\n')
    with pytest.raises(PkbError, match=rf"^{tmp_path / RECORDS}:1: not a pkb record \(.*missing fields"):
        read_records(tmp_path)


def test_a_cut_off_last_line_says_how_to_go_on_under_force_too(tmp_path):
    """Issue 55: a run killed while appending leaves half a line; the error names it and the way out."""
    from pkb_core.results.records import RECORDS, append_record, forget_records, read_records

    record = Record(key="k", problem_id=1, problem="1_allreduce", category="collective", backend="triton",
                    solution="a.py", world_size=2, size="tiny", dtype="fp32", mode="eval", verdict="pass")
    append_record(tmp_path, record)
    append_record(tmp_path, attrs.evolve(record, key="k2"))
    path = tmp_path / RECORDS
    whole = path.read_text()
    path.write_text(whole[: len(whole) - 40])  # the second record, cut off
    way_out = (f"^{path}:2: the last line is cut off, not a whole record \\(a run stopped while writing it\\): "
               f"delete line 2 of {path}, and a rerun runs its job again$")
    with pytest.raises(PkbError, match=way_out):
        read_records(tmp_path)
    with pytest.raises(PkbError, match=way_out):  # pkb run --force reads the file too
        forget_records(tmp_path, {"k"})
    path.write_text(whole[: len(whole) - 40] + "\n" + whole.splitlines()[0] + "\n")  # cut, then appended to
    with pytest.raises(PkbError, match=rf"^{path}:2: not a pkb record"):
        forget_records(tmp_path, {"k"})
    path.write_text(whole.splitlines()[0] + "\n" + whole.splitlines()[1])  # whole, only its newline missing
    assert [r.key for r in read_records(tmp_path)] == ["k", "k2"]


def test_a_calibration_cache_that_is_not_one_is_measured_again(tmp_path, monkeypatch):
    from pkb_core.machine import calibrate

    monkeypatch.setattr(calibrate, "cache_path", lambda device: tmp_path / "c.json")
    (tmp_path / "c.json").write_text('{"link_gbps": "fast"}')
    assert calibrate.load_calibration("cpu") is None
    measured = calibrate.calibrate("cpu")
    assert isinstance(measured, Calibration) and measured.link_gbps > 0
    assert calibrate.load_calibration("cpu") == measured


def test_a_real_jobs_record_reads_back_as_the_same_contract(pkb_invoke, tmp_path):
    out = pkb_invoke("run", "--problem", "1", "--trials", "1", "--measure-perf", "--out", tmp_path, "--json")
    printed = json.loads(out.stdout)["results"]
    from pkb_core.results.records import read_records

    records = read_records(tmp_path)
    assert [r.to_json() for r in records] == printed
    (record,) = records
    assert record.verdict is Verdict.PASS and record.stats.headline.reference.median == record.reference_ms
    assert record.options.timing_modes == ("window",)  # the CPU headline


def test_every_records_file_in_the_repository_reads_back_and_writes_back_unchanged():
    # Run directories outlive pkb versions: records written by earlier pkbs (the benchmark pages'
    # data, the report fixtures) must still read, and lose nothing when written again.
    root = Path(__file__).resolve().parents[1]
    files = [p for folder in ("docs/benchmarks/data", "tests/fixtures") for p in (root / folder).rglob("*.jsonl")]
    assert len(files) > 10
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                data = json.loads(line)
                assert Record.from_json(data).to_json() == data, f"{path}:{number}"


def test_a_record_that_would_not_read_back_is_refused_before_it_is_written(tmp_path):
    from pkb_core.results.records import RECORDS, append_record

    record = Record(key="k", problem_id=1, problem="1_allreduce", category="collective", backend="triton",
                    solution="a.py", world_size=2, size="tiny", dtype="fp32", mode="eval", verdict="pass")
    # attrs does not check types when a record is made: a value a candidate sent could be anything.
    for bad in (attrs.evolve(record, reason={"not": "text"}), attrs.evolve(record, seconds=float("nan"))):
        with pytest.raises(PkbError):
            append_record(tmp_path, bad)
    assert not (tmp_path / RECORDS).exists()
    append_record(tmp_path, record)
    assert (tmp_path / RECORDS).read_text().count("\n") == 1


def test_a_job_slug_stays_a_name_the_file_system_takes():
    """A legal 253-byte solution file name made the judge's save of its outputs fail (a hostile
    review, 2026-12-02): a long slug keeps its start and a digest of the whole."""
    from pkb_core.contracts.job import SLUG_CHARS, job_slug

    long = job_slug("1_allreduce", "1_allreduce_" + "a" * 240 + ".py", 2, "tiny")
    other = job_slug("1_allreduce", "1_allreduce_" + "a" * 239 + "b.py", 2, "tiny")
    assert len(long) == SLUG_CHARS and long.startswith("1_allreduce-1_allreduce_aaa") and long != other
    assert job_slug("1_allreduce", "mine.py", 2, "tiny") == "1_allreduce-mine-W2-tiny"
