"""The shapes and dtypes of a problem's inputs, for a prompt, by building them.

A prompt must state exactly what ``solution`` receives at the chosen size and
world size. Rather than derive shapes from ``SIZES`` by hand, pkb calls the
problem's own ``inputs(ctx)`` in the ``pkb`` command's process, on CPU, with no
process group: :class:`OfflineContext` is a :class:`RunContext` whose
``group()`` returns a :class:`GroupStandIn` (the ranks it would span) instead
of calling ``torch.distributed.new_group``.

It builds twice: rank 0 in trial 0 and rank ``W - 1`` in trial 1. An argument
whose description differs between the two (a routing-dependent row count, the
root's larger input in a scatter) is reported as varying, with both versions.
If ``inputs`` fails without a process group (it calls ``torch.distributed``
itself), the description falls back to the size preset's parameters and says
so. The random values come from a fixed secret, so a prompt is reproducible.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from pkb_core.problem.contract import RunContext
from pkb_core.contracts.dtypes import torch_dtype

#: Precision names and the torch dtype attribute each stands for.
#: Fixed seed material: prompts are reproducible.
PROMPT_SECRET = "pkb-prompt"


@dataclass(frozen=True)
class GroupStandIn:
    """What ``ctx.group(ranks)`` returns in an offline build: the ranks only."""

    ranks: tuple


class OfflineContext(RunContext):
    """A :class:`RunContext` on CPU that needs no process group."""

    def group(self, ranks):
        key = tuple(ranks)
        return self._groups.setdefault(key, GroupStandIn(key))


@dataclass(frozen=True)
class InputDescription:
    """``text``: Markdown lines, one per argument; ``built``: ``False`` when
    ``inputs`` could not run offline and ``text`` describes ``SIZES`` instead."""

    text: str
    built: bool


def describe_inputs(problem, *, size: str, world_size: int, precision: str) -> InputDescription:
    """Describe the arguments ``solution`` receives for ``problem`` (a loaded
    :class:`pkb_core.problem.contract.Problem`) at ``size``, ``world_size`` and ``precision``."""
    import torch

    spec = problem.spec
    params = spec.params(size)
    dtype = torch_dtype(precision)

    def build(rank, trial):
        ctx = OfflineContext(rank=rank, world_size=world_size, device="cpu", dtype=dtype, size=size,
                             params=params, trial=trial, secret=PROMPT_SECRET, problem_key=spec.key)
        with torch.no_grad():
            return tuple(problem.inputs(ctx))

    last = world_size - 1
    try:
        first, other = build(0, 0), build(last, 1)
    except Exception as exc:  # noqa: BLE001 - any failure means "describe from SIZES"
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return InputDescription(
            f"(pkb could not build the inputs without a process group: {type(exc).__name__}: {reason}. "
            f"They are made by `inputs(ctx)` in the reference source above from the size parameters "
            f"{params}, world size {world_size} and working dtype {dtype}.)", built=False)
    names = _parameter_names(problem.reference, max(len(first), len(other)))
    lines = []
    varying = False
    for i, name in enumerate(names):
        here = describe_value(first[i], name) if i < len(first) else "(absent)"
        there = describe_value(other[i], name) if i < len(other) else "(absent)"
        if here == there:
            lines.append(f"- `{name}`: {here}")
        else:
            varying = True
            lines.append(f"- `{name}`: *varies* by rank or trial; rank 0: {here}; "
                         f"rank {last} in another trial: {there}")
    if varying:
        lines.append("\nArguments marked *varies* change with the rank or the random draw of each trial: "
                     "read sizes from the arguments at run time, never hard-code them.")
    return InputDescription("\n".join(lines), built=True)


def _parameter_names(function, count: int) -> list[str]:
    """``count`` names for the arguments: the reference's parameter names, then
    ``arg<i>`` (past a ``*args``)."""
    names = []
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            names.append(param.name)
    return (names + [f"arg{i}" for i in range(len(names), count)])[:count]


def describe_value(value, name: str = "") -> str:
    """One line saying what ``value`` is: shape and dtype of tensors, the
    ranks of a group, the value of small Python objects."""
    import torch

    if isinstance(value, torch.Tensor):
        return _tensor(value)
    if isinstance(value, GroupStandIn):
        return f"a torch.distributed process group over ranks {list(value.ranks)} (this rank's group)"
    if value is None:
        return "None (the default process group: all ranks)" if "group" in name.lower() else "None"
    if isinstance(value, torch.nn.Module):
        tensors = [*value.named_parameters(), *value.named_buffers()]
        parts = [f"{n} {_tensor(t)}" for n, t in tensors[:8]]
        more = f", and {len(tensors) - 8} more" if len(tensors) > 8 else ""
        module = type(value).__module__
        where = "torch.nn" if module.startswith("torch.nn.") else module
        return f"a {where}.{type(value).__name__} module ({'; '.join(parts)}{more})"
    if isinstance(value, torch.Size):
        return f"torch.Size({list(value)})"
    if isinstance(value, (list, tuple)):
        kind = type(value).__name__
        if value and all(isinstance(v, torch.Tensor) for v in value) and \
                len({(tuple(v.shape), v.dtype) for v in value}) == 1:
            return f"{kind} of {len(value)} tensors, each {_tensor(value[0])}"
        if all(_is_plain(v) for v in value):
            return f"{kind} {_short(repr(value))}"
        return f"{kind} of {len(value)}: [" + "; ".join(describe_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "dict {" + "; ".join(f"{k!r}: {describe_value(v)}" for k, v in value.items()) + "}"
    if _is_plain(value):
        return f"{type(value).__name__} {value!r}"
    return f"{type(value).__name__} {_short(repr(value))}"


def _tensor(t) -> str:
    shape = "0-dim (scalar)" if t.dim() == 0 else str(tuple(t.shape))
    return f"tensor {shape} {str(t.dtype).replace('torch.', '')}"


def _is_plain(value) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    return isinstance(value, (bool, int, float, str)) or value is None


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
