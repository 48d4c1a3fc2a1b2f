"""The problem contract: one self-contained Python file per problem.

A problem file is named ``<id>_<name>.py`` (ids and names as in the original
ParallelKernelBench) and defines, at module level:

``ID`` (int), ``NAME`` (str), ``CATEGORY`` (str, one of :data:`CATEGORIES`),
``ORIGIN`` (str)
    Literal metadata. ``pkb problems`` reads these with :mod:`ast`, without
    importing the file (which usually imports torch).
``WORLD_SIZE`` (str)
    The world-size rule in words, shown to people (``"any W >= 2"``,
    ``"512 % W == 0"``).
``SIZES`` (dict)
    ``{"tiny": {...}, "default": {...}, "large": {...}}``: literal parameters of
    each size preset. ``tiny`` runs on CPU/gloo in well under a second,
    ``default`` is the original PKB size, ``large`` is bandwidth-bound.
``MUTATES`` (tuple of ints, optional)
    Indices of arguments the reference legitimately mutates (in-place
    optimizer updates); the harness gives every call fresh clones of them.
``RETURNS_INPUTS`` (tuple of ints, optional)
    Indices of arguments a rank may return, unchanged, as an output (the
    tensor itself, not a copy): the original PKB reference does so where a
    rank has nothing to compute (the non-root ranks of a gather). The harness
    reads every output before any input buffer is rewritten, so such an output
    needs no copy; the prompt says it is allowed. Arguments in ``MUTATES`` may
    be returned anyway.
``PKB``, ``PKB_DIFFERENCES`` (dicts, optional)
    The original PKB's arguments and outputs at its default size (facts read
    from its input factory and reference), and the reason for each way this
    problem differs from them; docs/pkb-parity.md sets them beside this
    file's own (tests/parity_table.py generates it, tests/test_parity.py
    checks it).
``CUDA_GRAPH`` (bool, optional)
    ``False`` when the reference cannot be replayed from a CUDA graph (NCCL's
    point-to-point based scatter/gather hung on replay on the 2xH200): graph
    mode then reports itself unavailable for this problem.
``TOLERANCE`` (dict, optional)
    ``{"rtol": float, "atol": float}`` overriding the dtype defaults of
    :mod:`pkb_core.judge.check` for floating-point outputs. ``atol`` is relative to
    the largest magnitude of each reference output leaf.
``EXACT`` (bool, optional)
    ``True`` when every input comes from :meth:`RunContext.exact` and the
    outputs are sums of them: outputs then compare bit for bit (no tolerance)
    on every trial but the full-mantissa ones, where the dtype's tolerances
    apply. A wire format that loses bits cannot pass both kinds of trial.
``world_size_error(world_size, params)`` (optional)
    Returns ``None`` when the problem runs at ``world_size`` with these size
    parameters, else a one-line reason. Without it every ``W >= 2`` is admitted
    (at ``W = 1`` nothing is communicated).
``inputs(ctx)``
    Builds this rank's positional arguments for ``reference`` from a
    :class:`RunContext`: random, rank-distinct and fresh every trial (use the
    context's generators, never the global RNG).
``reference(*args)``
    The PyTorch + torch.distributed implementation; runs on NCCL and gloo and
    never mutates its arguments (unless ``MUTATES`` names them).
``traffic(params, world_size, itemsize)``
    ``{"link_bytes": ..., "hbm_bytes": ..., "flops": ...}`` per rank per call:
    bytes this rank sends over GPU links, bytes through its HBM, FLOPs.

Optional, for ``pkb bench`` (message-size sweeps): ``sweep(nbytes, world_size,
itemsize)`` returns size parameters whose per-rank message is about ``nbytes``;
``busbw(params, world_size, itemsize)`` returns ``(S, factor)`` as nccl-tests
defines them (algbw = S / t, busbw = algbw * factor).

and a module docstring that states the task precisely: it is the spec shown to
people and to LLMs.

Tensor arguments are placed in the active backend's symmetric heap by the
harness before the candidate sees them, so a solution can read its peers'
inputs directly.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import linecache
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pkb_core.errors import PkbError

SIZE_PRESETS = ("tiny", "default", "large")

#: Category keys and the aliases people type for them.
CATEGORIES = {
    "collective": ("coll",),
    "tensor-parallel": ("tp",),
    "sequence-parallel": ("sp",),
    "context-parallel": ("cp",),
    "pipeline-parallel": ("pp",),
    "data-parallel": ("dp",),
    "fsdp": ("zero",),
    "expert-parallel": ("ep", "moe"),
    "vocab-parallel": ("vocab",),
    "graph": ("gnn",),
    "geometric": ("geo",),
    "other": (),
}

_FILE_NAME = re.compile(r"^(\d+)_([A-Za-z0-9_]+)\.py$")
_REQUIRED_LITERALS = ("ID", "NAME", "CATEGORY", "ORIGIN", "WORLD_SIZE", "SIZES")
_REQUIRED_FUNCTIONS = ("inputs", "reference", "traffic")


class ProblemFileError(PkbError):
    """A problem file that breaks the contract."""


@dataclass(frozen=True)
class ProblemSpec:
    """What a problem file declares, read without importing it."""

    id: int
    name: str
    category: str
    origin: str
    world_size_rule: str
    sizes: dict
    path: Path
    doc: str
    tolerance: dict = field(default_factory=dict)
    exact: bool = False

    @property
    def key(self) -> str:
        """``<id>_<name>``, the original PKB file stem."""
        return f"{self.id}_{self.name}"

    @property
    def summary(self) -> str:
        """First line of the docstring."""
        return self.doc.strip().splitlines()[0] if self.doc.strip() else ""

    def params(self, size: str) -> dict:
        if size not in self.sizes:
            raise PkbError(f"problem {self.key} has no size preset {size!r} (has: {', '.join(self.sizes)})")
        return dict(self.sizes[size])

    def load(self) -> "Problem":
        """Import the file (this usually imports torch)."""
        return Problem(self, _import_file(self.path, f"pkb_problem_{self.key}"))


def read_spec(path: Path) -> ProblemSpec:
    """Parse a problem file's literal metadata and docstring with :mod:`ast`."""
    path = Path(path)
    match = _FILE_NAME.match(path.name)
    if not match:
        raise ProblemFileError(f"{path}: problem files are named <id>_<name>.py")
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as exc:
        raise ProblemFileError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    literals: dict[str, Any] = {}
    not_literal: dict[str, ast.AST] = {}
    functions = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.isupper():
                try:
                    literals[name] = ast.literal_eval(node.value)
                    not_literal.pop(name, None)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    literals.pop(name, None)
                    not_literal[name] = node
        elif isinstance(node, ast.FunctionDef):
            functions.add(node.name)
    for name in _REQUIRED_LITERALS + ("TOLERANCE", "EXACT"):
        if name in not_literal:
            node = not_literal[name]
            raise ProblemFileError(
                f"{path}:{node.lineno}: {name} must be a literal (numbers, strings, tuples, lists, dicts: "
                f"pkb reads it without importing the file; write 1048576, not 1 << 20)")
    missing = [n for n in _REQUIRED_LITERALS if n not in literals]
    missing += [f"{n}()" for n in _REQUIRED_FUNCTIONS if n not in functions]
    if missing:
        raise ProblemFileError(f"{path}: missing {', '.join(missing)}")
    if (str(literals["ID"]), literals["NAME"]) != match.groups():
        raise ProblemFileError(f"{path}: ID/NAME ({literals['ID']}, {literals['NAME']!r}) do not match the file name")
    if literals["CATEGORY"] not in CATEGORIES:
        raise ProblemFileError(f"{path}: unknown CATEGORY {literals['CATEGORY']!r}")
    absent = [s for s in SIZE_PRESETS if s not in literals["SIZES"]]
    if absent:
        raise ProblemFileError(f"{path}: SIZES lacks {', '.join(absent)}")
    return ProblemSpec(
        id=literals["ID"], name=literals["NAME"], category=literals["CATEGORY"],
        origin=literals["ORIGIN"], world_size_rule=literals["WORLD_SIZE"],
        sizes=literals["SIZES"], path=path, doc=ast.get_docstring(tree) or "",
        tolerance=literals.get("TOLERANCE", {}),
        exact=literals.get("EXACT", False) is True,
    )


class Problem:
    """A loaded problem file: its spec plus the functions of the contract."""

    def __init__(self, spec: ProblemSpec, module):
        self.spec = spec
        self.module = module
        self.inputs = module.inputs
        self.reference = module.reference
        self.traffic = module.traffic
        #: Indices of arguments the reference mutates (cloned for every call).
        self.mutates = tuple(getattr(module, "MUTATES", ()))
        #: Indices of arguments a rank may return unchanged as an output.
        self.returns_inputs = tuple(getattr(module, "RETURNS_INPUTS", ()))

    def world_size_error(self, world_size: int, params: dict) -> str | None:
        """Why this problem cannot run at ``world_size`` with size ``params`` (``None`` if it can)."""
        if world_size < 2:
            return "needs at least 2 ranks (nothing is communicated at W = 1)"
        rule = getattr(self.module, "world_size_error", None)
        return rule(world_size, params) if rule else None


def _import_file(path: Path, module_name: str, source: str | None = None):
    """Run a Python file as a new module under a private name.

    The file is read as text and compiled here, never imported through the
    import system: no bytecode cache (``__pycache__``) is read or written, so a
    ``.pyc`` planted next to a problem or a solution never runs, and none is
    left behind. The source is registered in :mod:`linecache` under the
    file's name, so tracebacks and ``inspect.getsource`` (Triton's ``@jit``)
    work even where the file itself can no longer be read.

    :param source: the file's text, read earlier (``None``: read it now).
    """
    path = Path(path)
    if source is None:
        source = path.read_text()
    filename = str(path.resolve())
    code = compile(source, filename, "exec", dont_inherit=True)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(module_name)
    module.__file__ = filename
    module.__spec__ = importlib.machinery.ModuleSpec(module_name, None, origin=filename)
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - running the file is the point
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def matrix_for_bytes(nbytes: int, itemsize: int, rows_per_block: int = 1) -> dict:
    """``{"m", "n"}`` of a matrix of about ``nbytes`` (``n`` at most 1024) for
    sweeps; ``rows_per_block`` divides the bytes among that many blocks of ``m`` rows."""
    elements = max(1, nbytes // (itemsize * rows_per_block))
    n = min(1024, elements)
    return {"m": max(1, elements // n), "n": n}


def derive_seed(*parts) -> int:
    """A 63-bit seed from any parts (secret, problem, trial, rank...)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


#: How many binades below ``bound`` the magnitudes of a full-mantissa draw of
#: :meth:`RunContext.exact` spread over (16: from ``bound`` down to ``bound / 2**16``, above
#: fp16's smallest normal at the default bound): no fixed-point grid holds them all.
FULL_MANTISSA_BINADES = 16


class RunContext:
    """Everything ``inputs(ctx)`` may use to build one rank's arguments.

    Attributes: ``rank``, ``world_size``, ``device`` (a ``torch.device``),
    ``dtype`` (the working floating dtype; problems with a fixed dtype ignore
    it), ``size`` (preset name), ``params`` (that preset's ``SIZES`` entry),
    ``trial`` (an int: the trial's number, or a timed set's place in its batch,
    for problems that vary an edge case with it), ``gen`` (a ``torch.Generator``
    seeded by the run secret, the problem, the draw *and the rank*) and
    ``shared_gen`` (the same on every rank for a draw: for replicated weights and
    global tensors). The draw is ``label`` where the judge gives one (a timed
    set's, e.g. ``timing/3/5``: every set of a run is fresh), else ``trial``.

    Prefer the helpers: they draw on the right device from the right
    generator, so inputs are random, rank-distinct and fresh every trial.
    """

    def __init__(self, *, rank, world_size, device, dtype, size, params, trial: int, secret, problem_key,
                 groups=None, full_mantissa=False, label: str | None = None):
        import torch

        self.rank = rank
        self.world_size = world_size
        self.device = torch.device(device)
        self.dtype = dtype
        self.size = size
        self.params = params
        self.trial = trial
        self.gen = torch.Generator(device=self.device)
        draw = trial if label is None else label
        self.gen.manual_seed(derive_seed(secret, problem_key, draw, rank))
        self.shared_gen = torch.Generator(device=self.device)
        self.shared_gen.manual_seed(derive_seed(secret, problem_key, draw, "shared"))
        self._groups = groups if groups is not None else {}
        #: Draw :meth:`exact` values with every mantissa bit (see there).
        self.full_mantissa = full_mantissa
        #: ``group -> (partition, index of its block)`` for every group made here,
        #: so a group argument can be rebuilt in another process.
        self.group_blocks = {}

    def _generator(self, shared: bool):
        return self.shared_gen if shared else self.gen

    def randn(self, *shape, dtype=None, shared=False, scale=1.0):
        """Normal values (times ``scale``) in ``dtype`` (default ``ctx.dtype``)."""
        import torch

        x = torch.randn(*shape, generator=self._generator(shared), device=self.device, dtype=torch.float32)
        return (x * scale).to(dtype or self.dtype)

    def rand(self, *shape, dtype=None, shared=False, low=0.0, high=1.0):
        """Uniform values in ``[low, high)``."""
        import torch

        x = torch.rand(*shape, generator=self._generator(shared), device=self.device, dtype=torch.float32)
        return (low + (high - low) * x).to(dtype or self.dtype)

    def randint(self, low, high, *shape, dtype=None, shared=False):
        """Integers in ``[low, high)`` (default dtype int64)."""
        import torch

        x = torch.randint(low, high, shape, generator=self._generator(shared), device=self.device)
        return x.to(dtype or torch.int64)

    def exact(self, *shape, dtype=None, shared=False, bound=16):
        """Integers in ``[-bound, bound]`` stored in a floating dtype.

        Sums of up to a few hundred such values are exact in bf16, fp16 and
        fp32 in any order, so reductions over them compare bit for bit. On a
        *full-mantissa trial* (``ctx.full_mantissa``, set by the harness for
        some trials of every job, and every timed set) the values lie in the
        same range with every mantissa bit used and magnitudes spread over
        :data:`FULL_MANTISSA_BINADES` binades below ``bound`` instead, and
        outputs compare within the dtype's rounding of the sum: a solution that
        moves values through a lossy wire format (int8 codes, a fixed point)
        passes the integer trials but not these. (Uniform values in the range
        lay on one fixed-point grid, ``torch.rand``'s 2^-24 scaled: an
        all-reduce of 2^-19 fixed-point int32 codes, wrong on any value finer
        than that, passed every check: a hostile review, 2026-12-01.)
        """
        import torch

        if not self.full_mantissa:
            return self.randint(-bound, bound + 1, *shape, dtype=dtype or self.dtype, shared=shared)
        generator = self._generator(shared)
        fraction = 0.5 + 0.5 * torch.rand(*shape, generator=generator, device=self.device, dtype=torch.float32)
        binade = torch.randint(0, FULL_MANTISSA_BINADES, shape, generator=generator, device=self.device)
        sign = torch.randint(0, 2, shape, generator=generator, device=self.device) * 2 - 1
        return (sign * bound * fraction * torch.pow(2.0, -binade.to(torch.float32))).to(dtype or self.dtype)

    def permutation(self, n, shared=False):
        """A random permutation of ``range(n)`` (int64)."""
        import torch

        return torch.randperm(n, generator=self._generator(shared), device=self.device)

    def group(self, ranks):
        """A process group over ``ranks``, created once per launch and cached.

        Every rank must call this with the same ``ranks`` in the same order
        (``new_group`` is collective); ranks outside ``ranks`` get ``None``
        back from torch, as usual.
        """
        import torch.distributed as dist

        key = tuple(ranks)
        if key not in self._groups:
            self._groups[key] = dist.new_group(list(key))
        group = self._groups[key]
        if self.rank in key:
            self.group_blocks.setdefault(group, ((key,), 0))
        return group

    def groups(self, partition):
        """Create groups for every block of ``partition`` (all ranks call with
        the same list of rank lists) and return the one containing this rank."""
        mine = None
        blocks = tuple(tuple(block) for block in partition)
        for index, block in enumerate(blocks):
            group = self.group(block)
            if self.rank in block:
                mine = group
                self.group_blocks[group] = (blocks, index)
        return mine
