"""`pkb calibrate`'s noise floor in words: the reference timed against itself is the same code on both
sides, so an interval away from 1.0 is reported as a bias of the machine's timing, never as "slower"."""
from pkb_core.contracts.calibration import Calibration

#: A noise floor as a loaded 2-core machine measured it (issue 44: the reference read [0.50, 0.88]
#: against itself in latency mode), and a mode that read as it should.
FLOOR = {
    "problems": ["1_allreduce", "2_allgather"], "nproc": 2, "size": "tiny", "iters": 60,
    "datetime": "2026-11-27T00:00:00+00:00", "run_dir": "unused", "method": "the reference against itself",
    "modes": {
        "latency": {"entries": [
            {"problem": "1_allreduce", "reference_ms": 2.0, "copy_ms": 3.0, "ratio": 0.66, "low": 0.50,
             "high": 0.88, "difference": "slower", "reference_ci_rel": 0.2, "copy_ci_rel": 0.3, "samples": 60,
             "stopped": "cap"},
            {"problem": "2_allgather", "reference_ms": 2.0, "copy_ms": 2.1, "ratio": 0.95, "low": 0.80,
             "high": 1.10, "difference": "no measurable difference", "reference_ci_rel": 0.1,
             "copy_ci_rel": 0.1, "samples": 60, "stopped": "cap"}],
            "missing": [], "ratio_min": 0.66, "ratio_max": 0.95, "resolution": 0.5},
        "back-to-back": {"entries": [
            {"problem": "1_allreduce", "reference_ms": 1.0, "copy_ms": 1.0, "ratio": 1.0, "low": 0.97,
             "high": 1.03, "difference": "no measurable difference", "reference_ci_rel": 0.01,
             "copy_ci_rel": 0.01, "samples": 60, "stopped": "precise"}],
            "missing": [], "ratio_min": 1.0, "ratio_max": 1.0, "resolution": 0.03},
    },
}


def test_a_biased_noise_floor_is_called_a_bias_not_slower(pkb_invoke, tmp_path, monkeypatch):
    from pkb_core.machine.calibrate import save_calibration

    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path))
    save_calibration("cpu", Calibration(link_gbps=2.5, hbm_gbps=2.5, matmul_tflops=0.08, matmul_dtype="fp32",
                                        method="cached for the test", device="cpu", noise_floor=FLOOR))
    result = pkb_invoke("calibrate", "--device", "cpu")  # cached: nothing is measured
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "slower" not in out and "faster" not in out
    assert "timing bias: interval below 1.0" in out
    assert ("latency: reference/reference 0.660-0.950; 1 of 2 read the same code apart (intervals away from "
            "1.0: a bias of this machine's timing, not a difference in speed); intervals reach ±50.0 % from 1.0: "
            "a speedup must exceed about 1.500x to be measurable here") in out
    assert "back-to-back: reference/reference 1.000-1.000; intervals reach ±3.0 %" in out
    assert "CPU mode: host timings (the host's clock), not GPU kernel times." in out
