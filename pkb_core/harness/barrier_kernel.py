"""The device barrier's kernel, in Triton (:mod:`pkb_core.harness.device_barrier` says how it is used).

One program, one thread doing the work: it bumps a local epoch counter, writes
the epoch into its slot of every rank's signal pad (release, system scope),
then waits on its own pad until every rank's slot has reached the epoch
(acquire, system scope), each wait bounded by ``limit``. On the GPU the bound
is nanoseconds of the global timer; in Triton's interpreter (CPU) it is a count
of spins (there is no clock inside an interpreted kernel). A wait that ran out
leaves 1 in the status word; the barrier's owner reads it after the batch.

No inline assembly but the timer (compiled on the GPU only), so the same
kernel runs in the interpreter, where the atomics are ``std::atomic``
operations on the shared-memory heap's mappings.
"""
from __future__ import annotations

import functools

import triton
import triton.language as tl
from triton.language.extra.cuda import globaltimer


def _arrive_and_wait(pads, counter, status, rank, limit, WORLD: tl.constexpr, CLOCK: tl.constexpr):
    """The barrier kernel (one program). ``pads``: address of the uint64 table
    of the ranks' signal pads; ``counter``/``status``: local int32 words;
    ``limit``: nanoseconds (``CLOCK``, the GPU's global timer) or spins."""
    epoch = tl.load(counter) + 1
    tl.store(counter, epoch)
    table = pads.to(tl.pointer_type(tl.uint64))
    for p in tl.static_range(WORLD):
        pad = tl.load(table + p).to(tl.pointer_type(tl.int32))
        tl.atomic_xchg(pad + rank, epoch, sem="release", scope="sys")
    mine = tl.load(table + rank).to(tl.pointer_type(tl.int32))
    late = tl.full([], 0, tl.int32)
    waited = tl.full([], 0, tl.int64)
    if CLOCK:
        start = globaltimer()
    for p in tl.static_range(WORLD):
        seen = tl.atomic_add(mine + p, 0, sem="acquire", scope="sys")
        while (seen < epoch) & (waited < limit):
            seen = tl.atomic_add(mine + p, 0, sem="acquire", scope="sys")
            if CLOCK:
                waited = globaltimer() - start
            else:
                waited = waited + 1
        late = late | (seen < epoch).to(tl.int32)
    tl.store(status, tl.maximum(tl.load(status), late))


@functools.lru_cache(maxsize=None)
def kernel(interpreted: bool):
    """The launchable kernel: Triton's interpreter runs it on CPU, ``triton.jit`` compiles it for a GPU."""
    if interpreted:
        from triton.runtime.interpreter import InterpretedFunction

        return InterpretedFunction(_arrive_and_wait)
    return triton.jit(_arrive_and_wait)
