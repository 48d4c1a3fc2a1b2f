"""ChaCha20's keystream XORed into a buffer, one Triton kernel: what masks a window's set until its window opens
(:mod:`pkb_core.harness.mask` says how it is used).

ChaCha20 is RFC 8439's stream cipher: a 256-bit key, a 96-bit nonce and a 32-bit block counter
make a 64-byte block of keystream through 20 rounds of 32-bit additions, XORs and rotations.
Knowing keystream blocks (a guessed word of a masked set gives one) does not give the key or any
other block: that is what a mask needs and what splitmix64, whose mixing is invertible, did not
give (docs/timing.md, "A set released ahead of its window").

One program makes :data:`BLOCKS` consecutive blocks, each thread one block with its sixteen
words in registers, XORed into the sixteen words of the buffer it reads (so masking and unmasking
are one launch each, with no keystream buffer: what a side could skip of pkb's unmasking is one
kernel's cost). The same source runs compiled on a GPU and in Triton's interpreter on CPU
(the tests check it there against RFC 8439's own test vector), so the judge, which masks with it,
and a side, which unmasks with it, compute the same bytes. The quarter rounds are written out:
the interpreter cannot call a jitted helper.
"""
from __future__ import annotations

import functools

import triton
import triton.language as tl

from pkb_core.harness.gates import KEY_WORDS  # noqa: F401 - the key argument's words: eight of key, three of nonce

#: Keystream blocks (64 bytes each) one program makes.
BLOCKS = 128


def _chacha20_xor(key, src, out, n_words, first, BLOCKS: tl.constexpr):
    """Words ``0..n_words-1`` of ``src`` XORed with ChaCha20's keystream under ``key`` (int32
    ``[11]``: the key's eight words, the nonce's three, as RFC 8439 orders them) from block
    counter ``first`` on, into ``out`` (int32 words, little-endian; ``out`` may be ``src``: each
    thread reads its words before it writes them)."""
    block = tl.program_id(0) * BLOCKS + tl.arange(0, BLOCKS)
    ones = tl.full([BLOCKS], 1, tl.uint32)
    # The state: "expand 32-byte k", the key, the counter, the nonce.
    x0 = ones * 0x61707865
    x1 = ones * 0x3320646E
    x2 = ones * 0x79622D32
    x3 = ones * 0x6B206574
    x4 = ones * tl.load(key + 0).to(tl.uint32, bitcast=True)
    x5 = ones * tl.load(key + 1).to(tl.uint32, bitcast=True)
    x6 = ones * tl.load(key + 2).to(tl.uint32, bitcast=True)
    x7 = ones * tl.load(key + 3).to(tl.uint32, bitcast=True)
    x8 = ones * tl.load(key + 4).to(tl.uint32, bitcast=True)
    x9 = ones * tl.load(key + 5).to(tl.uint32, bitcast=True)
    x10 = ones * tl.load(key + 6).to(tl.uint32, bitcast=True)
    x11 = ones * tl.load(key + 7).to(tl.uint32, bitcast=True)
    x12 = (block + first).to(tl.uint32)
    x13 = ones * tl.load(key + 8).to(tl.uint32, bitcast=True)
    x14 = ones * tl.load(key + 9).to(tl.uint32, bitcast=True)
    x15 = ones * tl.load(key + 10).to(tl.uint32, bitcast=True)
    s0, s1, s2, s3, s4, s5, s6, s7 = x0, x1, x2, x3, x4, x5, x6, x7
    s8, s9, s10, s11, s12, s13, s14, s15 = x8, x9, x10, x11, x12, x13, x14, x15
    for _ in tl.static_range(10):  # ten double rounds: columns, then diagonals
        x0 = x0 + x4; x12 = x12 ^ x0; x12 = (x12 << 16) | (x12 >> 16)  # noqa: E702
        x8 = x8 + x12; x4 = x4 ^ x8; x4 = (x4 << 12) | (x4 >> 20)  # noqa: E702
        x0 = x0 + x4; x12 = x12 ^ x0; x12 = (x12 << 8) | (x12 >> 24)  # noqa: E702
        x8 = x8 + x12; x4 = x4 ^ x8; x4 = (x4 << 7) | (x4 >> 25)  # noqa: E702
        x1 = x1 + x5; x13 = x13 ^ x1; x13 = (x13 << 16) | (x13 >> 16)  # noqa: E702
        x9 = x9 + x13; x5 = x5 ^ x9; x5 = (x5 << 12) | (x5 >> 20)  # noqa: E702
        x1 = x1 + x5; x13 = x13 ^ x1; x13 = (x13 << 8) | (x13 >> 24)  # noqa: E702
        x9 = x9 + x13; x5 = x5 ^ x9; x5 = (x5 << 7) | (x5 >> 25)  # noqa: E702
        x2 = x2 + x6; x14 = x14 ^ x2; x14 = (x14 << 16) | (x14 >> 16)  # noqa: E702
        x10 = x10 + x14; x6 = x6 ^ x10; x6 = (x6 << 12) | (x6 >> 20)  # noqa: E702
        x2 = x2 + x6; x14 = x14 ^ x2; x14 = (x14 << 8) | (x14 >> 24)  # noqa: E702
        x10 = x10 + x14; x6 = x6 ^ x10; x6 = (x6 << 7) | (x6 >> 25)  # noqa: E702
        x3 = x3 + x7; x15 = x15 ^ x3; x15 = (x15 << 16) | (x15 >> 16)  # noqa: E702
        x11 = x11 + x15; x7 = x7 ^ x11; x7 = (x7 << 12) | (x7 >> 20)  # noqa: E702
        x3 = x3 + x7; x15 = x15 ^ x3; x15 = (x15 << 8) | (x15 >> 24)  # noqa: E702
        x11 = x11 + x15; x7 = x7 ^ x11; x7 = (x7 << 7) | (x7 >> 25)  # noqa: E702
        x0 = x0 + x5; x15 = x15 ^ x0; x15 = (x15 << 16) | (x15 >> 16)  # noqa: E702
        x10 = x10 + x15; x5 = x5 ^ x10; x5 = (x5 << 12) | (x5 >> 20)  # noqa: E702
        x0 = x0 + x5; x15 = x15 ^ x0; x15 = (x15 << 8) | (x15 >> 24)  # noqa: E702
        x10 = x10 + x15; x5 = x5 ^ x10; x5 = (x5 << 7) | (x5 >> 25)  # noqa: E702
        x1 = x1 + x6; x12 = x12 ^ x1; x12 = (x12 << 16) | (x12 >> 16)  # noqa: E702
        x11 = x11 + x12; x6 = x6 ^ x11; x6 = (x6 << 12) | (x6 >> 20)  # noqa: E702
        x1 = x1 + x6; x12 = x12 ^ x1; x12 = (x12 << 8) | (x12 >> 24)  # noqa: E702
        x11 = x11 + x12; x6 = x6 ^ x11; x6 = (x6 << 7) | (x6 >> 25)  # noqa: E702
        x2 = x2 + x7; x13 = x13 ^ x2; x13 = (x13 << 16) | (x13 >> 16)  # noqa: E702
        x8 = x8 + x13; x7 = x7 ^ x8; x7 = (x7 << 12) | (x7 >> 20)  # noqa: E702
        x2 = x2 + x7; x13 = x13 ^ x2; x13 = (x13 << 8) | (x13 >> 24)  # noqa: E702
        x8 = x8 + x13; x7 = x7 ^ x8; x7 = (x7 << 7) | (x7 >> 25)  # noqa: E702
        x3 = x3 + x4; x14 = x14 ^ x3; x14 = (x14 << 16) | (x14 >> 16)  # noqa: E702
        x9 = x9 + x14; x4 = x4 ^ x9; x4 = (x4 << 12) | (x4 >> 20)  # noqa: E702
        x3 = x3 + x4; x14 = x14 ^ x3; x14 = (x14 << 8) | (x14 >> 24)  # noqa: E702
        x9 = x9 + x14; x4 = x4 ^ x9; x4 = (x4 << 7) | (x4 >> 25)  # noqa: E702
    at = block * 16
    y0 = tl.load(src + at + 0, mask=at + 0 < n_words, other=0).to(tl.uint32, bitcast=True)
    y1 = tl.load(src + at + 1, mask=at + 1 < n_words, other=0).to(tl.uint32, bitcast=True)
    y2 = tl.load(src + at + 2, mask=at + 2 < n_words, other=0).to(tl.uint32, bitcast=True)
    y3 = tl.load(src + at + 3, mask=at + 3 < n_words, other=0).to(tl.uint32, bitcast=True)
    y4 = tl.load(src + at + 4, mask=at + 4 < n_words, other=0).to(tl.uint32, bitcast=True)
    y5 = tl.load(src + at + 5, mask=at + 5 < n_words, other=0).to(tl.uint32, bitcast=True)
    y6 = tl.load(src + at + 6, mask=at + 6 < n_words, other=0).to(tl.uint32, bitcast=True)
    y7 = tl.load(src + at + 7, mask=at + 7 < n_words, other=0).to(tl.uint32, bitcast=True)
    y8 = tl.load(src + at + 8, mask=at + 8 < n_words, other=0).to(tl.uint32, bitcast=True)
    y9 = tl.load(src + at + 9, mask=at + 9 < n_words, other=0).to(tl.uint32, bitcast=True)
    y10 = tl.load(src + at + 10, mask=at + 10 < n_words, other=0).to(tl.uint32, bitcast=True)
    y11 = tl.load(src + at + 11, mask=at + 11 < n_words, other=0).to(tl.uint32, bitcast=True)
    y12 = tl.load(src + at + 12, mask=at + 12 < n_words, other=0).to(tl.uint32, bitcast=True)
    y13 = tl.load(src + at + 13, mask=at + 13 < n_words, other=0).to(tl.uint32, bitcast=True)
    y14 = tl.load(src + at + 14, mask=at + 14 < n_words, other=0).to(tl.uint32, bitcast=True)
    y15 = tl.load(src + at + 15, mask=at + 15 < n_words, other=0).to(tl.uint32, bitcast=True)
    tl.store(out + at + 0, ((x0 + s0) ^ y0).to(tl.int32, bitcast=True), mask=at + 0 < n_words)
    tl.store(out + at + 1, ((x1 + s1) ^ y1).to(tl.int32, bitcast=True), mask=at + 1 < n_words)
    tl.store(out + at + 2, ((x2 + s2) ^ y2).to(tl.int32, bitcast=True), mask=at + 2 < n_words)
    tl.store(out + at + 3, ((x3 + s3) ^ y3).to(tl.int32, bitcast=True), mask=at + 3 < n_words)
    tl.store(out + at + 4, ((x4 + s4) ^ y4).to(tl.int32, bitcast=True), mask=at + 4 < n_words)
    tl.store(out + at + 5, ((x5 + s5) ^ y5).to(tl.int32, bitcast=True), mask=at + 5 < n_words)
    tl.store(out + at + 6, ((x6 + s6) ^ y6).to(tl.int32, bitcast=True), mask=at + 6 < n_words)
    tl.store(out + at + 7, ((x7 + s7) ^ y7).to(tl.int32, bitcast=True), mask=at + 7 < n_words)
    tl.store(out + at + 8, ((x8 + s8) ^ y8).to(tl.int32, bitcast=True), mask=at + 8 < n_words)
    tl.store(out + at + 9, ((x9 + s9) ^ y9).to(tl.int32, bitcast=True), mask=at + 9 < n_words)
    tl.store(out + at + 10, ((x10 + s10) ^ y10).to(tl.int32, bitcast=True), mask=at + 10 < n_words)
    tl.store(out + at + 11, ((x11 + s11) ^ y11).to(tl.int32, bitcast=True), mask=at + 11 < n_words)
    tl.store(out + at + 12, ((x12 + s12) ^ y12).to(tl.int32, bitcast=True), mask=at + 12 < n_words)
    tl.store(out + at + 13, ((x13 + s13) ^ y13).to(tl.int32, bitcast=True), mask=at + 13 < n_words)
    tl.store(out + at + 14, ((x14 + s14) ^ y14).to(tl.int32, bitcast=True), mask=at + 14 < n_words)
    tl.store(out + at + 15, ((x15 + s15) ^ y15).to(tl.int32, bitcast=True), mask=at + 15 < n_words)


@functools.lru_cache(maxsize=None)
def kernel(interpreted: bool):
    """The launchable kernel: Triton's interpreter runs it on CPU, ``triton.jit`` compiles it for a GPU.

    The word count and the first block are not specialised on (Triton would compile one kernel for
    counts divisible by 16 and another for the rest): one compiled kernel serves every set, so the
    judge's compile of it, copied into each side's cache, is the one each side looks up
    (:func:`pkb_core.cache.judge_triton_dir`)."""
    if interpreted:
        from triton.runtime.interpreter import InterpretedFunction

        return InterpretedFunction(_chacha20_xor)
    return triton.jit(_chacha20_xor, do_not_specialize=["n_words", "first"])


def xor_keystream(key, src, out, n_words: int, first: int = 0) -> None:
    """``out[:n_words] = src[:n_words] ^`` ChaCha20's keystream under ``key`` (int32 ``[11]``: key,
    then nonce) from block ``first`` on; all int32, on one device (``out`` may be ``src``). One
    kernel, queued on the current stream on a GPU: masking and unmasking are each one launch."""
    if n_words <= 0:
        return
    blocks = -(-n_words // 16)
    interpreted = out.device.type != "cuda"
    kernel(interpreted)[(-(-blocks // BLOCKS),)](key, src, out, n_words, first, BLOCKS=BLOCKS)


def compile_ahead(device) -> None:
    """Compile the kernel for ``device`` (a GPU) and run it once: what the judge does as it starts, so
    that its Triton cache holds the kernel and its launcher before the candidate groups' caches
    are made from it (a side that compiled them itself spent 11-13 s of its first masked batch
    doing so on 2xH200, every job)."""
    import torch

    with torch.cuda.device(device):
        words = torch.zeros(16, dtype=torch.int32, device=device)
        xor_keystream(torch.zeros(KEY_WORDS, dtype=torch.int32, device=device), words, words, 16)
        torch.cuda.synchronize(device)
