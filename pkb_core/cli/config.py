"""Reading ``pkb.toml`` or ``[tool.pkb]`` in pyproject.toml.

Precedence, highest first: command-line flag, environment (``PKB_<COMMAND>_<OPTION>``,
e.g. ``PKB_RUN_BACKEND``), this file, the built-in default. Tables:

``[run]``
    Defaults of ``pkb run``; keys are its option names with ``_`` (``backend``,
    ``nproc``, ``measure_perf``, ...).
``[backends.<name>]``
    Options handed to that backend's ``pkb_backend_init`` (``ctx.options``).
``[prompt]``
    Defaults of ``pkb prompt`` and ``pkb generate`` for the prompt options
    (``template``, ``backend``, ``precision``, ``hardware``, ``size``, ``nproc``).
``[generate]``
    Defaults of ``pkb generate`` (``model``, ``provider``, ``samples``, ...);
    they win over ``[prompt]``.
``[providers.<name>]``
    Options handed to that model provider's factory (docs/generation.md).
"""
from __future__ import annotations

import sys
from pathlib import Path

from pkb_core.errors import PkbError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


def load_config(directory: Path | None = None) -> dict:
    """The pkb configuration found in ``directory`` (default: the current one)."""
    directory = Path(directory or Path.cwd())
    own = directory / "pkb.toml"
    try:
        if own.is_file():
            return tomllib.loads(own.read_text())
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file():
            return tomllib.loads(pyproject.read_text()).get("tool", {}).get("pkb", {})
    except tomllib.TOMLDecodeError as exc:
        raise PkbError(f"cannot read pkb configuration in {directory}: {exc}") from None
    return {}


def default_map(config: dict) -> dict:
    """click's ``default_map``: one table per command."""
    prompt = dict(config.get("prompt", {}))
    return {"run": dict(config.get("run", {})), "prompt": prompt,
            "generate": {**prompt, **config.get("generate", {})}}
