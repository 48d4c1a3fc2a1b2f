"""``pkb_core.evaluate``: one solution checked (and timed) in this process's launch, no server.

For scripts and notebooks: the same planning, compile phase and launch as
``pkb run --solution F`` (so the same verdict), returning the job's
:class:`~pkb_core.contracts.record.Record`. Each call starts its own judge and
candidate processes (seconds of start-up); a loop over many solutions belongs
to the reward service (``pkb serve``, :class:`pkb_core.client.Client`), which
keeps them warm.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from pkb_core.contracts.record import Record


def evaluate(problem, source: str, *, backend: str = "reference", world_size: int = 2, device: str = "auto",
             trials: int = 5, size: str = "auto", dtype: str = "auto", measure_perf: bool = False,
             timing_modes=("latency",), timeout: float | None = None, out=None, config_dir=None) -> Record:
    """Check ``source`` (a solution file's text) on ``problem`` (an id or ``<id>_<name>``).

    :param out: the run directory for the record, logs and build outputs (default: a
        temporary one, removed afterwards).
    :param config_dir: where ``pkb.toml`` is looked for (default: the current directory).
    A ``source`` that is empty or not UTF-8 text is not an error: it is its ``compile-error``
    record, returned without starting anything (:mod:`pkb_core.build.source_defects`).

    :raises PkbError: an unknown problem or backend, a backend that cannot run here, an
        option out of range (one line, as ``pkb run`` says it).
    """
    from pkb_core.build.source_defects import source_bytes, source_defect
    from pkb_core.contracts.verdict import Verdict
    from pkb_core.errors import PkbError
    from pkb_core.launch.jobs import run_jobs
    from pkb_core.launch.plan import keyed_by_content, launch_settings, make_request, plan_jobs
    from pkb_core.machine.device import detect_device, device_count
    from pkb_core.plugin.manager import get_backend_info
    from pkb_core.problem.registry import build_registry, require_problems
    from pkb_core.results.records import append_record, job_record

    pm = configured_plugin_manager(config_dir)
    device = detect_device(device)
    info = get_backend_info(pm, backend, device)
    if device == "cuda" and world_size > device_count(device):
        raise PkbError(f"world size {world_size} but only {device_count(device)} GPU(s) here")
    spec = require_problems(build_registry(pm)).get(str(problem))
    defect = source_defect(source)
    with tempfile.TemporaryDirectory(prefix="pkb-evaluate-") as scratch:
        run_dir = Path(out) if out is not None else Path(scratch)
        path = run_dir / "solutions" / f"{spec.key}.py"
        if defect is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source)
        request = make_request(backend=info.name, device=device, nproc=world_size, trials=trials, size=size,
                               dtype=dtype, measure_perf=measure_perf, timing_modes=tuple(timing_modes),
                               problems=str(spec.id), solution=None if defect else str(path))
        jobs, rejected = plan_jobs(request, [(spec, None if defect else path, path.name)])
        if defect is not None:
            job = keyed_by_content((jobs or [rejected[0][0]])[0], source_bytes(source))
            record = job_record(job, world_size, Verdict.COMPILE_ERROR, defect)
            if out is not None:
                append_record(run_dir, record)
            return record
        if rejected:
            job, why = rejected[0]
            return job_record(job, world_size, Verdict.UNSUPPORTED, why)
        calibration = None
        if measure_perf:
            from pkb_core.machine.calibrate import calibrate

            calibration = calibrate(device)
        settings = launch_settings(pm, info, device=device, nproc=world_size, run_dir=run_dir,
                                   job_timeout=timeout, calibration=calibration)
        return run_jobs(jobs, settings, skip_recorded=False)[0]


def configured_plugin_manager(config_dir=None):
    """The plugin manager with ``pkb.toml`` read from ``config_dir`` (default: the current
    directory), as ``pkb`` itself makes it: for the in-process ways in (this module's
    :func:`evaluate`, :class:`pkb_core.ray.EvaluatorPool`)."""
    from pkb_core.cli.config import load_config
    from pkb_core.plugin.manager import get_plugin_manager

    pm = get_plugin_manager()
    pm.pkb_config = load_config(config_dir)
    return pm
