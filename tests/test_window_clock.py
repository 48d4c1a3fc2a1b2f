"""Window mode (docs/timing.md): the judge's timekeeper releases each call's inputs only when
the previous call's outputs were taken, snapshots what the call produced, and holds the only
clock; a side that never signals is a timeout, never a hang.

The first tests drive a real timekeeper process through the judge's handle
(:class:`pkb_core.judge.clock.Timekeeper`) with this process as the side, on the CPU engine;
the last runs window mode end to end with honest and hostile solutions."""
import json
import shutil
import statistics
import time

import pytest
import torch

from pkb_core.harness.parcel import pack_into, packed_size, unpack_from
from pkb_core.harness.windows import WindowSide
from pkb_core.judge.clock import Timekeeper, stride

CPU = torch.device("cpu")


def _arm(clock, sets, side="candidate", out_bytes=4096):
    """Stage ``sets`` as the judge does; the skeletons and the region the side attaches."""
    set_bytes = max(packed_size(s) for s in sets)
    clock.memory(len(sets), set_bytes, out_bytes)
    step = stride(set_bytes)
    skeletons = [pack_into(s, clock.staging[w * step:(w + 1) * step]) for w, s in enumerate(sets)]
    region = clock.region(side, set_bytes, out_bytes, None)
    return skeletons, region, {"side": region["key"], "sizes": [packed_size(s) for s in sets],
                               "set_stride": step, "snap_stride": stride(out_bytes)}


#: A window-mode job of problem 1 as these tests run it (two trials, two warm-up batches).
WINDOW_JOB = ("--problem", "1", "--trials", "2", "--measure-perf", "--timing-mode", "window", "--warmup", "2")


def window_records(pkb_invoke, folder, out, *more) -> dict:
    """``pkb run`` of :data:`WINDOW_JOB` over the files of ``folder`` (``more``: its batches and
    timeout), its records by file name."""
    result = pkb_invoke("run", "--solutions", folder, *WINDOW_JOB, *more, "--out", out, "--json")
    return {r["solution"].rsplit("/", 1)[-1]: r for r in json.loads(result.stdout)["results"]}


def _snapshot(clock, skeleton, w, out_bytes=4096):
    at = w * stride(out_bytes)
    return unpack_from(skeleton, clock.snap[at:at + out_bytes])


def test_each_call_sees_only_its_own_set_and_its_output_is_what_the_judge_reads(clock):
    sets = [(torch.arange(16, dtype=torch.float32) + 100 * w,) for w in range(5)]
    skeletons, region, layout = _arm(clock, sets)
    side = WindowSide(CPU)
    side.attach(region)
    seen = []

    def call(args):
        # Everything this side can read of the round's inputs: its own slot, which holds set w alone.
        seen.append(side.region.in_slot.clone())
        return args[0] * 2, args

    clock.send("open", epoch=7, timeout_s=20, **layout)
    written = side.run(epoch=7, skeletons=skeletons, call=call, timeout_s=20)
    answer = clock.receive()
    assert answer["status"] == "ok" and len(answer["times_ns"]) == 5 and min(answer["times_ns"]) > 0
    for w, (skeleton, slot) in enumerate(zip(skeletons, seen)):
        here = unpack_from(skeleton, slot)[0]
        assert torch.equal(here, sets[w][0])  # set w, and nothing of set w + 1 yet
        got = _snapshot(clock, written[w], w)
        assert torch.equal(got["out"], sets[w][0] * 2) and torch.equal(got["args"][0], sets[w][0])


def test_a_snapshot_never_runs_past_its_windows_stride_in_a_region_made_for_larger_outputs(clock):
    """A pool made for an earlier batch's larger outputs is kept for a batch whose outputs are
    smaller (the judge's own sides keep theirs from job to job): a side that says it filled its
    whole slot has each window's snapshot cut at the batch's stride, never written into the next
    window's (or, on the device engine, past the last: the triton all-to-all after the scatter at
    256 MiB failed so on 2xH200), and every window's outputs read back right."""
    large = [(torch.arange(16, dtype=torch.float32),)]
    _arm(clock, large, out_bytes=65536)
    sets = [(torch.arange(16, dtype=torch.float32) + 100 * w,) for w in range(5)]
    skeletons, region, layout = _arm(clock, sets)
    assert region["out_bytes"] == 65536 and layout["snap_stride"] == stride(4096)  # the larger pool, kept
    side = WindowSide(CPU)
    side.attach(region)
    clock.send("open", epoch=11, timeout_s=20, **layout)
    written = side.run(epoch=11, skeletons=skeletons, call=lambda args: (args[0] * 2, args), timeout_s=20,
                       fill=65536)
    answer = clock.receive()
    assert answer["status"] == "ok" and answer["copied"] == [stride(4096)] * 5, answer["copied"]
    for w in range(5):
        got = _snapshot(clock, written[w], w)
        assert torch.equal(got["out"], sets[w][0] * 2) and torch.equal(got["args"][0], sets[w][0])
    side.close()


def test_outputs_larger_than_the_out_slot_say_so_and_end_the_batch(clock):
    """A call whose outputs do not fit ``out_slot`` (sized from the reference's largest trial:
    problems 65 and 66's rows are a sum of random counts) ends its side's batch with a reason that
    names window mode's out slot, and the side's region is abandoned so the timekeeper answers for
    the batch at once instead of waiting out its timeout."""
    from pkb_core.harness.parcel import ParcelError

    sets = [(torch.arange(16, dtype=torch.float32) + 100 * w,) for w in range(3)]
    skeletons, region, layout = _arm(clock, sets)  # 4096 bytes a call
    side = WindowSide(CPU)
    side.attach(region)
    clock.send("open", epoch=5, timeout_s=20, **layout)
    began = time.monotonic()
    with pytest.raises(ParcelError, match=r"call 0's outputs and arguments after it do not fit window mode's out slot"):
        side.run(epoch=5, skeletons=skeletons, call=lambda args: (torch.zeros(2048), args), timeout_s=20)
    assert "status" in clock.receive() and time.monotonic() - began < 10
    side.close()


def test_the_judges_kernel_side_exports_what_the_references_calls_export(clock):
    """What is subtracted from every side's window (the ``kernel`` side's) holds the export any
    honest call makes: its outputs' and arguments' bytes, as many as the reference's calls fill,
    written into ``out_slot`` by one copy before ``done``; below one alignment of them, one
    kernel and nothing exported."""
    from types import SimpleNamespace

    from pkb_core.harness.parcel import skeleton_end
    from pkb_core.judge.rank import JudgeRank

    judge = SimpleNamespace(device=CPU)
    assert JudgeRank._side_call(judge, "null", 4096) is None
    tiny = JudgeRank._side_call(judge, "kernel", 40)
    assert tiny([]) == (None, None)
    sets = [(torch.arange(16, dtype=torch.float32) + 100 * w,) for w in range(3)]
    skeletons, region, layout = _arm(clock, sets)
    side = WindowSide(CPU)
    side.attach(region)
    # The slot holds something else first, so the export is what the snapshot then reads.
    side.region.out_slot.fill_(7)
    clock.send("open", epoch=21, timeout_s=20, **layout)
    written = side.run(epoch=21, skeletons=skeletons, call=JudgeRank._side_call(judge, "kernel", 1000),
                       timeout_s=20, fill=1000)
    assert clock.receive()["status"] == "ok"
    for w in range(3):
        assert 1000 - 64 < skeleton_end(written[w]) <= 1000, written[w]
        got = _snapshot(clock, written[w], w)
        assert got["args"] is None and got["out"].dtype == torch.uint8 and not got["out"].any(), got
    side.close()


def test_a_large_batch_copies_out_only_the_windows_chosen_before_it(clock):
    """The launcher draws which windows of a large batch are copied out and checked before the
    batch and tells the timekeeper alone: those are in the snapshots, the others copy nothing."""
    sets = [(torch.arange(16, dtype=torch.float32) + 100 * w,) for w in range(5)]
    skeletons, region, layout = _arm(clock, sets)
    side = WindowSide(CPU)
    side.attach(region)
    clock.send("open", epoch=3, timeout_s=20, snapshots=[1, 3], **layout)
    written = side.run(epoch=3, skeletons=skeletons, call=lambda args: (args[0] + 1, args), timeout_s=20)
    answer = clock.receive()
    assert answer["status"] == "ok" and len(answer["times_ns"]) == 5
    assert [n > 0 for n in answer["copied"]] == [False, True, False, True, False]
    for w in (1, 3):
        assert torch.equal(_snapshot(clock, written[w], w)["out"], sets[w][0] + 1)


def test_work_finished_after_the_call_is_not_in_the_snapshot(clock):
    sets = [(torch.ones(8),) for _ in range(3)]
    skeletons, region, layout = _arm(clock, sets)
    side = WindowSide(CPU)
    side.attach(region)
    outputs = []

    def call(args):
        out = torch.zeros_like(args[0])
        outputs.append(out)
        return out, args

    clock.send("open", epoch=1, timeout_s=20, **layout)
    written = side.run(epoch=1, skeletons=skeletons, call=call, timeout_s=20)
    assert clock.receive()["status"] == "ok"
    for out in outputs:
        out.fill_(5.0)  # "finished later": after the timekeeper took the window's snapshot
    assert all(torch.equal(_snapshot(clock, s, w)["out"], torch.zeros(8)) for w, s in enumerate(written))


def test_a_snapshot_is_copied_in_pieces_in_an_order_drawn_for_each_window():
    """Work left running past ``done`` that writes its outputs front to back, ahead of a copy that
    reads them front to back, would be in the snapshot: the pieces cover the outputs once, and the
    first one read is any of them."""
    from pkb_core.judge.timekeeper import SNAPSHOT_PIECE_BYTES, SNAPSHOT_PIECES, snapshot_pieces

    assert snapshot_pieces(0) == []
    for nbytes in (1, 4096, SNAPSHOT_PIECE_BYTES, SNAPSHOT_PIECE_BYTES + 1, 5 << 20, (16 << 20) + 3):
        pieces = snapshot_pieces(nbytes)
        assert len(pieces) <= SNAPSHOT_PIECES
        covered = 0
        for at, n in sorted(pieces):
            assert at == covered and n > 0
            covered += n
        assert covered == nbytes
    firsts = {snapshot_pieces(16 << 20)[0][0] for _ in range(40)}
    assert len(firsts) > 10, firsts  # 40 draws of 64 pieces: the first read is not a fixed piece
    assert len(snapshot_pieces(16 << 20, 16)) == 16


def test_a_snapshot_in_pieces_is_the_outputs_to_the_byte(clock):
    """Outputs of a MiB (sixteen pieces) come back exact through a real timekeeper's windows."""
    out_bytes = 1 << 20
    sets = [(torch.arange(16, dtype=torch.float32) + w,) for w in range(3)]
    skeletons, region, layout = _arm(clock, sets, out_bytes=out_bytes + 4096)
    side = WindowSide(CPU)
    side.attach(region)
    answers = [torch.randint(-2**31, 2**31 - 1, (out_bytes // 4 - 64,), dtype=torch.int32) for _ in sets]
    calls = iter(answers)
    clock.send("open", epoch=5, timeout_s=20, **layout)
    written = side.run(epoch=5, skeletons=skeletons, call=lambda args: (next(calls).clone(), args), timeout_s=20)
    assert clock.receive()["status"] == "ok"
    for w, skeleton in enumerate(written):
        got = _snapshot(clock, skeleton, w, out_bytes=out_bytes + 4096)
        assert torch.equal(got["out"], answers[w]) and torch.equal(got["args"][0], sets[w][0])


def test_a_side_that_never_signals_is_a_timeout_not_a_hang(clock):
    sets = [(torch.ones(4),) for _ in range(2)]
    skeletons, region, layout = _arm(clock, sets)
    side = WindowSide(CPU)
    side.attach(region)
    side.region.write_queued(4)  # it says its first call is queued, then never finishes it
    clock.send("open", epoch=3, timeout_s=1.5, **layout)
    answer = clock.receive()
    assert answer["times_ns"] == [] and "never finished" in answer["status"]


def test_done_signalled_ahead_gets_snapshots_of_nothing(clock):
    sets = [(torch.full((4,), 3.0),) for _ in range(3)]
    skeletons, region, layout = _arm(clock, sets)
    side = WindowSide(CPU)
    side.attach(region)
    side.region.write_queued(1 + len(sets))
    side.region.write_done(1 + len(sets))  # every window "done" before any call ran
    clock.send("open", epoch=1, timeout_s=20, **layout)
    assert clock.receive()["status"] == "ok"
    # What the judge would read for each call is an empty slot, never an answer.
    layout_of_answer = pack_into({"out": torch.full((4,), 6.0), "args": sets[0]}, torch.empty(4096, dtype=torch.uint8))
    assert all(torch.count_nonzero(_snapshot(clock, layout_of_answer, w)["out"]) == 0 for w in range(3))


def test_window_mode_judges_honest_and_hostile_solutions(pkb_invoke, tmp_path):
    """End to end: the timed calls are checked on what the timekeeper took, and the honest
    solution's speedup is read from the timekeeper's windows."""
    import shutil
    from pathlib import Path

    folder = tmp_path / "solutions"
    folder.mkdir()
    for fixtures in ("windows", "windows_hostile"):
        for path in (Path(__file__).parent / "fixtures" / fixtures).glob("*.py"):
            shutil.copy(path, folder / path.name)
    records = window_records(pkb_invoke, folder, tmp_path / "run", "--iters", "12", "--min-iters", "12",
                             "--timeout", "120")
    honest = records["1_allreduce_honest.py"]
    assert honest["verdict"] == "pass", honest
    window = honest["stats"]["modes"]["window"]
    assert window["alignment"] == {"reference": "timekeeper windows", "candidate": "timekeeper windows"}
    assert set(window["windows_us"]) == {"null", "kernel", "harness", "reference", "candidate"}
    assert window["harness_copies"] == "engine"  # the default: PKB_HARNESS_COPIES unset
    assert window["masked_sets"] == "false"  # masks are the GPU host engine's, for sets of 1 MiB and up
    assert window["speedup"]["rounds"] >= 6 and window["speedup"]["low"] is not None
    # The harness batch exports as many bytes as the reference's calls (a stand-in for their
    # outputs in front of the placed set), so its windows hold all an honest call's hold but the call.
    diagnostics = window["window_diagnostics"]
    assert diagnostics["harness"]["exported_bytes"] == diagnostics["reference"]["exported_bytes"] > 0, diagnostics
    assert "exported_bytes" not in diagnostics["candidate"]  # a candidate's layouts are the judge's to read
    # What checking a window cost, the candidate's alone (the one side whose windows are checked):
    # the conductor's wall per window holds the judge's parts.
    checks = {side: d["check_ms_per_window"] for side, d in diagnostics.items() if "check_ms_per_window" in d}
    assert set(checks) == {"candidate"}, checks
    parts = checks["candidate"]
    assert set(parts) == {"wall", "reference", "unpack", "to_device", "compare"}, parts
    assert all(v >= 0 for v in parts.values()) and parts["wall"] >= parts["reference"] + parts["compare"] > 0, parts
    # What the batch before each compared side's did to it (GPU jobs are judged on the reference's).
    assert set(window["follow_us"]) == {"reference", "candidate"}, window["follow_us"]
    assert all(v is None or isinstance(v, float) for v in window["follow_us"].values()), window["follow_us"]
    rounds = window["rounds_us"]  # each round's median windows of the pair, and which went first
    assert len(rounds["reference"]) == len(rounds["candidate"]) == len(rounds["first"]) == window["batches"], rounds
    assert set(rounds["first"]) <= {"reference", "candidate"} and statistics.median(rounds["reference"]) > 0, rounds
    # No garbage collection of either side (or of the null side) lands inside a window.
    assert all(d["gc_collections_in_windows"] == 0 for d in window["window_diagnostics"].values())
    # What of each window is the host engine's own copies: the release of the set, the snapshot.
    assert all(0 < d["release_us"] < d["window_p90_us"] and 0 < d["snapshot_us"] < d["window_p90_us"]
               for d in window["window_diagnostics"].values()), window["window_diagnostics"]
    # Where each side's gate region lies, per rank: on one of this machine's nodes, and (the
    # timekeeper settled on one node) every side's on the same one.
    from pkb_core.machine.numa import online_nodes

    assert window["numa_nodes"] == len(online_nodes())
    placed = {side: d["region_nodes"] for side, d in window["window_diagnostics"].items()}
    assert all(len(nodes) == 1 and len(nodes[0]) == 2 for nodes in placed.values()), placed
    assert len({tuple(nodes[0]) for nodes in placed.values()}) == 1 and placed["null"][0][0] in online_nodes(), placed
    wrong = records["1_allreduce_wrong_when_timed.py"]
    assert wrong["verdict"] == "fail" and "timed call" in wrong["reason"], wrong
    gates = records["1_allreduce_opens_its_own_gates.py"]
    assert gates["verdict"] == "fail" and "timed call" in gates["reason"], gates
    # Hostile sides (tests/fixtures/windows_hostile): the window closed before the work, answers
    # prepared from an earlier call, an input used as scratch and restored after its window.
    for name in ("1_allreduce_done_before_work.py", "1_allreduce_prepared_ahead.py"):
        assert records[name]["verdict"] == "fail" and "on fresh inputs" in records[name]["reason"], records[name]
    # A side that says it filled nothing of its slot (so nothing is copied out of its windows).
    unfilled = records["1_allreduce_claims_nothing_filled.py"]
    assert unfilled["verdict"] == "fail" and "said it filled" in unfilled["reason"], unfilled
    overwritten = records["1_allreduce_input_overwritten.py"]
    assert overwritten["verdict"] == "fail" and "modified its input" in overwritten["reason"], overwritten
    # The same, its arguments sent back as empty tuples so that no tensor of them was compared.
    hidden = records["1_allreduce_hides_its_modified_input.py"]
    assert hidden["verdict"] == "fail" and "modified its input (argument 0)" in hidden["reason"], hidden
    # A loop rebound in the candidate's own process still answers through the judge's gates and is
    # timed by the judge's clock, the kernel null subtracted (what it saves of pkb's harness
    # copies is the gap docs/trust.md names).
    rebound = records["1_allreduce_rebound_loop.py"]
    assert rebound["verdict"] == "pass", rebound
    assert rebound["stats"]["modes"]["window"]["windows_us"]["kernel"] > 0
    # Every timed set uses the full mantissa: a file wrong on integer-valued sets past its trials
    # is never given one to be wrong on (every other set was, and a timed call could tell which).
    integers = records["1_allreduce_wrong_on_integer_timed_sets.py"]
    assert integers["verdict"] == "pass", integers
    # Layouts the judge cannot make tensors of are the candidate's failure, not the judge's error.
    forged = records["1_allreduce_forges_its_layouts.py"]
    assert forged["verdict"] == "fail" and "its outputs could not be read back" in forged["reason"], forged
    unlaid = records["1_allreduce_answers_no_layouts.py"]
    assert unlaid["verdict"] == "fail" and "no layout was given" in unlaid["reason"], unlaid


def test_problems_whose_sets_hold_layers_or_vary_by_trial_time_in_every_mode(pkb_invoke, tmp_path, monkeypatch):
    """The reference against itself passes in latency and window mode, with the copies a GPU makes,
    where a set holds ``torch.nn.Linear`` layers (problem 31: on 2xH200 window mode's layers had
    copied their weights before the set arrived, and the judge's pool kept its first round's layers
    in latency mode) and where ``inputs`` computes with ``ctx.trial`` (problem 85 empties a shard
    every fourth set: a timed set's trial was a label, and ``"timing/0/3" % 4`` raised)."""
    monkeypatch.setenv("PKB_HARNESS_COPIES", "kernels")
    result = pkb_invoke("run", "--backend", "reference", "--problem", "31,85", "--measure-perf", "--timing-mode",
                        "latency,window", "--trials", "2", "--iters", "12", "--min-iters", "12", "--warmup", "2",
                        "--out", tmp_path / "run", "--json")
    records = json.loads(result.stdout)["results"]
    assert [r["verdict"] for r in records] == ["pass", "pass"], records
    assert all(set(r["stats"]["modes"]) == {"latency", "window"} for r in records)


def test_an_export_left_running_past_done_is_read_wrong_from_a_snapshot_in_drawn_pieces(pkb_invoke, tmp_path):
    """At the default size (4 MiB a set: a batch's snapshots are drawn, and only the windows not
    drawn are timed), a side that exports its answers only after saying ``done`` has every timed
    window close before its export, and its drawn windows' snapshots hold parts of an earlier
    answer: a ``fail``, where an honest file in the same run passes (tests/fixtures/windows_race;
    the order of the snapshot's pieces, which a GPU kernel's export would race, is
    test_a_snapshot_is_copied_in_pieces_in_an_order_drawn_for_each_window's)."""
    import shutil
    from pathlib import Path

    folder = tmp_path / "solutions"
    folder.mkdir()
    fixtures = Path(__file__).parent / "fixtures"
    shutil.copy(fixtures / "windows_race" / "1_allreduce_exports_after_done.py", folder)
    shutil.copy(fixtures / "windows_hostile" / "1_allreduce_honest.py", folder / "1_allreduce_z_honest.py")
    result = pkb_invoke("run", "--solutions", folder, "--problem", "1", "--size", "default", "--trials", "1",
                        "--measure-perf", "--timing-mode", "window", "--warmup", "2", "--iters", "30",
                        "--timeout", "120", "--out", tmp_path / "run", "--json")
    records = {r["solution"].rsplit("/", 1)[-1]: r for r in json.loads(result.stdout)["results"]}
    late = records["1_allreduce_exports_after_done.py"]
    assert late["verdict"] == "fail" and "timed call" in late["reason"], late
    assert records["1_allreduce_z_honest.py"]["verdict"] == "pass", records["1_allreduce_z_honest.py"]


def test_a_side_that_truncates_its_region_ends_its_own_job_not_the_next(pkb_invoke, tmp_path):
    """A side owns its gate region's file and can truncate it: the timekeeper's next copy into it
    dies of SIGBUS. That job ends as the side's own (``crash`` where its rank died of its own
    truncation too, else ``flagged``: it was the judge's ``error``, a verdict a reward may retry or
    ignore), and the next job of the same run (an honest file) passes."""
    import shutil
    from pathlib import Path

    folder = tmp_path / "solutions"
    folder.mkdir()
    fixtures = Path(__file__).parent / "fixtures"
    shutil.copy(fixtures / "windows_truncate" / "1_allreduce_a_truncates_its_region.py", folder)
    shutil.copy(fixtures / "windows_hostile" / "1_allreduce_honest.py", folder / "1_allreduce_b_honest.py")
    records = window_records(pkb_invoke, folder, tmp_path / "run", "--iters", "60", "--timeout", "120")
    truncated = records["1_allreduce_a_truncates_its_region.py"]
    assert truncated["verdict"] in ("crash", "flagged") and "SIGBUS" in truncated["reason"], truncated
    assert records["1_allreduce_b_honest.py"]["verdict"] == "pass", records["1_allreduce_b_honest.py"]


def test_a_solution_that_fills_the_shared_memory_leaves_the_judge_and_other_jobs_their_room(tmp_path):
    """A candidate could fill the shared-memory filesystem it shared with the judge (a file in its
    own folder, or in ``/dev/shm``), so that the timekeeper's next gate region had no room: the
    timekeeper died of SIGBUS and the job read as the judge's ``error``; then every region was
    allocated before it was touched and the job ``flagged``. Now a group's ``/dev/shm`` is its own
    folder, a tmpfs of its own: 256 MiB of ballast in a 128 MiB ``/dev/shm`` lands in the group's
    folder, the machine's is untouched, and both jobs pass. Run in a mount namespace of its own
    with a 128 MiB ``/dev/shm`` (a container's is often 64 MiB); the machine's own is never filled."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a /dev/shm of its own")
    folder = tmp_path / "solutions"
    folder.mkdir()
    fixtures = Path(__file__).parent / "fixtures"
    shutil.copy(fixtures / "windows_shm_full" / "1_allreduce_a_fills_the_shared_memory.py", folder)
    shutil.copy(fixtures / "windows_hostile" / "1_allreduce_honest.py", folder / "1_allreduce_b_honest.py")
    out = tmp_path / "records.json"
    run = (f"mount -t tmpfs -o size=128m tmpfs /dev/shm || exit 99; cd {Path(__file__).parent.parent}; exec "
           f"{sys.executable} -m pkb_core run --backend reference --solutions {folder} --problem 1 --trials 2 "
           f"--measure-perf --timing-mode window --warmup 2 --iters 60 --timeout 120 --out {tmp_path / 'run'} "
           f"--json > {out}")
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", run], capture_output=True,
                          text=True, timeout=300)
    if done.returncode == 99 or "unshare failed" in done.stderr:
        pytest.skip(f"no mount namespace with a tmpfs of its own here: {done.stderr.strip()[-200:]}")
    records = {r["solution"].rsplit("/", 1)[-1]: r for r in json.loads(out.read_text())["results"]}
    filled = records["1_allreduce_a_fills_the_shared_memory.py"]
    assert filled["verdict"] == "pass", filled["reason"]  # its ballast filled its own folder alone
    assert records["1_allreduce_b_honest.py"]["verdict"] == "pass", records["1_allreduce_b_honest.py"]["reason"]


def test_no_room_is_the_candidates_only_where_its_group_holds_it(tmp_path):
    """Whose doing a filesystem with no room for a batch's memory is: the judge says what is full
    and what did not fit; the launcher finds the candidate's doing (``flagged``) only where its
    group holds, beyond pkb's own reference group, what did not fit and a quarter of the
    filesystem; else the judge's ``error``, one line that says which filesystem is full. A
    neighbour that filled it leaves an honest candidate a few pages beyond the reference group:
    not flagged (a hostile review: the first rule flagged any candidate 4 KiB beyond it)."""
    import errno
    import os

    from pkb_core.conduct.window_rounds import arm_failed
    from pkb_core.contracts.commands_judge import Armed
    from pkb_core.contracts.verdict import Verdict
    from pkb_core.judge.clock import NoRoom, TimekeeperFailed
    from pkb_core.judge.rank import JudgeRank
    from pkb_core.process.shm_held import held_bytes

    full = NoRoom(TimekeeperFailed("the timekeeper failed: OSError", errno=errno.ENOSPC),
                  "the null's gate region", str(tmp_path), 4096)
    full.free, full.whole = 0, 128 << 20
    said = JudgeRank._no_room(full)
    assert said.room_needed == 4096 and said.room_whole == 128 << 20 and not said.side_fault
    assert "is full (0 KiB free of 128.0 MiB): the judge could not make the null's gate region (4 KiB)" in said.failed
    fine = Armed(skeletons=[], region={})

    def holding(candidate, reference):
        return lambda: (candidate, reference)

    def never():
        raise AssertionError("the groups are read only where a filesystem was full")

    assert arm_failed("null", [fine, fine], never) is None
    filled = arm_failed("null", [fine, said], holding(127 << 20, 1 << 20))
    assert filled.verdict == Verdict.FLAGGED and filled.reason.startswith("the null's batch: ") and \
        "126.0 MiB more than pkb's own reference group's" in filled.reason, filled.reason
    neighbour = arm_failed("null", [said], holding((1 << 20) + 8192, 1 << 20))
    assert neighbour.verdict == Verdict.ERROR and "not the candidate's doing" in neighbour.reason, neighbour.reason
    shrunk = Armed(skeletons=[], region={}, side_fault=True, failed="the judge's timekeeper was killed (SIGBUS)")
    assert arm_failed("null", [said, shrunk], never).verdict == Verdict.FLAGGED
    other = Armed(skeletons=[], region={}, failed="the timekeeper failed: something else")
    assert arm_failed("null", [other], never).verdict == Verdict.ERROR
    # Where no cgroup can say: the folder's blocks (a sparse file holds nothing), each file once.
    mine = tmp_path / "candidate"
    (mine / "deep" / "er").mkdir(parents=True)
    with open(mine / "sparse", "wb") as sparse:
        sparse.truncate(1 << 30)
    assert held_bytes(str(mine), str(tmp_path)) < 64 << 10
    ballast = mine / "deep" / "er" / "ballast"
    ballast.write_bytes(b"\1" * (2 << 20))
    os.link(ballast, mine / "same-ballast")  # one file, however many names
    assert (2 << 20) <= held_bytes(str(mine), str(tmp_path)) < (2 << 20) + (64 << 10)


def test_what_is_subtracted_and_what_is_flagged():
    """The judge's own windows: the kernel window is subtracted from a side that reaches it, the
    empty hand-off from one below it, nothing from one below both (never a floor); a candidate
    measurably below the empty hand-off is flagged where the reference reaches it, not where the
    judge's null was no floor for pkb's own reference either."""
    from pkb_core.conduct.window_rounds import _judge_against_null, null_is_floor, per_call_us
    from pkb_core.contracts.outcome import JobEnded
    from pkb_core.contracts.verdict import Verdict

    assert per_call_us(310.0, null=30.0, kernel=290.0) == 20.0
    assert per_call_us(100.0, null=30.0, kernel=290.0) == 70.0  # no compute engine: the hand-off alone
    assert per_call_us(20.0, null=30.0, kernel=290.0) == 20.0  # below the null: nothing subtracted
    null = [30.0, 31.0, 29.5, 30.5, 30.2, 29.8]
    honest = {"null": null, "reference": [310.0] * 6, "candidate": [305.0] * 6}
    _judge_against_null(honest)
    assert null_is_floor(honest)
    cheat = {**honest, "candidate": [12.0] * 6}
    with pytest.raises(JobEnded) as ended:
        _judge_against_null(cheat)
    assert ended.value.verdict == Verdict.FLAGGED and "12.0 us" in ended.value.reason
    # The judge's null paid a switch the sides did not (seen on 2xH200): not a floor, no flag.
    unreliable = {"null": [400.0] * 6, "reference": [350.0] * 6, "candidate": [340.0] * 6}
    _judge_against_null(unreliable)
    assert not null_is_floor(unreliable)


def test_a_candidate_under_pkbs_own_harness_is_flagged_where_the_reference_reaches_it():
    """The ``harness`` side is pkb's harness with no call in the reference group's processes (one
    H200 at 4 KiB: 22.7 us, the reference 26.7). A rebound loop that skips the placing, barrier and
    export lands below it (19.1 us, docs/benchmarks/2026-11-29-h200-skipped-harness.md): flagged,
    and so is one that skips less than the quarter the judge's own harness side once allowed; a
    candidate within what two groups of the same code differ by (GROUP_US) is not; nor is any
    candidate where the reference itself stays under the harness."""
    from pkb_core.conduct.window_rounds import GROUP_US, _judge_against_harness, harness_slack
    from pkb_core.contracts.outcome import JobEnded
    from pkb_core.contracts.verdict import Verdict

    harness = [22.7, 22.9, 22.6, 22.8, 22.7, 22.5]
    honest = {"harness": harness, "kernel": [16.3] * 6, "reference": [26.7] * 6, "candidate": [24.0] * 6}
    assert harness_slack(harness) == GROUP_US
    _judge_against_harness(honest)
    # A call of next to nothing whose group sits a little under the reference's: within the slack.
    _judge_against_harness({**honest, "candidate": [h - 0.6 for h in harness]})
    for cheat in ([19.1] * 6, [h - GROUP_US - 1.0 for h in harness]):  # all of the harness skipped; 3 us of its 6
        with pytest.raises(JobEnded) as ended:
            _judge_against_harness({**honest, "candidate": cheat})
        assert ended.value.verdict == Verdict.FLAGGED and "pkb's own harness" in ended.value.reason
        assert "the reference group's" in ended.value.reason
    # The reference under the harness too: the harness batch was no floor in this job, nothing flagged.
    _judge_against_harness({"harness": [186.0] * 6, "kernel": [95.0] * 6, "reference": [150.0] * 6,
                            "candidate": [120.0] * 6})
    # A loaded CPU (a hostile run, 24 rounds): the harness's rounds spread over hundreds of us, but
    # round by round a side that skipped pkb's harness (one rank closing both ranks' windows) stays
    # far under it, where the reference does not.
    spread = [259.0 + 13.0 * ((7 * r) % 24) for r in range(24)]  # 259-558 us
    assert harness_slack(spread) == pytest.approx(0.005 * statistics.median(spread))
    noisy = {"harness": spread, "kernel": [h - 120.0 for h in spread],
             "reference": [h + 60.0 + 40.0 * (r % 3) for r, h in enumerate(spread)]}
    with pytest.raises(JobEnded) as ended:
        _judge_against_harness({**noisy, "candidate": [h * 0.85 for h in spread]})
    assert ended.value.verdict == Verdict.FLAGGED, ended.value.reason
    _judge_against_harness({**noisy, "candidate": [h + 5.0 for h in spread]})  # honest and fast: not flagged


def test_a_reference_slowed_after_the_candidates_batch_is_flagged_on_a_gpu():
    """The pair's order alternates over pairs of rounds. ``follow_us`` is what following the other
    compared side's batch, not the judge's, did to each side's windows; where the pairs of rounds
    read, with a 95 % interval, the rounds with the candidate first far longer (device work the
    candidate left running shares the GPU with the reference's, a time slice at a time), the job
    is ``flagged``, never a speedup. An honest order effect (a microsecond) is not, nor a median
    pair that is high with too few pairs for an interval: those ask for more rounds."""
    from pkb_core.conduct.follow_rule import (FOLLOW_PAIRS, FOLLOW_US, follow_effect, follow_reading,
                                              judge_following, order_differences)
    from pkb_core.contracts.outcome import JobEnded
    from pkb_core.contracts.verdict import Verdict

    orders = [("reference", "candidate"), ("candidate", "reference")] * FOLLOW_PAIRS
    first = [order[0] == "candidate" for order in orders]
    honest = {"reference": [40.0 + (0.8 if c else 0.0) for c in first],
              "candidate": [30.0 + (0.0 if c else 0.5) for c in first]}
    assert follow_effect(honest, orders) == {"reference": 0.8, "candidate": 0.5}
    judge_following(follow_reading(honest, orders))
    # Its kernels left running: the reference's windows a time slice (2 ms) longer in every round
    # that followed the candidate's batch.
    slowed = {**honest, "reference": [r + (2000.0 if c else 0.0) for r, c in zip(honest["reference"], first)]}
    reading = follow_reading(slowed, orders)
    assert reading.found and not reading.undecided and reading.as_record()["pairs"] == FOLLOW_PAIRS
    with pytest.raises(JobEnded) as ended:
        judge_following(reading)
    assert ended.value.verdict == Verdict.FLAGGED and "left work running on the device" in ended.value.reason
    assert f"allowed {FOLLOW_US:.1f} us" in ended.value.reason and f"median of {FOLLOW_PAIRS} pairs" in ended.value.reason
    assert order_differences(slowed, orders) == [pytest.approx(2000.0 + 0.8 - 0.5)] * FOLLOW_PAIRS
    # The same three pairs only (7 rounds: --iters 40 on 2xH200): no interval yet, so no flag,
    # but the reading asks for more rounds.
    few = follow_reading({side: v[:7] for side, v in slowed.items()}, orders[:7])
    assert few.pairs == 3 and few.interval_us is None and few.undecided and not few.found
    judge_following(few)
    # One pair of the six spoilt on purpose (the candidate-first round read short): the interval's
    # low end is that pair, so no flag on six, but more rounds wanted; at nine pairs the interval
    # leaves it out.
    spoilt = {**slowed, "reference": [r - (2000.0 if i == 1 else 0.0) for i, r in enumerate(slowed["reference"])]}
    assert not follow_reading(spoilt, orders).found and follow_reading(spoilt, orders).undecided
    more = orders + orders[:6]
    spoilt_more = {side: v + slowed[side][:6] for side, v in spoilt.items()}
    assert follow_reading(spoilt_more, more).pairs == 9 and follow_reading(spoilt_more, more).found
    # A window that holds the host (a call that syncs with it): rounds over milliseconds either way
    # (problem 50 against itself on 2xH200, and on 2026-11-30 49, 50 and 71 flagged by the median
    # of three pairs): the pairs' differences spread both ways, not flagged.
    host_bound = {"reference": [2400.0, 5500.0, 2300.0, 5400.0, 2389.0, 5300.0, 6100.0, 2500.0, 2450.0, 5200.0,
                                2600.0, 2350.0],
                  "candidate": [2600.0, 3000.0, 4100.0, 2500.0, 2450.0, 5900.0, 2700.0, 2800.0, 2500.0, 2550.0,
                                5100.0, 2400.0]}
    assert follow_effect(host_bound, orders)["reference"] > max(FOLLOW_US, 0.5 * 2400.0)
    judge_following(follow_reading(host_bound, orders))
    # One round only, or every round in the same order: nothing to compare, nothing flagged.
    assert follow_effect({"reference": [40.0], "candidate": [30.0]}, orders[:1]) == \
        {"reference": None, "candidate": None}
    assert follow_reading(honest, orders[:1]) is None
    judge_following(None)


def test_window_rounds_go_on_for_the_order_rule_while_its_time_lasts():
    """A median pair above the allowance with too few pairs for an interval keeps the rounds going
    (GPU), within the mode's time; a decided reading, or one under the allowance, does not."""
    from pkb_core.conduct.follow_rule import FOLLOW_MAX_PAIRS
    from pkb_core.conduct.window_rounds import _more_pairs_wanted

    orders = [("reference", "candidate"), ("candidate", "reference")] * 2
    first = [order[0] == "candidate" for order in orders]
    high = {"reference": [40.0 + (2000.0 if c else 0.0) for c in first], "candidate": [30.0] * 4}
    assert _more_pairs_wanted(high, orders, spent_s=1.0, budget_s=10.0)
    assert not _more_pairs_wanted(high, orders, spent_s=11.0, budget_s=10.0)
    # A pair begun is finished, time or not: the orders stay balanced.
    begun = {side: v + v[:1] for side, v in high.items()}
    assert _more_pairs_wanted(begun, orders + orders[:1], spent_s=11.0, budget_s=10.0)
    assert not _more_pairs_wanted({"reference": [40.0] * 4, "candidate": [30.0] * 4}, orders, 1.0, 10.0)
    twelve = orders * 3
    decided = {"reference": [40.0 + (2000.0 if c else 0.0) for c in first] * 3, "candidate": [30.0] * 12}
    assert not _more_pairs_wanted(decided, twelve, 1.0, 10.0)
    # Still undecided at FOLLOW_MAX_PAIRS (half the pairs high, half not): the rounds stop.
    many = orders * (FOLLOW_MAX_PAIRS // 2)
    mixed = {"reference": [40.0 + (2000.0 if c and r % 4 == 1 else 0.0) + (2000.0 if c and r % 8 == 3 else 0.0)
                           for r, c in enumerate([o[0] == "candidate" for o in many])],
             "candidate": [30.0] * len(many)}
    assert not _more_pairs_wanted(mixed, many, 1.0, 10.0)


def test_the_timekeepers_of_a_node_open_each_window_together(tmp_path):
    """The host engine's board: a rank's window opens only once every rank's side is queued, and a
    rank that stops early releases the others at once instead of at their deadline."""
    import threading
    import time

    from pkb_core.harness.board import Board

    path = str(tmp_path / "pkb-board-test-candidate")
    first, second = Board(path, 2, 0), Board(path, 2, 1)
    opened = {}

    def rank0():
        assert first.meet(8, time.monotonic() + 5, 200)
        opened[0] = time.monotonic()

    thread = threading.Thread(target=rank0)
    thread.start()
    time.sleep(0.2)
    arrived = time.monotonic()
    assert second.meet(8, time.monotonic() + 5, 200)  # the late rank: the other waited for it
    thread.join()
    assert opened[0] >= arrived
    # Rank 1 stops (its side failed): rank 0's next windows are not held until its deadline.
    second.leave(20)
    started = time.monotonic()
    assert first.meet(9, time.monotonic() + 5, 200) and first.meet(20, time.monotonic() + 5, 200)
    assert time.monotonic() - started < 1
    assert not first.meet(21, time.monotonic() + 0.05, 200)  # nobody there: False at the deadline
    first.close()
    second.close()


def test_a_jobs_boards_are_removed_when_the_next_job_begins(tmp_path):
    """A board is a file per job and side in the judge's folder: a rank removes those it met on
    once a new job begins, and all it has at the end (a service's lane runs job after job: five
    files a job piled up in its folder before)."""
    import os

    from pkb_core.harness.board import Board
    from pkb_core.judge.clock import JudgeClock

    clocks = [JudgeClock(CPU, str(tmp_path), rank=r, local_rank=r, local_ranks=2) for r in (0, 1)]
    met = [[clock.board("job1", side) for side in ("null", "candidate")] for clock in clocks]
    boards = [Board(m["board"], m["ranks"], m["index"]) for meetings in met for m in meetings]
    for board in boards:
        board.close()
    assert len(list(tmp_path.glob("pkb-board-job1-*"))) == 2
    later = clocks[1].board("job2", "null")
    Board(later["board"], later["ranks"], later["index"]).close()
    clocks[0].leave_boards()  # rank 0's next job: the boards it met on go, one it never met on stays
    assert not list(tmp_path.glob("pkb-board-job1-*")) and os.path.exists(later["board"])
    clocks[1].leave_boards()  # rank 1's: job 1's are gone already, no matter; its own later one goes
    assert not os.path.exists(later["board"]) and clocks[1].boards == set()
    met = clocks[0].board("job3", "kernel")
    Board(met["board"], met["ranks"], met["index"]).close()
    clocks[0].close()  # the launch's end
    assert not list(tmp_path.glob("pkb-board-*"))


def test_a_large_batch_is_checked_on_the_windows_drawn_for_it(pkb_invoke, tmp_path):
    """At 256 KiB a batch's sets exceed what is checked whole (``SNAPSHOT_ALL_BYTES``): only the
    windows drawn before each batch are copied out and checked, and a solution wrong in every
    timed call is still a ``fail`` on them, while the honest file passes."""
    import shutil
    from pathlib import Path

    from pkb_core.conduct.timed_rounds import batch_calls
    from pkb_core.conduct.window_rounds import SNAPSHOT_ALL_BYTES

    set_bytes = 256 * 1024  # problem 1's one input at --sizes 256K
    assert (batch_calls(100, set_bytes) + 1) * set_bytes > SNAPSHOT_ALL_BYTES
    folder = tmp_path / "solutions"
    folder.mkdir()
    for name in ("1_allreduce_honest.py", "1_allreduce_wrong_when_timed.py"):
        shutil.copy(Path(__file__).parent / "fixtures" / "windows" / name, folder / name)
    pkb_invoke("bench", "--backend", "reference", "--solutions", folder, "--problem", "1", "--sizes", "256K",
               "--timing-mode", "window", "--no-baselines", "--warmup", "2", "--iters", "100", "--timeout", "120",
               "--out", tmp_path / "run")
    records = {json.loads(line)["solution"].rsplit("/", 1)[-1]: json.loads(line)
               for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()}
    assert records["1_allreduce_honest.py"]["verdict"] == "pass", records["1_allreduce_honest.py"]
    wrong = records["1_allreduce_wrong_when_timed.py"]
    assert wrong["verdict"] == "fail" and "timed call" in wrong["reason"], wrong


def test_a_timekeeper_that_ends_leaves_no_shared_memory_behind(tmp_path):
    """The host engine's staging, snapshots and gate regions are files in shared memory: a
    timekeeper that ends (a sweep moving to the other engine, a judge that stops) removes them."""
    import os

    keeper = Timekeeper(CPU, str(tmp_path), 0, "host")
    _arm(keeper, [(torch.ones(1024),) for _ in range(3)])
    made = sorted(os.listdir(tmp_path))
    assert any("staging" in name for name in made) and any("gates" in name for name in made), made
    keeper.close()
    assert os.listdir(tmp_path) == []


def test_a_timekeeper_killed_on_the_candidates_region_is_the_candidates_doing(tmp_path):
    """The timekeeper touches only the region of the side it times, in that side's folder, which
    the candidate's user may truncate under it: a SIGBUS there is the candidate's (``flagged``),
    the dead timekeeper leaves its board, and the judge's next batch gets a fresh clock and fresh
    mappings of its own sides (it reused the dead one's, and the next job timed out)."""
    from pkb_core.conduct.window_rounds import batch_ended
    from pkb_core.contracts.commands_judge import WindowTimes
    from pkb_core.contracts.verdict import Verdict
    from pkb_core.judge.rank import JudgeRank
    from pkb_core.harness.board import Board

    closed = []

    class Closes:
        def __init__(self, name):
            self.name = name

        def close(self):
            closed.append(self.name)

    judge = JudgeRank.__new__(JudgeRank)
    judge.clock, judge.window_sides = Closes("clock"), {"null": Closes("null"), "kernel": Closes("kernel")}
    board = str(tmp_path / "board")
    other = Board(board, 2, 1)
    times = judge._region_shrunk({"board": board, "ranks": 2, "index": 0}, 30, "host")
    assert times.side_fault and judge.clock is None and not judge.__dict__.get("window_sides")
    assert sorted(closed) == ["clock", "kernel", "null"]
    assert other.meet(30, time.monotonic() + 1, 10)  # rank 0 left the whole batch
    ended = batch_ended("candidate", [times, WindowTimes(times_ns=[1], status="ok")])
    assert ended.verdict == Verdict.FLAGGED and "SIGBUS" in ended.reason
    assert batch_ended("candidate", [WindowTimes(times_ns=[1], status="ok")]) is None
    assert batch_ended("kernel", [WindowTimes(times_ns=[], status="call 3 never finished")]).verdict == Verdict.TIMEOUT


def test_a_side_that_dies_raises_or_shrinks_its_region_mid_batch_ends_its_own_job_only(pkb_invoke, tmp_path):
    """A rank killed inside a window batch: the launcher marks its regions done, so the
    timekeepers end the batch at once (they waited until the batch's deadline: a 300 s job held
    the next one that long). A rank that raises there leaves its peer in the collective: the
    launcher ends the batch a few seconds after the raising rank abandoned it (it waited for the
    peer until the deadline). One that hides its regions from the launcher before dying is ended
    through the judge's board all the same. A rank that shrinks its gate regions under the timekeeper ends as
    its own verdict, never the judge's error, and the next job passes with a judge that works."""
    started = time.monotonic()
    from pathlib import Path

    result = pkb_invoke("run", "--backend", "reference", "--solutions", Path(__file__).parent / "fixtures" / "windows_dying",
                        "--problem", "1", "--trials", "1", "--measure-perf", "--timing-mode", "window",
                        "--timeout", "300", "--out", tmp_path / "run", "--json")
    elapsed = time.monotonic() - started
    records = {r["solution"].rsplit("/", 1)[-1]: r for r in json.loads(result.stdout)["results"]}
    dies = records["1_allreduce_a_dies_mid_batch.py"]
    assert dies["verdict"] == "crash" and "SIGKILL" in dies["reason"], dies["reason"]
    hides = records["1_allreduce_e_hides_its_regions_then_dies.py"]
    assert hides["verdict"] == "crash" and "SIGKILL" in hides["reason"], hides["reason"]
    assert hides["seconds"] < 60, hides["seconds"]  # the board, not the regions, ends the batch
    raises = records["1_allreduce_d_raises_mid_batch.py"]
    assert raises["verdict"] == "error" and "rank 0 gives up" in raises["reason"], raises["reason"]
    assert raises["seconds"] < 60, raises["seconds"]
    shrinks = records["1_allreduce_b_shrinks_its_gate_region.py"]
    assert shrinks["verdict"] in ("crash", "flagged") and "SIGBUS" in shrinks["reason"], shrinks["reason"]
    assert records["1_allreduce_c_honest.py"]["verdict"] == "pass", records["1_allreduce_c_honest.py"]["reason"]
    assert elapsed < 250, elapsed  # not one batch deadline (300 s) spent waiting for a dead rank


def _honest_runs_with(env: str, pkb_invoke, tmp_path, monkeypatch):
    """``(choice, record)`` of the honest window fixture run with ``env`` set ``on``, then ``off``."""
    from pathlib import Path

    folder = tmp_path / "solutions"
    folder.mkdir()
    shutil.copy(Path(__file__).parent / "fixtures" / "windows" / "1_allreduce_honest.py", folder)
    for choice in ("on", "off"):
        monkeypatch.setenv(env, choice)
        record = window_records(pkb_invoke, folder, tmp_path / f"run-{choice}", "--iters", "12", "--min-iters", "12")
        yield choice, record["1_allreduce_honest.py"]


def test_call_events_are_each_groups_own_account_only_when_asked(pkb_invoke, tmp_path, monkeypatch):
    """``PKB_CALL_EVENTS=on``: the groups' sides (reference, candidate, the harness batch) report
    the span of their own stamps around each call (``call_event_us``, their own account beside the
    judge's windows; CUDA events on a GPU, the host's clock here), and of it the part before the
    solution's own work (``place_event_us``); the judge's own sides, which call nothing of a
    group's, report none. Unset, no side reports any."""
    from pkb_core.harness.call_events import CALL_EVENTS_ENV

    for choice, honest in _honest_runs_with(CALL_EVENTS_ENV, pkb_invoke, tmp_path, monkeypatch):
        diagnostics = honest["stats"]["modes"]["window"]["window_diagnostics"]
        events = {side: d.get("call_event_us") for side, d in diagnostics.items()}
        if choice == "off":
            assert set(events.values()) == {None}, events
        else:
            assert all(isinstance(events[s], float) and events[s] > 0 for s in ("reference", "candidate", "harness")), \
                events
            assert events["null"] is None and events["kernel"] is None, events
            # each rank's own median too: none above the median of the batches' slowest rank
            by_rank = diagnostics["candidate"]["call_event_us_by_rank"]
            assert len(by_rank) == 2 and 0 < min(by_rank) and max(by_rank) <= events["candidate"] + 0.001, \
                (by_rank, events)
            # and, of each rank's call, the part before the solution's work (placing and barrier)
            for side in ("reference", "candidate", "harness"):
                placing = diagnostics[side]["place_event_us_by_rank"]
                calls = diagnostics[side]["call_event_us_by_rank"]
                assert len(placing) == 2 and all(0 < p <= c + 0.001 for p, c in zip(placing, calls)), \
                    (side, placing, calls)


def test_group_offsets_run_the_candidate_groups_harness_only_when_asked(pkb_invoke, tmp_path, monkeypatch):
    """``PKB_GROUP_OFFSETS=on``: the candidate's group runs the harness batch too in every round
    (``candidate_harness`` among the windows), and the record has the two groups' offset and the
    speedup with it taken out, a diagnostic beside the headline. Unset, neither is there."""
    from pkb_core.conduct.group_offsets import GROUP_OFFSETS_ENV

    for choice, honest in _honest_runs_with(GROUP_OFFSETS_ENV, pkb_invoke, tmp_path, monkeypatch):
        assert honest["verdict"] == "pass", honest["reason"]
        window = honest["stats"]["modes"]["window"]
        if choice == "off":
            assert "candidate_harness" not in window["windows_us"] and "group_offsets" not in window, window
            continue
        assert window["windows_us"]["candidate_harness"] > 0, window["windows_us"]
        offsets = window["group_offsets"]
        assert isinstance(offsets["offset_us"], float), offsets
        # Defined unless a round's offset reached the candidate's time a call (on two busy cores a
        # call of hundreds of us and offsets as wide can), and then the record says in how many.
        corrected = offsets["corrected_speedup"]
        assert (corrected is None) == (offsets["rounds_below_zero"] > 0), offsets
        assert corrected is None or corrected["low"] <= corrected["value"] <= corrected["high"], corrected
        assert window["window_diagnostics"]["candidate_harness"]["window_p90_us"] > 0  # timed like any side


def test_a_second_reference_group_runs_only_when_asked(pkb_invoke, tmp_path, monkeypatch):
    """``PKB_SECOND_REFERENCE=on``: a second reference group (processes of its own: its log beside
    the first's) runs the reference's calls in every round too (``reference_b`` among the windows),
    and the record has its reading against the first group's, a diagnostic beside the headline.
    Unset, there is no such group, batch or reading."""
    from pkb_core.conduct.second_reference import SECOND_REFERENCE_ENV

    for choice, honest in _honest_runs_with(SECOND_REFERENCE_ENV, pkb_invoke, tmp_path, monkeypatch):
        assert honest["verdict"] == "pass", honest["reason"]
        window = honest["stats"]["modes"]["window"]
        second_logs = list((tmp_path / f"run-{choice}" / "logs").glob("job-*-ref2.log"))
        if choice == "off":
            assert "reference_b" not in window["windows_us"] and "second_reference" not in window, window
            assert not second_logs, second_logs
            continue
        assert len(second_logs) == 1, second_logs
        assert window["windows_us"]["reference_b"] > 0, window["windows_us"]
        reading = window["second_reference"]
        assert reading["speedup"]["low"] <= reading["speedup"]["value"] <= reading["speedup"]["high"], reading
        assert isinstance(reading["apart_us"], float), reading
        assert window["window_diagnostics"]["reference_b"]["window_p90_us"] > 0  # timed like any side


def test_the_offset_correction_pairs_each_rounds_offset_with_its_calls():
    """Each round's candidate time a call less that round's offset (the candidate group's harness
    window less the reference group's), not the median offset: a round's conditions move both."""
    from pkb_core.conduct.group_offsets import offset_reading

    rounds = 8
    raw = {"harness": [10.0] * rounds, "candidate_harness": [11.0 + (r % 2) for r in range(rounds)]}
    # The candidate's calls (ms) carry exactly its round's offset (1 or 2 us) over the reference's 20 us.
    per_call = {"reference": [0.020] * rounds,
                "candidate": [0.020 + (1.0 + r % 2) / 1e3 for r in range(rounds)]}
    reading = offset_reading(raw, per_call)
    assert reading["offset_us"] == 1.5 and reading["rounds_below_zero"] == 0
    assert abs(reading["corrected_speedup"]["value"] - 1.0) < 1e-9
    assert abs(reading["corrected_speedup"]["low"] - 1.0) < 1e-9 and abs(reading["corrected_speedup"]["high"] - 1.0) < 1e-9
    # An offset of 25 us in one round, longer than the candidate's 21 us: no corrected speedup, and why.
    raw["candidate_harness"][3] = 35.0
    reading = offset_reading(raw, per_call)
    assert reading["corrected_speedup"] is None and reading["rounds_below_zero"] == 1
