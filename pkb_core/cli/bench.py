"""``pkb bench``: a message-size sweep of solutions against NCCL, nccl-tests style.

For each problem that defines ``sweep`` (the collectives) and each size, the
backend's solution and the reference are checked and timed in the modes of
``--timing-mode`` (default: ``window``, the headline, with ``latency`` and ``graph`` beside it on
GPU; the headline alone on CPU); on GPU, the problem's strong non-NCCL baselines
(:mod:`pkb_core.baselines`, e.g. torch symm_mem one-shot/two-shot all-reduce)
are timed too. The table gives times in microseconds, speedups, and busbw in
GB/s as nccl-tests defines it, under the name of the reference's library (NCCL on
GPU, gloo in CPU mode); it ends, like nccl-tests, with ``# Avg bus bandwidth :
X GB/s`` (the mean of the backend's solutions' busbw over the passing rows).
Progress goes to stderr as ``[i/n]`` lines. Records land in the run directory
like any ``pkb run`` (a rerun skips recorded jobs unless ``--force``); the exit
status is ``pkb run``'s.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path

import click

from pkb_core.cli.numbers import FiniteFloatRange
from pkb_core.cli.config_values import ListOption
from pkb_core.cli.limits import limit_options

from pkb_core.contracts.verdict import Verdict
from pkb_core.errors import BadOption, NothingSelected, Terminated
from pkb_core.plugin.reference_backend import NAME as REFERENCE
from pkb_core.results.table import render_table

DEFAULT_SIZES = "4K,64K,256K,1M,8M,64M,256M"
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_sizes(text: str) -> list[int]:
    """``"4K,1M"`` -> bytes (K, M, G are powers of 1024; a trailing B or iB is allowed)."""
    sizes = []
    if text.strip() and any(not p.strip() for p in text.split(",")):
        raise click.BadParameter(f"{text!r} has an empty size between its commas")
    for given in (p.strip() for p in text.split(",") if p.strip()):
        part = given.upper()
        text_ = part[:-1] if part.endswith("IB") else part
        text_ = text_[:-1] if text_.endswith("B") and len(text_) > 1 else text_
        unit = _UNITS.get(text_[-1], 1) if text_ else 1
        number = text_[:-1] if text_ and text_[-1] in _UNITS else text_
        try:
            nbytes = int(float(number) * unit)
        except ValueError:
            raise click.BadParameter(f"cannot read size {given!r} (use e.g. 4K, 1M, 256M)") from None
        if nbytes <= 0:
            raise click.BadParameter(f"size {given!r} is not a positive number of bytes")
        if nbytes in sizes:  # two jobs of one key: the table showed one's numbers twice
            raise click.BadParameter(f"size {given!r} is {nbytes} bytes, given already")
        sizes.append(nbytes)
    if not sizes:
        raise click.BadParameter("no size given (use e.g. 4K,1M,256M)")
    return sizes


def _read_modes(value) -> tuple:
    """``--timing-mode`` read as ``pkb run`` reads it, while the command line is (its errors then
    name the option); () when not given."""
    from pkb_core.cli.run import _timing_modes

    return () if value is None else _timing_modes(value)


def _read_sizes(ctx, param, value) -> list[int]:
    """``--sizes`` in bytes, read while the command line is (its error then names where the value
    came from: typed, the environment or pkb.toml)."""
    return parse_sizes(value)


@click.command()
@click.option("--problem", "problems", cls=ListOption, default="collective", show_default=True)
@click.option("--backend", required=True, help="Backend plugin whose solutions run (see `pkb backends`).")
@click.option("--solutions", default=None, help="Directory of solutions (default: the backend's samples).")
@click.option("--sizes", cls=ListOption, default=DEFAULT_SIZES, show_default=True, callback=_read_sizes,
              help="Per-rank message sizes.")
@click.option("--nproc", type=click.IntRange(min=1), default=None, help="Ranks (default: every GPU; 2 in CPU mode).")
@click.option("--dtype", type=click.Choice(["auto", "bf16", "fp16", "fp32"]), default="auto")
@click.option("--trials", type=click.IntRange(min=1), default=2, show_default=True,
              help="Correctness trials per size before timing.")
@click.option("--warmup", type=click.IntRange(min=0), default=20, show_default=True, help="Warm-up iterations.")
@click.option("--iters", type=click.IntRange(min=1), default=50, show_default=True, help="Timed iterations.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto")
@click.option("--timeout", "job_timeout", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Seconds per job (default 120 CPU, 300 GPU).")
@click.option("--build-timeout", type=FiniteFloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds one solution's build may take in the compile phase before any job runs.")
@click.option("--build-jobs", type=click.IntRange(min=1), default=None,
              help="Builds at once in the compile phase (default: by the node's cores and memory).")
@click.option("--out", default=None, help="Run directory (default runs/bench-<time>); a rerun skips recorded jobs.")
@click.option("--force", is_flag=True, help="Rerun jobs that already have a record in --out, replacing their records.")
@click.option("--baselines/--no-baselines", default=True, show_default=True,
              help="Also time torch symm_mem's all-reduce kernels (one_shot, two_shot) on GPU.")
@click.option("--timing-mode", "timing_modes", cls=ListOption, default=None,
              callback=lambda ctx, param, value: _read_modes(value),
              help="Timing modes (default: window, the headline, with latency and graph beside it on GPU; "
                   "window alone on CPU; docs/timing.md). busbw is from the fastest.")
@click.option("--json", "json_", is_flag=True)
@click.pass_obj
@limit_options  # --memory-limit, --max-processes, --log-cap: pkb_core/cli/limits.py
def bench(pm, problems, backend, solutions, sizes, nproc, dtype, trials, warmup, iters, device, job_timeout,
          build_timeout, build_jobs, out, force, baselines, timing_modes, json_, limits):
    """Sweep message sizes: solutions vs NCCL (eager and CUDA graph), with busbw."""
    from pkb_core.baselines import baselines_for
    from pkb_core.cli.config import config_of
    from pkb_core.cli.progress import JobProgress, stopped_by
    from pkb_core.cli.run import (CPU_QUICK_BYTES, CPU_TIMING_NOTE, FAILING, hold_run_dir_for_command,
                                  skipping_notice, writable_paths)
    from pkb_core.contracts.dtypes import ITEMSIZE
    from pkb_core.launch.plan import (RunRequest, device_defaults, pair_solutions, refuse_a_world_nothing_runs_at,
                                      skip_recorded)
    from pkb_core.launch.session import Session

    session = Session.here(pm, config_of(), device=device, backend=backend, world_size=nproc, what="--nproc")
    device, nproc, info = session.device, session.world_size, session.info
    _, dtype = device_defaults(device, dtype=dtype)
    itemsize = ITEMSIZE[dtype]
    ragged = [nbytes for nbytes in sizes if nbytes % itemsize]
    if ragged:  # a size of 3 bytes ran as one 4-byte element, labelled 3
        raise BadOption(f"--sizes {_human(ragged[0])} is not a whole number of {dtype} elements "
                        f"({itemsize} bytes each)")
    from pkb_core.contracts.modes import headline_mode

    # By default the judge's device clock (the headline) with the launcher's clocks beside it as
    # diagnostics on GPUs; on CPU a sweep stays one mode, the headline.
    default = (headline_mode(device), "latency", "graph") if device == "cuda" else (headline_mode(device),)
    modes = timing_modes or default
    run_dir = Path(out or Path("runs") / ("bench-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S")))
    request = RunRequest(problems=problems, backend=backend, solution=None, solutions=solutions, nproc=nproc,
                         trials=trials, dtype=dtype, size="default", mode="eval", measure_perf=True, warmup=warmup,
                         iters=iters, save_outputs=False, timing_modes=modes)
    pairs, no_sweep = [], []
    for spec, path, label in pair_solutions(request, session.registry, info):
        (pairs if hasattr(spec.load().module, "sweep") else no_sweep).append((spec, path, label))
    no_sweep = [spec.key for spec, _, _ in no_sweep]

    def message_sizes(spec, problem):
        return [(f"sweep:{nbytes}", problem.module.sweep(nbytes, nproc, itemsize)) for nbytes in sizes]

    jobs, rejected = session.plan(request, pairs, expand=message_sizes)
    refuse_a_world_nothing_runs_at(nproc, jobs, rejected)
    baseline_jobs = []
    reference = session.sibling(backend=REFERENCE)
    if device == "cuda" and baselines:
        baseline_request = RunRequest(**{**request.__dict__, "backend": REFERENCE})
        baseline_pairs = [(spec, path, path.stem) for spec in {s.key: s for s, _, _ in pairs}.values()
                          for path in baselines_for(spec.key)]
        baseline_jobs, _ = reference.plan(baseline_request, baseline_pairs, expand=message_sizes)
    if no_sweep and problems != "collective":
        click.echo(f"note: skipping {', '.join(no_sweep)} (no sweep() to size it by bytes)", err=True)
    if not jobs and not rejected:
        raise NothingSelected(f"no selected problem defines a sweep ({problems})")
    if device == "cpu":
        click.echo("No GPU: CPU mode (gloo, shared-memory heap, Triton interpreter): times are host timings, "
                   "not GPU performance.", err=True)
        slow = [nbytes for nbytes in sizes if nbytes > CPU_QUICK_BYTES]
        if slow:
            click.echo(f"note: sizes above {_human(CPU_QUICK_BYTES)} ({', '.join(map(_human, slow))}) can take "
                       "minutes a job on the CPU (1M: about two); --sizes 4K,16K,64K takes seconds to tens of "
                       "seconds a job", err=True)
    writable_paths(run_dir, None)
    hold_run_dir_for_command(run_dir)
    keys = [job.key for job, _ in rejected] + [job.key for job in jobs + baseline_jobs]
    earlier = skip_recorded(run_dir, keys, force)
    recorded = set(earlier)
    if recorded:
        click.echo(skipping_notice(recorded, run_dir), err=True)
    progress = JobProgress(len(keys) - len(recorded), quiet=json_,
                           label=lambda r: f"{r.problem}  {_human(int(r.size.split(':')[1]))}  {r.solution}")
    session.observe(progress)
    reporter = session.reporter
    pending = [[job for job in batch if job.key not in recorded] for batch in (jobs, baseline_jobs)]
    interrupted = False
    with session:
        session.refuse(rejected, run_dir, recorded)
        progress.start()
        try:
            for batch_session, batch in ((session, pending[0]), (reference, pending[1])):
                if batch:
                    settings = batch_session.settings(run_dir, calibrated=True, job_timeout=job_timeout,
                                                      build_timeout=build_timeout, build_workers=build_jobs,
                                                      **limits)
                    batch_session.run(batch, settings)
        except (KeyboardInterrupt, Terminated) as stop:
            # As pkb run: the table of what finished, and how to resume (a new user's Ctrl-C said only
            # "Interrupted", and bench's default --out is a new folder each time).
            interrupted = stop
        finally:
            progress.close()
    by_key = {**earlier, **{r.key: r for r in reporter.records}}
    records = [by_key[k] for k in keys if k in by_key]
    library = reference_library(device)
    own = {job.key for job in jobs}
    average = avg_busbw([r for r in records if r.key in own], modes=modes)
    if json_:
        click.echo(json.dumps({"run_dir": str(run_dir), "reference": library, "avg_busbw_gbps": average,
                               "results": [r.to_json() for r in records]}, indent=2))
    else:
        click.echo(sweep_table(records, modes, library))
        click.echo(f"\n(records in {run_dir}/records.jsonl)")
        click.echo(SWEEP_SPEEDUP_NOTE)
        if device == "cpu":
            click.echo(CPU_TIMING_NOTE)
        not_passed = sum(r.verdict != Verdict.PASS for r in records)
        reference_avg = avg_busbw([r for r in records if r.key in own], side="reference", modes=modes)
        click.echo(f"# Jobs not passed : {not_passed}")
        click.echo(f"# Avg bus bandwidth of {library} : " + _gbps(reference_avg))
        click.echo("# Avg bus bandwidth : " + _gbps(average))
    if interrupted:
        click.echo(f"{stopped_by(interrupted)}: {len(keys) - len(records)} job(s) not run; the same command with "
                   f"--out {run_dir} resumes", err=True)
        raise interrupted
    if any(r.verdict in FAILING for r in records):
        raise SystemExit(1)


#: Printed under the sweep's table: what its speedup columns are, and where their intervals are.
SWEEP_SPEEDUP_NOTE = ("note: `x <mode>` is the mode's speedup, the median of the rounds' paired ratios (each round "
                      "times both sides), so it need not be the ratio of the two medians beside it; each job's line "
                      "above gives its 95 % interval and whether the difference is measurable (docs/timing.md)")


def reference_library(device: str) -> str:
    """What the reference's collectives run on: NCCL on GPU, gloo in CPU mode."""
    return "NCCL" if device == "cuda" else "gloo"


def _mode_timing(record, mode):
    """The record's timing of ``mode`` (:class:`ModeTiming`), None where it has none."""
    return record.stats.modes.get(mode) if record.stats else None


def _median_us(record, mode, side):
    timing = _mode_timing(record, mode)
    stats = getattr(timing, side) if timing else None
    return stats.median * 1e3 if stats else None


def _busbw(record, t_us):
    """nccl-tests' bus bandwidth in GB/s of a call taking ``t_us`` microseconds."""
    bus = record.stats.bus if record.stats else None
    return bus["bytes"] / (t_us * 1e-6) * bus["factor"] / 1e9 if bus and t_us else None


def _best(*times):
    times = [t for t in times if t]
    return min(times) if times else None


def avg_busbw(records, side: str = "candidate", modes=None):
    """Mean busbw (GB/s) of the solutions over the passing ``records`` (``side="reference"``:
    of the reference on the same rows), each from its fastest of ``modes`` (default: every
    mode it was timed in), nccl-tests' ``# Avg bus bandwidth``; None without any."""
    values = []
    for r in records:
        if r.verdict != Verdict.PASS:
            continue
        bw = _busbw(r, _fastest_us(r, modes, side))
        if bw is not None:
            values.append(bw)
    return sum(values) / len(values) if values else None


def _fastest_us(record, modes, side):
    """The side's fastest median (us) over ``modes`` (None: every mode of the record)."""
    if modes is None:
        modes = list(record.stats.modes) if record.stats else []
    return _best(*(_median_us(record, mode, side) for mode in modes))


def _gbps(value) -> str:
    return "n/a (no passing timed job)" if value is None else f"{value:{fixed_format([value])}} GB/s"


def sweep_table(records, modes=("window",), library: str = "NCCL") -> str:
    """One row per (problem, size, solution): per mode the two sides' median times in us and the
    mode's speedup (the median of its rounds' ratios); busbw in GB/s from each side's fastest
    mode (fixed point)."""
    rows = []
    for r in sorted(records, key=lambda r: (r.problem_id, int(r.size.split(":")[1]), r.solution)):
        nbytes = int(r.size.split(":")[1])
        row = [r.problem, _human(nbytes), r.solution, r.verdict]
        for mode in modes:
            row += [_median_us(r, mode, "reference"), _median_us(r, mode, "candidate"), _speedup(r, mode)]
        row += [_busbw(r, _fastest_us(r, modes, "reference")), _busbw(r, _fastest_us(r, modes, "candidate"))]
        rows.append(row)
    headers = ["problem", "size", "solution", "verdict"]
    for mode in modes:
        headers += [f"{library} {mode} us", f"sol {mode} us", f"x {mode}"]
    headers += [f"{library} busbw GB/s", "sol busbw GB/s"]
    return render_table(headers, rows, formats={i: fixed_format([row[i] for row in rows])
                                                for i in range(4, len(headers))})


def fixed_format(values) -> str:
    """A fixed-point format for a column: 2 decimals (nccl-tests'), more when the smallest
    non-zero value would otherwise show fewer than 2 significant digits (at most 6)."""
    small = [abs(v) for v in values if isinstance(v, (int, float)) and v]
    if not small:
        return ".2f"
    decimals = 1 - math.floor(math.log10(min(small)))
    return f".{max(2, min(6, decimals))}f"


def _speedup(record, mode):
    """The mode's speedup as its record keeps it (:meth:`ModeTiming.speedup_value`): the number the
    job's own line printed, not the ratio of the two medians beside it in the table (they differ
    where a side's rounds sit on two levels)."""
    timing = _mode_timing(record, mode)
    return timing.speedup_value() if timing else None


def _human(nbytes):
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size}{unit}"
    return str(nbytes)
