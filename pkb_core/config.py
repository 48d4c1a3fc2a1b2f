"""The pkb configuration: ``pkb.toml``, or ``[tool.pkb]`` in pyproject.toml, read into a
:class:`Config` (no click, no torch: every way into a run reads it, the command line and the
in-process APIs alike).

Tables:

``[run]``, ``[bench]``, ``[build]``, ... (one per command)
    Defaults of that command; keys are its option names with ``_`` (``backend``,
    ``nproc``, ``measure_perf``, ``problem``, ``timeout``, ...).
``[backends.<name>]``
    Options handed to that backend's ``pkb_backend_init`` (``ctx.options``):
    :meth:`Config.backend_options`.
``[prompt]``
    Defaults of ``pkb prompt`` and ``pkb generate`` for the prompt options
    (``template``, ``backend``, ``precision``, ``hardware``, ``size``, ``nproc``).
``[generate]``
    Defaults of ``pkb generate`` (``model``, ``provider``, ``samples``, ...);
    they win over ``[prompt]``.
``[providers.<name>]``
    Options handed to that model provider's factory (docs/generation.md).

A run carries its configuration in its session (:class:`pkb_core.launch.session.Session`);
the command line checks it against its commands (:mod:`pkb_core.cli.config`).
"""
from __future__ import annotations

import sys
from pathlib import Path

from pkb_core.errors import CannotStart

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

#: Tables of tables handed to plugins: ``[backends.<name>]``, ``[providers.<name>]``.
PLUGIN_TABLES = ("backends", "providers")


class Config(dict):
    """The configuration (a dict of tables) and where it was read from.

    ``origin``: the file as the user knows it (``pkb.toml``, ``pyproject.toml``),
    ``None`` when there is none; ``prefix``: how its tables are spelled there
    (``""`` or ``"tool.pkb."``)."""

    def __init__(self, data=(), origin: str | None = None, prefix: str = ""):
        super().__init__(data)
        self.origin = origin
        self.prefix = prefix

    def table(self, name: str) -> str:
        """``[run]`` or ``[tool.pkb.run]``: how table ``name`` is written in the file."""
        return f"[{self.prefix}{name}]"

    def backend_options(self, name: str) -> dict:
        """``[backends.<name>]``: the options handed to that backend's init hook (empty if none)."""
        return dict(self.get("backends", {}).get(name, {}))

    def provider_options(self, name: str) -> dict:
        """``[providers.<name>]``: the options handed to that model provider's factory."""
        return dict(self.get("providers", {}).get(name, {}))


def load_config(directory: Path | None = None) -> Config:
    """The pkb configuration found in ``directory`` (default: the current one)."""
    directory = Path(directory or Path.cwd())
    own = directory / "pkb.toml"
    pyproject = directory / "pyproject.toml"
    reading = own if own.is_file() else pyproject
    try:
        if own.is_file():
            return Config(tomllib.loads(own.read_text()), _shown(own))
        if pyproject.is_file():
            data = tomllib.loads(pyproject.read_text()).get("tool", {}).get("pkb", {})
            return Config(data, _shown(pyproject), "tool.pkb.") if data else Config()
    except tomllib.TOMLDecodeError as exc:
        raise CannotStart(f"cannot read pkb configuration {_shown(reading)}: {exc}") from None
    return Config()


def _shown(path: Path) -> str:
    """The file's name when it is in the current directory, else its path."""
    try:
        return path.name if path.parent.resolve() == Path.cwd().resolve() else str(path)
    except OSError:
        return str(path)
