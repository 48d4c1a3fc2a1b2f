"""Rank side of a launch: ``python -m pkb_core.worker BATCH.json`` under torchrun.

One launch runs a batch of jobs that share a backend and a world size:
init the process group and the backend once, then for each job compile,
run the trials, time, and (rank 0) append the job's record; finalize always.

Each rank keeps a small status file (``<scratch>/rank<local rank>.json``: job, phase,
error) that the launcher's watchdog reads, so a job that hangs or crashes is
named, and an error on one rank is reported even when its peers hang.
"""
from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

from pkb_core.preload import import_torch_after_preloads

import_torch_after_preloads()  # a backend's own build of a library must load before torch's

import torch  # noqa: E402
import torch.distributed as dist

from pkb_core.backend import WorkerContext
from pkb_core.defaults import CoreDefaults
from pkb_core.errors import BackendUnavailable, PkbError
from pkb_core.guards import CollectiveGuard, TamperGuard
from pkb_core.job import JobRunner, _describe
from pkb_core.plugins import backend_infos, get_plugin_manager
from pkb_core.problem import read_spec
from pkb_core.results import append_record, job_record, machine_info
from pkb_core.symmetric import default_heap, forget_allocations


class StatusFile:
    """This rank's last known job and phase, replaced atomically."""

    def __init__(self, scratch: Path, rank: int):
        self.path = scratch / f"rank{rank}.json"

    def write(self, job: str, phase: str, error: str = "") -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"job": job, "phase": phase, "error": error, "time": time.time(),
                                   "pid": os.getpid()}))
        os.replace(tmp, self.path)


def _worker_plugin_manager(backend: str):
    """Exactly one backend plugin plus the core defaults."""
    pm = get_plugin_manager(backend=backend)
    names = set(backend_infos(pm))
    if names != {backend}:
        raise PkbError(f"worker expected backend {backend!r}, loaded {sorted(names) or 'none'}")
    defaults = CoreDefaults()
    pm.register(defaults, name="pkb_core.defaults")
    return pm, defaults


def run_batch(batch: dict) -> None:
    # The launcher sends SIGUSR1 before killing a stuck launch: every rank then
    # writes its Python stack to the launch log, which names where it hung.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    run_dir = Path(batch["run_dir"])
    scratch = Path(batch["scratch"])
    # Named by local rank: each node's launcher watches its own ranks.
    status = StatusFile(scratch, local_rank)
    status.write("", "init")
    timeout = timedelta(seconds=batch["job_timeout"] + 60)
    if batch["device"] == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, timeout=timeout)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
        dist.init_process_group("gloo", timeout=timeout)
    control = dist.new_group(backend="gloo", timeout=timeout)
    pm, defaults = _worker_plugin_manager(batch["backend"])
    # Captured before any solution is imported (rigor rules 6 and 9).
    tamper = TamperGuard()
    guard = None
    if backend_infos(pm)[batch["backend"]].custom_kernels:
        guard = CollectiveGuard()
        guard.install()
    info = machine_info(device) if rank == 0 else None
    state = None
    clean_exit = False
    ctx = WorkerContext(rank=rank, world_size=world_size, local_rank=local_rank, device=device,
                        control_group=control, run_dir=run_dir, options=batch.get("options", {}))
    try:
        try:
            state = pm.hook.pkb_backend_init(ctx=ctx)
        except BackendUnavailable as exc:
            for job in batch["jobs"]:
                if rank == 0:
                    append_record(run_dir, job_record(job, world_size, "unsupported", str(exc), machine=info))
            clean_exit = True
            return
        defaults.heap = default_heap(device, control, batch["run_id"])
        runner = JobRunner(pm=pm, state=state, rank=rank, world_size=world_size, device=device,
                           control=control, secret=batch["secret"], run_dir=run_dir, status=status,
                           guard=guard, tamper=tamper, calibration=batch.get("calibration"))
        for job in batch["jobs"]:
            status.write(job["key"], "compile")
            started = time.time()
            try:
                problem = read_spec(job["problem_path"]).load()
                outcome = runner.run(job, problem)
            except Exception as exc:
                # The ranks may now disagree about where they are (a peer died,
                # a collective was left half done): end the launch. The launcher
                # records this job from the status files and relaunches the rest.
                status.write(job["key"], "harness", error=f"harness error: {_describe(exc)}")
                raise
            if rank == 0:
                append_record(run_dir, job_record(
                    job, world_size, outcome.verdict, outcome.reason, timing=outcome.timing,
                    trials=outcome.trials, seconds=time.time() - started, machine=info))
            status.write(job["key"], "done")
        clean_exit = True
    finally:
        try:
            pm.hook.pkb_backend_finalize(state=state)
        finally:
            forget_allocations()
            if clean_exit:
                dist.barrier(group=control)
                dist.destroy_process_group()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    run_batch(json.loads(Path(argv[0]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
