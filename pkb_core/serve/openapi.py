"""JSON Schema of a contract, for the service's OpenAPI page.

The service parses its requests with the contracts themselves
(:mod:`pkb_core.contracts.serve`), not with a second model of them; this
module only describes a contract's fields to the OpenAPI page, from the same
annotations :meth:`Contract.from_json <pkb_core.contracts.serial.Contract.from_json>` reads.
"""
from __future__ import annotations

import enum
import types
import typing

import attrs

from pkb_core.contracts.serial import Contract

_PLAIN = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object"}


def contract_schema(cls: type[Contract]) -> dict:
    """An object schema: every field with its type and default; fields without one required."""
    hints = typing.get_type_hints(cls)
    properties, required = {}, []
    for field in attrs.fields(cls):
        if field.name == "extra":
            continue
        schema = _type_schema(hints[field.name])
        if field.default is attrs.NOTHING:
            required.append(field.name)
        elif not isinstance(field.default, attrs.Factory):
            schema["default"] = list(field.default) if isinstance(field.default, tuple) else field.default
        properties[field.name] = schema
    return {"title": cls.__name__, "type": "object", "properties": properties, "required": required,
            "additionalProperties": False, "description": (cls.__doc__ or "").strip().split("\n\n")[0]}


def _type_schema(hint) -> dict:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        schema = _type_schema(arms[0]) if len(arms) == 1 else {}
        return {"anyOf": [schema, {"type": "null"}]} if type(None) in args else schema
    if origin in (tuple, list):
        return {"type": "array", "items": _type_schema(args[0]) if args else {}}
    if origin is dict:
        return {"type": "object"}
    if isinstance(hint, type) and issubclass(hint, Contract):
        return contract_schema(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"type": "string", "enum": [m.value for m in hint]}
    return {"type": _PLAIN[hint]} if hint in _PLAIN else {}
