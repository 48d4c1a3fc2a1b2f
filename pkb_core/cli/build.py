"""``pkb build``: the compile phase alone, to warm a node's caches before a long run."""
from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import click

from pkb_core.cli.numbers import FiniteFloatRange
from pkb_core.cli.config_values import ListOption
from pkb_core.contracts.verdict import Verdict


@click.command()
@click.option("--backend", required=True, help="Backend plugin (see `pkb backends`).")
@click.option("--solution", default=None, help="A solution file.")
@click.option("--solutions", default=None, help="A directory of <id>_<name>*.py solution files (default: the backend's samples).")
@click.option("--problem", "problems", cls=ListOption, default=None,
              help="Ids, names, categories or ranges (default: all).")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
              help="The device type the builds are for (nothing runs on it).")
@click.option("--build-timeout", type=FiniteFloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds one build may take.")
@click.option("--build-jobs", type=click.IntRange(min=1), default=None, help="Builds at once (default: by cores and memory).")
@click.option("--json", "json_", is_flag=True,
              help="JSON lines: one {\"build\": ...} per outcome as it finishes, then one {\"summary\": ...}.")
@click.pass_obj
def build(pm, backend, solution, solutions, problems, device, build_timeout, build_jobs, json_):
    """Build solutions ahead of `pkb run` (outcomes cached by content; failures too)."""
    from pkb_core.compile.phase import BuildPhase
    from pkb_core.launch.warm_builders import WarmBuilders
    from pkb_core.cli.config import config_of
    from pkb_core.machine.device import detect_device
    from pkb_core.errors import PkbError
    from pkb_core.launch.plan import RunRequest, pair_solutions
    from pkb_core.plugin.manager import get_backend_info
    from pkb_core.problem.registry import build_registry
    from pkb_core.process import temp_folders

    device = detect_device(device)
    # A backend that cannot run here is one line, as under `pkb run` (the cuda backend on a machine
    # without a GPU gave a compile error per file: a new user, 2026-12-02).
    info = get_backend_info(pm, backend, device=device)
    if not solution and not solutions:
        if info.samples is None:
            raise PkbError(f"backend {backend!r} has no samples: give --solution FILE or --solutions DIR")
        solutions = str(info.samples)  # like pkb run: the backend's samples
    request = RunRequest(problems=problems, backend=backend, solution=solution, solutions=solutions, nproc=1,
                         trials=1, dtype="fp32", size="tiny", mode="eval", measure_perf=False, warmup=0, iters=0,
                         save_outputs=False)
    pairs = pair_solutions(request, build_registry(pm), info)
    options = config_of().backend_options(backend)
    # SIGTERM (a time limit around `pkb build`) ends the phase like Ctrl-C: running builders are
    # killed, and every outcome that finished has been printed.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    # Its run folder (the builds' logs) is gone when it ends, however it ends (kill -9: its warden).
    with temp_folders.held("pkb-build-run-") as run_dir:
        def show(path, result, done, total):
            # Each outcome is written as it finishes (and flushed), so a build cut by a
            # time limit or a signal has printed every outcome it reached.
            if json_:
                click.echo(json.dumps({"build": _outcome(path, result)}))
                sys.stdout.flush()
                return
            state = "cached" if result.cached else ("built" if result.ok else result.verdict)
            seconds = "" if result.cached else f"  {result.seconds:.1f} s"
            click.echo(f"[{done}/{total}] {Path(path).name}  {state}{seconds}", err=True)

        # Builders are forked from one zygote that imported torch and the backend, not each started.
        warm = WarmBuilders(Path(run_dir) / "logs" / "builders.log")
        phase = BuildPhase(backend=backend, device=device, run_dir=Path(run_dir), options=options,
                           preload=tuple(info.preload()), workers=build_jobs, timeout=build_timeout, on_result=show,
                           environment=tuple(info.environment),
                           starter=warm.starter(backend, tuple(info.preload()), tuple(info.environment)))
        try:
            results = phase.run([(path, spec.path) for spec, path, _ in pairs])
        finally:
            warm.stop()
    failed = {path: r for path, r in results.items() if not r.ok}
    unsupported = sum(r.verdict == Verdict.UNSUPPORTED for r in failed.values())
    flagged = sum(r.verdict == Verdict.FLAGGED for r in failed.values())  # killed by the lockdown
    if json_:
        summary = {"built": len(results) - len(failed), "compile_error": len(failed) - unsupported - flagged,
                   "unsupported": unsupported}
        if flagged:
            summary["flagged"] = flagged
        click.echo(json.dumps({"summary": {**summary, "phase": phase.summary}}))
    else:
        for path, result in failed.items():
            click.echo(f"\n{Path(path).name}: {result.message}")
        tail = (f", {unsupported} unsupported" if unsupported else "") + (f", {flagged} flagged" if flagged else "")
        click.echo(f"\n{len(results) - len(failed)} built, {len(failed) - unsupported - flagged} compile-error{tail}"
                   f"{_throughput(phase.summary)}")
    if failed:
        raise SystemExit(1)


def _outcome(path, result) -> dict:
    """One build's JSON line."""
    return {"solution": path, "ok": result.ok, "cached": result.cached, "seconds": result.seconds,
            "message": result.message, "verdict": None if result.ok else result.verdict}


def _throughput(summary: dict) -> str:
    """``" (3 compiled in 41.2 s by 3 builders: 262 builds/hour)"``, or '' when all came from the cache."""
    if not summary.get("built"):
        return ""
    return (f" ({summary['built']} compiled in {summary['wall_s']} s by {summary['workers']} builders: "
            f"{summary['builds_per_hour']} builds/hour)")


def _exit_on_signal(signum, frame):
    raise SystemExit(128 + signum)
