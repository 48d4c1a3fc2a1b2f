"""Exceptions that carry a one-line message for the user.

The CLI turns :class:`PkbError` into ``Error: <message>`` and exit status 1;
anything else keeps its traceback, because it is a bug in pkb or a plugin.
"""


class PkbError(Exception):
    """Bad input or an unmet requirement, explained in one line."""


class BackendUnavailable(PkbError):
    """A backend's requirements are not met here; the message says what is missing."""


class CompileError(PkbError):
    """A solution could not be built or loaded; becomes the ``compile-error`` verdict."""


class PluginError(PkbError):
    """A plugin misbehaved (two backends, a firstresult hook returned None, ...)."""
