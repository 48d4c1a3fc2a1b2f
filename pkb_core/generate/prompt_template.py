"""Prompt templates: TOML files of ``${placeholder}`` strings.

The default is :data:`DEFAULT_TEMPLATE` (package data). A user template
(``--template FILE`` or ``[prompt] template = "FILE"`` in pkb.toml) is read on
top of it: it may set any subset of :data:`TEMPLATE_KEYS`, the rest keep the
default's text. Unknown keys are refused, so a misspelt key cannot be ignored
silently. Placeholders follow :class:`string.Template` (``$$`` is a literal
dollar sign); an unknown one is an error naming it.
"""
from __future__ import annotations

import string
import sys
from pathlib import Path

from pkb_core.errors import PkbError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

DEFAULT_TEMPLATE = Path(__file__).parent / "default_prompt.toml"

#: Every key a template may set, and its type.
TEMPLATE_KEYS = {
    "system": str, "user": str, "example": str, "max_examples": int,
    "rules": str, "custom_kernels_rule": str, "library_rule": str,
    "revision": str, "goal_fix": str, "goal_faster": str,
}


class PromptTemplate:
    """A loaded template: :attr:`parts` (key -> value) and :attr:`source` (where
    the overrides came from, ``"default"`` without any)."""

    def __init__(self, parts: dict, source: str):
        self.parts = parts
        self.source = source

    def text(self, key: str) -> str:
        return self.parts[key].strip()

    def render(self, key: str, values: dict) -> str:
        """Template ``key`` with ``values`` substituted."""
        try:
            return string.Template(self.text(key)).substitute(values)
        except KeyError as exc:
            raise PkbError(f"prompt template {self.source}: unknown placeholder ${{{exc.args[0]}}} in {key!r} "
                           f"(known: {', '.join(sorted(values))})") from None
        except ValueError as exc:
            raise PkbError(f"prompt template {self.source}: {exc} in {key!r} (write $$ for a literal $)") from None


def load_template(path=None) -> PromptTemplate:
    """The default template, with the keys of the TOML file ``path`` (if any) on top."""
    parts = _read(DEFAULT_TEMPLATE)
    if not path:
        return PromptTemplate(parts, "default")
    path = Path(path).expanduser()
    if not path.is_file():
        raise PkbError(f"prompt template {path} does not exist")
    override = _read(path)
    unknown = sorted(set(override) - set(TEMPLATE_KEYS))
    if unknown:
        raise PkbError(f"prompt template {path}: unknown key(s) {', '.join(unknown)} "
                       f"(known: {', '.join(TEMPLATE_KEYS)})")
    for key, value in override.items():
        wanted = TEMPLATE_KEYS[key]
        if not isinstance(value, wanted) or isinstance(value, bool):
            raise PkbError(f"prompt template {path}: {key} must be {'an integer' if wanted is int else 'a string'}")
    return PromptTemplate({**parts, **override}, str(path))


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise PkbError(f"prompt template {path}: {exc}") from None
