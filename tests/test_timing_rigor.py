"""Timing rigor (docs/timing.md): intervals, the stopping rule, "no measurable difference" in
reports, the device barrier's CPU path on the shared-memory heap, host timings kept out of fast_p,
and the reference against itself on CPU reading as no measurable difference."""
import json
import math
import os
import random
import re
import socket
import time

import pytest
import torch.multiprocessing as mp

from pkb_core.judge.intervals import (FASTER, SAME, SLOWER, coverage, difference, median_interval, ratio_interval,
                                      relative_half_width, speedup)
from pkb_core.judge.stopping import StoppingRule, time_share
from pkb_core.judge.timing import summarize


# -- the interval arithmetic ---------------------------------------------------------------------
def test_median_interval_is_the_binomial_order_statistics():
    # n = 10: ranks 2 and 9 (coverage 1 - 2 * 11/1024 = 97.85 %); n = 100: ranks 40 and 61 (tables).
    assert median_interval(range(1, 11)) == (2, 9)
    assert coverage(10) == pytest.approx(1 - 2 * 11 / 1024)
    assert median_interval(list(range(100, 0, -1))) == (40, 61)  # order of the samples does not matter
    assert median_interval(range(1, 21)) == (6, 15)
    # Below 6 samples no 95 % interval exists ([min, max] covers 1 - 2/2^5 = 93.75 % at n = 5).
    assert median_interval(range(5)) is None and median_interval(range(6)) == (0, 5)
    assert coverage(5) is None
    # Exact for large n without overflow, and never below the level.
    assert 0.95 <= coverage(5000) < 0.96


def test_relative_half_width():
    samples = [1.0 + d for d in (-0.02, -0.01, -0.005, 0.0, 0.0, 0.0, 0.005, 0.01, 0.02, 0.03)]
    low, high = median_interval(samples)  # ranks 2 and 9: 0.99 and 1.02
    assert (low, high) == (0.99, 1.02)
    assert relative_half_width(samples) == pytest.approx(0.02)
    assert relative_half_width([1.0] * 3) is None  # too few for an interval


def test_speedup_interval_from_the_medians_intervals():
    # Each median at sqrt(0.95) = 97.47 %: for n = 20 that is ranks 5 and 16.
    reference = [float(x) for x in range(1, 21)]
    candidate = [x / 2 for x in reference]
    assert median_interval(reference, math.sqrt(0.95)) == (5.0, 16.0)
    low, high = ratio_interval(reference, candidate)
    assert (low, high) == pytest.approx((5.0 / 8.0, 16.0 / 2.5))
    result = speedup(reference, candidate)
    assert result["value"] == pytest.approx(2.0) and result["difference"] == SAME  # 0.625 < 1 < 6.4
    tight = [10.0 + 0.01 * i for i in range(20)]
    assert speedup(tight, [t / 2 for t in tight])["difference"] == FASTER
    assert speedup([t / 2 for t in tight], tight)["difference"] == SLOWER


def test_difference_reading():
    assert difference((1.01, 1.2)) == FASTER
    assert difference((0.8, 0.99)) == SLOWER
    assert difference((0.99, 1.01)) == SAME
    assert difference(None) == SAME  # too few samples to tell: not a win


def test_summaries_carry_the_medians_interval():
    stats = summarize([float(x) for x in range(1, 11)])
    assert (stats["ci_low"], stats["ci_high"], stats["ci_level"]) == (2.0, 9.0, 0.95)
    assert stats["median"] == 5.5 and stats["rounds"] == 10
    assert summarize([1.0, 2.0])["ci_low"] is None


# -- the stopping rule ---------------------------------------------------------------------------
def _rounds_until_stop(rule, draw, per_round=10):
    ref, cand = [], []
    while True:
        ref += [draw() for _ in range(per_round)]
        cand += [draw() for _ in range(per_round)]
        decision = rule.decide(ref, cand)
        if decision:
            return decision, len(ref)


def test_steady_samples_stop_at_the_minimum():
    rng = random.Random(1)
    rule = StoppingRule(min_samples=20, max_samples=1000)
    decision, n = _rounds_until_stop(rule, lambda: 1.0 + rng.uniform(-0.003, 0.003))
    assert (decision, n) == ("precise", 20)


def test_noisy_samples_run_to_the_cap():
    rng = random.Random(2)
    rule = StoppingRule(min_samples=20, max_samples=120)
    decision, n = _rounds_until_stop(rule, lambda: rng.lognormvariate(0.0, 0.5))
    assert (decision, n) == ("cap", 120)


def test_moderate_noise_stops_in_between():
    rng = random.Random(3)
    rule = StoppingRule(min_samples=20, max_samples=5000)
    decision, n = _rounds_until_stop(rule, lambda: rng.gauss(1.0, 0.03))
    assert decision == "precise" and 20 < n < 5000


def test_never_before_the_minimum_and_both_sides_must_be_precise():
    rule = StoppingRule(min_samples=30, max_samples=100)
    steady = [1.0] * 20
    assert rule.decide(steady, steady) is None  # precise, but below the minimum
    noisy = [float(x) for x in range(1, 41)]
    assert rule.decide([1.0] * 40, noisy) is None  # one side still wide
    with pytest.raises(ValueError):
        StoppingRule(min_samples=10, max_samples=5)


def test_time_share_splits_the_remaining_time_among_the_modes():
    assert time_share(100.0, 2) == pytest.approx(40.0)
    assert time_share(-5.0, 1) == 0.0


# -- records and reports -------------------------------------------------------------------------
def _timing(ref_samples, cand_samples, clock="device"):
    from pkb_core.judge.intervals import speedup as ratio

    sides = {"reference": summarize(ref_samples), "candidate": summarize(cand_samples)}
    mode = dict(sides, speedup=ratio(ref_samples, cand_samples), stopped="cap", batches=3,
                alignment={"reference": "device barrier", "candidate": "device barrier"})
    return {"modes": {"latency": mode}, "primary": "latency", "crosscheck": {}, "clock": clock,
            "reference": sides["reference"], "candidate": sides["candidate"], "speedup": mode["speedup"]}


def _record(name, ref_samples, cand_samples, clock="device", problem="1_allreduce"):
    from pkb_core.results.records import job_record

    job = {"key": name, "problem_id": 1, "problem": problem, "category": "collective", "backend": "triton",
           "solution_label": name, "size": "default", "dtype": "bf16", "mode": "eval", "warmup": 1, "iters": 30,
           "min_iters": 10, "timing_modes": ["latency"]}
    return job_record(job, 2, "pass", timing=_timing(ref_samples, cand_samples, clock),
                      machine={"device": "cuda" if clock == "device" else "cpu"})


def _steady(center, n=30, spread=0.001):
    return [center * (1 + spread * math.sin(i)) for i in range(n)]


def _rows():
    return [
        _record("1_allreduce_fast.py", _steady(1.0), _steady(0.5)),                 # 2x, measurable
        _record("1_allreduce_same.py", _steady(1.0), _steady(0.98, spread=0.2)),    # 1.02x, interval contains 1
        _record("1_allreduce_slow.py", _steady(1.0), _steady(2.0)),                 # 0.5x, measurable
        _record("1_allreduce_cpu.py", _steady(1.0), _steady(0.25), clock="host"),   # 4x on the host clock
    ]


def test_records_carry_intervals_and_the_reading():
    fast, same, slow, cpu = _rows()
    assert fast["difference"] == FASTER and fast["speedup_ci"][0] > 1.0 and fast["clock"] == "device"
    assert same["difference"] == SAME and same["speedup_ci"][0] < 1.0 < same["speedup_ci"][1]
    assert same["speedup"] > 1.0  # a point value above 1 that is not a win
    assert slow["difference"] == SLOWER
    assert cpu["clock"] == "host"
    for r in (fast, same, slow, cpu):
        low, high = r["reference_ci_ms"]
        assert low <= r["reference_ms"] <= high
        assert r["stats"]["modes"]["latency"]["stopped"] == "cap"


def test_fast_p_counts_only_measurable_wins_and_leaves_host_timings_out():
    from pkb_core.results.report import summarize as report

    rows = _rows()
    agg = report(rows)["aggregates"]
    # 4 rows pass; only "fast" is a measurable device-timed win (the 1.02x is no measurable difference).
    assert agg["fast_p"]["1"] == pytest.approx(1 / 4)
    assert agg["fast_p"]["1.5"] == pytest.approx(1 / 4) and agg["fast_p"]["2"] == 0.0  # 2.0 is not > 2
    assert agg["differences"] == {FASTER: 1, SAME: 1, SLOWER: 1} and agg["host_timed"] == 1
    assert agg["timed_correct"] == 3
    with_cpu = report(rows, include_cpu=True)["aggregates"]
    assert with_cpu["fast_p"]["1"] == pytest.approx(2 / 4) and with_cpu["fast_p"]["2"] == pytest.approx(1 / 4)
    only_cpu = report([rows[3]])["aggregates"]
    assert only_cpu["fast_p"]["1"] is None and only_cpu["pass_rate"] == 1.0
    row = next(r for r in report(rows)["rows"] if r["solution"] == "1_allreduce_same.py")
    assert row["difference"] == SAME and row["speedup_ci"] and row["reference_ci_pct"] is not None


def test_report_shows_intervals_and_no_measurable_difference(pkb_invoke, tmp_path):
    from pkb_core.results.records import append_record

    for r in _rows():
        append_record(tmp_path, r)
    out = pkb_invoke("report", tmp_path).stdout
    for text in ("95% interval", "vs reference", "no measurable difference", "faster", "slower", "host timing",
                 "--include-cpu", "1 faster, 1 no measurable difference, 1 slower"):
        assert text in out, text
    assert re.search(r"fast_1 \(correct and speedup > 1\) +25\.0%", out)
    out = pkb_invoke("report", tmp_path, "--include-cpu").stdout
    assert re.search(r"fast_1 \(correct and speedup > 1\) +50\.0%", out)
    data = json.loads(pkb_invoke("report", tmp_path, "--json").stdout)
    assert data["aggregates"]["fast_p"]["1"] == pytest.approx(0.25)


def test_run_table_and_progress_show_the_reading(capsys):
    from pkb_core.cli.progress import JobProgress
    from pkb_core.cli.run import summary_table

    rows = _rows()
    table = summary_table(rows)
    assert "no measurable difference" in table and "95% interval" in table and "host timings" in table
    progress = JobProgress(1)
    progress(rows[1])
    assert "no measurable difference" in capsys.readouterr().err


def test_noise_floor_condenses_records():
    from pkb_core.machine.noise import condense, describe

    records = [_record("a", _steady(1.0), _steady(1.0)), _record("b", _steady(2.0), _steady(2.02), problem="7_rs")]
    noise = condense(records, ("latency", "graph"))
    latency = noise["modes"]["latency"]
    assert [e["difference"] for e in latency["entries"]] == [SAME, SLOWER]
    assert latency["ratio_min"] == pytest.approx(1 / 1.01) and latency["ratio_max"] == pytest.approx(1.0)
    assert latency["resolution"] > 0.0
    assert noise["modes"]["graph"]["entries"] == [] and len(noise["modes"]["graph"]["missing"]) == 2
    lines = describe(noise)
    assert lines[0].startswith("latency: reference/reference") and lines[1].startswith("graph: not measured")


# -- the device barrier's CPU path (shared-memory heap, Triton's interpreter) ------------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _barrier_worker(rank, world_size, port, run_id, results):
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from pkb_core.judge import device_barrier
    from pkb_core.judge.barrier import StoreBarrier
    from pkb_core.judge.timing import DeviceBarrierTimeout
    from pkb_core.symmetric.shm import SharedMemoryHeap

    store = dist.TCPStore("127.0.0.1", port, world_size, is_master=rank == 0, timeout=timedelta(seconds=120))
    pacing = StoreBarrier(store, world_size, prefix="test-heap")
    cpu = torch.device("cpu")
    out = {}

    # The ranks agree: one rank that cannot make the barrier means none uses it (and nobody hangs).
    def broken():
        if rank == 1:
            raise OSError("no heap here")
        return SharedMemoryHeap(rank, world_size, pacing, run_id + "-broken")

    made, note = device_barrier.create(broken, cpu, store=store, rank=rank, world_size=world_size,
                                       local_world_size=world_size, key="t-broken")
    out["broken"] = (made is None, note)
    made, note = device_barrier.create(broken, cpu, store=store, rank=rank, world_size=world_size,
                                       local_world_size=1, key="t-nodes")
    out["nodes"] = (made is None, note)

    heap = SharedMemoryHeap(rank, world_size, pacing, run_id)
    barriers = {}
    # "host": CPU mode's engine; "mixed": rank 0 runs the Triton kernel (interpreted), rank 1 the host
    # engine, on one allocation: one protocol.
    for name, engines in (("host", ("host", "host")), ("mixed", ("kernel", "host"))):
        barrier, note = device_barrier.create(lambda: heap, cpu, store=store, rank=rank, world_size=world_size,
                                              local_world_size=world_size, key=f"t-{name}", timeout_s=2.0,
                                              engine=engines[rank])
        for _ in range(3):
            barrier()
        barrier.check()
        pacing()
        pads = [barrier._handle.get_signal_pad(p)[:world_size].tolist() for p in range(world_size)]
        pacing()
        # It waits for a late rank (no host barrier in between).
        if rank == 1:
            time.sleep(0.5)
        started = time.perf_counter()
        barrier()
        waited = time.perf_counter() - started
        barrier.check()
        out[name] = {"note": note, "engine": barrier.engine, "count": barrier.count, "pads": pads, "waited": waited}
        barriers[name] = barrier
        pacing()

    # A rank that never comes: rank 0 gives up after its timeout instead of hanging.
    for name in ("host", "mixed"):
        pacing()
        if rank == 0:
            started = time.perf_counter()
            barriers[name]()
            out[name]["gave_up_after"] = time.perf_counter() - started
            try:
                barriers[name].check()
            except DeviceBarrierTimeout as exc:
                out[name]["timeout"] = str(exc)
    results[rank] = out
    pacing()


def test_device_barrier_on_the_shared_memory_heap():
    from pkb_core.symmetric.shm import SHM_DIR

    world_size = 2
    run_id = f"tdb{os.getpid()}"
    results = mp.Manager().dict()
    mp.start_processes(_barrier_worker, args=(world_size, _free_port(), run_id, results), nprocs=world_size,
                       start_method="spawn")
    for rank in range(world_size):
        out = results[rank]
        assert out["broken"] == (True, "host barrier only: rank 1 could not make the device barrier "
                                       "(OSError: no heap here)")
        assert out["nodes"][0] and "several nodes" in out["nodes"][1]
        for name in ("host", "mixed"):
            assert out[name]["note"] == "device barrier"
            # creation's pass + 3, then the late one: every rank's slot in every pad holds the epoch
            assert out[name]["pads"] == [[4, 4], [4, 4]] and out[name]["count"] == 5
    assert results[0]["mixed"]["engine"] == "kernel" and results[1]["mixed"]["engine"] == "host"
    for name in ("host", "mixed"):
        assert results[0][name]["waited"] > 0.4 > results[1][name]["waited"]  # rank 0 waited for rank 1
        assert "did not reach the device barrier within 2 s" in results[0][name]["timeout"]
    assert 1.9 < results[0]["host"]["gave_up_after"] < 10  # the host engine's clock is a real one
    assert results[0]["mixed"]["gave_up_after"] < 60  # the interpreter counts spins: roughly
    assert not [n for n in os.listdir(SHM_DIR) if n.startswith(f"pkb-{run_id}")]


# -- the reference against itself on CPU -------------------------------------------------------------
def test_reference_against_itself_is_no_measurable_difference(pkb_invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "run"
    result = pkb_invoke("run", "--problem", "1", "--trials", "1", "--measure-perf", "--warmup", "1", "--iters", "12",
                        "--min-iters", "6", "--timing-mode", "latency,back-to-back", "--out", run, "--json")
    record = json.loads(result.stdout)["results"][0]
    assert record["verdict"] == "pass" and record["solution"] == "reference"
    assert record["difference"] == SAME and record["clock"] == "host"
    low, high = record["speedup_ci"]
    assert low <= 1.0 <= high
    for mode in ("latency", "back-to-back"):
        stats = record["stats"]["modes"][mode]
        assert stats["speedup"]["difference"] == SAME
        assert stats["alignment"] == {"reference": "device barrier", "candidate": "device barrier"}
        assert stats["stopped"] in ("precise", "cap", "time") and 6 <= stats["reference"]["rounds"] <= 20
    assert record["options"]["min_iters"] == 6
    report = pkb_invoke("report", run).stdout
    assert "no measurable difference" in report and "n/a (host timings only" in report
    assert re.search(r"fast_1 \(correct and speedup > 1\) +0\.0%", pkb_invoke("report", run, "--include-cpu").stdout)


def test_min_iters_above_iters_is_an_error(pkb_invoke, tmp_path):
    result = pkb_invoke("run", "--problem", "1", "--measure-perf", "--iters", "5", "--min-iters", "9",
                        "--out", tmp_path)
    assert result.exit_code == 1 and "--min-iters 9 is more than --iters 5" in result.output


def test_calibrate_measures_and_caches_the_noise_floor(pkb_invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    out = pkb_invoke("calibrate", "--device", "cpu", "--noise-problems", "1", "--noise-iters", "6").stdout
    assert "Noise floor: the reference against itself" in out and "1_allreduce" in out
    assert "latency: reference/reference" in out and "host timings" in out
    from pkb_core.machine.calibrate import load_calibration

    floor = load_calibration("cpu")["noise_floor"]
    assert set(floor["modes"]) == {"latency", "back-to-back"}
    assert [e["problem"] for e in floor["modes"]["latency"]["entries"]] == ["1_allreduce"]
    again = pkb_invoke("calibrate", "--device", "cpu", "--json").stdout  # cached: not measured again
    assert json.loads(again)["noise_floor"]["datetime"] == floor["datetime"]
