"""Running a list of jobs on this node: the compile phase, then one launch
(:class:`pkb_core.launch.launcher.Launch`), or this node's part of a multi-node one.

``pkb run``'s local executor, a SLURM shard, ``pkb bench`` and the noise floor
all go through :func:`run_jobs`; the reward service builds and launches per job
itself (:mod:`pkb_core.serve`) with the same two parts.
"""
from __future__ import annotations

import attrs

from pkb_core.contracts.batch import LaunchSettings
from pkb_core.contracts.job import Built, Job
from pkb_core.contracts.record import Record
from pkb_core.launch.launcher import STARTUP_TIMEOUT_S, Launch
from pkb_core.plugin.reporter import Reporter
from pkb_core.results.records import append_record, job_record, make_run_dir, read_records


def run_jobs(jobs: list[Job], settings: LaunchSettings, reporter: Reporter | None = None, *,
             skip_recorded: bool = True) -> list[Record]:
    """Build (:mod:`pkb_core.compile.phase`), then run, ``jobs`` and return the records
    they got, in the order they were made. A job whose solution failed to build gets
    its ``compile-error`` record without a launch. Each record is written, then
    reported (``reporter``, :mod:`pkb_core.plugin.reporter`); the run stops between
    jobs when an observer asks.

    :param skip_recorded: leave out the jobs the run directory already records (a
        requeued SLURM shard resumes so); a caller that planned against the records
        itself passes False and spares the read.
    """
    reporter = reporter or Reporter()
    run_dir = make_run_dir(settings.run_dir)
    if skip_recorded:
        done = {r.key for r in read_records(run_dir)}
        jobs = [job for job in jobs if job.key not in done]
    if settings.nodes:
        pending, records = compile_phase(jobs, settings, reporter)
        if pending and not reporter.stopped:
            records += run_multinode(pending, settings, reporter)
        return records
    launch = Launch(settings, reporter)
    try:  # the builders are forked by the zygote that forks the jobs' candidates
        pending, records = compile_phase(jobs, settings, reporter, starter=launch.builder_starter())
        if pending and not reporter.stopped:
            records += launch.run(pending)
    finally:
        launch.stop_zygotes()
    return records


def compile_phase(jobs: list[Job], settings: LaunchSettings, reporter: Reporter | None = None,
                  starter=None, cancelled=None) -> tuple[list[Job], list[Record]]:
    """Build every job's solution ahead of its launch; ``(the jobs that built, the
    records of those that did not)``.

    Each job gets ``compile`` (seconds, whether it came from the cache); the
    ones that failed are recorded as ``compile-error`` (or ``unsupported``)
    here (on the node that writes records). ``starter``: how builders start
    (:attr:`pkb_core.compile.phase.BuildPhase.starter`); ``cancelled``: an event that stops the
    phase (:attr:`pkb_core.compile.phase.BuildPhase.cancelled`)."""
    from pkb_core.compile.phase import BuildPhase

    reporter = reporter or Reporter()
    phase = BuildPhase(backend=settings.backend, device=settings.device, run_dir=settings.run_dir,
                       options=settings.options, preload=settings.preload, workers=settings.build_workers,
                       timeout=settings.build_timeout, on_result=reporter.build, starter=starter,
                       memory_mib=settings.memory_mib, max_processes=settings.max_processes,
                       log_cap_mib=settings.log_cap_mib, hidden=settings.hidden, environment=settings.environment,
                       cancelled=cancelled)
    results = phase.run([(job.solution, job.problem_path) for job in jobs])
    built, records = [], []
    for job in jobs:
        result = results.get(job.solution) if job.solution else None
        if result is not None:
            job = attrs.evolve(job, compile=Built(seconds=round(result.seconds, 3), cached=result.cached))
        if result is None or result.ok:
            built.append(job)
        elif not settings.nodes or settings.nodes.node_rank == 0:
            record = job_record(job, settings.world_size, result.verdict, result.message)
            append_record(settings.run_dir, record)
            records.append(record)
            reporter.job(record)
    return built, records


def run_multinode(pending: list, settings, reporter: Reporter | None = None) -> list[Record]:
    """This node's part of a multi-node launch (see the module docstring); the records
    it made (node 0's; the other nodes make none)."""
    from pkb_core.launch.nodes import Agent, Conductor

    nodes = settings.nodes
    if nodes.node_rank == 0:
        conductor = Conductor(nodes.endpoint, nodes.nnodes, settings.nproc, startup_s=STARTUP_TIMEOUT_S)
        try:
            return Launch(settings, reporter, remote=conductor).run(pending)
        finally:
            conductor.close()
    launch = Launch(settings)  # for the environment of this node's workers only
    Agent(settings, launch.node_env).serve()
    return []


