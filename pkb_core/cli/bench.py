"""``pkb bench``: a message-size sweep of solutions against NCCL, nccl-tests style.

For each problem that defines ``sweep`` (the collectives) and each size, the
backend's solution and the reference are checked and timed in latency mode
(eager, one call per sample) and in CUDA-graph mode (host launch cost
removed); on GPU, the problem's strong non-NCCL baselines
(:mod:`pkb_core.baselines`, e.g. torch symm_mem one-shot/two-shot all-reduce)
are timed too. The table gives times in microseconds, speedups, and algbw /
busbw as nccl-tests defines them. Records land in the run directory like any
``pkb run``.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import click

from pkb_core.errors import PkbError
from pkb_core.plugin.reference_backend import NAME as REFERENCE
from pkb_core.cli.table import render_table

DEFAULT_SIZES = "4K,64K,256K,1M,8M,64M,256M"
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_sizes(text: str) -> list[int]:
    sizes = []
    for part in (p.strip().upper() for p in text.split(",") if p.strip()):
        unit = _UNITS.get(part[-1].rstrip("B"), 1) if part[-1] in "KMG" else 1
        number = part[:-1] if part[-1] in "KMG" else part
        try:
            sizes.append(int(float(number) * unit))
        except ValueError:
            raise PkbError(f"cannot read size {part!r} (use e.g. 4K, 1M, 256M)") from None
    return sizes


@click.command()
@click.option("--problem", "problems", default="collective", show_default=True)
@click.option("--backend", required=True, help="Backend plugin whose solutions run (see `pkb backends`).")
@click.option("--solutions", default=None, help="Directory of solutions (default: the backend's samples).")
@click.option("--sizes", default=DEFAULT_SIZES, show_default=True, help="Per-rank message sizes.")
@click.option("--nproc", type=int, default=None)
@click.option("--dtype", type=click.Choice(["auto", "bf16", "fp16", "fp32"]), default="auto")
@click.option("--trials", type=int, default=2, show_default=True)
@click.option("--warmup", type=int, default=20, show_default=True)
@click.option("--iters", type=int, default=50, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto")
@click.option("--timeout", "job_timeout", type=float, default=None, help="Seconds per job (default 120 CPU, 300 GPU).")
@click.option("--out", default=None)
@click.option("--baselines/--no-baselines", default=True, show_default=True,
              help="Also time torch symm_mem's all-reduce kernels (one_shot, two_shot) on GPU.")
@click.option("--json", "json_", is_flag=True)
@click.pass_obj
def bench(pm, problems, backend, solutions, sizes, nproc, dtype, trials, warmup, iters, device, job_timeout, out,
          baselines, json_):
    """Sweep message sizes: solutions vs NCCL (eager and CUDA graph), with busbw."""
    from pkb_core.baselines import baselines_for
    from pkb_core.machine.calibrate import calibrate
    from pkb_core.machine.device import detect_device, device_count
    from pkb_core.launch.launcher import LaunchSettings, run_jobs
    from pkb_core.launch.plan import ITEMSIZE, RunRequest, make_job, pair_solutions
    from pkb_core.plugin.manager import get_backend_info
    from pkb_core.problem.registry import build_registry

    device = detect_device(device)
    info = get_backend_info(pm, backend)
    missing = info.unavailable_reason(device)
    if missing:
        raise PkbError(missing)
    nproc = nproc or max(device_count(device), 1)
    dtype = ("bf16" if device == "cuda" else "fp32") if dtype == "auto" else dtype
    itemsize = ITEMSIZE[dtype]
    modes = ("latency", "graph") if device == "cuda" else ("latency",)
    run_dir = Path(out or Path("runs") / ("bench-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S")))
    request = RunRequest(problems=problems, backend=backend, solution=None, solutions=solutions, nproc=nproc,
                         trials=trials, dtype=dtype, size="default", mode="eval", measure_perf=True, warmup=warmup,
                         iters=iters, save_outputs=False, timing_modes=modes)
    registry = build_registry(pm)
    jobs, baseline_jobs = [], []
    for spec, path, label in pair_solutions(request, registry, info):
        module = spec.load().module
        if not hasattr(module, "sweep"):
            continue
        for nbytes in parse_sizes(sizes):
            params = module.sweep(nbytes, nproc, itemsize)
            request.size = f"sweep:{nbytes}"
            jobs.append(make_job(request, spec, path, label, params=params))
            if device == "cuda" and baselines:
                baseline_request = RunRequest(**{**request.__dict__, "backend": REFERENCE})
                for baseline in baselines_for(spec.key):
                    baseline_jobs.append(make_job(baseline_request, spec, baseline, baseline.stem, params=params))
    if not jobs:
        raise PkbError(f"no selected problem defines a sweep ({problems})")
    calibration = calibrate(device)
    progress = lambda record: click.echo(f"{record['problem']} {record['size']} {record['solution']}: "
                                         f"{record['verdict']}", err=True)
    reference = get_backend_info(pm, REFERENCE)
    for batch_info, batch in ((info, jobs), (reference, baseline_jobs)):
        if batch:
            settings = LaunchSettings(nproc=nproc, device=device, backend=batch_info.name, run_dir=run_dir,
                                      job_timeout=job_timeout or (300.0 if device == "cuda" else 120.0),
                                      calibration=calibration, preload=tuple(batch_info.preload()),
                                      custom_kernels=batch_info.custom_kernels)
            run_jobs(batch, settings, on_record=progress)
    from pkb_core.results.records import read_records

    keys = {job["key"] for job in jobs + baseline_jobs}
    records = [r for r in read_records(run_dir) if r["key"] in keys]
    if json_:
        click.echo(json.dumps({"run_dir": str(run_dir), "results": records}, indent=2))
    else:
        click.echo(sweep_table(records, modes))
        click.echo(f"\n(records in {run_dir}/records.jsonl)")


def _median_us(record, mode, side):
    stats = record.get("stats", {}).get("modes", {}).get(mode, {}).get(side)
    return stats["median"] * 1e3 if stats else None


def sweep_table(records, modes=("latency", "graph")) -> str:
    """One row per (problem, size, solution): times in us, speedups, busbw in GB/s."""
    rows = []
    for r in sorted(records, key=lambda r: (r["problem_id"], int(r["size"].split(":")[1]), r["solution"])):
        nbytes = int(r["size"].split(":")[1])
        ref_eager, sol_eager = _median_us(r, "latency", "reference"), _median_us(r, "latency", "candidate")
        ref_graph, sol_graph = _median_us(r, "graph", "reference"), _median_us(r, "graph", "candidate")
        bus = r.get("stats", {}).get("bus")
        best_sol = min(t for t in (sol_eager, sol_graph) if t) if sol_eager else None

        def busbw(t):
            return bus["bytes"] / (t * 1e-6) * bus["factor"] / 1e9 if bus and t else None

        rows.append([r["problem"], _human(nbytes), r["solution"], r["verdict"], ref_eager, ref_graph, sol_eager,
                     sol_graph, _ratio(ref_eager, sol_eager), _ratio(ref_graph, sol_graph), busbw(ref_graph or ref_eager),
                     busbw(best_sol)])
    headers = ["problem", "size", "solution", "verdict", "NCCL us", "NCCL graph us", "sol us", "sol graph us",
               "x eager", "x graph", "NCCL busbw", "sol busbw"]
    if "graph" not in modes:
        keep = [i for i, h in enumerate(headers) if "graph" not in h]
        headers = [headers[i] for i in keep]
        rows = [[row[i] for i in keep] for row in rows]
    return render_table(headers, rows)


def _ratio(a, b):
    return a / b if a and b else None


def _human(nbytes):
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size}{unit}"
    return str(nbytes)
