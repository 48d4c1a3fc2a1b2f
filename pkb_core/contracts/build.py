"""What the compile phase concluded about one solution (:mod:`pkb_core.build.phase`), as the
launcher, the report hooks and the build cache see it."""
from __future__ import annotations

from dataclasses import dataclass

from pkb_core.contracts.verdict import Verdict


@dataclass(frozen=True)
class BuildResult:
    """One solution's outcome in the compile phase (``message``: the compile
    error; ``verdict``: the failed job's verdict, ``unsupported`` when the
    solution needs what pkb cannot provide)."""

    ok: bool
    message: str = ""
    seconds: float = 0.0
    cached: bool = False
    verdict: Verdict = Verdict.COMPILE_ERROR
