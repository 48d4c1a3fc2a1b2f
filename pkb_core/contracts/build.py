"""The compile phase's contracts: what it asks a builder and what the builder answers
(:mod:`pkb_core.compile.builder`), and what it concluded about one solution
(:mod:`pkb_core.compile.phase`), as the launcher, the report hooks and the build cache see it."""
from __future__ import annotations

from dataclasses import dataclass

import attrs

from pkb_core.contracts.messages import NOTE_CHARS, optional_text, text
from pkb_core.contracts.serial import Contract
from pkb_core.contracts.verdict import Verdict

#: Characters of a compiler's message a build outcome keeps.
BUILD_MESSAGE_CHARS = 20000


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


@attrs.frozen(kw_only=True)
class BuildRequest(Contract):
    """What the compile phase asks one builder process (:mod:`pkb_core.compile.builder`), on its
    standard input: build ``solution`` for ``problem_path`` with ``backend`` on ``device``."""

    backend: str
    solution: str
    problem_path: str
    device: str
    #: The backend's options (``--backend-option``).
    options: dict = attrs.field(factory=dict)
    #: The run directory, hidden from the build (unless the solution lies in it).
    run_dir: str
    #: Folders hidden from the build besides the run directory (the reward service's data
    #: directory), but for the solution's own folder.
    hidden: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    #: Bytes of output the build's log takes before the rest is dropped (None: no cap).
    log_cap: int | None = None
    #: The build's temporary folder, made (and removed when the build ends, however it ends) by
    #: the compile phase: the only folder the build writes besides its output.
    scratch: str
    #: Bytes the temporary folder may hold: the builder mounts a tmpfs of that size on it in its
    #: own mount namespace (charged to its cgroup, gone with its processes). None: no cap.
    scratch_bytes: int | None = None
    #: The build's own user (uid and gid), drawn by the compile phase as a candidate group's is.
    #: None: the launcher is not root, and the build keeps its user.
    user: int | None = None
    #: The build's output folder, made by the compile phase (:mod:`pkb_core.compile.output`): the
    #: builder sees pkb's cache through an overlay whose writes land there, and the phase
    #: publishes what is new in it once the build has ended. None: the build writes pkb's cache
    #: itself (no user of its own).
    output: str | None = None


@attrs.frozen(kw_only=True)
class BuildAnswer(Contract):
    """A builder's answer, its last line on the reply descriptor. The solution's code ran in
    that process, so it is read once, strictly, by :class:`pkb_core.compile.phase.BuildPhase`
    (an answer that does not fit is a ``compile-error``). ``verdict``: ``unsupported`` when
    the solution needs what pkb cannot provide; believed only before its code ran."""

    ok: bool
    message: str = text(BUILD_MESSAGE_CHARS)
    verdict: str | None = optional_text(NOTE_CHARS)


@attrs.frozen(kw_only=True)
class SourceChecked(Contract):
    """A builder's first line once the source check passed, before any solution code runs:
    after it, the builder may say a solution did not compile, never that it is unsupported."""

    source: str = "checked"
