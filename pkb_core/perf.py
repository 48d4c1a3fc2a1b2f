"""Timing a job that passed its trials, and the checks that go with timing.

For each requested mode the reference and the candidate are timed interleaved
in the same processes (:func:`pkb_core.timing.time_interleaved`). Then:

* **re-check** (rigor rule 7): new inputs are written into the very buffers
  the timed callable is bound to, the callable runs again and its answer is
  compared with the reference on those inputs: a solution that caches its
  first answer fails here;
* **hidden work** (rule 8): on GPU, what a device-wide sync still waits for
  once the current stream's end event has completed;
* **physics floor** (rule 17): a candidate faster than the problem's traffic
  allows at this machine's calibrated rates is flagged;
* clocks, power and throttle reasons of every rank are logged;
* ``--profile`` writes per-rank Chrome traces of a few calls of each side.
"""
from __future__ import annotations

from pkb_core.check import compare
from pkb_core.clocks import read_clocks
from pkb_core.guards import harness_call
from pkb_core.job import _clone, _restore
from pkb_core.plan import ITEMSIZE
from pkb_core.roofline import below_floor, speed_of_light
from pkb_core.timing import GraphUnavailable, side_stream_check, summarize, time_interleaved

#: Trial index of the post-timing re-check (never used by correctness trials).
RECHECK_TRIAL = 1_000_000


def measure(runner, job, problem, program, bound):
    """Return ``(timing, found)``; ``found`` is an agreed ``(verdict, reason)`` or None."""
    fn, cand_args, pristine = bound
    ref_args = _clone(pristine)
    runner.status.write(job["key"], "timing")
    refreshers = {}
    if problem.mutates:
        refreshers = {"reference": lambda: _restore(ref_args, pristine, problem.mutates),
                      "candidate": lambda: _restore(cand_args, pristine, problem.mutates)}
    sides = {"reference": lambda: problem.reference(*ref_args), "candidate": fn}
    timing = {"modes": {}, "primary": job["timing_modes"][0]}
    for mode in job["timing_modes"]:
        runner.status.write(job["key"], f"timing {mode}")
        if mode != "latency" and problem.mutates:
            timing["modes"][mode] = {"unavailable": "the problem mutates its arguments: latency mode only"}
            continue
        if mode == "graph" and not getattr(problem.module, "CUDA_GRAPH", True):
            timing["modes"][mode] = {"unavailable": "the reference cannot be replayed from a CUDA graph "
                                                    "(CUDA_GRAPH = False in the problem)"}
            continue
        try:
            with harness_call():
                times = time_interleaved(sides, device=runner.device, group=runner.control, warmup=job["warmup"],
                                         iters=job["iters"], mode=mode, refreshers=refreshers)
            timing["modes"][mode] = {side: summarize(t) for side, t in times.items()}
        except GraphUnavailable as exc:
            timing["modes"][mode] = {"unavailable": str(exc)}
    primary = timing["modes"].get(timing["primary"], {})
    timing["reference"], timing["candidate"] = primary.get("reference"), primary.get("candidate")

    runner.status.write(job["key"], "re-check")
    local, fn = _recheck(runner, job, problem, program, cand_args, fn)
    if local is None:
        hidden = side_stream_check(fn, device=runner.device, group=runner.control)
        local = ("flagged", hidden) if hidden else None
    if local is None and runner.calibration and timing["candidate"]:
        traffic = problem.traffic(job["params"], runner.world_size, ITEMSIZE[job["dtype"]])
        timing["sol"] = speed_of_light(traffic, runner.calibration)
        busbw = getattr(problem.module, "busbw", None)
        if busbw:
            nbytes, factor = busbw(job["params"], runner.world_size, ITEMSIZE[job["dtype"]])
            timing["bus"] = {"bytes": nbytes, "factor": factor}
        impossible = below_floor(timing["candidate"]["median"], timing["sol"])
        local = ("flagged", impossible) if impossible else None
    clocks = [None] * runner.world_size
    import torch.distributed as dist

    with harness_call():
        dist.all_gather_object(clocks, read_clocks(runner.device), group=runner.control)
    if any(clocks):
        timing["clocks"] = clocks
    if job.get("profile"):
        timing["profile"] = _profile(runner, job, sides)
    return timing, runner.agree(local)


def _recheck(runner, job, problem, program, cand_args, fn):
    """Fresh inputs in the timed buffers; the candidate must follow them.

    Returns ``(local verdict or None, callable)``: the callable just launched
    on what the buffers now hold, for anything that runs the candidate
    afterwards (``fn`` only if that launch failed). Calling the old one on
    changed shapes fed problem 28's reference split sizes that no longer
    matched its tensors (2xH200, 2026-11-22)."""
    ctx = runner.context(job, problem, RECHECK_TRIAL)
    args = problem.inputs(ctx)
    pristine = _clone(args)
    placed = runner.slots.place(args)
    # Shapes that changed mean new views; the callable bound to the old ones
    # would read stale shapes, so rebind in that case.
    same = _same_layout(placed, cand_args)
    target = cand_args if same else placed
    rebound, out, local = runner.call_candidate(job, program, target, pristine, problem.mutates)
    fn = rebound or fn
    if local:
        return local, fn
    ref_out = problem.reference(*_clone(pristine))
    runner.sync()
    problem_text = compare(out, ref_out, problem.spec.tolerance)
    if problem_text:
        return ("fail", f"after timing, on new inputs in the same buffers: {problem_text} (a cached answer?)"), fn
    return None, fn


def _same_layout(a, b) -> bool:
    """Same tensors at the same addresses and the same non-tensor values.

    Python scalars drawn per trial (a problem's step size, say) live in the
    argument tuple, not in the buffers: when they changed, the old tuple would
    hand the candidate stale values, so the new one must be used.
    """
    import torch

    from pkb_core.check import leaves

    left, right = list(leaves(a)), list(leaves(b))
    if len(left) != len(right):
        return False
    for (_, x), (_, y) in zip(left, right):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.data_ptr() != y.data_ptr():
                return False
        elif x is not y:
            try:
                if not bool(x == y):
                    return False
            except Exception:  # noqa: BLE001 - no plain equality (an array, a module): rebind
                return False
    return True


def _profile(runner, job, sides):
    from pkb_core.profiling import profile_calls

    summary = {}
    for side, fn in sides.items():
        path = runner.run_dir / "profiles" / f"{job['slug']}-{side}-rank{runner.rank}.json"
        with harness_call():
            summary[side] = profile_calls(fn, device=runner.device, calls=5, trace_path=path)
    return summary

