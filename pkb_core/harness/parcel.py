"""Trees of arguments or outputs as data: a JSON skeleton plus one file of bytes.

Between the judge's processes and a candidate's, nothing travels as a live
Python object (docs/trust.md): a tree of tensors, scalars, tuples, lists and
dicts is *packed* into a skeleton (JSON-able, describing every node) and a
parcel file holding the tensors' bytes, and *unpacked* on the other side into
fresh tensors. Unpacking what a candidate sent is strict (:class:`Limits`):
only known node kinds and dtypes, shapes that match their byte counts, bytes
inside the file, bounded depth and size; anything else is :class:`ParcelError`,
which the judge turns into the candidate's verdict.

Node kinds: ``tensor`` (dtype, shape, offset, byte count), ``tuple``, ``list``,
``size`` (``torch.Size``), ``dict`` (key/value pairs; keys are str or int),
``int``, ``float``, ``bool``, ``str``, ``none``; from the judge only:
``group`` (a process group, as the partition of ranks it belongs to, or the
world group) and
``linear`` (a ``torch.nn.Linear``); from a candidate only: ``object`` (anything
else it returned, by type name, so the verdict can name it).
"""
from __future__ import annotations

import math
import os
import stat
import tempfile
from dataclasses import dataclass

import torch

from pkb_core.harness.copies import copy_all

_DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128,
    *(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64") if hasattr(torch, n)),
)}
_ALIGN = 64
_SCALARS = {bool: "bool", int: "int", float: "float", str: "str", type(None): "none"}


class ParcelError(ValueError):
    """A skeleton or parcel that breaks the format; the message says where."""


@dataclass(frozen=True)
class Limits:
    """Bounds on what an untrusted skeleton may describe."""

    max_depth: int = 64
    max_nodes: int = 200_000
    max_str: int = 10_000
    #: Bytes of tensor data in all (``None``: no bound).
    max_bytes: int | None = None
    #: Node kinds accepted; the judge's own kinds (group, linear) are not among a candidate's.
    kinds: frozenset = frozenset({"tensor", "tuple", "list", "size", "dict", "int", "float", "bool", "str",
                                  "none", "object"})


UNTRUSTED = Limits()
TRUSTED = Limits(max_depth=10_000, max_nodes=10**9, max_str=10**9,
                 kinds=UNTRUSTED.kinds | {"group", "linear"})

#: A tensor's dimensions, and its elements with every zero dimension counted as one, at most (a
#: shape beyond them is no tensor torch can make), whatever the limits.
MAX_DIMS = 64
MAX_ELEMENTS = 2 ** 62


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def pack(tree, path, *, group_blocks=None) -> dict:
    """Write ``tree``'s tensors into the file ``path`` and return the skeleton.

    The file is made anew (a file or link already at ``path`` is removed, and
    the new one is created exclusively, never through a link), so nobody can
    point a writer at another file. ``path=None`` writes to an anonymous
    in-memory file that nobody else can open: the same cost as a real export,
    for a side whose output must stay private (the reference's timed outputs).

    :param group_blocks: ``group -> (partition, index)`` for process groups
        among the leaves (the judge's inputs); ``None`` sends them as ``object``.
    """
    writer = _Writer(path)
    try:
        return writer.node(tree, group_blocks)
    finally:
        writer.close()


def _unlinked_temp() -> int:
    """A file descriptor of a temporary file that no longer has a name."""
    fd, name = tempfile.mkstemp(prefix="pkb-private-")
    os.unlink(name)
    return fd


def _give_to_folder_owner(fd: int, path) -> None:
    """A parcel belongs to the owner of its folder: the judge (root) writes a
    candidate's inputs into the job's folder, owned by the job's own user
    (:mod:`pkb_core.launch.scratch`), which must read them and nobody else can."""
    if os.geteuid() != 0:
        return
    folder = os.stat(os.path.dirname(os.path.abspath(path)))
    if folder.st_uid != 0:
        os.fchown(fd, folder.st_uid, folder.st_gid)


class _Writer:
    """Writes a tree's tensors into a file (``path``, or a private memfd for ``None``)."""

    def __init__(self, path):
        if path is None:
            fd = os.memfd_create("pkb-private-export") if hasattr(os, "memfd_create") else _unlinked_temp()
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            _give_to_folder_owner(fd, path)
        self.file = os.fdopen(fd, "wb")
        self.offset = 0

    def close(self):
        self.file.close()

    def tensor(self, value: torch.Tensor) -> dict:
        flat = value.detach().reshape(-1)
        if flat.dtype.is_complex:
            flat = torch.view_as_real(flat).reshape(-1)
        if not flat.numel():
            # No bytes, so no place in the file: offset 0 lies inside any parcel, even an
            # empty one (an aligned offset past the last byte would not).
            return {"k": "tensor", "dtype": dtype_name(value.dtype), "shape": list(value.shape), "at": 0, "n": 0}
        raw = flat.contiguous().view(torch.uint8)
        at = -(-self.offset // _ALIGN) * _ALIGN
        self.put(raw, at)
        self.offset = at + raw.numel()
        return {"k": "tensor", "dtype": dtype_name(value.dtype), "shape": list(value.shape), "at": at,
                "n": raw.numel()}

    def put(self, raw: torch.Tensor, at: int) -> None:
        self.file.seek(at)
        self.file.write(memoryview(raw.cpu().numpy()))


    def node(self, value, groups) -> dict:
        if type(value) is torch.Tensor or (isinstance(value, torch.nn.Parameter)):
            if dtype_name(value.dtype) not in _DTYPES:
                return {"k": "object", "type": f"tensor of dtype {value.dtype}"}
            return self.tensor(value)
        if isinstance(value, torch.Size):
            return {"k": "size", "v": [int(v) for v in value]}
        if type(value) in (tuple, list) or (isinstance(value, tuple) and hasattr(value, "_fields")):
            return {"k": "list" if isinstance(value, list) else "tuple", "v": [self.node(v, groups) for v in value]}
        if type(value) is dict:
            return {"k": "dict", "v": [[k, self.node(v, groups)] for k, v in value.items()
                                       if isinstance(k, (str, int))]} if all(
                isinstance(k, (str, int)) for k in value) else {"k": "object", "type": "dict with non-str keys"}
        if type(value) in _SCALARS:
            return {"k": _SCALARS[type(value)], "v": value}
        if groups is not None and value in groups:
            partition, index = groups[value]
            return {"k": "group", "partition": [list(b) for b in partition], "index": index}
        if groups is not None and _is_world(value):
            return {"k": "group", "partition": None, "index": 0}
        if type(value) is torch.nn.Linear:
            return {"k": "linear", "in": value.in_features, "out": value.out_features,
                    "weight": self.tensor(value.weight.data),
                    "bias": self.tensor(value.bias.data) if value.bias is not None else None}
        return {"k": "object", "type": type(value).__module__ + "." + type(value).__qualname__}


class _BufferWriter(_Writer):
    """Writes a tree's tensors into a byte buffer on their own device: the copies are queued on
    the current stream once the whole tree is laid out (no synchronisation: :func:`pack_into`),
    made as ``copies`` says (:func:`pkb_core.harness.copies.copy_all`: with kernels, one launch
    for the whole tree)."""

    def __init__(self, buffer: torch.Tensor, copies: str = "engine"):
        self.buffer = buffer
        self.offset = 0
        self.copies = copies
        self.pending: list = []

    def close(self):
        copy_all(self.pending, self.copies, non_blocking=True)
        self.pending = []

    def put(self, raw: torch.Tensor, at: int) -> None:
        if at + raw.numel() > self.buffer.numel():
            raise ParcelError(f"{at + raw.numel()} bytes do not fit the {self.buffer.numel()}-byte slot")
        self.pending.append((self.buffer[at:at + raw.numel()], raw))


def _is_world(value) -> bool:
    import torch.distributed as dist

    return isinstance(value, dist.ProcessGroup) and dist.is_initialized() and value is dist.group.WORLD


class _Reader:
    """Reads a tree's tensors out of a parcel file."""

    def __init__(self, path, limits: Limits, device, make_group):
        self.path = path
        self.limits = limits
        self.device = device
        self.make_group = make_group
        self.nodes = 0
        self.bytes = 0
        try:
            # Not blocking: a FIFO put where the parcel should be opens at once (and is refused
            # below) instead of holding the judge until a writer comes, which none will.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise ParcelError(f"the parcel {os.path.basename(path)} could not be opened ({exc.strerror}; "
                              f"a link is never followed)") from None
        os.set_blocking(fd, True)
        self.file = os.fdopen(fd, "rb")
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            self.file.close()
            raise ParcelError(f"the parcel {os.path.basename(path)} is not a plain file of its own "
                              f"(a link to another file is never read)")
        self.size = info.st_size

    def close(self):
        self.file.close()

    def tensor(self, node, where) -> torch.Tensor:
        dtype = _DTYPES.get(node.get("dtype"))
        if dtype is None:
            raise ParcelError(f"{where}: unknown dtype {node.get('dtype')!r}")
        shape, at, n = node.get("shape"), node.get("at"), node.get("n")
        if not (isinstance(shape, list) and len(shape) <= MAX_DIMS and all(type(d) is int and d >= 0 for d in shape)):
            raise ParcelError(f"{where}: bad shape {str(shape)[:200]}")
        # torch multiplies every dimension, a zero one too, in 64 bits: a shape of no elements whose
        # other dimensions overflow would pass the byte count below and fail in reshape
        if math.prod(max(d, 1) for d in shape) > MAX_ELEMENTS:
            raise ParcelError(f"{where}: a shape of more than {MAX_ELEMENTS} elements ({str(shape)[:200]})")
        itemsize = torch.empty((), dtype=dtype).element_size()
        if type(at) is not int or type(n) is not int or at < 0 or n != math.prod(shape) * itemsize:
            raise ParcelError(f"{where}: {n!r} bytes at {at!r} do not hold a {dtype_name(dtype)} tensor of shape {shape}")
        if at + n > self.size:
            raise ParcelError(f"{where}: bytes {at}..{at + n} lie outside the {self.size}-byte parcel")
        self.bytes += n
        if self.limits.max_bytes is not None and self.bytes > self.limits.max_bytes:
            raise ParcelError(f"{where}: the parcel holds more than {self.limits.max_bytes} bytes of tensors")
        raw = self.get(at, n, where)
        if dtype.is_complex:
            real = raw.view(torch.float32 if dtype == torch.complex64 else torch.float64)
            value = torch.view_as_complex(real.reshape(*shape, 2)) if shape else torch.view_as_complex(real.reshape(2))
        else:
            value = raw.view(dtype).reshape(shape)
        return value.to(self.device) if self.device is not None else value

    def get(self, at: int, n: int, where: str) -> torch.Tensor:
        raw = torch.empty(n, dtype=torch.uint8)
        if n:
            self.file.seek(at)
            got = self.file.readinto(memoryview(raw.numpy()))
            if got != n:
                raise ParcelError(f"{where}: the parcel ended after {got} of {n} bytes")
        return raw

    def node(self, node, where, depth):
        self.nodes += 1
        if depth > self.limits.max_depth or self.nodes > self.limits.max_nodes:
            raise ParcelError(f"{where}: the tree is too deep or too large")
        if not isinstance(node, dict) or node.get("k") not in self.limits.kinds:
            kind = node.get("k") if isinstance(node, dict) else type(node).__name__
            raise ParcelError(f"{where}: unexpected node {kind!r}")
        kind = node["k"]
        if kind == "tensor":
            return self.tensor(node, where)
        if kind in ("tuple", "list", "size"):
            items = node.get("v")
            if not isinstance(items, list):
                raise ParcelError(f"{where}: {kind} without items")
            if kind == "size":
                if not all(type(v) is int for v in items):
                    raise ParcelError(f"{where}: torch.Size of non-integers")
                return torch.Size(items)
            values = [self.node(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(items)]
            return tuple(values) if kind == "tuple" else values
        if kind == "dict":
            pairs = node.get("v")
            if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
                raise ParcelError(f"{where}: dict without key/value pairs")
            out = {}
            for key, value in pairs:
                if type(key) not in (str, int):
                    raise ParcelError(f"{where}: dict key of type {type(key).__name__}")
                out[key] = self.node(value, f"{where}[{key!r}]", depth + 1)
            return out
        if kind == "object":
            return Foreign(str(node.get("type"))[:200])
        if kind == "group":
            if node["partition"] is None:  # the world group
                import torch.distributed as dist

                return dist.group.WORLD
            return self.make_group([tuple(b) for b in node["partition"]], node["index"])
        if kind == "linear":
            weight = self.tensor(node["weight"], f"{where}.weight")
            bias = None if node["bias"] is None else self.tensor(node["bias"], f"{where}.bias")
            if tuple(weight.shape) != (node["out"], node["in"]) or (
                    bias is not None and tuple(bias.shape) != (node["out"],)):
                raise ParcelError(f"{where}: a Linear({node['in']}, {node['out']}) with a weight of shape "
                                  f"{list(weight.shape)} and a bias of shape {None if bias is None else list(bias.shape)}")
            return linear_of(weight, bias)
        value = node.get("v")
        expected = {"int": int, "float": float, "bool": bool, "str": str, "none": type(None)}[kind]
        if kind == "float" and type(value) is int:
            value = float(value)  # JSON writes 2.0 as 2.0, but be lenient with hand-made skeletons
        if type(value) is not expected:
            raise ParcelError(f"{where}: a {kind} node holds {type(value).__name__}")
        if kind == "str" and len(value) > self.limits.max_str:
            raise ParcelError(f"{where}: string of {len(value)} characters")
        return value


class _BufferReader(_Reader):
    """Reads a tree out of a byte buffer: views of it (``copy=False``) or copies."""

    def __init__(self, buffer: torch.Tensor, limits: Limits, make_group, copy: bool):
        self.buffer = buffer
        self.limits = limits
        self.device = None
        self.make_group = make_group
        self.copy = copy
        self.nodes = 0
        self.bytes = 0
        self.size = buffer.numel()

    def close(self):
        pass

    def get(self, at: int, n: int, where: str) -> torch.Tensor:
        view = self.buffer[at:at + n]
        return view.clone() if self.copy else view


class Foreign:
    """Stands for an object a candidate returned that is not data (its type name)."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self):
        return f"<{self.type_name}>"


def unpack(skeleton, path, *, limits: Limits = UNTRUSTED, device=None, make_group=None):
    """The tree a skeleton describes, with fresh tensors read from ``path``.

    :param device: where the tensors go (``None``: stay on the CPU).
    :param make_group: ``make_group(partition, index)`` for ``group`` nodes.
    :raises ParcelError: the skeleton or the file breaks the format.
    """
    try:
        reader = _Reader(path, limits, device, make_group)
    except OSError as exc:
        raise ParcelError(f"cannot read the parcel {path}: {exc.strerror}") from None
    try:
        return reader.node(skeleton, "out", 0)
    finally:
        reader.close()


def pack_into(tree, buffer: torch.Tensor, *, group_blocks=None, copies: str = "engine") -> dict:
    """Copy ``tree``'s tensors into ``buffer`` (a flat ``uint8`` tensor on their device) at
    aligned offsets and return the skeleton (the format of :func:`pack`). The copies are
    queued on the current stream and not waited for, so a side can write a call's outputs
    into a judge-owned slot inside a timed window (:mod:`pkb_core.harness.windows`); ``copies``:
    by the copy engine or by kernels (:mod:`pkb_core.harness.copies`).

    :raises ParcelError: the tensors do not fit ``buffer``.
    """
    writer = _BufferWriter(buffer, copies)
    skeleton = writer.node(tree, group_blocks)
    writer.close()  # the copies, once every tensor fitted (a tree that does not fit copies nothing)
    return skeleton


def skeleton_end(skeleton, limits: Limits = UNTRUSTED) -> int:
    """Where the last tensor a skeleton describes ends: the bytes of its buffer it fills.

    :raises ParcelError: the skeleton is deeper or larger than ``limits`` allow, or a tensor's
        ``at`` or ``n`` is not a whole number of bytes (a candidate's skeleton is read here before
        the bytes it describes)."""
    end, nodes, pending = 0, 0, [(skeleton, 0)]
    while pending:
        node, depth = pending.pop()
        nodes += 1
        if depth > limits.max_depth or nodes > limits.max_nodes:
            raise ParcelError("the layout is too deep or too large")
        if isinstance(node, dict):
            if node.get("k") == "tensor":
                at, n = node.get("at", 0), node.get("n", 0)
                if type(at) is not int or type(n) is not int or at < 0 or n < 0:
                    raise ParcelError(f"a tensor of {str(n)[:40]} bytes at {str(at)[:40]}")
                end = max(end, at + n)
            pending.extend((v, depth + 1) for key, v in node.items() if key in ("v", "weight", "bias"))
        elif isinstance(node, list):
            pending.extend((item, depth + 1) for item in node)
    return end


def packed_size(tree) -> int:
    """Bytes :func:`pack_into` needs for ``tree``'s tensors (each aligned)."""
    end = 0
    for value in _tensors(tree):
        n = value.numel() * value.element_size()
        if n:
            end = -(-end // _ALIGN) * _ALIGN + n
    return end


def linear_of(weight: torch.Tensor, bias: torch.Tensor | None) -> torch.nn.Linear:
    """A ``torch.nn.Linear`` whose parameters are ``weight`` and ``bias`` themselves (their storage,
    not copies, and nothing initialised at random first): a layer read as views of a slot, or
    placed in a side's buffers, holds whatever is later written there. Window mode needs it: a
    set's bytes arrive only when its window opens, after the layer was made (a layer that copied
    its weights when made computed with the window before's, and the reference against itself
    failed problems 31 and 32 on 2xH200)."""
    out_features, in_features = weight.shape
    layer = torch.nn.Linear(in_features, out_features, bias=bias is not None, device="meta", dtype=weight.dtype)
    layer.weight = torch.nn.Parameter(weight)
    if bias is not None:
        layer.bias = torch.nn.Parameter(bias)
    return layer


def stand_in_outputs(args, fill: int, device) -> torch.Tensor | None:
    """A tensor (uint8, contents undefined) that takes, as a call's outputs beside the argument
    tree ``args``, about ``fill`` bytes of a parcel laid out as ``{"out": outputs, "args": args}``
    (less than one alignment short of them, never more); None where ``args`` alone take that much.

    The ``harness`` batch of window mode exports it with each placed set, so that its windows hold
    the export of as many bytes as a real call's, outputs included (docs/timing.md)."""
    # The outputs come first and fill whole alignments, so the arguments lie as they would alone.
    nbytes = (fill - packed_size(args)) // _ALIGN * _ALIGN
    return torch.empty(nbytes, dtype=torch.uint8, device=device) if nbytes > 0 else None


def _tensors(tree):
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, torch.nn.Linear):
        yield tree.weight
        if tree.bias is not None:
            yield tree.bias
    elif isinstance(tree, (list, tuple)) and not isinstance(tree, torch.Size):
        for item in tree:
            yield from _tensors(item)
    elif type(tree) is dict:
        for item in tree.values():
            yield from _tensors(item)


def unpack_from(skeleton, buffer: torch.Tensor, *, limits: Limits = UNTRUSTED, make_group=None,
                copy: bool = True):
    """The tree a skeleton describes, its tensors read from ``buffer`` (a flat ``uint8``
    tensor): views into it (``copy=False``: what a side places from a judge's slot) or
    fresh copies on the buffer's device (what the judge checks).

    :raises ParcelError: the skeleton breaks the format or reaches outside ``buffer``.
    """
    return _BufferReader(buffer, limits, make_group, copy).node(skeleton, "out", 0)


def tensor_bytes(skeleton) -> list[int]:
    """Byte counts of the tensor leaves of a (trusted) skeleton, in order."""
    found = []

    def walk(node):
        kind = node["k"]
        if kind == "tensor":
            found.append(node["n"])
        elif kind == "linear":  # its weight, then its bias: the order a tree's walks take
            walk(node["weight"])
            if node["bias"] is not None:
                walk(node["bias"])
        elif kind in ("tuple", "list"):
            for item in node["v"]:
                walk(item)
        elif kind == "dict":
            for _, item in node["v"]:
                walk(item)

    walk(skeleton)
    return found
