"""Sealed evaluation (docs/trust.md): hostile candidates end `flagged` or `fail` for their own reason,
honest ones pass, and nothing of one job reaches the next."""
import json
import os
import shutil

import pytest

CUSTOM_BACKEND = '''
from pkb_core.plugin.backend import BackendInfo
from pkb_core.plugin.hookspecs import hookimpl

@hookimpl
def pkb_backend_info():
    # Plain Python solutions judged as custom kernels: NCCL/gloo are off limits.
    return BackendInfo(name="plainpy", devices=("cpu",), custom_kernels=True)
'''

REFUSED = "called a torch.distributed collective"
LOCKDOWN = "system call the candidate lockdown forbids"
STORE = "moved data through the job's store"

#: file -> (verdict, text in the reason); one class of attack per prefix (c1..c7, see docs/trust.md;
#: c8: the second review's attacks on the sealed design itself; c9: on the typed contracts; c10: on
#: timing that the candidate's processes measured themselves, now measured from outside).
EXPECTED = {
    "1_allreduce_c1_calls_nccl.py": ("flagged", REFUSED),
    "1_allreduce_c1_process_group_object.py": ("flagged", REFUSED),
    "1_allreduce_c1_backend_object.py": ("flagged", REFUSED),
    "1_allreduce_c1_dispatcher_op.py": ("flagged", REFUSED),
    "1_allreduce_c1_functional_collective.py": ("flagged", REFUSED),
    "1_allreduce_c1_own_gloo_group.py": ("flagged", LOCKDOWN),
    "1_allreduce_c1_own_rendezvous.py": ("flagged", LOCKDOWN),
    "1_allreduce_c1_exemption_switch.py": ("flagged", REFUSED),
    "1_allreduce_c1_io_uring_socket.py": ("flagged", LOCKDOWN),
    "1_allreduce_c1_store_payload.py": ("flagged", STORE),
    "1_allreduce_c1_store_flood.py": ("flagged", STORE),
    "1_allreduce_c1_send_recv.py": ("fail", "elements differ"),
    "1_allreduce_c2_rebinds_comparer.py": ("fail", "elements differ"),
    "1_allreduce_c2_widens_tolerance.py": ("fail", "elements differ"),
    "1_allreduce_c2_patches_tensor_methods.py": ("fail", "elements differ"),
    "1_allreduce_c2_forges_record.py": ("fail", "elements differ"),
    "1_allreduce_c2_drops_verdicts.py": ("fail", "elements differ"),
    "1_allreduce_c3_frame_walk.py": ("fail", "elements differ"),
    "1_allreduce_c3_forges_timer.py": ("pass", ""),  # its clock is not the one pkb reads: see below
    "1_allreduce_c4_skips_when_timed.py": ("fail", "timed call"),
    "1_allreduce_c4_caches_after_warmup.py": ("fail", "timed call"),
    "1_allreduce_c4_caches_by_buffer.py": ("fail", "trial 1: rank"),
    "1_allreduce_c4_defers_to_thread.py": ("fail", "elements differ"),
    "1_allreduce_c5_hogs_the_host.py": ("flagged", "left work running on the host"),
    "1_allreduce_c7_int8_wire.py": ("fail", "trial 1: rank"),
    "1_allreduce_c7_int8_row_scale.py": ("fail", "trial 1: rank"),
    # Full-mantissa draws uniform in [-16, 16) lay on one fixed-point grid (torch.rand's, scaled):
    # 2^-19 fixed-point codes passed every check (a hostile review, 2026-12-01); they spread over
    # 16 binades now.
    "1_allreduce_c7_fixed_point_wire.py": ("fail", "own rounding of the sum"),
    "1_allreduce_c7_inside_tolerance.py": ("fail", "trial 0: rank"),
    "1_allreduce_c8_links_reference_parcel.py": ("fail", "could not be opened"),
    "1_allreduce_c8_answers_ahead.py": ("error", "malformed"),
    "1_allreduce_c8_lossy_when_timed.py": ("fail", "timed call"),
    "1_allreduce_c8_poisons_caches.py": ("compile-error", "cache/calibration"),  # refused: read-only or not its own
    "1_allreduce_c9_claims_a_verdict.py": ("flagged", "its setup answer claimed the verdict 'pass'"),
    "1_allreduce_c9_claims_unsupported.py": ("compile-error", "a compile error, not unsupported"),
    "1_allreduce_c9_deep_answer.py": ("error", "malformed"),
    "1_allreduce_c10_first_call_does_the_batch.py": ("pass", ""),  # and no speedup: see below
    "1_allreduce_c10_reports_one_call.py": ("pass", ""),
    "1_allreduce_c10_works_while_placed.py": ("pass", ""),
    "1_allreduce_honest_peer_reads.py": ("pass", ""),
}
#: Attacks on the timing that now gain nothing: each really costs 10 ms a call, far more than the
#: reference's all-reduce, and must never read faster (before: 47x, 56x, 199x). (c3 cost 4 ms until
#: a CI run beside two busy loops read it "faster" in latency mode, 2026-12-01.)
GAIN_NOTHING = ("1_allreduce_c3_forges_timer.py", "1_allreduce_c10_first_call_does_the_batch.py",
                "1_allreduce_c10_reports_one_call.py", "1_allreduce_c10_works_while_placed.py")
#: Attacks on the launcher's clock's own commands (latency mode's ``time`` answer and its parcels):
#: where each call has its own window of the judge's timekeeper (window mode, the headline) no
#: such command runs, and their solutions, which compute honestly, pass.
LAUNCHER_CLOCK_ATTACKS = ("1_allreduce_c8_links_reference_parcel.py", "1_allreduce_c8_answers_ahead.py")
#: What the attack set ends as in window mode.
EXPECTED_WINDOW = {**EXPECTED, **{name: ("pass", "") for name in LAUNCHER_CLOCK_ATTACKS}}
#: The attacks run again in latency mode (the launcher's clock, a diagnostic beside the headline):
#: those on its commands and its batches, and the honest control.
LATENCY_ATTACKS = (*GAIN_NOTHING, *LAUNCHER_CLOCK_ATTACKS, "1_allreduce_c8_lossy_when_timed.py",
                   "1_allreduce_c4_skips_when_timed.py", "1_allreduce_honest_peer_reads.py")


@pytest.fixture
def plainpy(fake_dist):
    fake_dist("pkbtest-plainpy", {"pkb.backends": {"plainpy": "pkbtest_plainpy"}}, {"pkbtest_plainpy": CUSTOM_BACKEND})


def _records(result):
    assert result.stdout.strip(), result.output
    return {r["solution"].rsplit("/", 1)[-1]: r for r in json.loads(result.stdout)["results"]}


def _gain_nothing(by_file: dict) -> None:
    for name in GAIN_NOTHING:
        record = by_file[name]
        assert record["difference"] != "faster" and not (record.get("claimed_speedup") or 0) > 1, (name, record)
        # The clock pkb reads saw every call's cost, whatever the process said about itself.
        assert record["solution_ms"] > 10.0, (name, record)


def test_every_class_of_attack_is_caught_and_the_honest_control_passes(pkb_invoke, plainpy, fixtures, tmp_path):
    """The whole set, timed in the CPU headline (window mode: every call in a window of the judge's timekeeper)."""
    run = tmp_path / "run"
    launcher_peak = _peak_rss()  # this process is the launcher (pkb_invoke runs in-process)
    result = pkb_invoke("run", "--backend", "plainpy", "--solutions", fixtures / "adversarial", "--problem", "1",
                        "--trials", "2", "--measure-perf", "--warmup", "3", "--iters", "20", "--out", run, "--json",
                        "--timeout", "60")
    by_file = _records(result)
    assert set(by_file) == set(EXPECTED_WINDOW)
    for name, (verdict, text) in EXPECTED_WINDOW.items():
        assert by_file[name]["verdict"] == verdict, (name, by_file[name]["reason"])
        assert text in by_file[name]["reason"], (name, by_file[name]["reason"])
        if verdict == "pass":
            assert by_file[name]["timing_mode"] == "window", by_file[name]
    _gain_nothing(by_file)
    # The static scan of the source adds a hint to a refused collective.
    assert "hint: source mentions torch.distributed.all_reduce" in by_file["1_allreduce_c1_calls_nccl.py"]["reason"]
    # The forged record never reached the records file (the run directory is read-only for candidates).
    keys = [json.loads(line)["key"] for line in (run / "records.jsonl").read_text().splitlines()]
    assert "forged" not in keys and len(keys) == len(EXPECTED)
    assert not by_file["1_allreduce_honest_peer_reads.py"].get("lockdown_gaps")
    # The store flood (3 GiB of SETs) never reached the launcher: the store is the candidate's own keeper.
    assert _peak_rss() - launcher_peak < 1 << 30


def test_attacks_on_the_launchers_clock_are_caught_in_latency_mode(pkb_invoke, plainpy, fixtures, tmp_path):
    """Latency mode (the launcher's clock around each batch) against the attacks on its own
    commands, its batches and what its processes say of themselves."""
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    for name in LATENCY_ATTACKS:
        (chosen / name).write_text((fixtures / "adversarial" / name).read_text())
    result = pkb_invoke("run", "--backend", "plainpy", "--solutions", chosen, "--problem", "1", "--trials", "2",
                        "--measure-perf", "--timing-mode", "latency", "--warmup", "3", "--iters", "20",
                        "--out", tmp_path / "run", "--json", "--timeout", "60")
    by_file = _records(result)
    assert set(by_file) == set(LATENCY_ATTACKS)
    for name in LATENCY_ATTACKS:
        verdict, text = EXPECTED[name]
        assert by_file[name]["verdict"] == verdict and text in by_file[name]["reason"], (name, by_file[name]["reason"])
    _gain_nothing(by_file)
    reported = by_file["1_allreduce_c10_reports_one_call.py"]["stats"]["modes"]["latency"]["self_reported_ms"]
    assert reported["candidate"] < 1.0  # what it said: kept as an untrusted diagnostic, used for nothing


def _peak_rss() -> int:
    """This process's peak resident set (bytes), from the kernel."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def test_timed_calls_are_checked_on_the_arguments_they_update(pkb_invoke, fixtures, tmp_path):
    # Problem 21 clips its gradients in place (MUTATES); skipping that only in timed calls fails, in
    # the launcher's batches and in the judge's windows alike.
    for mode in ("latency", "window"):
        result = pkb_invoke("run", "--solutions", fixtures / "mutates", "--problem", "21", "--trials", "2",
                            "--measure-perf", "--timing-mode", mode, "--warmup", "1", "--iters", "6",
                            "--out", tmp_path / mode, "--json")
        record = next(iter(_records(result).values()))
        assert record["verdict"] == "fail", (mode, record["reason"])
        assert "timed call" in record["reason"] and "argument 0 (updated in place)" in record["reason"], \
            (mode, record["reason"])


def test_a_layer_handed_to_a_call_is_compared_after_it_like_any_input(pkb_invoke, fixtures, tmp_path):
    # Problem 31 hands the call torch.nn.Linear layers; overwriting their weights in timed calls
    # (the answer right) is a modified input, in the launcher's batches and in the judge's windows
    # alike (a hostile review, 2026-11-30: a layer's tensors were neither sent back nor compared).
    for mode in ("latency", "window"):
        result = pkb_invoke("run", "--backend", "reference", "--solutions", fixtures / "layers", "--problem", "31",
                            "--trials", "2", "--measure-perf", "--timing-mode", mode, "--warmup", "1", "--iters", "6",
                            "--out", tmp_path / mode, "--json")
        record = next(iter(_records(result).values()))
        assert record["verdict"] == "fail", (mode, record["reason"])
        assert "timed call" in record["reason"] and "modified its input (argument 3['bias'])" in record["reason"], \
            (mode, record["reason"])


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_lossy_wire_formats_fail_at_16_bits_and_honest_sums_pass(pkb_invoke, plainpy, fixtures, tmp_path, dtype):
    # EXACT problems' full-mantissa trials compare within the dtype's own rounding of the sum: int8
    # codes (with or without a per-row scale) fail at bf16 and fp16 as at fp32 (before: pass at bf16).
    folder = tmp_path / "solutions"
    folder.mkdir()
    for name in ("1_allreduce_c7_int8_wire.py", "1_allreduce_c7_int8_row_scale.py", "1_allreduce_honest_peer_reads.py"):
        shutil.copy(fixtures / "adversarial" / name, folder / name)
    # Eight trials, four of them full-mantissa: at the tiny size the row-scaled codes err in 1-3 of
    # 128 elements a trial, and with four trials one CI run of four saw every element cross exactly.
    result = pkb_invoke("run", "--backend", "plainpy", "--solutions", folder, "--problem", "1", "--trials", "8",
                        "--dtype", dtype, "--out", tmp_path / "run", "--json")
    by_file = _records(result)
    assert by_file["1_allreduce_honest_peer_reads.py"]["verdict"] == "pass"
    for name in ("1_allreduce_c7_int8_wire.py", "1_allreduce_c7_int8_row_scale.py"):
        assert by_file[name]["verdict"] == "fail", (name, by_file[name]["reason"])
        assert "own rounding of the sum" in by_file[name]["reason"], by_file[name]["reason"]


def test_an_honest_job_after_one_that_leaves_traps_passes(pkb_invoke, plainpy, fixtures, tmp_path):
    result = pkb_invoke("run", "--backend", "plainpy", "--solutions", fixtures / "batch", "--problem", "1",
                        "--trials", "3", "--measure-perf", "--iters", "10", "--out", tmp_path, "--json")
    by_file = _records(result)
    assert by_file["1_allreduce_a_leaves_traps.py"]["verdict"] == "fail"
    assert by_file["1_allreduce_b_honest.py"]["verdict"] == "pass", by_file["1_allreduce_b_honest.py"]["reason"]
    # The trap's child was in the job's process group (it could not leave it) and died with the job.
    assert not _processes_with("_vandal", tmp_path) and not _processes_with("pkb_core.launch.zygote", tmp_path)


def _processes_with(text, run_dir):
    """Live processes whose command line has ``text`` and that this test's launch started
    (their settings or their output name its run directory: other pkb runs on the machine do not count)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        try:
            # A worker's settings name the run directory; a zygote's output is the launch's log in it.
            with open(f"/proc/{pid}/environ", "rb") as f:
                ours = json.dumps({"run_dir": str(run_dir)})[1:-1].encode() in f.read()
            ours = ours or os.readlink(f"/proc/{pid}/fd/1").startswith(str(run_dir))
        except OSError:
            continue
        if text in cmdline and ours:
            found.append(pid)
    return found


def test_p2pop_references_run_under_a_custom_kernel_backend(pkb_invoke, fixtures, tmp_path):
    # The judge's processes are never patched: references that build P2POp lists run
    # (2xH200, before: "Invalid op" for 54, 55, 57, 58 and 71 under every custom-kernel backend).
    result = pkb_invoke("run", "--backend", "triton", "--solutions", fixtures / "p2p", "--problem",
                        "54,55,57,58,71", "--nproc", "4", "--trials", "2", "--out", tmp_path, "--json")
    by_problem = {r["problem_id"]: r for r in _records(result).values()}
    assert by_problem[71]["verdict"] == "pass", by_problem[71]["reason"]
    for problem in (54, 55, 57, 58):
        record = by_problem[problem]
        assert record["verdict"] == "fail", record["reason"]
        assert "reference raised" not in record["reason"]


def test_the_physics_floor_flags_an_impossible_time(pkb_invoke, tmp_path, monkeypatch):
    from pkb_core.machine.calibrate import cache_path

    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    path = cache_path("cpu")
    path.parent.mkdir(parents=True)
    # A machine whose links would need an hour for 512 bytes: every real time is "impossible".
    path.write_text(json.dumps({"link_gbps": 1e-10, "hbm_gbps": 1e-10, "matmul_tflops": 1e-10, "links": [],
                                "matmul_dtype": "fp32", "method": "test"}))
    result = pkb_invoke("run", "--problem", "1", "--trials", "1", "--measure-perf", "--warmup", "1", "--iters", "3",
                        "--out", tmp_path / "run", "--json")
    record = json.loads(result.stdout)["results"][0]
    assert record["verdict"] == "flagged"
    assert "below the physical floor" in record["reason"]
    assert "link-bound" in record["reason"] or "memory-bound" in record["reason"]


def test_timing_modes_statistics_and_the_launchers_clock(pkb_invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    result = pkb_invoke("run", "--problem", "2", "--trials", "1", "--measure-perf", "--warmup", "1", "--iters", "20",
                        "--min-iters", "20",
                        "--timing-mode", "back-to-back,latency,graph", "--out", tmp_path / "run", "--json")
    record = json.loads(result.stdout)["results"][0]
    assert record["verdict"] == "pass" and record["timing_mode"] == "back-to-back"
    modes = record["stats"]["modes"]
    for mode in ("back-to-back", "latency"):
        # 20 calls in at least 6 rounds: batches of 3, 7 rounds (the 7th reaches the minimum).
        assert modes[mode]["calls_per_batch"] == 3 and modes[mode]["batches"] == 7
        for side in ("reference", "candidate"):
            stats = modes[mode][side]
            assert stats["rounds"] == 21 and stats["ci_units"] == 7
            assert stats["min"] <= stats["p10"] <= stats["median"] <= stats["p90"] <= stats["max"]
        # The sides' own accounts are kept, as a diagnostic only.
        assert set(modes[mode]["self_reported_ms"]) == {"reference", "candidate"}
    assert not record["stats"].get("crosscheck")  # no self-reported times to cross-check
    assert modes["graph"] == {"unavailable": "CUDA-graph mode needs a GPU"}
    assert record["sol"]["bound"] in ("link", "memory", "compute")
    # the headline is the primary mode's: the median of its rounds' paired ratios, inside its interval
    assert record["speedup"] == pytest.approx(modes["back-to-back"]["speedup"]["value"])
    assert record["speedup_ci"][0] <= record["speedup"] <= record["speedup_ci"][1]


def test_reference_backend_may_call_nccl(pkb_invoke, fixtures, tmp_path):
    result = pkb_invoke("run", "--solution", fixtures / "adversarial" / "1_allreduce_c1_calls_nccl.py",
                        "--trials", "2", "--out", tmp_path, "--json")
    assert json.loads(result.stdout)["results"][0]["verdict"] == "pass"
