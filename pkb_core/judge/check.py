"""Comparing a candidate's outputs with the reference's, leaf by leaf.

Rules (docs/trust.md, "Correctness checks"): the structure must match; every tensor leaf must have
the reference's dtype and shape; integer and boolean leaves compare exactly;
complex leaves compare real and imaginary parts; NaN and Inf must sit exactly
where the reference has them; floating leaves pass when

    |cand - ref| <= atol * max|ref| + rtol * |ref|

elementwise, with dtype defaults below (a problem's ``TOLERANCE`` overrides
them); or, where the judge gives a *bound* (a tree shaped like the reference
whose float leaves say, per element, how far an honest result may lie: the
full-mantissa draws of ``EXACT`` problems, :meth:`pkb_core.judge.rank.JudgeRank._exact_bound`),
when ``|cand - ref| <= bound`` elementwise. ``atol`` is relative to the leaf's largest magnitude, so one number
works for outputs of any scale. Python scalars and strings compare exactly,
floats among them with the same rule.

One answer, two forms: a list or tuple of Python ints where the reference has a
1-D integer tensor is that tensor (PKB's first published commit returned problem
26's splits as ``List[int]``, its later ones as int64 tensors): it compares
exactly, like the tensor would. A Python float equal to an integer counts as that
integer there (PKB's own reference of problem 26 sums an fp32 mask, so ``tolist()``
gives floats); a list holding any other float is not that answer.

PKB's own harness compared only tensors, by shape and value, after a cast to
float: it did not check output dtypes, the nesting of outputs, or whether a
solution modified its inputs. pkb keeps those rules (they are the reference's
semantics), but a finding that breaks only one of them says so with
:data:`PKB_UNCHECKED`, so a census of PKB's trees tells those records apart.
"""
from __future__ import annotations

import math

import torch

from pkb_core.harness.trees import leaves

#: Differing elements a finding lists (the first ones in memory order), besides the worst.
SHOWN_ELEMENTS = 4

#: Default tolerances per floating dtype: (rtol, atol as a fraction of max|ref|).
DEFAULT_TOLERANCE = {
    torch.float64: (1e-9, 1e-12),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
}
#: How an ``EXACT`` problem's trials on integer-valued draws are checked: bit for bit (its other
#: trials, full-mantissa draws, within the dtype's rounding of the sum: :mod:`pkb_core.judge.rank`).
EXACT_TOLERANCE = {"rtol": 0.0, "atol": 0.0}
_FP8 = {getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)}
#: The note on a finding that breaks only a rule PKB's harness did not apply (output
#: dtype, output structure, input mutation): the rule stays, the record says so.
PKB_UNCHECKED = "PKB's harness did not check this; the reference's semantics require it"


def structure(value):
    """The shape of a nested structure, leaves replaced by their type name.

    Tuples and lists are alike (PKB solutions return either); dicts are keyed,
    so two dicts match when they have the same keys, in any order.
    """
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        return [structure(v) for v in value]
    if isinstance(value, dict):
        return {k: structure(v) for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))}
    if isinstance(value, torch.Tensor):
        return "tensor"
    return getattr(value, "type_name", None) or type(value).__name__


def _containers(value):
    """The nesting of tuples, lists and dicts alone (leaves are compared one by one)."""
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        return [_containers(v) for v in value]
    if isinstance(value, dict):
        return {k: _containers(v) for k, v in value.items()}
    return None


def tolerance_for(dtype, override=None):
    rtol, atol = DEFAULT_TOLERANCE.get(dtype, DEFAULT_TOLERANCE[torch.float32])
    if override:
        rtol, atol = override.get("rtol", rtol), override.get("atol", atol)
    return rtol, atol


def compare(candidate, reference, tolerance=None, bound=None) -> str | None:
    """``None`` if ``candidate`` matches ``reference``, else one line saying where and by how much.

    :param bound: None, or a tree shaped like ``reference``: per float leaf, the
        largest difference allowed per element (replaces ``tolerance`` there)."""
    candidate = _integer_lists_as_tensors(candidate, reference)
    if _containers(candidate) != _containers(reference):
        line = (f"output structure {_brief(structure(candidate))} differs from the reference's "
                f"{_brief(structure(reference))}")
        return f"{line} ({PKB_UNCHECKED})" if _same_leaves(candidate, reference, tolerance) else line
    bounds = [b for _, b in leaves(bound)] if bound is not None else None
    for i, ((path, cand), (_, ref)) in enumerate(zip(leaves(candidate), leaves(reference))):
        limit = bounds[i] if bounds is not None and i < len(bounds) else None
        problem = compare_leaf(cand, ref, tolerance, limit if isinstance(limit, torch.Tensor) else None)
        if problem:
            return Finding.of(f"{path}: {problem}", problem, output=path)
    return None


def _integer_lists_as_tensors(candidate, reference):
    """``candidate`` with each list or tuple of Python ints (or floats equal to
    integers) that stands where the reference has a 1-D integer tensor replaced by
    that tensor's form (the same answer: see the module docstring). Anything else
    is left as it is."""
    if isinstance(reference, torch.Tensor):
        if (reference.dim() == 1 and not reference.is_floating_point() and not reference.is_complex()
                and reference.dtype != torch.bool and isinstance(candidate, (list, tuple))
                and all(_integral(v) for v in candidate)):
            # Out of the dtype's range: compared as it came (a failure). Checked here, since
            # torch.tensor wraps some values into a small dtype silently ([-251] as uint8 [5]).
            info = torch.iinfo(reference.dtype)
            if not all(info.min <= int(v) <= info.max for v in candidate):
                return candidate
            try:
                return torch.tensor([int(v) for v in candidate], dtype=reference.dtype, device=reference.device)
            except (OverflowError, RuntimeError):
                return candidate
        return candidate
    if isinstance(reference, (list, tuple)) and not isinstance(reference, torch.Size) \
            and isinstance(candidate, (list, tuple)) and len(candidate) == len(reference):
        return type(candidate)(_integer_lists_as_tensors(c, r) for c, r in zip(candidate, reference))
    if isinstance(reference, dict) and isinstance(candidate, dict):
        return {k: _integer_lists_as_tensors(v, reference[k]) if k in reference else v for k, v in candidate.items()}
    return candidate


def _integral(value) -> bool:
    """Whether ``value`` is a Python int, or a Python float whose value is an
    integer (bools are neither: ``True`` is no split size)."""
    return type(value) is int or (type(value) is float and value.is_integer())


def _same_leaves(candidate, reference, tolerance) -> bool:
    """Whether the two trees hold the same leaves in the same order, each matching
    (only their nesting differs: a rule PKB's harness did not apply)."""
    cand, ref = [v for _, v in leaves(candidate)], [v for _, v in leaves(reference)]
    return len(cand) == len(ref) and all(compare_leaf(c, r, tolerance) is None for c, r in zip(cand, ref))


def _same_values(cand, ref, tolerance) -> bool:
    """Whether ``cand`` (a tensor of another dtype, ``ref``'s shape) holds the
    reference's values: cast to the reference's dtype and compared by its rules
    (integers exactly, after checking that nothing was lost in the cast)."""
    if cand.shape != ref.shape or cand.is_complex() != ref.is_complex():
        return False
    cand = cand.detach().to(ref.device)
    if not (ref.is_floating_point() or ref.is_complex()):
        wide = torch.float64 if not cand.is_complex() else torch.complex128
        return bool(torch.equal(cand.to(wide), ref.to(wide)))
    return compare_leaf(cand.to(ref.dtype), ref, tolerance) is None


class Finding(str):
    """What :func:`compare` says: its one line, which also carries :attr:`detail`,
    the structured form a model's feedback is made of (:mod:`pkb_core.results.feedback`):
    ``output`` (the leaf's path), and for a tensor that differs ``count``, ``numel``,
    ``elements`` (the first :data:`SHOWN_ELEMENTS` differing ones in memory order,
    then the worst: ``{"index", "got", "expected"}`` as text), ``max_abs_err`` and
    ``tolerance``. A plain string with an empty detail where there is no more to say."""

    detail: dict

    @classmethod
    def of(cls, line: str, source=None, **detail) -> "Finding":
        found = cls(line)
        found.detail = {**getattr(source, "detail", {}), **detail}
        return found

    @classmethod
    def input_modified(cls, path: str) -> "Finding":
        """A solution changed the input at ``path`` that the problem does not update
        in place: a rule PKB's harness did not apply (:data:`PKB_UNCHECKED`)."""
        return cls.of(f"the solution modified its input ({path}) ({PKB_UNCHECKED})")


def compare_leaf(cand, ref, tolerance=None, bound=None) -> str | None:
    if not isinstance(ref, torch.Tensor):
        return _compare_scalar(cand, ref, tolerance)
    if type(cand) is not torch.Tensor:
        return f"got {_type_name(cand)}, expected a plain torch.Tensor of dtype {_dtype(ref.dtype)}"
    if cand.dtype != ref.dtype:
        line = f"dtype {_dtype(cand.dtype)}, expected {_dtype(ref.dtype)}"
        return f"{line} ({PKB_UNCHECKED})" if _same_values(cand, ref, tolerance) else line
    if cand.shape != ref.shape:
        return f"shape {tuple(cand.shape)}, expected {tuple(ref.shape)}"
    # Compare where the reference lives: on a GPU the elementwise work stays
    # there (on the host, single-threaded in a worker, 256 MiB outputs took
    # longer than a job's timeout); only the verdict's few scalars come back.
    cand, ref = cand.detach().to(ref.device), ref.detach()
    if ref.is_complex():
        return compare_leaf(torch.view_as_real(cand), torch.view_as_real(ref), tolerance)
    if bound is not None and ref.is_floating_point() and bound.shape == ref.shape:
        return _compare_bounded(cand, ref, bound.to(ref.device))
    if ref.dtype in _FP8:
        cand, ref = cand.view(torch.uint8), ref.view(torch.uint8)
    if not ref.is_floating_point():
        bad = cand != ref
        return _report(bad, cand, ref, "exact comparison") if bad.any() else None
    return _compare_float(cand, ref, tolerance)


def _compare_scalar(cand, ref, tolerance) -> str | None:
    """Python scalars and strings: the same type (bool, int and float are told
    apart), equal values; floats within the fp64 tolerance."""
    if type(cand) is not type(ref):
        return f"got {_type_name(cand)} {cand!r}, expected {_type_name(ref)} {ref!r}"
    if isinstance(ref, float):
        rtol, atol = tolerance_for(torch.float64, tolerance)
        if not (math.isfinite(ref) and math.isfinite(cand)):  # NaN only for NaN, an infinity only for itself
            ok = (math.isnan(ref) and math.isnan(cand)) or cand == ref
        else:
            ok = abs(cand - ref) <= atol * abs(ref) + rtol * abs(ref)
        return None if ok else f"got {cand!r}, expected {ref!r}"
    if isinstance(ref, (bool, int, str, type(None), torch.Size)):
        return None if cand == ref else f"got {cand!r}, expected {ref!r}"
    return f"cannot compare a {_type_name(ref)} output"


def _type_name(value) -> str:
    return getattr(value, "type_name", None) or type(value).__name__


def _compare_float(cand, ref, tolerance):
    rtol, atol = tolerance_for(ref.dtype, tolerance)
    # 16-bit values convert to fp32 exactly and fp32 error is far below their
    # tolerances; wider dtypes need fp64.
    wide = torch.float32 if ref.element_size() <= 2 else torch.float64
    c, r = cand.to(wide), ref.to(wide)
    nan_mismatch = torch.isnan(c) != torch.isnan(r)
    inf_mismatch = (torch.isinf(c) | torch.isinf(r)) & (c != r)
    finite_r = r[torch.isfinite(r)]
    scale = finite_r.abs().max().item() if finite_r.numel() else 0.0
    err = (c - r).abs()
    finite = torch.isfinite(c) & torch.isfinite(r)
    out_of_tol = finite & (err > atol * scale + rtol * r.abs())
    bad = nan_mismatch | inf_mismatch | out_of_tol
    if not bad.any():
        return None
    label = f"rtol={rtol:g}, atol={atol:g}*max|ref|={atol * scale:.3g}"
    if nan_mismatch.any() or inf_mismatch.any():
        label = "NaN/Inf where the reference has none (or the other way round); " + label
    return _report(bad, cand, ref, label, err=torch.where(finite, err, torch.full_like(err, math.inf)))


def _compare_bounded(cand, ref, bound):
    """Per element ``|cand - ref| <= bound`` (NaN and Inf where the reference has them)."""
    c, r = cand.to(torch.float64), ref.to(torch.float64)
    err = (c - r).abs()
    special = ~torch.isfinite(r) | ~torch.isfinite(c)
    bad = torch.where(special, ~((c == r) | (torch.isnan(c) & torch.isnan(r))), err > bound)
    if not bad.any():
        return None
    label = (f"within the working dtype's own rounding of the sum ({_dtype(ref.dtype)}: world size x eps x "
             f"the sum of the terms' magnitudes, per element)")
    return _report(bad, cand, ref, label, err=torch.where(special, torch.full_like(err, math.inf), err))


def _report(bad, cand, ref, label, err=None):
    count = int(bad.sum())
    flat = int(torch.argmax(err.masked_fill(~bad, -1) if err is not None else bad.to(torch.int8)))
    index = _unravel(flat, bad.shape)
    got, want = cand.reshape(-1)[flat].item(), ref.reshape(-1)[flat].item()
    max_err = err.reshape(-1)[flat].item() if err is not None else None
    worst = f", max abs err {max_err:.3g}" if err is not None else ""
    shown = [i for i in _first_true(bad.reshape(-1), SHOWN_ELEMENTS) if i != flat] + [flat]
    elements = [dict(zip(("got", "expected"), _distinct(cand.reshape(-1)[i].item(), ref.reshape(-1)[i].item())),
                     index=list(_unravel(i, bad.shape))) for i in shown]
    got_text, want_text = _distinct(got, want)
    return Finding.of(f"{count} of {bad.numel()} elements differ{worst} at {index} "
                      f"(got {got_text}, expected {want_text}); {label}",
                      count=count, numel=bad.numel(), shape=list(bad.shape), elements=elements,
                      max_abs_err=None if max_err is None else f"{max_err:.3g}", tolerance=label)


def _distinct(got, want) -> tuple[str, str]:
    """Two differing values as text: six significant digits, or every digit they need where six
    would print them alike (a result off by one part in a million read "got 30, expected 30")."""
    short = (f"{got:.6g}", f"{want:.6g}")
    return short if short[0] != short[1] else (repr(got), repr(want))


def _unravel(flat: int, shape) -> tuple:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape)) if len(shape) else ()


def _first_true(flags, count: int, chunk: int = 1 << 20) -> list[int]:
    """The flat indices of the first ``count`` set flags, scanning in chunks (a
    256 MiB output that is wrong everywhere must not become a list of every index)."""
    found: list[int] = []
    for start in range(0, flags.numel(), chunk):
        hits = torch.nonzero(flags[start:start + chunk]).reshape(-1)[: count - len(found)]
        found += [start + int(i) for i in hits]
        if len(found) >= count:
            break
    return found


def _dtype(dtype):
    return str(dtype).replace("torch.", "")


def _brief(value, limit=120):
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."
