"""Masked sets: a large set released ahead of its window, unreadable until the window opens
(docs/timing.md, "A set released ahead of its window").

On the host engine the timekeeper copies each set from its private staging into the side's
``in_slot``, host memory the side's GPU reads over the bus. Inside the window that copy and the
side's read of it are most of a large set's window (2 MiB: ~250 us of a ~400 us window on one
H200, and most of its spread). Outside it, a side could read the set before its gate and compute
ahead. So for large sets:

1. the judge masks each set with ChaCha20's keystream under a key of its own, fresh for every
   window, on its device as it stages the set (:func:`mask_in_place`,
   :mod:`pkb_core.harness.keystream_kernel`: one kernel), before the batch;
2. the timekeeper releases masked set ``w`` into ``in_slot`` once the side has announced call
   ``w`` queued and call ``w - 1``'s outputs are in its snapshot, and says so (the region's
   ``released`` word);
3. the side's stream, queued ahead, waits for ``released``, copies the masked set into its own
   device memory and says so (``taken``); the timekeeper opens the window only after that, so
   neither copy is inside it, but waits no longer than an honest take after the release
   (``take_allowance_ns``: the judge's own ``kernel`` side's) and times a side still not taken
   from there, so what a side does before saying ``taken`` beyond that is inside its window;
4. as the window opens the timekeeper writes the key (the region's ``key`` words) just before
   ``go``, and the side unmasks on its device behind its gate (:class:`Unmasker`): one kernel
   that XORs the keystream in, a few microseconds.

What a side holds before its window is ChaCha20's output XORed with the set: without the key it
tells nothing of the set, and a guessed word of it (a set's values can often be guessed) gives a
keystream word, from which no key and no other word follows. The key of window ``w + 1`` is drawn
on its own, so having window ``w``'s tells nothing either.
"""
from __future__ import annotations

import secrets

import torch

from pkb_core.harness.gates import KEY_WORDS, mask_choice
from pkb_core.harness.keystream_kernel import xor_keystream

#: Host-engine sets of at least this many bytes are released masked, ahead of their windows;
#: smaller ones are copied inside the window, where their copy costs about what the unmasking's
#: kernels do (a 256 KiB release was ~25 us on one H200, a 2 MiB one ~250 us).
MASK_MIN_BYTES = 1 << 20


def masks_sets(on_gpu: bool, host_engine: bool, set_bytes: int) -> bool:
    """Whether a batch's sets are released masked (``PKB_MASKED_SETS``,
    :func:`pkb_core.harness.gates.mask_choice`). By default a GPU side's, timed by the host engine
    (the device engine's release is a copy in device memory, a few us), of at least
    :data:`MASK_MIN_BYTES`; not on CPU, where the side's unmasking is the host's work too, in
    Triton's interpreter, and costs far more than the copy it replaces. ``on``: every host-engine
    batch's; ``off``: none."""
    choice = mask_choice()
    if choice == "off" or not host_engine:
        return False
    return choice == "on" or (on_gpu and set_bytes >= MASK_MIN_BYTES)


def new_key() -> list[int]:
    """A fresh key: ChaCha20's eight key words and three nonce words, as signed int32 (one window's)."""
    return [secrets.randbits(32) - (1 << 31) for _ in range(KEY_WORDS)]


def words(nbytes: int) -> int:
    """The 4-byte words that cover ``nbytes`` (a masked release copies whole words)."""
    return -(-nbytes // 4)


def mask_in_place(buffer: torch.Tensor, key: list[int]) -> None:
    """XOR ``buffer`` (uint8, a whole number of 4-byte words) with ``key``'s keystream, in place, on
    its own device: what the judge does to each set it stages (and what undoes it). The judge packs
    a set on its device, masks it there and copies it into the staging once, the copy packing
    made anyway: masking a staged set in host memory cost a trip there and back for every set (a
    16 MiB job on one H200 ran past its time doing it)."""
    n = buffer.numel() // 4
    on = buffer[:n * 4].view(torch.int32)
    xor_keystream(torch.tensor(key, dtype=torch.int32, device=buffer.device), on, on, n)


class Unmasker:
    """A side's end of masked sets on one gate region: the masked set taken into the side's own
    memory ahead of its window (:meth:`take`), then unmasked into :attr:`plain` (whose views the
    side's calls are laid out in) once the window's key is there (:meth:`__call__`). On a GPU
    everything is queued on the current stream, behind the words' waits."""

    def __init__(self, masked_slot: torch.Tensor, key_words: torch.Tensor):
        n = masked_slot.numel() // 4
        self.masked_slot = masked_slot[:n * 4]
        self.key_words = key_words
        device = masked_slot.device
        self.taken = torch.empty(n * 4, dtype=torch.uint8, device=device)
        self.key = torch.empty(KEY_WORDS, dtype=torch.int32, device=device)
        self.plain = torch.empty(n * 4, dtype=torch.uint8, device=device)
        # The kernel compiled and loaded now, outside every window: its first launch inside a
        # batch would hold that batch's queueing behind the compile (the timekeeper would read a
        # stalled side and open its gates itself from there on).
        warm = min(n, 16)
        if warm:
            xor_keystream(self.key, self.taken[:warm * 4].view(torch.int32), self.plain[:warm * 4].view(torch.int32),
                          warm)
            if device.type == "cuda":
                torch.cuda.synchronize(device)

    def take(self, nbytes: int) -> None:
        """Copy the released set's first ``nbytes`` (whole words) out of ``in_slot``."""
        n = min(words(nbytes) * 4, self.taken.numel())
        self.taken[:n].copy_(self.masked_slot[:n], non_blocking=True)

    def __call__(self, nbytes: int) -> torch.Tensor:
        """Unmask the taken set's first ``nbytes`` into :attr:`plain` under the key the window's
        opening wrote; returns :attr:`plain`."""
        n = min(words(nbytes), self.plain.numel() // 4)
        # The key read once from the mapped words into the device's memory (each of the kernel's
        # threads reading host memory would cross the bus).
        torch.bitwise_or(self.key_words, 0, out=self.key)
        xor_keystream(self.key, self.taken[:n * 4].view(torch.int32), self.plain[:n * 4].view(torch.int32), n)
        return self.plain
