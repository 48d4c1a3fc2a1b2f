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


def evaluate(problem, source: str, *, backend: str | None = None, world_size: int = 2, device: str = "auto",
             trials: int = 5, size: str = "auto", dtype: str = "auto", measure_perf: bool = False,
             timing_modes=(), timeout: float | None = None, out=None, config_dir=None) -> Record:
    """Check ``source`` (a solution file's text) on ``problem`` (an id or ``<id>_<name>``).

    :param backend: the backend whose rules judge it (``triton``, ``cuda``, ...; ``reference``
        allows torch.distributed); default: the one ``source`` declares (``BACKEND = "name"``, as
        ``pkb submit`` and the service read it). A source that declares none and no ``backend``
        is refused, as the service refuses it: a file judged by rules nobody chose passed where
        its own backend flags it.
    :param out: the run directory for the record, logs and build outputs (default: a
        temporary one, removed afterwards).
    :param config_dir: where ``pkb.toml`` is looked for (default: the current directory).
    A ``source`` that is empty or not UTF-8 text is not an error: it is its ``compile-error``
    record, returned without starting anything (:mod:`pkb_core.compile.source_defects`).

    The record is written to the run directory and reported to the plugins' ``pkb_report_job``
    (:mod:`pkb_core.launch.session`), whatever the verdict.

    :raises PkbError: an unknown problem or backend, a backend that cannot run here, an
        option out of range (one line, as ``pkb run`` says it).
    """
    from pkb_core.compile.source_defects import source_bytes, source_defect
    from pkb_core.config import load_config
    from pkb_core.contracts.verdict import Verdict
    from pkb_core.launch.plan import keyed_by_content
    from pkb_core.errors import BadOption
    from pkb_core.launch.session import Session
    from pkb_core.plugin.manager import get_plugin_manager

    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout < float("inf")):
        raise BadOption(f"timeout {timeout!r} must be a number of seconds above 0")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise BadOption(f"world_size {world_size!r} must be a whole number of ranks, at least 1")
    if backend is None:
        from pkb_core.problem.solution_backend import declared_backend

        backend = declared_backend(source) if isinstance(source, str) else None
        if backend is None:
            raise BadOption('no backend: pass backend="NAME" (triton, cuda, ...; "reference" allows '
                            'torch.distributed) or declare BACKEND = "NAME" in the source (`pkb backends` lists them)')
    session = Session.here(get_plugin_manager(), load_config(config_dir), device=device, backend=backend,
                           world_size=world_size)
    spec = session.registry.get(str(problem))
    defect = source_defect(source)
    with tempfile.TemporaryDirectory(prefix="pkb-evaluate-") as scratch, session:
        run_dir = Path(out) if out is not None else Path(scratch)
        path = run_dir / "solutions" / f"{spec.key}.py"
        if defect is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source)
        request = session.request(trials=trials, size=size, dtype=dtype, measure_perf=measure_perf,
                                  timing_modes=timing_modes, problems=str(spec.id),
                                  solution=None if defect else str(path))
        jobs, refused = session.plan(request, [(spec, None if defect else path, path.name)])
        if defect is not None:
            job = keyed_by_content((jobs or [refused[0][0]])[0], source_bytes(source))
            return session.record(job, Verdict.COMPILE_ERROR, defect, run_dir)
        if refused:
            return session.refuse(refused, run_dir)[0]
        settings = session.settings(run_dir, calibrated=measure_perf, job_timeout=timeout)
        return session.run(jobs, settings)[0]
