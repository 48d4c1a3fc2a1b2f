"""pkb's Triton backend: the helper API that Triton solutions import.

A Triton solution is a Python file that defines ``solution(*inputs)`` with the
problem's reference signature. The harness places every tensor input in the
symmetric heap (torch symm_mem on GPU, shared memory on CPU) before each call,
so each rank can hand its kernel the addresses of *every rank's* copy of an
input and read peers directly: no NCCL, no ``torch.distributed``.

Host side (plain Python, ``pkb_triton.host``):

:func:`peers` ``(tensor) -> Peers``
    For a harness-placed input: ``ptrs`` (address of a uint64 table: this
    tensor's address on each rank), ``pads`` (address of a uint64 table of the
    ranks' int32 signal pads, then ``pad_slots``), ``rank``, ``world_size``, ``pad_slots`` and
    ``grid(numel, block, channels=1)`` (how many programs to launch so that
    the pad has room for the barrier and the GPU stays fully busy). Pass the
    ints straight to a kernel.
:func:`workspace` ``(numel, dtype, tag="")``
    A cached *symmetric* scratch tensor that peers can reach (``peers(ws)``
    works on it). The first call with a given (tag, numel, dtype) allocates,
    which is collective: every rank must ask for the same sizes in the same
    order. Outputs are never workspaces: they are plain ``torch.empty``
    tensors.
:func:`max_programs` ``(world_size, pad_slots=1024, channels=1)``
    The largest grid the barrier supports on one pad.

Device side (``@triton.jit`` functions, ``pkb_triton.lang``):

:func:`barrier` ``(pads, rank, WORLD: constexpr, channel)``
    Pairwise compare-and-swap handshake over the signal pads among program
    ``tl.program_id(0)`` of every rank. Returns once that program of every
    rank has arrived. Call it first (peers' inputs are in place) and last (no
    rank returns, letting the harness overwrite its inputs, while a peer still
    reads them). Slots return to 0, so it is reusable; ``channel`` selects an
    independent set of slots.
:func:`peer_ptr` ``(table, peer, like)``
    Rank ``peer``'s address from a pointer table, as a pointer with the
    element type of the pointer ``like`` (usually the output).

Push (``pkb_triton.push``): :func:`push_workspace` ``(like, slot, tag="")``, :func:`push_launch`
``(n, peers)`` (the grid, ``BLOCK`` and ``num_warps`` to launch with) and the device helpers
``push_bits``, ``push_slot``, ``push_wait_credit``, ``push_receive``, ``push_reset_last``,
``push_finish``: small messages sent one way with the data as its own flag, no barrier, credits
keeping a rank that only sends from overrunning its receiver (the module's docstring says how).

On CPU (``pkb run --device cpu``) the launcher sets ``TRITON_INTERPRET=1`` and
the very same kernels run in Triton's interpreter against the shared-memory
heap; each kernel also goes through Triton's compiler front end for sm_90 at its
first launch (``pkb_triton.gpu_check``), so what the GPU's compiler refuses fails
on the CPU too. Importing this package is cheap: triton and torch load on the
first use of a helper.
"""
from __future__ import annotations

import importlib

__all__ = ["Peers", "peers", "workspace", "max_programs", "barrier", "peer_ptr", "PushWorkspace", "push_workspace",
           "push_launch", "push_bits", "push_slot", "push_wait_credit", "push_receive", "push_reset_last", "push_finish"]

_WHERE = {
    "Peers": "host", "peers": "host", "workspace": "host", "max_programs": "host",
    "barrier": "lang", "peer_ptr": "lang",
    "PushWorkspace": "push", "push_workspace": "push", "push_launch": "push", "push_bits": "push", "push_slot": "push",
    "push_wait_credit": "push", "push_receive": "push", "push_reset_last": "push", "push_finish": "push",
}


def __getattr__(name):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'pkb_triton' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pkb_triton.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
