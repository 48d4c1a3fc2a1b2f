"""The host engine's gates as kernels: a side's stream waits for ``go`` in a one-thread kernel.

A stream wait (``cuStreamWaitValue32``) on a word in host memory is done by the GPU's front
end, which re-reads the word on a schedule of its own: on one H200 (2026-11-29,
docs/benchmarks/2026-11-29-h200-gate-kernels.md) a 4 KiB window read 25.0 us in one process
and 33.7 us in the next, every batch of each, and 23-41 us within a batch whose side queued as
it went. A fixed offset per process is what two groups of the same code carried for a whole job
(docs/trust.md, "Resolution"). A kernel that polls the word through the GPU's mapping of it
sees ``go`` one bus read after it lands, whatever the process: the same windows read
29.3-30.5 us in every batch of both processes.

The kernel holds one SM while it waits, so it suits the host engine only, where the side's
context is the only one with work on its GPU inside a window (the device engine's timekeeper
has a context on the same GPU, which a spinning kernel would starve of its time slice).

The kernels are PTX, compiled by the driver for the GPU at hand when a side first maps a
region (:func:`load`), so no compiler is needed in the side's process and no lazy loading
happens behind a gate (a module loaded while the device waits for a gate that waits for this
host would never load).
"""
from __future__ import annotations

import ctypes

from pkb_core.harness.gates import checked, driver

#: ``pkb_wait_word(word, target)``: spin until the int32 at ``word`` reaches ``target``, compared
#: cyclically as the gates' words are (the signed difference is not negative).
#: ``pkb_write_words(first, value, second, value)``: store two int32 words in that order.
PTX = rb"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry pkb_wait_word(.param .u64 word, .param .u32 target)
{
    .reg .pred %late;
    .reg .b32 %seen, %goal, %gap;
    .reg .b64 %at;
    ld.param.u64 %at, [word];
    ld.param.u32 %goal, [target];
    cvta.to.global.u64 %at, %at;
POLL:
    ld.volatile.global.u32 %seen, [%at];
    sub.s32 %gap, %seen, %goal;
    setp.lt.s32 %late, %gap, 0;
    @%late bra POLL;
    ret;
}

.visible .entry pkb_write_words(.param .u64 first, .param .u32 first_value, .param .u64 second,
                                .param .u32 second_value)
{
    .reg .b32 %v;
    .reg .b64 %at;
    membar.sys;
    ld.param.u64 %at, [first];
    ld.param.u32 %v, [first_value];
    cvta.to.global.u64 %at, %at;
    st.volatile.global.u32 [%at], %v;
    membar.sys;
    ld.param.u64 %at, [second];
    ld.param.u32 %v, [second_value];
    cvta.to.global.u64 %at, %at;
    st.volatile.global.u32 [%at], %v;
    ret;
}
""" + b"\0"

_loaded: dict = {}


def load(device_index: int) -> dict:
    """The kernels in the current context (of device ``device_index``), loaded once: ``wait``
    and ``write``."""
    functions = _loaded.get(device_index)
    if functions is None:
        cu = driver()
        module = checked(cu.cuModuleLoadData(PTX))
        functions = {"wait": checked(cu.cuModuleGetFunction(module, b"pkb_wait_word")),
                     "write": checked(cu.cuModuleGetFunction(module, b"pkb_write_words"))}
        _loaded[device_index] = functions
    return functions


def _launch(function, stream_handle: int, params: tuple) -> None:
    cu = driver()
    checked(cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, cu.CUstream(stream_handle), params, 0))


def kernel_wait(functions: dict, stream_handle: int, ptr: int, value: int) -> None:
    """Queue on ``stream_handle`` a one-thread kernel that returns once the int32 at ``ptr``
    (a device address of host memory) reaches ``value``."""
    _launch(functions["wait"], stream_handle, ((ptr, value & 0xFFFFFFFF), (ctypes.c_void_p, ctypes.c_uint32)))


def kernel_write(functions: dict, stream_handle: int, first: tuple, second: tuple | None = None) -> None:
    """Queue on ``stream_handle`` a one-thread kernel that, once everything before it on the
    stream is done, stores ``first = (ptr, value)`` and then (after a system-wide fence, so a
    reader that sees the second sees the first) ``second``: one launch for a call's ``used``
    and ``done`` (each launch costs the device microseconds inside a window)."""
    second = second or first
    values = (first[0], first[1] & 0xFFFFFFFF, second[0], second[1] & 0xFFFFFFFF)
    _launch(functions["write"], stream_handle,
            (values, (ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint32)))
