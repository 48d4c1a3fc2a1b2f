"""Exceptions that carry a one-line message for the user.

The CLI turns :class:`PkbError` into ``Error: <message>`` and exit status 1
(:class:`NothingSelected`: status 5, like pytest's "no tests ran";
:class:`CannotStart` and :class:`BadOption`: status 4, a usage error); anything
else keeps its traceback, because it is a bug in pkb or a plugin (exit status 3,
pytest's internal error). docs/cli.md lists the exit statuses.
"""
import re


class PkbError(Exception):
    """Bad input or an unmet requirement, explained in one line.

    :param about: the command-line parameters (their names: ``"backend"``, ``"problems"``) whose
        value the message is about: the ``pkb`` command adds where that value came from when it
        was not typed (a ``pkb.toml`` key, an environment variable), as it does for a value click
        refuses itself."""

    #: The exit status of the ``pkb`` command that stops with this error.
    exit_code = 1
    #: Class defaults too: a plugin's subclass may not call this ``__init__``.
    about: tuple = ()
    #: Where that value came from, once the command found it (``'backend' in [run] of pkb.toml``).
    origin: str | None = None

    def __init__(self, *args, about: tuple = ()):
        super().__init__(*args)
        self.about = tuple(about)


class NothingSelected(PkbError):
    """The options select no job at all (no problem, no solution file): pytest's exit status 5."""

    exit_code = 5


class BadOption(PkbError):
    """An option's value that makes no sense, refused before anything ran, as click refuses one
    of the wrong type (``--k 0``, ``--fail-on median5``): exit status 4 (a usage error)."""

    exit_code = 4


class CannotStart(PkbError):
    """A command that cannot start as it was given, refused before it did anything: an optional
    extra that is not installed, a port another process listens on, a data directory another
    service holds, a pkb.toml that is not valid TOML. The message says what to do; exit status 4
    (a usage error)."""

    exit_code = 4


class BackendUnavailable(PkbError):
    """A backend's requirements are not met here; the message says what is missing."""


class CompileError(PkbError):
    """A solution could not be built or loaded; becomes the ``compile-error`` verdict."""


class SolutionUnsupported(CompileError):
    """A solution needs something pkb does not provide here (a harness module
    it cannot serve, say); becomes the ``unsupported`` verdict. A subclass of
    :class:`CompileError`, so code that knows only that still fails the file."""


class Terminated(SystemExit):
    """SIGTERM or SIGHUP (``timeout``, SLURM, systemd, a closed terminal), raised where the process
    is so that every ``finally`` runs; its exit status is 128 + the signal. ``pkb run`` and
    ``pkb bench`` catch it as they catch Ctrl-C: the table of what finished, and how to resume."""

    def __init__(self, signum: int):
        import signal

        super().__init__(128 + signum)
        self.signal_name = signal.Signals(signum).name


class SolutionFailed(Exception):
    """A candidate's solution raised; the message is the verdict's one line.

    ``refused`` tells that it raised because the sealed process group refused
    a collective (:mod:`pkb_core.candidate.sealed`); ``multicast_off`` that it
    failed for want of NVLink multicast, off on this machine
    (:mod:`pkb_core.candidate.multicast_gate`: the launcher decides whether to
    believe it)."""

    def __init__(self, description: str, refused: bool = False, multicast_off: bool = False):
        super().__init__(description)
        self.refused = refused
        self.multicast_off = multicast_off


class MulticastUnavailable(RuntimeError):
    """An entry point that creates or uses NVLink multicast was called where
    multicast is off (:mod:`pkb_core.candidate.multicast_gate`). A
    ``RuntimeError``, as torch's own refusal is, so a solution's ``except``
    around its multicast path still takes its fallback; one that escapes the
    solution's call makes the job ``unsupported``."""


class PluginError(PkbError):
    """A plugin misbehaved (two backends, a firstresult hook returned None, ...)."""


#: A call whose arguments do not fit the function's parameters (Python's own words).
_SIGNATURE = re.compile(r"^[\w.]+\(\) (missing \d+ required|takes \d+|takes from|got an unexpected|got multiple)")


def describe(exc: BaseException, solution=None) -> str:
    """``Type: first line of the message (file:line)``, one line.

    The place is the innermost frame of the traceback, or, given the path of the
    solution file whose code was running (``solution``), the innermost frame in
    that file first and the innermost one after it: ``(1_allreduce.py:12; raised
    in ahead.py:125)``. An error of the solution's own call then names the
    solution's line, not the line of pkb's or a library's code it reached. A first line that only
    introduces what follows (it ends with ``:``, as a compiler's ``at 8:4:`` before the source it
    quotes) is followed by the message's last line, which says what is wrong. An exception whose
    class sets ``pkb_refusal = True`` (a backend's refusal that names its own place) is placed at
    the solution's line alone, without where in pkb it was raised."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    message = lines[0] if lines else ""
    if len(lines) > 1 and message.endswith(":"):
        message = f"{message} {lines[-1]}"
    return f"{type(exc).__name__}: {message}{where(exc, solution, inner=not getattr(exc, 'pkb_refusal', False))}"


def where(exc: BaseException, solution=None, inner: bool = True) -> str:
    """The place part of :func:`describe`: `` (file:line)``, `` (sol.py:12; raised
    in helper.py:40)``, or empty when the exception has no traceback.
    ``inner=False`` leaves out where it was raised when the solution's line is
    known (pkb's own refusal, whose place is no news)."""
    import traceback
    from pathlib import Path

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    innermost = frames[-1]
    own = None
    if solution is not None:
        target = str(Path(solution).resolve())
        own = next((f for f in reversed(frames) if _same_file(f.filename, target)), None)
        if own is None and isinstance(exc, TypeError) and _SIGNATURE.match(str(exc)):
            # The call never entered the file: the place is pkb's call site, which is no news.
            return " (where pkb called it: its parameters do not take the problem's inputs, which " \
                   "`pkb problems show PROBLEM` lists)"
    if own is None or own is innermost:
        return f" ({Path(innermost.filename).name}:{innermost.lineno})"
    if not inner:
        return f" ({Path(own.filename).name}:{own.lineno})"
    return f" ({Path(own.filename).name}:{own.lineno}; raised in {Path(innermost.filename).name}:{innermost.lineno})"


def _same_file(filename: str, target: str) -> bool:
    """Whether a frame's ``filename`` is the file ``target`` (resolved): pkb compiles a
    solution under its resolved path (:func:`pkb_core.problem.contract._import_file`)."""
    from pathlib import Path

    if filename == target:
        return True
    try:
        return str(Path(filename).resolve()) == target
    except (OSError, ValueError):
        return False


def mib_text(nbytes: int | None) -> str:
    """Bytes as a reason says them: MiB, or KiB below one (``an unknown amount`` for None)."""
    if nbytes is None:
        return "an unknown amount"
    return f"{nbytes / (1 << 20):.1f} MiB" if nbytes >= 1 << 20 else f"{nbytes / 1024:.0f} KiB"
