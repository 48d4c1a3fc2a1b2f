"""``pkb run``: parse options, plan jobs, run them, show the results."""
from __future__ import annotations

import datetime as _dt
import json
import os
import time
from pathlib import Path

import click

from pkb_core.cli.numbers import FiniteFloatRange
from pkb_core.errors import PkbError, Terminated
from pkb_core.plugin.reference_backend import NAME as REFERENCE
from pkb_core.cli.config_values import ListOption
from pkb_core.cli.limits import limit_options
from pkb_core.launch.fanout import executor_options
from pkb_core.cli.progress import JobProgress, stopped_by
from pkb_core.contracts.modes import CPU_HEADLINE_MODE, HEADLINE_MODE, MODES, claimable
from pkb_core.contracts.verdict import FAILING, Verdict
from pkb_core.results.table import render_table
from pkb_core.plugin.hookspecs import hookimpl


@click.command()
@click.option("--problem", "problems", cls=ListOption, default=None,
              help="Ids, names, categories, ranges (1-8) or 'all', comma-separated. Default: all (or the "
                   "problem a --solution file is named after).")
@click.option("--backend", default=REFERENCE, show_default=True, help="Backend plugin (see `pkb backends`).")
@click.option("--solution", default=None, help="A solution file (defines solution(*inputs)).")
@click.option("--solutions", default=None, help="A directory of <id>_<name>*.py solution files.")
@click.option("--nproc", type=click.IntRange(min=1), default=None, help="Ranks (default: every GPU; 2 in CPU mode).")
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Nodes of one job (they meet at --rdzv-endpoint; docs/cluster.md).")
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True,
              help="This node's rank (with --nnodes).")
@click.option("--rdzv-endpoint", default=None, help="host:port of the rendezvous (with --nnodes > 1).")
@click.option("--rdzv-id", default="pkb", show_default=True, help="Rendezvous id, the same on every node.")
@click.option("--trials", type=click.IntRange(min=1), default=5, show_default=True,
              help="Correctness trials, fresh inputs each.")
@click.option("--dtype", type=click.Choice(["auto", "bf16", "fp16", "fp32"]), default="auto", show_default=True,
              help="Working dtype (auto: bf16 on GPU, fp32 on CPU).")
@click.option("--size", type=click.Choice(["auto", "tiny", "default", "large"]), default="auto", show_default=True,
              help="Size preset (auto: default on GPU, tiny on CPU).")
@click.option("--mode", type=click.Choice(["eval", "dryrun"]), default="eval", show_default=True,
              help="eval checks against the reference; dryrun runs only the candidate and saves its outputs "
                   "(verdict unchecked, never counted as a pass).")
@click.option("--measure-perf", is_flag=True, help="Time the reference and the candidate (times and speedups).")
@click.option("--timing-mode", "timing_modes", cls=ListOption, default=None,
              callback=lambda ctx, param, value: () if value is None else _timing_modes(value),
              help=f"Comma-separated: {', '.join(MODES)} (the first gives the headline numbers; default "
                   + (f"{HEADLINE_MODE})." if HEADLINE_MODE == CPU_HEADLINE_MODE else
                      f"{HEADLINE_MODE} on GPUs, {CPU_HEADLINE_MODE} on CPU)."))
@click.option("--profile", is_flag=True, help="Save per-rank profiler traces of a few calls (needs --measure-perf).")
@click.option("--warmup", type=click.IntRange(min=0), default=None, help="Warm-up iterations (default by size).")
@click.option("--iters", type=click.IntRange(min=1), default=None,
              help="At most this many timed calls per side and mode (default by size: 20 tiny, 1000 default, "
                   "200 large); sampling stops earlier once both medians are known within +-1 %.")
@click.option("--min-iters", type=click.IntRange(min=1), default=None,
              help="At least this many timed calls per side and mode (default by size: 10, 100, 50; at most --iters).")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True)
@click.option("--build-timeout", type=FiniteFloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds one solution's build may take in the compile phase before any job runs.")
@click.option("--build-jobs", type=click.IntRange(min=1), default=None,
              help="Builds at once in the compile phase (default: by the node's cores and memory).")
@click.option("--timeout", "job_timeout", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Seconds a job may run before it is a timeout (default 120 on CPU, 300 on GPU).")
@click.option("--out", default=None,
              help="Run directory (default runs/<time>); a rerun into it skips recorded jobs (see --force).")
@click.option("--force", is_flag=True, help="Rerun jobs that already have a record in --out, replacing their records.")
@click.option("-x", "--exitfirst", is_flag=True,
              help="Stop after the first job whose verdict fails the run (fail, error, compile-error, timeout, "
                   "crash, flagged; unsupported does not count); later jobs get no record.")
@click.option("--junitxml", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write a JUnit XML report to this file (one testcase per job).")
@click.option("--save-outputs", is_flag=True, help="Keep each rank's outputs in the run directory.")
@click.option("--json", "json_", is_flag=True, help="Print one JSON object with every record.")
@click.pass_obj
@executor_options  # --executor, --jobs-per-shard, --slurm-*: pkb_core/launch/fanout.py
@limit_options  # --memory-limit, --max-processes, --log-cap: pkb_core/cli/limits.py
def run(pm, problems, backend, solution, solutions, nproc, nnodes, node_rank, rdzv_endpoint, rdzv_id, trials, dtype, size, mode, measure_perf, timing_modes,
        profile, warmup, iters, min_iters, device, build_timeout, build_jobs, job_timeout, out, force, exitfirst, junitxml,
        save_outputs, json_, executor, limits):
    """Check (and with --measure-perf, time) solutions against the references.

    Exit status (as pytest's): 0 every job passed or is unsupported here, 1 a job
    failed, 2 interrupted, 4 a bad option or configuration value, 5 nothing selected."""
    from pkb_core.cli.config import config_of
    from pkb_core.contracts.batch import Nodes
    from pkb_core.launch.plan import (check_solution_paths, named_problem, pair_solutions,
                                      refuse_a_world_nothing_runs_at, skip_recorded)
    from pkb_core.launch.session import Session
    from pkb_core.machine.device import crowded_cores_warning, detect_device, device_count, require_device
    from pkb_core.plugin.manager import get_backend_info
    from pkb_core.problem.registry import build_registry, require_problems

    if profile and not measure_perf:
        raise click.UsageError("--profile needs --measure-perf (it profiles timed calls)")
    ignored = [] if measure_perf else typed_timing_options(click.get_current_context())
    if ignored and not json_:
        click.echo(f"note: {', '.join(ignored)} {'shapes' if len(ignored) == 1 else 'shape'} the timing, and nothing "
                   "is timed without --measure-perf: ignored", err=True)
    if node_rank >= nnodes:
        raise click.UsageError(f"--node-rank {node_rank} needs --nnodes > {node_rank} (ranks count from 0)")
    if exitfirst and executor.name != "local":
        raise click.UsageError(f"-x/--exitfirst stops jobs on this node; --executor {executor.name} runs them "
                               "as shards elsewhere")
    # What can be refused without torch is refused before detect_device imports it (a second, not ten).
    check_solution_paths(solution, solutions)
    get_backend_info(pm, backend)  # an unknown name
    registry = require_problems(build_registry(pm))
    if problems:
        registry.select(problems)  # an unknown problem
    # SLURM shards run on other nodes: this machine's GPUs and toolchain say nothing about them.
    device = require_device(detect_device(device)) if executor.runs_here else executor.node_device(device)
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
    session = Session(pm, config_of(), device=device, backend=backend, world_size=world_size,
                      runs_here=executor.runs_here)
    info = session.info
    request = session.request(problems=problems, solution=solution, solutions=solutions, trials=trials,
                              dtype=dtype, size=size, mode=mode, measure_perf=measure_perf, warmup=warmup,
                              iters=iters, min_iters=min_iters, save_outputs=save_outputs,
                              timing_modes=timing_modes, profile=profile)  # parsed by the option's callback
    run_dir = Path(out or Path("runs") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S"))
    dropped = []
    pairs = pair_solutions(request, registry, info, dropped=dropped)
    jobs, rejected = session.plan(request, pairs)
    refuse_a_world_nothing_runs_at(nproc, jobs, rejected)
    writable_paths(run_dir, junitxml)
    hold_run_dir_for_command(run_dir)
    if device == "cpu":  # notices once nothing is left to refuse: a refusal stays one line
        click.echo(f"No GPU: CPU mode (gloo, shared-memory heap, Triton interpreter), size {request.size}."
                   + (" Times are host timings, not GPU performance." if measure_perf else ""), err=True)
        if request.size not in CPU_QUICK_SIZES:  # a new user's --size large printed nothing for minutes
            click.echo(f"note: size {request.size} on the CPU can take minutes a job (the tiny size, CPU mode's "
                       "default, takes seconds)", err=True)
        crowded = executor.runs_here and crowded_cores_warning(nproc)
        if crowded:
            click.echo(crowded, err=True)
    if dropped and problems:
        click.echo(dropped_notice(dropped, backend, solutions), err=True)
    if solution or solutions:
        source = click.get_current_context().get_parameter_source("backend")
        for line in backend_notices(pairs, backend, chosen=source not in (click.core.ParameterSource.DEFAULT, None)):
            click.echo(line, err=True)
    named = named_problem(solution) if solution else None
    if named and problems and any(spec.id != int(named) for spec, _, _ in pairs):
        click.echo(f"note: {Path(solution).name} is named for problem {named}; it runs as "
                   f"{', '.join(spec.key for spec, _, _ in pairs)}, as --problem says", err=True)
    keys = {job.key for job in jobs} | {job.key for job, _ in rejected}
    earlier = skip_recorded(run_dir, keys, force)
    recorded = set(earlier)
    if recorded:
        click.echo(skipping_notice(recorded, run_dir), err=True)
    # The run's observers (pkb_report_* hooks): the progress lines, -x, --junitxml.
    progress = JobProgress(len(keys) - len(recorded), quiet=json_)
    observers = [progress] + ([ExitFirst()] if exitfirst else []) + ([BuildLines(progress.echo)] if not json_ else [])
    if junitxml:
        from pkb_core.results.junit import JunitReport

        junit = JunitReport(junitxml, suite=f"pkb.{backend}", earlier=list(earlier.values()))
        observers.append(junit)
    session.observe(*observers)
    reporter = session.reporter
    pending = [job for job in jobs if job.key not in recorded]
    interrupted = False
    started = time.monotonic()
    with session:
        session.refuse(rejected, run_dir, recorded)
        settings = session.settings(run_dir, calibrated=bool(measure_perf and jobs and executor.runs_here),
                                    nproc=nproc, job_timeout=job_timeout, nodes=nodes,
                                    build_timeout=build_timeout, build_workers=build_jobs, **limits)
        progress.start()
        try:
            session.run(pending, settings, executor)
        except (KeyboardInterrupt, Terminated) as stop:
            interrupted = stop
        finally:
            progress.close()
    by_key = {**earlier, **{r.key: r for r in reporter.records}}
    ordered = [job.key for job, _ in rejected] + [job.key for job in jobs]
    records = [by_key[k] for k in ordered if k in by_key]
    not_run = len(ordered) - len(records)
    if junitxml:
        junit.write(seconds=time.monotonic() - started)
    if nodes and nodes.node_rank != 0 and not records:
        click.echo(f"node {node_rank} of {nnodes}: done; records are written where global rank 0 ran", err=True)
    if json_:
        click.echo(json.dumps({"run_dir": str(run_dir), "results": [r.to_json() for r in records]}, indent=2))
    elif not records:
        click.echo(f"no job finished  (run directory {run_dir})")
    else:
        click.echo(summary_table(records))
        # Among the counts, not beside them: "1 pass, 1 recorded earlier" read as two jobs.
        earlier = f" ({len(recorded)} of them recorded earlier, not run again)" if recorded else ""
        click.echo(f"\n{_counts(records)}{earlier}  (records in {run_dir}/records.jsonl)")
        for line in unavailable_notes(records) + diagnostic_notes(records):
            click.echo(line)
        if any(r.speedup_ci for r in records):
            click.echo(speedup_note(records))
        if device == "cpu" and any(r.reference_ms is not None for r in records):
            click.echo(CPU_TIMING_NOTE)
        elif not measure_perf and records and not any(r.reference_ms is not None for r in records):
            click.echo("(no times or speedups: add --measure-perf to time the reference and the solutions)")
    if reporter.stopped:
        click.echo(f"stopped ({reporter.stop_reason}); {not_run} job(s) not run", err=True)
    if interrupted:
        click.echo(f"{stopped_by(interrupted)}: {not_run} job(s) not run; the same command with --out {run_dir} "
                   "resumes", err=True)
        raise interrupted
    if any(r.verdict in FAILING for r in records):
        raise SystemExit(1)


#: Printed under a table with a speedup: why it need not be the ratio of the two times beside it.
SPEEDUP_NOTE = ("note: ref ms and sol ms are each side's median time a call{mode}; the speedup is the median of "
                "the rounds' paired ratios (each round times both sides), with its 95 % interval, so it need "
                "not be the ratio of the two medians (docs/timing.md)")


#: The options that shape only the timing (their parameter names and flags).
TIMING_OPTIONS = {"timing_modes": "--timing-mode", "warmup": "--warmup", "iters": "--iters", "min_iters": "--min-iters"}


def typed_timing_options(ctx) -> list[str]:
    """The timing options typed on the command line (a new user's ``--timing-mode window`` without
    ``--measure-perf`` was silently ignored); pkb.toml's and the environment's are defaults that
    may serve other runs."""
    from click.core import ParameterSource

    return [flag for name, flag in TIMING_OPTIONS.items()
            if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]


def speedup_note(records) -> str:
    """:data:`SPEEDUP_NOTE`, naming the timing mode the table's times and speedups are (the
    headline: the first ``--timing-mode``; a new user could not tell which it was)."""
    modes = sorted({r.timing_mode for r in records if r.timing_mode})
    mode = (f" in {' and '.join(modes)} mode (the headline: the first --timing-mode that could time here, "
            f"window by default)") if modes else ""
    return SPEEDUP_NOTE.format(mode=mode)


#: Readings of one diagnostic mode named in its note, at most.
DIAGNOSTIC_SHOWN = 8


def diagnostic_notes(records) -> list[str]:
    """One note per timing mode that timed beside the headline (``--timing-mode window,latency``:
    the table is window mode's, and a new user saw nothing of latency's), with each job's speedup
    and interval in that mode: a diagnostic, never a record's ``claimed_speedup``."""
    readings: dict[str, list[str]] = {}
    for record in records:
        for mode, timing in (record.stats.modes.items() if record.stats else ()):
            found = timing.speedup
            if mode == record.timing_mode or timing.unavailable or found is None or found.value is None:
                continue
            interval = f" [{found.low:.2f}, {found.high:.2f}]" if found.low is not None else ""
            readings.setdefault(mode, []).append(f"{record.problem} {record.solution} {found.value:.2f}x{interval}")
    notes = []
    for mode, shown in readings.items():
        more = f", and {len(shown) - DIAGNOSTIC_SHOWN} more" if len(shown) > DIAGNOSTIC_SHOWN else ""
        what = "the judge's clock, not the headline here" if claimable(mode) else "a diagnostic, never claimed"
        notes.append(f"note: {mode} mode beside the headline ({what}): "
                     f"{'; '.join(shown[:DIAGNOSTIC_SHOWN])}{more} (records: stats.modes.{mode})")
    from pkb_core.conduct.intervals import TOO_FEW, least_rounds

    if any(r.difference == TOO_FEW for r in records):
        notes.append(f"note: {TOO_FEW}: a speedup's interval needs at least {least_rounds()} timed rounds; "
                     "raise --iters (or --min-iters) for more")
    unclaimed = sorted({r.timing_mode for r in records if r.speedup and r.timing_mode and not claimable(r.timing_mode)})
    if unclaimed:
        notes.append(f"note: the table's speedups in {' and '.join(unclaimed)} mode are a launcher clock's, whose "
                     f"batches run in the candidate's process: shown, never claimed (claimed_speedup) nor counted "
                     f"by pkb report; window mode is the judge's clock")
    return notes


def unavailable_notes(records) -> list[str]:
    """One note per timing mode asked for that could not time here, with why (``--timing-mode
    graph`` on CPU: the table was latency mode's, and only the record said why)."""
    from collections import Counter

    found = Counter((mode, timing.unavailable) for record in records if record.stats
                    for mode, timing in record.stats.modes.items() if timing.unavailable)
    return [f"note: --timing-mode {mode} did not time {n} job(s) here: {why}" for (mode, why), n in found.items()]


#: Sizes a CPU-mode job runs in seconds (larger ones move megabytes through Triton's interpreter
#: and gloo: minutes a job, and a run printed nothing meanwhile).
CPU_QUICK_SIZES = ("tiny",)
#: The same for a sweep's message sizes, in bytes per rank (the triton all-reduce on the 2-core
#: machine, idle: 64 KiB 12 s a job, 1 MiB 130 s, past the CPU's 120 s default --timeout).
CPU_QUICK_BYTES = 64 << 10

#: Printed under the table of a timed CPU-mode run.
CPU_TIMING_NOTE = ("note: CPU mode: times are host timings (gloo over shared memory, Triton's interpreter), "
                   "not GPU performance; these speedups say nothing about a GPU.")


class ExitFirst:
    """``-x``: after the first job whose verdict fails the run, no further job starts."""

    @hookimpl
    def pkb_report_job(self, record, reporter):
        if record.verdict in FAILING:
            reporter.stop(f"-x/--exitfirst: {record.problem} {record.solution} is {record.verdict.value}")


class BuildLines:
    """One line per finished build of the compile phase, through ``echo`` (the progress's
    :meth:`~pkb_core.cli.progress.JobProgress.echo`: on a terminal, above its bar, not on it)."""

    def __init__(self, echo=None):
        self.echo = echo or (lambda line: click.echo(line, err=True))

    @hookimpl
    def pkb_report_build(self, solution, result, done, total):
        state = "cached" if result.cached else ("built" if result.ok else Verdict.COMPILE_ERROR.value)
        seconds = "" if result.cached else f"  {result.seconds:.1f} s"
        self.echo(f"build [{done}/{total}] {Path(solution).name}  {state}{seconds}")


def skipping_notice(recorded, run_dir) -> str:
    """The line that says a rerun skips jobs already recorded."""
    return f"skipping {len(recorded)} recorded job(s) in {run_dir} (use --force to rerun them)"


def backend_notices(pairs, backend: str, chosen: bool) -> list[str]:
    """Notes for solution files run by a backend nobody chose or that they do not declare: with no
    ``--backend`` (nor a ``pkb.toml`` or environment value) files run under the reference backend,
    where torch.distributed is allowed and no backend's own checks run (a new user's first "pass"
    was one); a file that declares ``BACKEND = "name"`` (what ``pkb submit`` honours) runs by
    ``--backend`` here, so a declaration it contradicts is named."""
    from pkb_core.problem.solution_backend import declared_backend

    lines = []
    if not chosen and backend == REFERENCE:
        lines.append(f"note: no --backend given: these solutions run under the {REFERENCE} backend (torch.distributed "
                     "allowed, no backend's own checks); --backend NAME to choose (`pkb backends`)")
    for _, path, _ in pairs:
        try:
            declared = declared_backend(Path(path).read_text(errors="replace")) if path else None
        except OSError:
            continue
        if declared and declared != backend:
            lines.append(f'note: {Path(path).name} declares BACKEND = "{declared}"; pkb run runs it by --backend '
                         f"({backend})")
    return lines


def dropped_notice(dropped, backend, solutions) -> str:
    """One line naming the selected problems that have no solution file to run."""
    names = [spec.key for spec in dropped]
    shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    where = f"no solution file in {solutions}" if solutions else f"backend {backend} has no sample for them"
    return (f"note: skipping {len(names)} selected problem(s): {shown} ({where}; "
            f"give --solution FILE or --solutions DIR to run them)")


def _timing_modes(text) -> tuple:
    """``--timing-mode``'s names, checked against the modes' contract (no torch: refused at once)."""
    if isinstance(text, (list, tuple)):  # a TOML array
        text = ",".join(map(str, text))
    from pkb_core.errors import BadOption
    from pkb_core.launch.plan import checked_timing_modes

    modes = tuple(m.strip() for m in str(text).split(","))
    if not any(modes):
        raise click.BadParameter(f"no timing mode in {text!r} (choose from {', '.join(MODES)})")
    if not all(modes):  # "latency,,window": a mode left out by mistake, not a list to guess at
        raise click.BadParameter(f"an empty name in {text!r} (comma-separated modes, e.g. window,latency)")
    try:
        return checked_timing_modes(modes)
    except BadOption as exc:
        raise click.BadParameter(str(exc)) from None


def hold_run_dir_for_command(run_dir: Path) -> None:
    """Hold ``run_dir`` while this command runs (:mod:`pkb_core.results.run_lock`: one run at a time
    in a run directory; another live one refuses this in one line, exit 4), released as it ends."""
    from pkb_core.results.run_lock import hold_run_dir, release_run_dir

    hold_run_dir(run_dir)
    context = click.get_current_context(silent=True)
    if context is not None:
        context.call_on_close(lambda: release_run_dir(run_dir))


def writable_paths(run_dir: Path, junitxml: Path | None) -> None:
    """Refuse, in one line and before any job, a run directory or report file that cannot be
    written; a refusal leaves no folder it made (a refused run had left an empty run directory,
    which `pkb leaderboard runs/*` then refused: a new user, 2026-12-02)."""
    made = [path for path in [run_dir, *run_dir.parents] if not path.exists()]
    try:
        _writable_paths(run_dir, junitxml)
    except PkbError:
        for path in made:  # deepest first
            try:
                path.rmdir()
            except OSError:
                break  # not empty, or not there: what is left is not only this refusal's
        raise


def _writable_paths(run_dir: Path, junitxml: Path | None) -> None:
    from pkb_core.results.records import make_run_dir

    for folder, what in ((run_dir, "run directory"), (junitxml.parent if junitxml else None, "--junitxml folder")):
        if folder is None:
            continue
        # A file on the way is named as such (mkdir would say "File exists" or "Not a directory").
        blocking = next((path for path in [folder, *folder.parents] if path.exists()), None)
        if blocking is not None and not blocking.is_dir():
            raise PkbError(f"the {what} {folder} is a file, not a folder" if blocking == folder else
                           f"cannot create the {what} {folder}: {blocking} is a file, not a folder")
        try:
            if folder is run_dir:
                make_run_dir(run_dir)  # 0700: records and logs are no candidate's to read
            else:
                folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PkbError(f"cannot create the {what} {folder}: {exc.strerror or exc}") from None
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PkbError(f"cannot write into the {what} {folder} (permission denied)")
    if junitxml is not None:
        existed = junitxml.exists()
        try:
            with open(junitxml, "a"):
                pass
        except OSError as exc:
            raise PkbError(f"cannot write the --junitxml file {junitxml}: {exc.strerror or exc}") from None
        if not existed:
            junitxml.unlink()


def summary_table(records) -> str:
    """The run's table; the timing columns only when some job was timed: medians, the
    speedup with its 95 % interval and what it reads as (faster, slower, no measurable
    difference; docs/timing.md)."""
    timed = any(r.reference_ms is not None or r.solution_ms is not None for r in records)
    rows = []
    for r in sorted(records, key=lambda r: (r.problem_id, r.solution)):
        ci = r.speedup_ci
        # No interval, no speedup shown: a bare ratio of a few rounds means nothing.
        times = [r.reference_ms, r.solution_ms, r.speedup if ci else None,
                 f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "", r.difference or ""] if timed else []
        rows.append([r.problem, r.solution, r.world_size, r.size, r.dtype, r.verdict, *times, r.reason])
    # dtype: a --dtype bf16 run's table read like an fp32 one's (a new user's pass)
    headers = ["problem", "solution", "W", "size", "dtype", "verdict"] + (
        ["ref ms", "sol ms", "speedup", "95% interval", "vs reference"] if timed else [])
    return render_table(headers + ["reason"], rows)


def _counts(records) -> str:
    counts = {}
    for r in records:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))

