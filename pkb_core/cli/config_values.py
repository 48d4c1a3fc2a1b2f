"""A pkb.toml value checked against the option it is the default of, before click reads it.

click converts a ``default_map`` value with the option's type as if it had been typed, and a
TOML value is no typed text: ``int(2.5)`` is 2 (``nproc = 2.5`` ran two ranks), ``True`` is the
integer 1 (``trials = true`` ran one trial), a list reaches the command as its ``str()``
(``problem = [1, 7]``: "unknown problem '[1'"), and an integer or a list for a flag ended in a
traceback. So each value's TOML type is checked here first, against what the option takes:

- a string is read as the command line reads text (click converts it and names the key if it
  cannot: ``timeout = "soon"``; a flag's string must be one of click's words for yes and no,
  :data:`BOOLEAN_WORDS`);
- a flag takes ``true`` or ``false``, an integer option an integer, a float option a number;
- a text option also takes an integer (``problem = 7``), as if it had been typed;
- a :class:`ListOption` (comma-separated on the command line: ``--problem 1,7``) takes a list of
  strings and integers, joined with commas; an option given once per value (click's
  ``multiple``) takes a list of strings;
- an option of a type pkb does not know (a plugin's) gets the value unchecked.
"""
from __future__ import annotations

import datetime as _dt
import json

import click


#: The words a flag's value may be as text (an environment variable's, or a pkb.toml string), as
#: click reads them.
BOOLEAN_WORDS = frozenset({"1", "0", "true", "false", "t", "f", "yes", "no", "y", "n", "on", "off"})


class ListOption(click.Option):
    """An option whose value is a comma-separated list on the command line (``--problem 1,7``):
    in pkb.toml it is a list (``problem = [1, 7]``) or the same comma-separated string."""


def toml_default(param: click.Option, value):
    """``value`` (as pkb.toml holds it) in the form click expects as ``param``'s default.

    Raises :class:`ValueError` whose message says what the value is and what the option
    takes (``2.5 is a float, not an integer``); the caller names the key and the file."""
    if isinstance(param, ListOption):
        return _listed(value)
    if param.multiple:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise ValueError(_refusal(value, "a list of strings"))
    kind = param.type
    boolean = param.is_bool_flag or isinstance(kind, click.types.BoolParamType)
    if boolean and isinstance(value, str) and value.strip().lower() not in BOOLEAN_WORDS:
        # click's own refusal lists its words with an empty one first ("Recognized values: , 0, 1")
        raise ValueError(f"{_shown(value)} is a string that says neither yes nor no; it takes true or false "
                         f"(or one of {', '.join(sorted(BOOLEAN_WORDS))})")
    if isinstance(value, str) or param.nargs != 1:
        return value
    if boolean:
        wanted, fits = "true or false", isinstance(value, bool)
    elif isinstance(kind, click.types.IntParamType):
        wanted, fits = "an integer", _integer(value)
    elif isinstance(kind, click.types.FloatParamType):
        wanted, fits = "a number", _integer(value) or isinstance(value, float)
    elif isinstance(kind, (click.types.StringParamType, click.Choice, click.Path, click.File)):
        if _integer(value):
            return str(value)
        wanted, fits = "a string", False
    else:  # a plugin's own type: click (and the plugin) judge the value
        return value
    if not fits:
        raise ValueError(_refusal(value, wanted))
    return value


def _listed(value) -> str:
    """A list option's value as the command line gives it: one comma-separated string."""
    if isinstance(value, str):
        return value
    if _integer(value):
        return str(value)
    if isinstance(value, list) and value and all(isinstance(v, str) or _integer(v) for v in value):
        return ",".join(str(v) for v in value)
    wanted = "a non-empty list of strings and integers (or one comma-separated string)"
    if isinstance(value, list) and value:
        odd = next(v for v in value if not (isinstance(v, str) or _integer(v)))
        raise ValueError(f"{_shown(value)} holds {_kind(odd)} ({_shown(odd)}); it takes {wanted}")
    raise ValueError(_refusal(value, wanted))


def _integer(value) -> bool:
    """A TOML integer (``true`` is no integer, though Python's ``bool`` is an ``int``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _refusal(value, wanted: str) -> str:
    return f"{_shown(value)} is {_kind(value)}, not {wanted}"


def _kind(value) -> str:
    """What ``value`` is in TOML's words."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an empty list" if not value else "a list"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, (_dt.date, _dt.time)):
        return "a date or time"
    return type(value).__name__


def _shown(value) -> str:
    """``value`` as it looks in TOML (``true``, ``[1, 7]``, ``"x"``), for the message."""
    return json.dumps(value, default=str, ensure_ascii=False)
