"""``pkb inspect RUN_DIR --problem ID``: what a solution returned, next to the reference.

Runs made with ``--save-outputs`` keep, per job and rank,
``RUN_DIR/outputs/<slug>/rank<R>.pt`` = ``{"candidate", "reference", "inputs"}``
(nested lists/tuples/dicts of tensors, saved by ``torch.save``; the reference is
``None`` when the job never got to compare, and absent in dryrun mode). This
command prints every leaf's dtype, shape and first values, then where and by
how much the candidate differs from the reference: the verdict line of
:func:`pkb_core.judge.check.compare` and, per leaf, max abs/rel error, the count of
elements outside tolerance and the first of them.
"""
from __future__ import annotations

from pathlib import Path

import click

from pkb_core.errors import PkbError
from pkb_core.contracts.job import job_slug
from pkb_core.results.records import read_records


@click.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--problem", required=True, help="Problem id, key (7_reducescatter) or name.")
@click.option("--rank", type=click.IntRange(min=0), default=None, help="Only this rank (default: every saved rank).")
@click.option("--solution", default=None, help="Only outputs of solutions whose file name contains this.")
@click.option("--values", "n_values", type=click.IntRange(min=0), default=6, show_default=True, help="Sample values shown per leaf.")
@click.pass_obj
def inspect(pm, run_dir, problem, rank, solution, n_values):
    """Shapes, dtypes, sample values and differences of saved outputs (runs made with --save-outputs)."""
    import torch

    outputs = run_dir / "outputs"
    if not run_dir.is_dir():
        raise PkbError(f"run directory {run_dir} does not exist")
    if not outputs.is_dir():
        raise PkbError(f"no saved outputs in {run_dir} (rerun its jobs with `pkb run ... --save-outputs --force "
                       f"--out {run_dir}`; without --force the recorded jobs are skipped)")
    records = read_records(run_dir)
    folders = _folders(outputs, problem, records, solution)
    tolerance, exact = _tolerance(pm, folders[0].name.split("-", 1)[0])
    verdicts = {_slug(r): r for r in records}
    for folder in folders:
        record = verdicts.get(folder.name)
        head = f"== {folder.name}"
        if record:
            head += f"  [{record.verdict}]" + (f" {record.reason}" if record.reason else "")
        click.echo(head)
        for path in _rank_files(folder, rank):
            payload = torch.load(path, map_location="cpu", weights_only=True)
            click.echo(f"rank {path.stem[4:]}")
            for line in describe_payload(payload, checked_tolerance(payload, tolerance, exact), n_values):
                click.echo("  " + line)
        click.echo("")


def _folders(outputs: Path, problem: str, records, solution) -> list[Path]:
    """Output folders of ``problem`` (folders are named ``<problem key>-<solution>-W<n>-<size>``)."""
    keys = {r.problem for r in records if problem in (str(r.problem_id), r.problem)
            or str(r.problem).split("_", 1)[-1] == problem}
    prefixes = [k + "-" for k in keys] or [f"{problem}_" if problem.isdigit() else f"{problem}-"]
    found = sorted(d for d in outputs.iterdir() if d.is_dir() and any(d.name.startswith(p) for p in prefixes))
    if solution:
        found = [d for d in found if Path(solution).stem in d.name]
    if not found:
        have = ", ".join(sorted(d.name for d in outputs.iterdir() if d.is_dir())) or "none"
        raise PkbError(f"no saved outputs for problem {problem!r}"
                       + (f" and solution {solution!r}" if solution else "") + f" in {outputs} (have: {have})")
    return found


def _rank_files(folder: Path, rank) -> list[Path]:
    files = sorted(folder.glob("rank*.pt"), key=lambda p: int(p.stem[4:]) if p.stem[4:].isdigit() else -1)
    if rank is not None:
        every, files = files, [p for p in files if p.stem == f"rank{rank}"]
        if not files:
            raise PkbError(f"no rank {rank} in {folder} (have: {', '.join(p.stem for p in every)})")
    return files


def _slug(record) -> str:
    """The outputs folder of a record (named by :func:`pkb_core.contracts.job.job_slug`)."""
    return job_slug(record.problem, str(record.solution), record.world_size, record.size)


def _tolerance(pm, problem_key):
    """``(the problem's TOLERANCE override or None, whether it is EXACT)``, when the problem is
    registered here (else ``(None, False)``)."""
    from pkb_core.problem.registry import build_registry

    try:
        spec = build_registry(pm).get(problem_key)
    except PkbError:
        return None, False
    return spec.tolerance or None, bool(spec.exact)


def checked_tolerance(payload: dict, tolerance, exact: bool):
    """The tolerance the run's verdict used for these outputs, as far as one process can tell: an
    ``EXACT`` problem's integer-valued inputs are checked bit for bit (the judge's trials on such
    draws); anything else with the problem's tolerance (an ``EXACT`` problem's full-mantissa
    draws were checked within the dtype's rounding of the sum, which needs the reference run on
    every rank: here the problem's tolerance stands in for it)."""
    import torch

    from pkb_core.harness.trees import leaves
    from pkb_core.judge.check import EXACT_TOLERANCE

    if not exact:
        return tolerance
    floats = [leaf for _, leaf in leaves(payload.get("inputs")) if isinstance(leaf, torch.Tensor)
              and leaf.is_floating_point()]
    integral = all(bool(torch.equal(leaf, leaf.round())) for leaf in floats)
    return EXACT_TOLERANCE if integral else tolerance


def describe_payload(payload: dict, tolerance=None, n_values: int = 6) -> list[str]:
    """Lines describing one rank's saved outputs and their differences."""
    from pkb_core.harness.trees import leaves
    from pkb_core.judge.check import compare

    lines = []
    for part in ("candidate", "reference", "inputs"):
        if part in payload and payload[part] is not None:
            lines += [f"{path}: {describe_leaf(leaf, n_values)}" for path, leaf in leaves(payload[part], part)]
    if payload.get("reference") is None:
        lines.append("no reference output saved (the job stopped before comparing, or ran in dryrun mode)")
        return lines
    verdict = compare(payload["candidate"], payload["reference"], tolerance)
    lines.append(f"check: {verdict or 'candidate matches the reference'}")
    if verdict and not verdict.startswith("output structure"):
        for (path, cand), (_, ref) in zip(leaves(payload["candidate"]), leaves(payload["reference"])):
            diff = leaf_difference(cand, ref, tolerance)
            if diff:
                lines.append(f"  {path}: {diff}")
    return lines


def describe_leaf(leaf, n_values: int = 6) -> str:
    """``float32 (8, 16) [v0, v1, ...]`` for a tensor, ``int 3`` for a Python value."""
    import torch

    if not isinstance(leaf, torch.Tensor):
        return f"{type(leaf).__name__} {leaf!r}"
    flat = leaf.detach().reshape(-1)
    if flat.is_floating_point() and flat.element_size() == 1:
        flat = flat.float()  # fp8 has no tolist()
    values = ", ".join(_number(v) for v in flat[:n_values].tolist())
    more = ", ..." if flat.numel() > n_values else ""
    return f"{str(leaf.dtype).replace('torch.', '')} {tuple(leaf.shape)} [{values}{more}]"


def leaf_difference(cand, ref, tolerance=None) -> str | None:
    """Where and by how much two leaves differ, or None when they match.

    The verdict is :func:`pkb_core.judge.check.compare_leaf`'s; this adds the numbers a
    debugger wants: max abs and rel error, how many elements are outside the
    tolerance (the same rule as the check) and the first of them in row-major order.
    """
    import torch

    from pkb_core.judge.check import compare_leaf, tolerance_for

    problem = compare_leaf(cand, ref, tolerance)
    if problem is None:
        return None
    if not (isinstance(cand, torch.Tensor) and isinstance(ref, torch.Tensor)) or cand.shape != ref.shape \
            or cand.dtype != ref.dtype:
        return problem  # structure, type, dtype or shape: the check's line says it all
    c, r = cand.detach().cpu(), ref.detach().cpu()
    if r.is_complex():
        c, r = torch.view_as_real(c), torch.view_as_real(r)
    if r.is_floating_point() and r.element_size() > 1:
        rtol, atol = tolerance_for(r.dtype, tolerance)
        c, r = c.double(), r.double()
        finite_r = r[torch.isfinite(r)]
        scale = finite_r.abs().max().item() if finite_r.numel() else 0.0
        err = (c - r).abs()
        finite = torch.isfinite(c) & torch.isfinite(r)
        bad = (torch.isnan(c) != torch.isnan(r)) | ((torch.isinf(c) | torch.isinf(r)) & (c != r))
        bad |= finite & (err > atol * scale + rtol * r.abs())
        # A NaN or infinity where the reference has another value is an infinite error, as the
        # check reports it (it read "max abs err 0" beside the check's "inf": a new user).
        err = torch.where(finite, err, torch.where(bad, torch.full_like(err, float("inf")), torch.zeros_like(err)))
    else:  # integers and booleans exact; fp8 compares bit patterns, like the check
        bits = (c.view(torch.uint8), r.view(torch.uint8)) if r.is_floating_point() else (c, r)
        bad = bits[0] != bits[1]
        c, r = c.double(), r.double()
        err = (c - r).abs()
        err = torch.where(torch.isfinite(err), err, torch.zeros_like(err))
    rel = torch.where(r != 0, err / r.abs(), torch.zeros_like(err))
    count = int(bad.sum())
    first = int(torch.nonzero(bad.reshape(-1))[0]) if count else 0
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(first), bad.shape)) if bad.dim() else ()
    return (f"{count} of {bad.numel()} elements differ; max abs err {err.max().item():.4g}, "
            f"max rel err {rel.max().item():.4g}; first at {index}: got {_number(c.reshape(-1)[first].item())}, "
            f"expected {_number(r.reshape(-1)[first].item())}")


def _number(value) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, complex):
        return f"{value.real:.4g}{value.imag:+.4g}j"
    return str(value)
