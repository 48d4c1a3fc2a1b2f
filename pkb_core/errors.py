"""Exceptions that carry a one-line message for the user.

The CLI turns :class:`PkbError` into ``Error: <message>`` and exit status 1
(:class:`NothingSelected`: status 5, like pytest's "no tests ran";
:class:`CannotStart`: status 4, a usage error); anything
else keeps its traceback, because it is a bug in pkb or a plugin (exit status 3,
pytest's internal error). docs/cli.md lists the exit statuses.
"""


class PkbError(Exception):
    """Bad input or an unmet requirement, explained in one line."""

    #: The exit status of the ``pkb`` command that stops with this error.
    exit_code = 1


class NothingSelected(PkbError):
    """The options select no job at all (no problem, no solution file): pytest's exit status 5."""

    exit_code = 5


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


class SolutionFailed(Exception):
    """A candidate's solution raised; the message is the verdict's one line.

    ``refused`` tells that it raised because the sealed process group refused
    a collective (:mod:`pkb_core.candidate.sealed`)."""

    def __init__(self, description: str, refused: bool = False):
        super().__init__(description)
        self.refused = refused


class PluginError(PkbError):
    """A plugin misbehaved (two backends, a firstresult hook returned None, ...)."""


def describe(exc: BaseException) -> str:
    """``Type: first line of the message (file:line)`` of the innermost frame, one line."""
    import traceback
    from pathlib import Path

    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    text = str(exc).strip()
    message = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {message}{where}"
