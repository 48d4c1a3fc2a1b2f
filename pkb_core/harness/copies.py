"""How pkb's harness copies a window's set into a side's buffers and its outputs out (docs/timing.md,
"How the harness copies"): ``PKB_HARNESS_COPIES``, read by the judge and told to every side
with its gate region, so that the judge's own sides and the groups copy alike.

* ``kernels`` (the default on a GPU): an elementwise kernel over the bytes (``bitwise_or`` with 0),
  run by the SMs, so that a window's work never passes between the copy engine and the SMs;
* ``engine`` (the default on CPU): ``Tensor.copy_``, which on a GPU is a memcpy run by the copy engine.

Why kernels on a GPU (one H200, 2026-11-29, docs/benchmarks/2026-11-29-h200-harness-copies.md): with
the copy engine a window grew in steps of about 8 us, flat over the first 3 us of a known delay after
the call and then a whole step at once, and pkb's ruler read every delay 3-4.4 us long; with
kernels the window grew along the delay (11.44 us for an 11.55 us sleep) and the ruler read all four
delays within 0.04-0.68 us. On CPU both are the host's copies and ``copy_`` is the cheaper one.
"""
from __future__ import annotations

from pkb_core.env_settings import setting_from_env

COPIES_ENV = "PKB_HARNESS_COPIES"
COPIES = ("engine", "kernels")


def copies_choice(on_gpu: bool = False) -> str:
    """What ``PKB_HARNESS_COPIES`` asks for; unset, ``kernels`` for sides on a GPU (``on_gpu``) and
    ``engine`` on CPU. ValueError, one line, for a value not in :data:`COPIES`."""
    return setting_from_env(COPIES_ENV, COPIES, "kernels" if on_gpu else "engine",
                            "how pkb's harness copies a window's set and outputs: docs/timing.md")


def region_copies(region: dict) -> str:
    """How the gate region ``region`` (the timekeeper's description) says a side copies:
    ``engine`` where it says nothing of :data:`COPIES`."""
    return region.get("copies") if region.get("copies") in COPIES else "engine"


def copy_into(dst, src, copies: str = "engine", *, non_blocking: bool = False) -> None:
    """Copy tensor ``src`` into tensor ``dst`` (same shape and dtype), the way ``copies`` says: a
    kernel is queued on the current stream; ``copy_`` is given ``non_blocking``. A tensor that is
    not one contiguous run of bytes, or a pair on two devices (a call's output on the host exported
    into a device's view of a slot), is copied by ``copy_``."""
    if copies == "kernels":
        import torch  # here, not at the top: the command line checks the setting before any torch

        views = _byte_views(torch, dst, src)
        if views is not None:
            torch.bitwise_or(views[1], 0, out=views[0])
            return
    dst.copy_(src, non_blocking=non_blocking)


#: Tensors up to this many bytes are copied together by :func:`copy_all` (with kernels); larger
#: ones each by a kernel of their own.
TOGETHER_MAX_BYTES = 32 * 1024


def copy_all(pairs, copies: str = "engine", *, non_blocking: bool = False) -> None:
    """Copy each ``(dst, src)`` of ``pairs`` as :func:`copy_into` would, but with ``kernels`` the
    small contiguous pairs (up to :data:`TOGETHER_MAX_BYTES` each) in one launch: one
    ``torch._foreach_copy_`` over their bytes (a multi-tensor kernel on a GPU), viewed as the
    widest integer every such pair's length and addresses divide; the others one by one.

    Why (docs/timing.md, "How the harness copies"): each kernel in a window is a launch the device
    waits through, inside the window of every side alike; a call's export (its outputs and its
    arguments after it) was one kernel a tensor. Measured on 2xH200 (2026-11-30,
    docs/benchmarks/2026-11-30-h200x2-harness-launches.md): with every pair together, pkb's harness
    at 4 KiB was 2-4 us shorter, but 10-25 us longer at 256 KiB and 2 MiB, where the multi-tensor
    kernel gives a tensor one block for each 64 Ki elements and its writes into the host's memory
    crawl; hence the bound."""
    pairs = list(pairs)
    if copies != "kernels" or len(pairs) < 2:
        for dst, src in pairs:
            copy_into(dst, src, copies, non_blocking=non_blocking)
        return
    import torch  # here, not at the top: the command line checks the setting before any torch

    together, alone = [], []  # byte views of the pairs copied in one launch; the pairs copied alone
    for dst, src in pairs:
        views = _byte_views(torch, dst, src)
        # One launch runs on one device: the pairs on another than the first copied alone.
        if views is not None and views[0].numel() <= TOGETHER_MAX_BYTES and (
                not together or views[0].device == together[0][0].device):
            together.append(views)
        else:
            alone.append((dst, src))
    if len(together) == 1:
        torch.bitwise_or(together[0][1], 0, out=together[0][0])  # one pair: copy_into's own kernel
    elif together:
        into, out_of = [v[0] for v in together], [v[1] for v in together]
        width = _common_width(torch, into + out_of)
        if width is not None:
            into = [t.view(width) for t in into]
            out_of = [t.view(width) for t in out_of]
        torch._foreach_copy_(into, out_of)
    for dst, src in alone:
        copy_into(dst, src, copies, non_blocking=non_blocking)


def _common_width(torch, flats):
    """The widest integer dtype whose size divides every byte tensor's length and address (fewer,
    wider elements for the same copy), or None for bytes."""
    for dtype, size in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2)):
        if all(t.numel() % size == 0 and t.data_ptr() % size == 0 for t in flats):
            return dtype
    return None


def _byte_views(torch, dst, src):
    """``(dst's bytes, src's bytes)`` as two flat uint8 views where both tensors are one contiguous
    run of bytes of the same dtype and length on the same device (what a copy by a kernel over
    bytes needs), else None."""
    if not (dst.is_contiguous() and src.is_contiguous() and dst.dtype == src.dtype and dst.device == src.device):
        return None
    into, out_of = _bytes(torch, dst), _bytes(torch, src)
    return (into, out_of) if into.shape == out_of.shape else None


def _bytes(torch, tensor):
    flat = tensor.reshape(-1)
    if flat.dtype.is_complex:
        flat = torch.view_as_real(flat).reshape(-1)
    return flat.view(torch.uint8)
