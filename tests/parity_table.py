"""docs/pkb-parity.md, generated from the problem files: PKB's arguments and outputs beside pkb's.

PKB's side is data: the ``PKB`` literal of every problem file (what the
original ParallelKernelBench passes and returns at its default size: M = N =
1024, bf16, W = 2, as read from its input factory and reference). pkb's side
is computed here from the same file, at the ``default`` size preset, bf16,
W = 2, rank 0 and rank 1:

* ``inputs(ctx)`` and ``reference(*args)`` run first on the meta device (a
  context whose draws are meta tensors, torch's fake process group for the
  collectives): shapes and dtypes only, no data, so nothing can depend on
  values;
* a problem whose inputs or reference need values (host-side split lists,
  ``.item()``, data-dependent shapes) runs on the CPU instead, with real
  random draws (large ones left uninitialised: untouched pages cost
  nothing), two real ranks over gloo, and the few expensive kernels (matmul,
  attention, convolution) replaced by zeros of the shape their meta functions
  give (:class:`_ShapesOfHeavyOps`). Such a problem runs three times, with three
  seeds: a dimension or scalar that differs between them is data-dependent
  and shows as ``?``.

Each difference between the two sides must be justified by the problem file's
``PKB_DIFFERENCES`` literal (a key per argument name or ``out`` / ``out[i]``,
its reason as the value); a justification where nothing differs is stale.
tests/test_parity.py regenerates the table and checks both.

Each problem's section ends with a hidden line holding pkb's facts and a
fingerprint of what they were computed from (the problem file, this generator,
pkb_core/problem/contract.py, torch's version). ``--check`` (the test) runs again only
the problems whose fingerprint changed and compares the visible document;
``--full`` (or PKB_PARITY_FULL=1) runs all of them (one to two minutes on
two cores; PKB_PARITY_TIMES=1 prints each CPU-pass problem's seconds).

Usage: ``python tests/parity_table.py --write`` runs every problem and writes
docs/pkb-parity.md; ``--check [--full]`` compares; no option prints the
document, ``--json`` the facts and differences.
"""
from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "problems" / "pkb_problems"
DOC = ROOT / "docs" / "pkb-parity.md"
WORLD = 2
SIZE = "default"
#: Trials of the CPU pass: a value or dimension that differs between them shows as ``?``.
CPU_TRIALS = (0, 1, 2)
#: Draws of more elements than this are left uninitialised in the CPU fallback.
LARGE_DRAW = 1 << 22

_DTYPES = {
    "bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64",
    "float8_e4m3fn": "fp8e4m3", "float8_e5m2": "fp8e5m2",
}


# -- descriptions ---------------------------------------------------------------
def dtype_name(dtype) -> str:
    name = str(dtype).replace("torch.", "")
    return _DTYPES.get(name, name)


def describe(value, rank: int = 0) -> str:
    """One value as the table shows it: ``bf16[1024, 1024]``, ``group(all)``, ``0``, ``(…)``."""
    import torch
    import torch.distributed as dist

    if isinstance(value, torch.Tensor):
        text = f"{dtype_name(value.dtype)}[{', '.join(str(int(d)) for d in value.shape)}]"
        if value.layout != torch.strided:
            text += f" {str(value.layout).replace('torch.', '')}"
        return text
    if isinstance(value, torch.Size):
        return f"Size({list(value)})"
    if isinstance(value, torch.nn.Linear):
        bias = "" if value.bias is not None else ", no bias"
        return f"Linear({value.in_features}, {value.out_features}, {dtype_name(value.weight.dtype)}{bias})"
    if isinstance(value, torch.nn.Module):
        return f"<{type(value).__name__}>"
    if isinstance(value, dist.ProcessGroup):
        return _group(dist.get_world_size(value))
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        items = _runs([describe(v, rank) for v in value])
        if isinstance(value, list):
            return f"[{', '.join(items)}]"
        return f"({items[0]},)" if len(items) == 1 and len(value) == 1 else f"({', '.join(items)})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v, rank)}" for k, v in value.items()) + "}"
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    return f"<{type(value).__name__}>"


def _group(size: int) -> str:
    return "group(all)" if size == WORLD else "group(self)" if size == 1 else f"group({size} ranks)"


def _runs(items: list[str]) -> list[str]:
    """Runs of three or more equal items as ``item ×n``."""
    out, i = [], 0
    while i < len(items):
        j = i
        while j < len(items) and items[j] == items[i]:
            j += 1
        out += [f"{items[i]} ×{j - i}"] if j - i >= 3 else items[i:j]
        i = j
    return out


def by_rank(texts: list[str]) -> str:
    """One description for all ranks, or ``rank 0: … | rank 1: …`` where they differ."""
    if all(t == texts[0] for t in texts):
        return texts[0]
    return " | ".join(f"rank {r}: {t}" for r, t in enumerate(texts))


_NUMBER = re.compile(r"(?<![\w.])(?:-?\d+(?:\.\d+)?(?:e-?\d+)?|True|False|\?)(?![\w.])")


def unify(a: str, b: str) -> str:
    """Two trials' descriptions as one: numbers (and booleans) that differ become ``?``."""
    if a == b or a.endswith(" (varies)"):
        return a
    sa, sb = _NUMBER.split(a), _NUMBER.split(b)
    na, nb = _NUMBER.findall(a), _NUMBER.findall(b)
    if sa != sb:
        return a + " (varies)"
    out = [sa[0]]
    for x, y, rest in zip(na, nb, sa[1:]):
        out += ["?" if x != y else x, rest]
    return "".join(out)


# -- PKB's side: the literals -----------------------------------------------------
def literals(path: Path) -> dict:
    """The problem file's upper-case literals (read with ast, no import)."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.isupper():
                try:
                    found[name] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return found


def problem_files() -> list[Path]:
    files = [p for p in PROBLEMS.glob("*/*.py") if re.match(r"^\d+_", p.name)]
    return sorted(files, key=lambda p: int(p.name.split("_")[0]))


# -- pkb's side: running the file -------------------------------------------------
def _contexts():
    import torch

    from pkb_core.problem.contract import RunContext

    class MetaContext(RunContext):
        """Draws are meta tensors: shapes and dtypes, no data."""

        def __init__(self, **kw):
            super().__init__(device="cpu", **kw)
            self.device = torch.device("meta")

        def randn(self, *shape, dtype=None, shared=False, scale=1.0):
            return torch.empty(*shape, device="meta", dtype=dtype or self.dtype)

        def rand(self, *shape, dtype=None, shared=False, low=0.0, high=1.0):
            return torch.empty(*shape, device="meta", dtype=dtype or self.dtype)

        def randint(self, low, high, *shape, dtype=None, shared=False):
            return torch.empty(*shape, device="meta", dtype=dtype or torch.int64)

        def exact(self, *shape, dtype=None, shared=False, bound=16):
            return torch.empty(*shape, device="meta", dtype=dtype or self.dtype)

        def permutation(self, n, shared=False):
            return torch.empty(n, device="meta", dtype=torch.int64)

    class CheapContext(RunContext):
        """Real values, but large floating draws left uninitialised (shapes are what counts here)."""

        def randn(self, *shape, dtype=None, shared=False, scale=1.0):
            if _numel(shape) > LARGE_DRAW:
                return torch.empty(*shape, dtype=dtype or self.dtype, device=self.device)
            return super().randn(*shape, dtype=dtype, shared=shared, scale=scale)

        def rand(self, *shape, dtype=None, shared=False, low=0.0, high=1.0):
            if _numel(shape) > LARGE_DRAW:
                return torch.empty(*shape, dtype=dtype or self.dtype, device=self.device)
            return super().rand(*shape, dtype=dtype, shared=shared, low=low, high=high)

    return MetaContext, CheapContext


def _numel(shape) -> int:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _heavy_ops_mode():
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_map

    heavy = {torch.matmul, torch.mm, torch.bmm, torch.einsum, torch.baddbmm, torch.addmm, F.linear,
             F.scaled_dot_product_attention, F.conv1d, F.conv2d, F.conv3d, torch.Tensor.__matmul__,
             torch.Tensor.matmul, torch.Tensor.mm, torch.Tensor.bmm}

    class _ShapesOfHeavyOps(TorchFunctionMode):
        """Expensive kernels return zeros of the shape and dtype their meta functions give."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in heavy:
                meta = lambda t: t.to("meta") if isinstance(t, torch.Tensor) else t  # noqa: E731
                out = func(*tree_map(meta, args), **tree_map(meta, kwargs))
                return tree_map(lambda t: torch.zeros(t.shape, dtype=t.dtype) if isinstance(t, torch.Tensor)
                                else t, out)
            return func(*args, **kwargs)

    return _ShapesOfHeavyOps()


def _load(paths):
    from pkb_core.problem.contract import read_spec

    specs = [read_spec(p) for p in paths]
    return specs, {s.key: s.load() for s in specs}


def _common(spec, rank, groups):
    import torch

    return dict(rank=rank, world_size=WORLD, dtype=torch.bfloat16, size=SIZE, params=spec.params(SIZE),
                secret="parity", problem_key=spec.key, groups=groups)


def _meta_pass(paths) -> dict:
    """``{key: [(args, out rows) per rank]}`` for the problems that run on the meta device."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    MetaContext, _ = _contexts()
    specs, problems = _load(paths)
    found = {s.key: [] for s in specs}
    for rank in range(WORLD):
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=WORLD)
        groups = {}
        try:
            for spec in specs:
                if found[spec.key] is None:
                    continue
                try:
                    args = problems[spec.key].inputs(MetaContext(trial=0, **_common(spec, rank, groups)))
                    described = [describe(a, rank) for a in args]
                    out = problems[spec.key].reference(*args)
                    found[spec.key].append((described, out_rows(out, rank)))
                except Exception:  # noqa: BLE001 - it needs values: the CPU pass runs it
                    found[spec.key] = None
        finally:
            dist.destroy_process_group()
    del torch
    return {k: v for k, v in found.items() if v is not None}


def _cpu_rank(rank, paths, folder):
    """One rank of the CPU pass (a process of its own, gloo): :data:`CPU_TRIALS` per problem."""
    import datetime
    import warnings

    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    _, CheapContext = _contexts()
    specs, problems = _load([Path(p) for p in paths])
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    results, groups = {}, {}
    try:
        for spec in specs:
            started = time.perf_counter()
            trials = []
            for trial in CPU_TRIALS:
                with torch.no_grad():
                    args = problems[spec.key].inputs(CheapContext(device="cpu", trial=trial,
                                                                  **_common(spec, rank, groups)))
                    described = [describe(a, rank) for a in args]
                    with _heavy_ops_mode():
                        out = problems[spec.key].reference(*args)
                trials.append((described, out_rows(out, rank)))
            if os.environ.get("PKB_PARITY_TIMES"):
                print(f"rank {rank} {spec.key}: {time.perf_counter() - started:.2f} s", file=sys.stderr)
            args, out = trials[0]
            for a1, o1 in trials[1:]:
                args = [unify(x, y) for x, y in zip(args, a1)]
                out = {k: unify(v, o1.get(k, v)) for k, v in out.items()}
            results[spec.key] = (args, out)
    finally:
        dist.destroy_process_group()
    Path(folder, f"rank{rank}.json").write_text(json.dumps(results))


def _cpu_pass(paths) -> dict:
    """``{key: [(args, out rows) per rank]}`` from two gloo ranks on the CPU (real collectives)."""
    import tempfile

    import torch.multiprocessing as mp

    if not paths:
        return {}
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_cpu_rank, args=([str(p) for p in paths], folder), nprocs=WORLD)
        per_rank = [json.loads(Path(folder, f"rank{r}.json").read_text()) for r in range(WORLD)]
    return {key: [tuple(per_rank[r][key]) for r in range(WORLD)] for key in per_rank[0]}


def pkb_side(paths: list[Path]) -> dict:
    """``{key: {"params", "args": [...], "out": {...}, "mode"}}``, descriptions merged over ranks."""
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    _, problems = _load(paths)
    refused = {}
    for path in paths:
        from pkb_core.problem.contract import read_spec

        why = problems[path.stem].world_size_error(WORLD, read_spec(path).params(SIZE))
        if why:
            refused[path.stem] = why
    runnable = [p for p in paths if p.stem not in refused]
    found = _meta_pass(runnable)
    modes = {key: "meta" for key in found}
    rest = [p for p in runnable if p.stem not in found]
    for key, value in _cpu_pass(rest).items():
        found[key] = value
        modes[key] = "cpu"
    facts = {}
    for path in paths:
        key = path.stem
        params = list(inspect.signature(problems[key].reference).parameters)
        if key in refused:
            facts[key] = {"params": params, "args": [], "out": {}, "mode": "refused", "refused": refused[key]}
            continue
        per_rank_args = [r[0] for r in found[key]]
        per_rank_out = [r[1] for r in found[key]]
        n = max(len(a) for a in per_rank_args)
        args = [by_rank([a[i] if i < len(a) else "—" for a in per_rank_args]) for i in range(n)]
        out_keys = list(dict.fromkeys(k for o in per_rank_out for k in o))
        out = {k: by_rank([o.get(k, "—") for o in per_rank_out]) for k in out_keys}
        facts[key] = {"params": params, "args": args, "out": out, "mode": modes[key]}
    return facts


def out_rows(value, rank: int) -> dict:
    """An output as rows: ``out`` for one value, ``out[i]`` per element of a top-level tuple or list."""
    if isinstance(value, (tuple, list)):
        kind = "tuple" if isinstance(value, tuple) else "list"
        rows = {f"out[{i}]": describe(v, rank) for i, v in enumerate(value)}
        return {"out": f"{kind} of {len(value)}", **rows}
    return {"out": describe(value, rank)}


def pkb_literal_rows(literal) -> dict:
    """PKB's ``out`` literal as rows (a tuple or list of descriptions, or one description)."""
    if isinstance(literal, (tuple, list)):
        kind = "tuple" if isinstance(literal, tuple) else "list"
        return {"out": f"{kind} of {len(literal)}", **{f"out[{i}]": v for i, v in enumerate(literal)}}
    return {"out": literal}


# -- comparison -----------------------------------------------------------------
def same(pkb_text: str, ours: str) -> bool:
    """Equal descriptions; an argument PKB leaves at its default (``=v``) equals ``v`` passed."""
    if pkb_text == ours:
        return True
    if pkb_text.startswith("="):
        return pkb_text[1:] == ours or ours == "—"
    return False


def rows(key: str, path: Path, ours: dict) -> tuple[list[dict], list[str]]:
    """The table rows of one problem and its problems (unjustified or stale)."""
    lit = literals(path)
    pkb = lit.get("PKB")
    reasons = dict(lit.get("PKB_DIFFERENCES", {}))
    problems = []
    if pkb is None:
        return [], [f"{key}: no PKB literal"]
    table = []
    names = list(ours["params"])
    pkb_names = list(pkb["params"])
    if names != pkb_names:
        item = "signature"
        table.append({"item": item, "pkb_side": ", ".join(pkb_names), "ours": ", ".join(names)})
    pkb_args = list(pkb["args"])
    for i, name in enumerate(names if len(names) >= len(pkb_names) else pkb_names):
        theirs = pkb_args[i] if i < len(pkb_args) else "—"
        mine = ours["args"][i] if i < len(ours["args"]) else "—"
        table.append({"item": name, "pkb_side": theirs, "ours": mine})
    pkb_out = pkb_literal_rows(pkb["out"])
    for k in dict.fromkeys([*pkb_out, *ours["out"]]):
        table.append({"item": k, "pkb_side": pkb_out.get(k, "—"), "ours": ours["out"].get(k, "—")})
    if ours.get("refused"):
        for row in table:
            row["ours"], row["status"] = "(not run)", "n/a"
        table.insert(0, {"item": "world_size", "pkb_side": f"runs at W = {WORLD}",
                         "ours": f"refuses W = {WORLD}: {ours['refused']}"})
    for row in table:
        if row.get("status") == "n/a":
            continue
        differs = row["item"] in ("signature", "world_size") or not same(row["pkb_side"], row["ours"])
        row["status"] = "same" if not differs else "differs"
        if differs:
            if row["item"] in reasons:
                row["why"] = reasons.pop(row["item"])
            else:
                problems.append(f"{key}: {row['item']}: PKB {row['pkb_side']} vs pkb {row['ours']}, "
                                "not justified in PKB_DIFFERENCES")
    for item in reasons:
        problems.append(f"{key}: PKB_DIFFERENCES[{item!r}] justifies a difference that does not exist")
    return table, problems


CACHE_LINE = re.compile(r"^<!-- pkb side: (\{.*\}) -->$", re.M)


def fingerprint(path: Path) -> str:
    """What pkb's side of one problem is computed from: its file, this generator,
    the problem contract (RunContext) and torch's version."""
    import torch

    digest = hashlib.sha256()
    for part in (path, Path(__file__), ROOT / "pkb_core" / "problem" / "contract.py"):
        digest.update(Path(part).read_bytes())
    digest.update(torch.__version__.encode())
    return digest.hexdigest()[:16]


def cached_facts(text: str) -> dict:
    """``{key: (fingerprint, facts)}`` from the hidden lines of a generated document."""
    found = {}
    for match in CACHE_LINE.finditer(text):
        entry = json.loads(match.group(1))
        found[entry["key"]] = (entry["fingerprint"], entry["facts"])
    return found


def visible(text: str) -> str:
    """The document without its hidden cache lines."""
    return CACHE_LINE.sub("", text)


def build(cache: dict | None = None) -> tuple[str, list[str], dict]:
    """The markdown, the unjustified or stale differences, and the facts.

    :param cache: ``{key: (fingerprint, facts)}`` (from :func:`cached_facts`):
        a problem whose fingerprint is unchanged keeps its recorded facts
        instead of being run again; None runs every problem.
    """
    paths = problem_files()
    prints = {p.stem: fingerprint(p) for p in paths}
    cache = cache or {}
    reuse = {p.stem: cache[p.stem][1] for p in paths if p.stem in cache and cache[p.stem][0] == prints[p.stem]}
    ours = dict(reuse)
    ours.update(pkb_side([p for p in paths if p.stem not in reuse]) if len(reuse) < len(paths) else {})
    problems, sections, summary = [], [], []
    counts = {"same": 0, "justified": 0, "unjustified": 0, "not_run": 0}
    for path in paths:
        key = path.stem
        table, bad = rows(key, path, ours[key])
        problems += bad
        justified = sum(1 for r in table if r["status"] == "differs" and "why" in r)
        unjustified = sum(1 for r in table if r["status"] == "differs" and "why" not in r)
        counts["same"] += sum(1 for r in table if r["status"] == "same")
        counts["not_run"] += sum(1 for r in table if r["status"] == "n/a")
        counts["justified"] += justified
        counts["unjustified"] += unjustified
        same_rows = sum(1 for r in table if r["status"] == "same")
        summary.append(f"| [{key}](#{key.lower()}) | {path.parent.name} | {same_rows} | {justified} | "
                       f"{unjustified} |")
        lines = [f"### {key}", "", f"`{path.relative_to(ROOT)}`", ""]
        rules = _output_rules(path, ours[key]["params"])
        if rules:
            lines += [rules, ""]
        lines += ["| item | PKB | pkb | |", "|---|---|---|---|"]
        for r in table:
            note = {"same": "", "n/a": "not run at this world size"}.get(r["status"]) if r["status"] != "differs" \
                else (f"justified: {r['why']}" if "why" in r else "**UNJUSTIFIED**")
            lines.append(f"| {r['item']} | {_cell(r['pkb_side'])} | {_cell(r['ours'])} | {_cell(note)} |")
        entry = {"key": key, "fingerprint": prints[key], "facts": ours[key]}
        lines += ["", f"<!-- pkb side: {json.dumps(entry, ensure_ascii=False)} -->"]
        sections.append("\n".join(lines))
    head = HEADER.format(**counts, problems=len(paths), pkb_commit=PKB_COMMIT, pkb_commit_note=PKB_COMMIT_NOTE)
    text = "\n".join([head, "| problem | category | same | justified | unjustified |", "|---|---|---|---|---|",
                      *summary, "", *[s + "\n" for s in sections]]).rstrip() + "\n"
    return text, problems, ours


def _output_rules(path: Path, params: list) -> str:
    """``MUTATES`` and ``RETURNS_INPUTS`` of a problem file, in words."""
    lit = literals(path)
    name = lambda i: f"`{params[i]}`" if i < len(params) else f"argument {i}"  # noqa: E731
    parts = []
    if lit.get("MUTATES"):
        parts.append("updates " + ", ".join(name(i) for i in lit["MUTATES"]) + " in place (`MUTATES`)")
    if lit.get("RETURNS_INPUTS"):
        parts.append("may return " + ", ".join(name(i) for i in lit["RETURNS_INPUTS"])
                     + " itself, unchanged (`RETURNS_INPUTS`)")
    return ("Output rules: a solution " + "; ".join(parts) + ".") if parts else ""


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ") if text else ""


HEADER = """# pkb and the original PKB: arguments and outputs, problem by problem

Generated by `python tests/parity_table.py --write` from the problem files; tests/test_parity.py
fails when this file is out of date or a difference is not justified. Do not edit by hand.

**PKB** is the original ParallelKernelBench (togethercomputer/ParallelKernelBench) at commit
`{pkb_commit}` ({pkb_commit_note}) and its default size (M = N = 1024, bf16, 2 ranks): what its input
factory passes and its reference returns,
recorded as facts in each problem file's `PKB` literal (observed by running its factory and
references on the CPU with 2 gloo ranks, with a second trial where values or sizes vary by trial,
and read from its code where they need a GPU or 28 GB: 10, 68 and the outputs of 81). **pkb** is computed from the same file:
`inputs(ctx)` and `reference(*args)` at the `default` size preset, bf16, 2 ranks (on the meta
device where the problem allows; otherwise on the CPU, two ranks over gloo, with the expensive
kernels replaced by their shapes). Each row is one argument (by name, in signature order) or one
output (`out`, or `out[i]` for the elements of a tuple or list).

Notation: `bf16[1024, 1024]` a tensor (dtype, shape); `?` a dimension or value that depends on the
random data or the trial; `=0` an argument PKB leaves at its default (0), which equals pkb passing
0; `—` not passed or not returned; `group(all)` a process group of both ranks (WORLD or not),
`group(self)` of one rank; `None` as a group means WORLD; `rank 0: … | rank 1: …` where the ranks
differ; `x ×n` n equal items.

Tensor values are not compared: pkb draws random, rank- and trial-distinct values on purpose where
the original filled constants (shared/problems.md, baseline rule 1). Argument order, dtypes, shapes,
structure and Python scalar values are compared; each difference is either removed or justified by
the problem file's `PKB_DIFFERENCES` literal, whose reason is shown here. Output rules (which
arguments a solution updates in place, `MUTATES`, or may return unchanged, `RETURNS_INPUTS`) are
listed under a problem where it has any; every other input must be unchanged after the call.

Rows: {same} same, {justified} justified differences, {unjustified} unjustified, {not_run} not run
(a problem that refuses 2 ranks), over {problems} problems.

## PKB's first commit against the one compared here

PKB's published solution trees (GPT-5.5, Claude Opus 4.7 and Gemini 3 Pro CUDA trees, a Gemini
Triton and a Gemini ParallelKittens tree) were written against its first commit, `dab0830`
(2026-06-06); the rows below compare with `{pkb_commit}`. Read from the two commits' `reference/`,
`utils/input_output_tensors.py` and `run_local.py` (every difference in what a solution is given
or must return; the other files changed comments, timing and packaging only):

| PKB id and name | `dab0830` | `{pkb_commit}` | pkb |
|---|---|---|---|
| every problem | `run_local.py` default dtype fp32, `--atol`/`--rtol` 1e-5 | bf16, 1e-2 | bf16 on a GPU; tolerances per dtype (pkb_core/judge/check.py) |
| 21 clip_grad_norm_no_ep | `fsdp_group` None: the reference reduces nothing (a local norm) | `dist.group.WORLD` | `{pkb_commit}`'s: a group of every rank |
| 22 clip_grad_norm_ep | `fsdp_group`, `ep_fsdp_group`, `ep_group` all None: no reduction | WORLD and a 2-D EP x EP-FSDP grid (E = W // 2) | `{pkb_commit}`'s grid, E = W at W = 2 (see 22's rows) |
| 26 moe_token_preprocess | returns the two splits as `List[int]` | as int64 tensors | the reference returns int64 tensors; a list of W Python ints, or floats equal to them, is accepted as the same answer (pkb_core/judge/check.py) |
| 46 | `fsdp_adamw_sharded` (the trees' early 47) | `gemv_decode`, a new problem | `{pkb_commit}`'s; `pkb import-pkb` reports the trees' `47_fsdp_adamw_sharded` as not mapped |
| 60 physicsnemo_distributed_irfft | `x` the spectrum of a 3-D signal sized from M, N (16 x 1024 x 1024 at the default), `dim` (1, 2) | of a (2, 10, 720, 1440) signal, `dim` (-2, -1) | `{pkb_commit}`'s |
| 61 gsplat_3d_gaussian_splatting | 8-256 Gaussians per rank, scales 0.02-0.06 | 1000-10000, scales 0-0.02 | `{pkb_commit}`'s count (fp32 and random cameras: see 61's rows) |
| 62 torchharmonics_spherical_convolution | batch M // 256, `nlat_in`/`nlon_in` 8-32 | batch 32, 128 x 256 | `{pkb_commit}`'s |
| 63 deepmd_kalman_filter_optimizer | 4 blocks of 8-64, `error` fp64[1, 1] | 8 blocks of 1024, `error` fp64[] | `{pkb_commit}`'s |
| 64 gnn_neighbor_sampling | the reference samples neighbours at random (`randperm`/`randint`); ring lattice of 64-1024 nodes, degree 4, fanouts [3, 2], 4-32 seeds per rank | the first neighbours (deterministic); 10000-100000 nodes, degree 16, fanouts [10, 5], 512-2048 seeds | `{pkb_commit}`'s reference and fanouts on a random graph (see 64's rows) |
| 65 gnn_feature_exchange_all2all | 1-8 rows per peer, `seed_inverse_ids` an arange | 64-1024 rows, random ids into 3/4 as many seeds | `{pkb_commit}`'s sizes, uneven random counts (see 65's rows) |
| 66 gnn_feature_exchange_all2all_backward | 1-8 rows per peer, arange ids | 64-1024, random ids into half as many seeds | `{pkb_commit}`'s sizes, uneven random counts |
| 67 gnn_sparse_embedding_all2all | >= 1024 nodes, 16-512 indices, structured | >= 100000 nodes, 1024-50000 uniform random indices | `{pkb_commit}`'s |
| 68 gnn_sparse_feature_fetch_projection | >= 1024 nodes, embedding 16-128, `out_dim` half of it, 16-512 queries | 111 M nodes, 128/256, `out_dim` equal, 20000-200000 queries | `{pkb_commit}`'s, with a smaller table (see 68's rows) |
| 69 gnn_negative_scoring | 8-256 positives (+ rank % 3), 4-64 negatives | 16-1280, 100-1000 | `{pkb_commit}`'s sizes (fp32: see 69's rows) |
| 70 torchrec_kjt_all2all | batch 2-16, lengths (i + rank) % 4, values an arange | batch 512-1024, lengths 5-20 and values at random | `{pkb_commit}`'s |

A file written against `dab0830` therefore gets `{pkb_commit}`'s inputs in pkb; where that is a
different problem (46) it is not run, and where only the return form changed (26) both forms pass.
"""

#: The PKB commit the ``PKB`` literals describe (its ``main`` when they were recorded).
PKB_COMMIT = "3cc0f9b"
PKB_COMMIT_NOTE = "main, 2026-06-24"

def main(argv: list[str]) -> int:
    """``--write``: run every problem and write the document. ``--check``: regenerate
    it (problems whose fingerprint is unchanged keep their recorded facts, unless
    ``--full``) and compare with the committed one. Otherwise print it (``--json``:
    the facts). Exit status 1 on an unjustified or stale difference, or (``--check``)
    a document that is not up to date."""
    full = "--full" in argv or "--write" in argv or os.environ.get("PKB_PARITY_FULL") == "1"
    committed = DOC.read_text() if DOC.exists() else ""
    text, problems, facts = build(None if full else cached_facts(committed))
    status = 1 if problems else 0
    if "--json" in argv:
        print(json.dumps({"facts": facts, "problems": problems}, indent=1))
    elif "--write" in argv:
        DOC.write_text(text)
        print(f"wrote {DOC.relative_to(ROOT)}")
    elif "--check" in argv:
        if visible(text) != visible(committed):
            import difflib

            diff = difflib.unified_diff(visible(committed).splitlines(), visible(text).splitlines(),
                                        "committed", "regenerated", lineterm="", n=1)
            print("\n".join(list(diff)[:80]))
            print(f"{DOC.relative_to(ROOT)} is out of date: run python tests/parity_table.py --write",
                  file=sys.stderr)
            status = 1
    else:
        print(text, end="")
    for line in problems:
        print(line, file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
