"""Small operations on argument and output trees (tuples, lists, dicts of tensors)."""
from __future__ import annotations

import copy

import torch



def clone(value):
    """A deep copy in which every tensor is a fresh clone (modules are deep-copied)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        items = [clone(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, torch.nn.Module):
        return copy.deepcopy(value)
    return value


def restore(target, pristine, indices) -> None:
    """Copy the tensors of arguments ``indices`` of ``pristine`` back into ``target``, a layer's
    weight and bias included (:func:`leaves`: a pool reused for the next round's sets must take
    their layers too; the judge's pool kept its first round's ``torch.nn.Linear`` weights, and the
    reference against itself failed problems 31 and 32 in latency mode)."""
    with torch.no_grad():  # a layer's parameters are leaves that require grad
        for i in indices:
            for (_, dst), (_, src) in zip(leaves(target[i]), leaves(pristine[i])):
                if isinstance(dst, torch.Tensor):
                    dst.copy_(src)


def identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bits (NaNs where the other has NaNs)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.element_size() == 1 and a.is_floating_point():  # fp8: compare the codes
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    if a.is_floating_point() or a.is_complex():
        # NaN where the other has NaN, every other value equal: infinities kept (nan_to_num made an
        # infinity and the dtype's largest value alike, so an input's inf overwritten with the
        # largest finite value read as unchanged).
        nans = torch.isnan(a)
        return bool(torch.equal(nans, torch.isnan(b)) and
                    torch.equal(a.masked_fill(nans, 0), b.masked_fill(nans, 0)))
    return bool(torch.equal(a, b))


def tensors(value) -> list:
    """The tensor leaves of a tree, in order."""
    return [leaf for _, leaf in leaves(value) if isinstance(leaf, torch.Tensor)]


def leaves(value, path="out"):
    """Yield ``(path, leaf)`` of a nested tuple/list/dict structure (dicts in key order); a
    ``torch.nn.Linear`` is the dict ``{"weight": ..., "bias": ...}`` of its parameters, as a
    side exports it (so a layer handed to a call is compared after it like any tensor)."""
    if type(value) is torch.nn.Linear:
        value = linear_tensors(value.weight, value.bias)
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key in sorted(value, key=repr):
            yield from leaves(value[key], f"{path}[{key!r}]")
    else:
        yield path, value


def linear_tensors(weight, bias) -> dict:
    """A ``torch.nn.Linear``'s weight and bias as the tree a side exports for the layer after a
    call (:func:`leaves` reads a layer the judge handed over as the same tree)."""
    return {"weight": weight, "bias": bias}
