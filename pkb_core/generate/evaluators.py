"""How ``pkb generate --rounds`` has a round's files checked: an :class:`Evaluator`.

Two implementations, one contract (the loop never asks which it has):

:class:`ServiceEvaluator`
    the reward service (``--server URL``, :class:`pkb_core.client.Client`): every
    file of a round is submitted at once (``evaluate_many``) and the service's warm
    groups run them; nothing starts on this machine.
:class:`LocalEvaluator`
    one ``pkb run`` launch per round on this node (:class:`pkb_core.launch.session.Session`):
    the compile phase, then one launch for every file of the round, into
    ``<out>/runs/r<k>/`` (its records and logs).

Both give the records ``pkb run --solution F`` gives for the same file (the same
planning, compile phase and launch), feedback included.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pkb_core.contracts.record import Record
from pkb_core.errors import PkbError


@dataclass(frozen=True)
class Candidate:
    """One file of a round: the problem's key, the file, and the label its record gets."""

    problem: str
    path: Path
    label: str


@dataclass(frozen=True)
class EvalOptions:
    """What ``pkb run`` would be asked for each file (``size``/``dtype`` ``auto``: the device's default)."""

    backend: str
    world_size: int = 2
    trials: int = 5
    size: str = "auto"
    dtype: str = "auto"
    measure_perf: bool = False
    #: None asked: the device's headline (:func:`pkb_core.contracts.modes.headline_mode`).
    timing_modes: tuple[str, ...] = ()
    timeout: float | None = None


class Evaluator(Protocol):
    """Checks (and times) a round's files."""

    def evaluate(self, candidates: list[Candidate], tag: str) -> list[Record]:
        """The records of ``candidates``, in their order; ``tag`` names the round (``r2``)."""

    def close(self) -> None:
        """Release what the evaluator holds (a connection)."""


class ServiceEvaluator:
    """A round through the reward service at ``url`` (``pkb serve``)."""

    def __init__(self, url: str, options: EvalOptions, *, token: str | None = None, client: str = "pkb-generate",
                 concurrency: int = 64):
        from pkb_core.client.http import Client

        self.client = Client(url, token=token, timeout=60.0)
        self.options = options
        self.tag = client
        self.concurrency = concurrency

    def evaluate(self, candidates: list[Candidate], tag: str) -> list[Record]:
        o = self.options
        options = {"backend": o.backend, "world_size": o.world_size, "trials": o.trials, "size": o.size,
                   "dtype": o.dtype, "measure_perf": o.measure_perf, "timing_modes": list(o.timing_modes),
                   "timeout": o.timeout, "client": self.tag}
        items = [(c.problem, c.path.read_text(), {**options, "label": c.label}) for c in candidates]
        records = self.client.evaluate_many(items, concurrency=self.concurrency)
        missing = [c.label for c, r in zip(candidates, records) if r is None]
        if missing:
            raise PkbError(f"the service cancelled the jobs of {', '.join(missing)}")
        return records

    def close(self) -> None:
        self.client.close()


class LocalEvaluator:
    """A round as one launch on this node, run directories under ``runs``; one session
    (:class:`pkb_core.launch.session.Session`) for every round: calibrated once, each
    record reported to the plugins' ``pkb_report_job``."""

    def __init__(self, pm, options: EvalOptions, runs: Path, *, device: str = "auto", config=None):
        from pkb_core.launch.session import Session

        self.options, self.runs = options, Path(runs)
        self.session = Session.here(pm, config, device=device, backend=options.backend,
                                    world_size=options.world_size)
        self.request = self.session.request(trials=options.trials, size=options.size, dtype=options.dtype,
                                            measure_perf=options.measure_perf,
                                            timing_modes=tuple(options.timing_modes))

    def evaluate(self, candidates: list[Candidate], tag: str) -> list[Record]:
        session = self.session
        run_dir = self.runs / tag
        pairs = [(session.registry.get(c.problem), c.path.resolve(), c.label) for c in candidates]
        jobs, refused = session.plan(self.request, pairs)
        with session:
            by_label = {record.solution: record for record in session.refuse(refused, run_dir)}
            if jobs:
                settings = session.settings(run_dir, calibrated=self.options.measure_perf,
                                            job_timeout=self.options.timeout)
                for record in session.run(jobs, settings):
                    by_label[record.solution] = record
        missing = [c.label for c in candidates if c.label not in by_label]
        if missing:
            raise PkbError(f"the launch of {tag} ended without records for {', '.join(missing)} (see {run_dir})")
        return [by_label[c.label] for c in candidates]

    def close(self) -> None:
        pass
