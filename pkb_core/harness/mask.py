"""Masked sets: a window's input set released into ``in_slot`` ahead of its window, unreadable
until the window opens (docs/timing.md, "Masked sets").

On the host engine the timekeeper copies each set from its private staging into the side's
``in_slot``. Inside the window that copy is most of a large set's window (2 MiB: ~250 us of a
~400 us window on one H200, with most of its spread). Outside it, a side could read the set
before its gate and compute ahead. So for large sets the judge writes each set into its staging
XORed with a keystream drawn from a key of its own (:func:`mask`), the timekeeper releases the
masked set between windows, and writes the key into the region's ``key`` word only when the
window opens, just before ``go``: the side unmasks as it takes the set (:class:`Unmasker`), inside
the window, on its own device.

The keystream is splitmix64's output for the state ``key + i * GAMMA`` (the i-th 8-byte word),
computed with torch's integer operations, which wrap alike on CPU and GPU, so that the judge's CPU
and a side's device compute the same bytes. It is not a cipher: a side sees masked sets and, once
it has unmasked them, their keystreams, and each key is fresh from the operating system's
randomness, so no key tells anything of the next; what it would take to read a set early is
recovering a 64-bit key from one masked set, whose values it can only guess at, before its window
opens.
"""
from __future__ import annotations

import torch

#: Host-engine sets of at least this many bytes are released masked, ahead of their windows;
#: smaller ones are copied inside the window, where their copy costs less than the unmasking's
#: kernels (a 256 KiB release was ~25 us on one H200, a 2 MiB one ~250 us).
MASK_MIN_BYTES = 1 << 20


_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


GAMMA = _signed(0x9E3779B97F4A7C15)
MIX1 = _signed(0xBF58476D1CE4E5B9)
MIX2 = _signed(0x94D049BB133111EB)


def masks_sets(on_gpu: bool, host_engine: bool, set_bytes: int) -> bool:
    """Whether a batch's sets are released masked: a GPU side's, timed by the host engine (the
    device engine's release is a copy in device memory, a few us), of at least
    :data:`MASK_MIN_BYTES`. Not on CPU, where the side's unmasking is the host's work too and costs
    more than the copy it replaces (2 MiB: ~4 ms against ~0.3 ms on the 2-core machine)."""
    return on_gpu and host_engine and set_bytes >= MASK_MIN_BYTES


def words(nbytes: int) -> int:
    """The 8-byte words that cover ``nbytes`` (a masked release copies whole words)."""
    return -(-nbytes // 8)


def _shifted(z: torch.Tensor, k: int) -> torch.Tensor:
    """``z`` shifted right by ``k`` as unsigned 64-bit words (torch shifts int64 arithmetically)."""
    return torch.bitwise_right_shift(z, k).bitwise_and_((1 << (64 - k)) - 1)


def keystream(key: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """The keystream's words for ``counters`` (int64, ``i * GAMMA`` for word ``i``: :func:`counters`)
    under ``key`` (an int64 tensor of one element, on the same device): splitmix64's output for
    the state ``key + i * GAMMA``, as a new int64 tensor."""
    z = counters + key
    z = torch.bitwise_xor(z, _shifted(z, 30)).mul_(MIX1)
    z = torch.bitwise_xor(z, _shifted(z, 27)).mul_(MIX2)
    return torch.bitwise_xor(z, _shifted(z, 31))


def counters(n_words: int, device) -> torch.Tensor:
    """``i * GAMMA`` for ``i`` in ``0..n_words-1``, int64 (wrapping), on ``device``."""
    return torch.arange(n_words, dtype=torch.int64, device=device).mul_(GAMMA)


def mask(buffer: torch.Tensor, key: int) -> None:
    """XOR ``buffer`` (uint8, a whole number of 8-byte words, on CPU) with ``key``'s keystream, in
    place: what the judge does to each staged set (and what undoes it)."""
    flat = buffer.view(torch.int64)
    flat.bitwise_xor_(keystream(torch.tensor([_signed(key)], dtype=torch.int64), counters(flat.numel(), "cpu")))


class Unmasker:
    """A side's unmasking: each window's set from ``in_slot``'s masked bytes into a buffer of the
    side's own device memory (``plain``), under the key the timekeeper wrote into the region's
    ``key`` word (``key_word``: an int64 tensor of one element, mapped) when the window opened.
    Everything it does is queued on the current stream (GPU) behind the window's gate."""

    def __init__(self, masked: torch.Tensor, key_word: torch.Tensor):
        n_words = masked.numel() // 8
        self.masked = masked[:n_words * 8].view(torch.int64)
        self.key_word = key_word
        self.key = torch.zeros(1, dtype=torch.int64, device=masked.device)
        self.counters = counters(n_words, masked.device)
        self.plain = torch.empty(n_words * 8, dtype=torch.uint8, device=masked.device)

    def __call__(self, nbytes: int) -> torch.Tensor:
        """Unmask the window's first ``nbytes`` into :attr:`plain` (whose views the side's call is
        laid out in, ahead); returns it."""
        n = min(words(nbytes), self.counters.numel())
        # The key read once from the mapped word into the device's memory (every thread of the
        # keystream's kernels reading host memory would cross the bus each time).
        torch.bitwise_or(self.key_word, 0, out=self.key)
        torch.bitwise_xor(self.masked[:n], keystream(self.key, self.counters[:n]),
                          out=self.plain[:n * 8].view(torch.int64))
        return self.plain
