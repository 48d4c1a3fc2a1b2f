"""Suite fan-out: the jobs of one ``pkb run`` split into shards that a job engine runs.

``pkb run --executor local`` (the default) runs every job on this node, one
launch after another (:func:`pkb_core.launch.jobs.run_jobs`). With
``--executor submitit-local`` or ``--executor slurm`` the planned jobs are cut
into *shards* (one per problem, or ``--jobs-per-shard N`` consecutive jobs) and
each shard becomes one job of the engine, submitted through `submitit
<https://github.com/facebookincubator/submitit>`_:

* ``slurm``: one SLURM job per shard (a job array), one node, one task, the
  node's GPUs (``--slurm-gpus-per-node``, default ``--nproc``; none in CPU mode) and
  ``--exclusive`` unless ``--no-slurm-exclusive``. The task calls
  :func:`~pkb_core.launch.jobs.run_jobs` on its shard, so the ranks start
  there exactly as a local run would;
* ``submitit-local``: the same, but every shard is a process on this machine
  (submitit's ``LocalExecutor``), all at once. It exists to try the fan-out
  (and to test it) without a cluster; timings taken that way contend.

Every shard writes into the one run directory, which must therefore be on a
filesystem the nodes share: records are appended to ``records.jsonl`` by one
``os.write`` of one line under ``O_APPEND`` (:func:`pkb_core.results.records.append_record`).
Jobs whose key is already recorded are dropped before submission, so a rerun
into the same directory resumes. This process waits for every shard, shows
records as they land, and turns a shard that the engine lost (killed, out of
time, failed to start, raised) into ``error`` records carrying the engine's
message for each of its jobs that has no record, so no job goes missing.

Nothing here schedules: ordering, placement, queueing and retries belong to
the engine. This module imports neither torch nor submitit at import time;
:mod:`pkb_core.launch.shard` holds what runs on the node.
"""
from __future__ import annotations

import functools
import math
import os
import time
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import attrs
import click

from pkb_core.contracts.batch import Batch
from pkb_core.contracts.record import Record
from pkb_core.contracts.verdict import Verdict
from pkb_core.errors import PkbError
from pkb_core.results.records import RECORDS, append_record, job_record, parse_record, read_records

EXECUTORS = ("local", "submitit-local", "slurm")
#: Seconds between looks at the records file and the engine's job states.
POLL_S = 1.0
#: Extra seconds per job in the default shard time limit (launch start, relaunch after a failure).
PER_JOB_SLACK_S = 60
#: Characters of the engine's message kept in a record's reason.
REASON_LIMIT = 1500


@dataclass(frozen=True)
class ExecutorOptions:
    """Where the jobs of one ``pkb run`` execute (the ``--executor`` and ``--slurm-*`` options)."""

    name: str = "local"
    #: Jobs per shard; 0 means one shard per problem.
    jobs_per_shard: int = 0
    slurm_partition: str | None = None
    #: Minutes per shard; ``None``: the worst case of its jobs (see :func:`shard_minutes`).
    slurm_time: int | None = None
    slurm_gpus_per_node: int | None = None
    slurm_cpus_per_task: int | None = None
    slurm_account: str | None = None
    slurm_qos: str | None = None
    slurm_exclusive: bool = True
    #: Extra ``#SBATCH`` flags, ``"key=value"`` or ``"key"``.
    slurm_options: tuple = ()

    @property
    def runs_here(self) -> bool:
        """Whether the jobs run on this machine (so its GPUs and backends are the ones to check)."""
        return self.name != "slurm"

    def node_device(self, choice: str) -> str:
        """The device of the nodes that run the shards when they are not this machine.

        ``auto`` means ``cuda`` there (unless ``PKB_DEVICE`` says otherwise): a
        login node without GPUs says nothing about the compute nodes.
        """
        choice = os.environ.get("PKB_DEVICE", choice) if choice == "auto" else choice
        return "cuda" if choice == "auto" else choice

    def default_nproc(self) -> int | None:
        """Ranks per node when ``--nproc`` is not given (``None``: count this machine's GPUs)."""
        if self.runs_here:
            return None
        if not self.slurm_gpus_per_node:
            raise PkbError("--executor slurm needs --nproc N (ranks per node) or --slurm-gpus-per-node N")
        return self.slurm_gpus_per_node

    def check_nnodes(self, nnodes: int) -> None:
        """Shards are single-node: a job over several nodes is one ``pkb run`` per node."""
        if nnodes > 1 and self.name != "local":
            raise PkbError(f"--executor {self.name} runs single-node jobs; --nnodes > 1 needs one "
                           "`pkb run` per node (docs/cluster.md)")

    def run(self, jobs: list, settings, reporter=None) -> list:
        """Run ``jobs`` here (``local``) or as shards through the engine (each
        shard builds its solutions on its node); the records they got, each
        reported to ``reporter`` (:class:`pkb_core.plugin.reporter.Reporter`)
        as it is made or read back."""
        if self.name == "local":
            from pkb_core.launch.jobs import run_jobs

            return run_jobs(jobs, settings, reporter, skip_recorded=False)  # planned against the records
        return run_sharded(jobs, settings, self, reporter)


_OPTIONS = [
    click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
                 help="Where jobs run: this node, or shards through submitit (its local mode, or SLURM)."),
    click.option("--jobs-per-shard", type=click.IntRange(min=0), default=0, show_default=True,
                 help="Jobs per engine job (0: one shard per problem)."),
    click.option("--slurm-partition", default=None, help="SLURM partition of the shards."),
    click.option("--slurm-time", type=click.IntRange(min=1), default=None,
                 help="Minutes per shard (default: the worst case, every job hitting --timeout)."),
    click.option("--slurm-gpus-per-node", type=click.IntRange(min=0), default=None, help="GPUs per shard's node (default: --nproc)."),
    click.option("--slurm-cpus-per-task", type=click.IntRange(min=1), default=None, help="CPUs of a shard's one task."),
    click.option("--slurm-account", default=None, help="SLURM account to charge."),
    click.option("--slurm-qos", default=None, help="SLURM quality of service."),
    click.option("--slurm-exclusive/--no-slurm-exclusive", default=True, show_default=True,
                 help="Ask for whole nodes (no other job on a shard's GPUs or links)."),
    click.option("--slurm-option", "slurm_options", multiple=True,
                 help="Any other sbatch flag, KEY=VALUE or KEY (repeatable), e.g. mem=0, constraint=h100."),
]
_NAMES = [f.name for f in dataclasses.fields(ExecutorOptions) if f.name != "name"]


def executor_options(command):
    """Decorator: adds the fan-out options to a click command and hands them to it as
    one ``executor=ExecutorOptions(...)`` argument. Put it directly above the function."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        values = {name: kwargs.pop(name) for name in _NAMES}
        values["slurm_options"] = tuple(values["slurm_options"] or ())
        if values["jobs_per_shard"] < 0:
            raise PkbError("--jobs-per-shard must be 0 (one shard per problem) or more")
        return command(*args, executor=ExecutorOptions(name=kwargs.pop("executor"), **values), **kwargs)

    for option in reversed(_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


def make_shards(jobs: list[dict], jobs_per_shard: int = 0) -> list[list[dict]]:
    """Cut ``jobs`` (in plan order) into shards: one per problem, or ``jobs_per_shard`` each."""
    if jobs_per_shard > 0:
        return [jobs[i:i + jobs_per_shard] for i in range(0, len(jobs), jobs_per_shard)]
    shards: dict = {}
    for job in jobs:
        shards.setdefault(job.problem, []).append(job)
    return list(shards.values())


def shard_minutes(shard: list[dict], job_timeout: float) -> int:
    """The time a shard may need at worst: every job running into its timeout and a
    fresh launch (with its start-up allowance) after each; the engine's limit must
    not cut a shard short of what its own watchdog allows."""
    from pkb_core.launch.launcher import STARTUP_TIMEOUT_S

    return math.ceil((STARTUP_TIMEOUT_S + len(shard) * (job_timeout + PER_JOB_SLACK_S)) / 60)


def engine_parameters(options: ExecutorOptions, nproc: int, device: str, minutes: int, name: str) -> dict:
    """``update_parameters`` keywords of submitit's ``AutoExecutor`` for one shard per node."""
    params = {"name": name, "nodes": 1, "tasks_per_node": 1, "timeout_min": options.slurm_time or minutes}
    if device == "cuda":
        params["gpus_per_node"] = options.slurm_gpus_per_node or nproc
    elif options.name == "slurm":
        # CPU shards ask for no GPUs (a CPU node has no gres to give, and sbatch refuses the job), unless told to.
        if options.slurm_gpus_per_node:
            params["gpus_per_node"] = options.slurm_gpus_per_node
    else:
        # submitit-local sets CUDA_VISIBLE_DEVICES to the first gpus_per_node GPUs: 0 hides them all.
        params["gpus_per_node"] = 0
    if options.name == "slurm":
        if options.slurm_cpus_per_task:
            params["cpus_per_task"] = options.slurm_cpus_per_task
        for key in ("partition", "account", "qos"):
            value = getattr(options, f"slurm_{key}")
            if value:
                params[f"slurm_{key}"] = value
        if options.slurm_exclusive:
            params["slurm_exclusive"] = True
        if options.slurm_options:
            params["slurm_additional_parameters"] = dict(_sbatch_flag(text) for text in options.slurm_options)
    return params


def _sbatch_flag(text: str) -> tuple:
    key, sep, value = text.partition("=")
    key = key.strip().lstrip("-")
    if not key:
        raise PkbError(f"--slurm-option {text!r}: expected KEY=VALUE or KEY")
    return key, value.strip() if sep else True


def make_executor(options: ExecutorOptions, folder: Path):
    """submitit's executor for ``options.name``, storing its pickles and logs in ``folder``."""
    try:
        import submitit
    except ImportError:
        raise PkbError(f"--executor {options.name} needs submitit: pip install 'pkb[cluster]'") from None
    cluster = "local" if options.name == "submitit-local" else "slurm"
    try:
        return submitit.AutoExecutor(folder=folder, cluster=cluster)
    except RuntimeError as exc:  # no srun on PATH
        raise PkbError(f"--executor {options.name}: {exc}") from None


def run_sharded(jobs: list, settings, options: ExecutorOptions, reporter=None) -> list:
    """Submit the unrecorded ``jobs`` as shards, wait for all, record what the engine lost;
    the records of the jobs, in the order they were read back."""
    options.check_nnodes(settings.nodes.nnodes if settings.nodes else 1)
    run_dir = Path(settings.run_dir).resolve()
    settings = attrs.evolve(settings, run_dir=run_dir)  # the nodes may start elsewhere
    done = {r.key for r in read_records(run_dir)}
    shards = make_shards([job for job in jobs if job.key not in done], options.jobs_per_shard)
    if not shards:
        click.echo(f"{options.name}: every job already has a record in {run_dir}; nothing to submit", err=True)
        return []
    from pkb_core.launch.shard import Shard

    folder = run_dir / "submitit"
    executor = make_executor(options, folder)
    minutes = max(shard_minutes(shard, settings.job_timeout) for shard in shards)
    try:
        executor.update_parameters(**engine_parameters(options, settings.nproc, settings.device, minutes,
                                                       name=f"pkb-{run_dir.name}"))
    except (ValueError, NameError) as exc:
        raise PkbError(f"--executor {options.name}: {_first_line(exc)}") from None
    tail = RecordTail(run_dir, {job.key for shard in shards for job in shard}, reporter)
    try:
        with executor.batch():  # one job array on SLURM
            engine_jobs = [executor.submit(Shard(), Batch(jobs=shard, settings=settings).to_json())
                           for shard in shards]
    except Exception as exc:  # sbatch refused (partition, account, limits): nothing was submitted
        raise PkbError(f"--executor {options.name}: submission failed: {_first_line(exc)}") from None
    if options.name == "slurm":  # states from sacct, or squeue where accounting is off
        from pkb_core.launch.slurm_watch import watch

        watch(engine_jobs)
    click.echo(f"{options.name}: {len(shards)} shard(s) of {sum(map(len, shards))} job(s) submitted "
               f"(engine jobs {_id_range(engine_jobs)}; logs in {folder})", err=True)
    wait_for_shards(list(zip(engine_jobs, shards)), settings, tail)
    return tail.records


def wait_for_shards(submitted: list[tuple], settings, tail: "RecordTail") -> None:
    """Wait until every ``(engine job, shard)`` is done; give each job of a shard that
    ended without recording it an ``error`` record with the engine's message.
    Ctrl-C cancels the shards still queued or running."""
    pending = list(submitted)
    try:
        while pending:
            tail.poll()
            still = []
            for engine_job, shard in pending:
                if engine_job.done():
                    _record_lost(engine_job, shard, settings, tail)
                else:
                    still.append((engine_job, shard))
            pending = still
            if pending:
                time.sleep(POLL_S)
    except KeyboardInterrupt:
        for engine_job, _ in pending:
            engine_job.cancel(check=False)
        click.echo(f"cancelled {len(pending)} shard(s); rerun into {settings.run_dir} to resume", err=True)
        raise
    tail.poll()


def _record_lost(engine_job, shard, settings, tail: "RecordTail") -> None:
    tail.poll()  # the shard may have written after the last look
    missing = [job for job in shard if job.key not in tail.announced]
    if not missing:
        return
    # The engine ended the shard (a SLURM step ends every process of its cgroup, the launch's
    # warden too): what it left in this node's /dev/shm goes now, not at the next pkb run here.
    from pkb_core.launch.scratch import sweep_stale_now

    sweep_stale_now()
    error = engine_job.exception()
    why = engine_message(error) if error else "the shard finished without recording this job"
    reason = f"engine job {engine_job.job_id}: {why} (logs {engine_job.paths.stderr})"[:REASON_LIMIT]
    for job in missing:
        record = job_record(job, settings.world_size, Verdict.ERROR, reason)
        append_record(settings.run_dir, record)
        tail.seen(record)


def engine_message(error: BaseException) -> str:
    """The gist of submitit's error for a shard in one line: the exception its
    function raised (the last line of the trace, between submitit's two rules),
    or the engine's account of a job that produced nothing (its first sentence,
    two lines) and the last line of the log excerpt that follows."""
    lines = [line.strip() for line in str(error).splitlines()]
    rules = [i for i, line in enumerate(lines) if line and set(line) == {"-"}]
    if len(rules) >= 2:
        trace = [line for line in lines[rules[0] + 1:rules[1]] if line]
        if trace:
            return trace[-1]
    head = " ".join([line for line in lines[:rules[0] if rules else None] if line][:2])
    tail = [line for line in lines[rules[0] + 1:] if line] if rules else []
    return "; last log line: ".join(filter(None, [head, tail[-1] if tail else ""])) or type(error).__name__


class RecordTail:
    """Reads ``records.jsonl`` as it grows, keeps the records of ``keys`` and reports
    each once (``reporter``: :class:`pkb_core.plugin.reporter.Reporter`)."""

    def __init__(self, run_dir: Path, keys: set, reporter=None):
        from pkb_core.plugin.reporter import Reporter

        self.path, self.keys, self.reporter = Path(run_dir) / RECORDS, keys, reporter or Reporter()
        self.announced: set = set()
        self.records: list = []
        self._offset = self.path.stat().st_size if self.path.exists() else 0

    def poll(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line being written is read next time
        self._offset += len(complete)
        for line in complete.decode().splitlines():
            if line.strip():
                self.seen(parse_record(line, str(self.path)))

    def seen(self, record: Record) -> None:
        if record.key in self.keys and record.key not in self.announced:
            self.announced.add(record.key)
            self.records.append(record)
            self.reporter.job(record)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _id_range(engine_jobs) -> str:
    ids = [str(j.job_id) for j in engine_jobs]
    return ids[0] if len(ids) == 1 else f"{ids[0]} .. {ids[-1]}"
