"""``pkb run``: parse options, plan jobs, run them, show the results."""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import click

from pkb_core.errors import PkbError
from pkb_core.plugin.reference_backend import NAME as REFERENCE
from pkb_core.launch.fanout import executor_options
from pkb_core.cli.progress import JobProgress
from pkb_core.launch.plan import TIMING_DEFAULTS
from pkb_core.results.records import append_record, job_record
from pkb_core.cli.table import render_table

#: Verdicts that make ``pkb run`` exit with status 1.
FAILING = {"fail", "error", "compile-error", "timeout", "crash", "flagged"}


@click.command()
@click.option("--problem", "problems", default=None,
              help="Ids, names, categories, ranges (1-8) or 'all', comma-separated. Default: all (or the "
                   "problem a --solution file is named after).")
@click.option("--backend", default=REFERENCE, show_default=True, help="Backend plugin (see `pkb backends`).")
@click.option("--solution", default=None, help="A solution file (defines solution(*inputs)).")
@click.option("--solutions", default=None, help="A directory of <id>_<name>*.py solution files.")
@click.option("--nproc", type=int, default=None, help="Ranks (default: every GPU; 2 in CPU mode).")
@click.option("--nnodes", type=int, default=1, show_default=True, help="Nodes of one job (torchrun c10d rendezvous).")
@click.option("--node-rank", type=int, default=0, show_default=True, help="This node's rank (with --nnodes).")
@click.option("--rdzv-endpoint", default=None, help="host:port of the rendezvous (with --nnodes > 1).")
@click.option("--rdzv-id", default="pkb", show_default=True, help="Rendezvous id, the same on every node.")
@click.option("--trials", type=int, default=5, show_default=True, help="Correctness trials, fresh inputs each.")
@click.option("--dtype", type=click.Choice(["auto", "bf16", "fp16", "fp32"]), default="auto", show_default=True,
              help="Working dtype (auto: bf16 on GPU, fp32 on CPU).")
@click.option("--size", type=click.Choice(["auto", "tiny", "default", "large"]), default="auto", show_default=True,
              help="Size preset (auto: default on GPU, tiny on CPU).")
@click.option("--mode", type=click.Choice(["eval", "dryrun"]), default="eval", show_default=True,
              help="eval checks against the reference; dryrun runs only the candidate and saves its outputs.")
@click.option("--measure-perf", is_flag=True, help="Time the reference and the candidate.")
@click.option("--timing-mode", "timing_modes", default="latency", show_default=True,
              help="Comma-separated: latency, back-to-back, graph (the first gives the headline numbers).")
@click.option("--profile", is_flag=True, help="Save per-rank profiler traces of a few calls (needs --measure-perf).")
@click.option("--warmup", type=int, default=None, help="Warm-up iterations (default by size).")
@click.option("--iters", type=int, default=None,
              help="At most this many timed calls per side and mode (default by size: 20 tiny, 1000 default, "
                   "200 large); sampling stops earlier once both medians are known within +-1 %.")
@click.option("--min-iters", type=int, default=None,
              help="At least this many timed calls per side and mode (default by size: 10, 100, 50; at most --iters).")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True)
@click.option("--build-timeout", type=float, default=600.0, show_default=True,
              help="Seconds one solution's build may take in the compile phase before any job runs.")
@click.option("--build-jobs", type=int, default=None,
              help="Builds at once in the compile phase (default: by the node's cores and memory).")
@click.option("--timeout", "job_timeout", type=float, default=None,
              help="Seconds a job may run before it is a timeout (default 120 on CPU, 300 on GPU).")
@click.option("--out", default=None, help="Run directory (default runs/<time>); reruns skip recorded jobs.")
@click.option("--save-outputs", is_flag=True, help="Keep each rank's outputs in the run directory.")
@click.option("--json", "json_", is_flag=True, help="Print one JSON object with every record.")
@click.pass_obj
@executor_options  # --executor, --jobs-per-shard, --slurm-*: pkb_core/launch/fanout.py
def run(pm, problems, backend, solution, solutions, nproc, nnodes, node_rank, rdzv_endpoint, rdzv_id, trials, dtype, size, mode, measure_perf, timing_modes,
        profile, warmup, iters, min_iters, device, build_timeout, build_jobs, job_timeout, out, save_outputs, json_, executor):
    """Check (and with --measure-perf, time) solutions against the references."""
    from pkb_core.machine.device import detect_device, device_count
    from pkb_core.launch.launcher import LaunchSettings, Nodes
    from pkb_core.launch.plan import RunRequest, make_job, pair_solutions
    from pkb_core.plugin.manager import get_backend_info
    from pkb_core.problem.registry import build_registry

    # SLURM shards run on other nodes: this machine's GPUs and toolchain say nothing about them.
    device = detect_device(device) if executor.runs_here else executor.node_device(device)
    info = get_backend_info(pm, backend)
    missing = info.unavailable_reason(device) if executor.runs_here else None
    if missing:
        raise PkbError(missing)
    if size == "auto":
        size = "default" if device == "cuda" else "tiny"
    if device == "cpu":
        click.echo(f"No GPU: CPU mode (gloo, shared-memory heap, Triton interpreter), size {size}.", err=True)
    nproc = nproc or executor.default_nproc() or max(device_count(device), 1)
    if executor.runs_here and device == "cuda" and nproc > device_count(device):
        raise PkbError(f"--nproc {nproc} but only {device_count(device)} GPU(s) here")
    nodes = None
    if nnodes > 1:
        executor.check_nnodes(nnodes)
        if not rdzv_endpoint:
            raise PkbError("--nnodes > 1 needs --rdzv-endpoint host:port (the same on every node)")
        nodes = Nodes(nnodes=nnodes, node_rank=node_rank, endpoint=rdzv_endpoint, rdzv_id=rdzv_id)
    world_size = nproc * nnodes
    dtype = ("bf16" if device == "cuda" else "fp32") if dtype == "auto" else dtype
    default_warmup, default_min, default_iters = TIMING_DEFAULTS[size]
    iters = default_iters if iters is None else iters
    if min_iters is not None and min_iters > iters:
        raise PkbError(f"--min-iters {min_iters} is more than --iters {iters} (the most timed calls)")
    request = RunRequest(problems=problems, backend=backend, solution=solution, solutions=solutions, nproc=world_size,
                         trials=trials, dtype=dtype, size=size, mode=mode, measure_perf=measure_perf,
                         warmup=default_warmup if warmup is None else warmup, iters=iters,
                         min_iters=min(default_min, iters) if min_iters is None else min_iters,
                         save_outputs=save_outputs, timing_modes=_timing_modes(timing_modes), profile=profile)
    registry = build_registry(pm)
    run_dir = Path(out or Path("runs") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S"))
    jobs, rejected = [], []
    for spec, path, label in pair_solutions(request, registry, info):
        job = make_job(request, spec, path, label)
        why = spec.load().world_size_error(world_size, job["params"])
        (rejected if why else jobs).append((job, why))
    for job, why in rejected:
        append_record(run_dir, job_record(job, world_size, "unsupported", f"world size {world_size}: {why}"))
    total = len(jobs) + len(rejected)
    progress = JobProgress(total, quiet=json_)
    for job, _ in rejected:
        progress({"problem": job["problem"], "solution": job["solution_label"], "verdict": "unsupported"})
    backend_options = getattr(pm, "pkb_config", {}).get("backends", {}).get(backend, {})
    calibration = None
    if measure_perf and jobs and executor.runs_here:
        from pkb_core.machine.calibrate import calibrate

        calibration = calibrate(device)
    settings = LaunchSettings(nproc=nproc, device=device, backend=backend, run_dir=run_dir,
                              job_timeout=job_timeout or (300.0 if device == "cuda" else 120.0),
                              options=backend_options, calibration=calibration, nodes=nodes,
                              preload=tuple(info.preload()), custom_kernels=info.custom_kernels,
                              build_timeout=build_timeout, build_workers=build_jobs)
    progress.start()
    try:
        executor.run([job for job, _ in jobs], settings, on_record=progress,
                     on_build=None if json_ else build_progress)
    finally:
        progress.close()
    from pkb_core.results.records import read_records

    keys = {job["key"] for job, _ in jobs + rejected}
    records = [r for r in read_records(run_dir) if r["key"] in keys]
    if nodes and nodes.node_rank != 0 and not records:
        click.echo(f"node {node_rank} of {nnodes}: done; records are written where global rank 0 ran", err=True)
    if json_:
        click.echo(json.dumps({"run_dir": str(run_dir), "results": records}, indent=2))
    else:
        click.echo(summary_table(records))
        click.echo(f"\n{_counts(records)}  (records in {run_dir}/records.jsonl)")
    if any(r["verdict"] in FAILING for r in records):
        raise SystemExit(1)


def build_progress(path, result, done, total) -> None:
    """One line per finished build of the compile phase (stderr)."""
    state = "cached" if result.cached else ("built" if result.ok else "compile-error")
    seconds = "" if result.cached else f"  {result.seconds:.1f} s"
    click.echo(f"build [{done}/{total}] {Path(path).name}  {state}{seconds}", err=True)


def _timing_modes(text: str) -> tuple:
    from pkb_core.judge.timing import MODES

    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise PkbError(f"unknown timing mode {', '.join(unknown) or text!r} (choose from {', '.join(MODES)})")
    return modes


def summary_table(records) -> str:
    """The run's table: medians, the speedup with its 95 % interval and what it
    reads as (faster, slower, no measurable difference; docs/timing.md)."""
    rows = []
    for r in sorted(records, key=lambda r: (r["problem_id"], r["solution"])):
        ci = r.get("speedup_ci")
        rows.append([r["problem"], r["solution"], r["world_size"], r["size"], r["verdict"],
                     r.get("reference_ms"), r.get("solution_ms"), r.get("speedup"),
                     f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "", r.get("difference") or "",
                     _short(r.get("reason", ""))])
    table = render_table(["problem", "solution", "W", "size", "verdict", "ref ms", "sol ms", "speedup",
                          "95% interval", "vs reference", "reason"], rows)
    if any(r.get("clock") == "host" and r.get("speedup") for r in records):
        table += ("\n\nCPU mode: times are host timings (the host's clock around each call), not GPU kernel "
                  "times; `pkb report` leaves them out of fast_p unless --include-cpu.")
    return table


def _counts(records) -> str:
    counts = {}
    for r in records:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))


def _short(text, limit=100):
    return text if len(text) <= limit else text[: limit - 3] + "..."
