"""The one JSON form of every contract: :class:`Contract`, a base for frozen attrs classes.

A contract's :meth:`Contract.to_json` gives plain JSON values (nested
contracts as objects, enums as their values, paths as strings, tuples as
lists) in field order; :meth:`Contract.from_json` builds the instance back,
converting each field by its annotation. Both are written once here, so no
contract has a second, hand-written (de)serialisation that could drift.

Two class settings say how a contract meets data it did not write:

``UNKNOWN``
    ``"refuse"`` (the default: a job from another pkb version, or a forged
    one, is an error naming the field) or ``"keep"`` (records and their
    timings, read back from run directories that older or newer pkb versions
    wrote: unknown fields land in the ``extra`` field and are written back
    unchanged, so nothing is lost).

Fields made with :func:`optional` are left out of the JSON form while they are
None (a record of an untimed job has no ``reference_ms`` at all).
"""
from __future__ import annotations

import enum
import functools
import types
import typing
from pathlib import Path

import attrs

from pkb_core.errors import PkbError


class ContractError(PkbError):
    """Data that does not fit a contract: a wrong type, a missing or an unknown field."""


_OMIT = "pkb_omit_if_none"


def optional(**kwargs):
    """A field that defaults to None and is absent from the JSON form while None."""
    return attrs.field(default=None, metadata={_OMIT: True}, **kwargs)


class Contract:
    """Base of pkb's typed contracts (frozen attrs classes).

    Subclasses are ``@attrs.frozen(kw_only=True)``; a subclass with
    ``UNKNOWN = "keep"`` declares ``extra: dict = attrs.field(factory=dict)``.
    """

    UNKNOWN: typing.ClassVar[str] = "refuse"

    def to_json(self) -> dict:
        """This instance as plain JSON values, fields in declaration order."""
        out = {}
        for field in attrs.fields(type(self)):
            if field.name == "extra":
                continue
            value = getattr(self, field.name)
            if value is None and field.metadata.get(_OMIT):
                continue
            out[field.name] = _dump(value)
        out.update(getattr(self, "extra", None) or {})
        return out

    @classmethod
    def from_json(cls, data):
        """An instance from :meth:`to_json`'s form; :class:`ContractError` (one line)
        when ``data`` does not fit."""
        name = cls.__name__
        if not isinstance(data, dict):
            raise ContractError(f"{name}: expected an object, got {type(data).__name__}")
        hints = _hints(cls)
        fields = [f for f in attrs.fields(cls) if f.name != "extra"]
        known = {f.name for f in fields}
        unknown = [key for key in data if key not in known]
        if unknown and cls.UNKNOWN != "keep":
            raise ContractError(f"{name}: unknown field{'s' if len(unknown) > 1 else ''} "
                                f"{', '.join(map(repr, unknown))}")
        kwargs = {f.name: _load(hints[f.name], data[f.name], f"{name}.{f.name}")
                  for f in fields if f.name in data}
        if unknown:
            kwargs["extra"] = {key: data[key] for key in unknown}
        missing = [f.name for f in fields if f.default is attrs.NOTHING and f.name not in data]
        if missing:
            raise ContractError(f"{name}: missing field{'s' if len(missing) > 1 else ''} "
                                f"{', '.join(map(repr, missing))}")
        return cls(**kwargs)


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _dump(value):
    if isinstance(value, Contract):
        return value.to_json()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


def _load(hint, value, where: str):
    """``value`` converted to the annotation ``hint`` (``where`` names the field in errors)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            if type(None) in args:
                return None
            raise ContractError(f"{where}: must not be null")
        arms = [a for a in args if a is not type(None)]
        return _load(arms[0], value, where) if len(arms) == 1 else value
    if hint is typing.Any:
        return value
    if origin is tuple:
        _expect(value, (list, tuple), where)
        item = args[0] if args else typing.Any
        return tuple(_load(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is list:
        _expect(value, (list, tuple), where)
        item = args[0] if args else typing.Any
        return [_load(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        _expect(value, dict, where)
        item = args[1] if len(args) == 2 else typing.Any
        return {k: _load(item, v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(hint, type):
        if issubclass(hint, Contract):
            return hint.from_json(value)
        if issubclass(hint, enum.Enum):
            try:
                return hint(value)
            except ValueError:
                raise ContractError(f"{where}: {value!r} is not one of "
                                    f"{', '.join(m.value for m in hint)}") from None
        if hint is Path:
            _expect(value, str, where)
            return Path(value)
        if hint is float:
            _expect(value, (int, float), where)
            return value
        if hint in (int, str, bool, dict, list, tuple):
            _expect(value, hint, where)
            return value
    return value


def _expect(value, kinds, where: str) -> None:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    # bool is an int in Python; a count given as true is still a mistake.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ContractError(f"{where}: expected {names}, got {type(value).__name__} {str(value)[:40]!r}")
