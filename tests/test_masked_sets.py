"""Masked sets (docs/timing.md, "Masked sets"; :mod:`pkb_core.harness.mask`): a large set is
released into the side's ``in_slot`` between windows, XORed with a keystream whose key the
timekeeper writes only as the window opens; the side unmasks it into its own memory inside the
window. Driven through a real timekeeper process with this process as the side (CPU engine)."""
import torch

from pkb_core.harness import mask
from pkb_core.harness.parcel import pack_into, packed_size, unpack_from
from pkb_core.harness.windows import WindowSide
from pkb_core.judge.clock import stride

CPU = torch.device("cpu")


def _splitmix64(state: int) -> int:
    """The published splitmix64 output function, on Python's unbounded ints."""
    z = state & (2 ** 64 - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2 ** 64 - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2 ** 64 - 1)
    return z ^ (z >> 31)


def test_the_keystream_is_splitmix64_of_the_key_and_the_word_index():
    """torch's int64 operations wrap and their shifts are made logical, so the stream is the
    published function's, word for word (what a side's device must reproduce of the judge's CPU)."""
    for key in (0, 1, 2 ** 63 - 1, -(2 ** 63), -12345678901234567):
        stream = mask.keystream(torch.tensor([key], dtype=torch.int64), mask.counters(9, "cpu"))
        expected = [_splitmix64(key + i * 0x9E3779B97F4A7C15) for i in range(9)]
        assert [v & (2 ** 64 - 1) for v in stream.tolist()] == expected


def test_masking_twice_gives_the_set_back_and_once_hides_it():
    data = torch.arange(64, dtype=torch.uint8).repeat(8)
    buffer = data.clone()
    mask.mask(buffer, 987654321)
    assert (buffer != data).sum() > 480  # nearly every byte differs
    mask.mask(buffer, 987654321)
    assert torch.equal(buffer, data)


def test_a_masked_batch_reaches_the_call_unmasked_and_in_slot_holds_it_masked(clock):
    """What the judge does for a large set, on a small one: each set masked in the staging under
    a key of its own, the keys sent with the batch. Inside window w the side's ``in_slot`` holds set
    w masked (never plain), the key word holds key w, and the call's arguments are set w."""
    sets = [(torch.arange(40, dtype=torch.float32) * (w + 1) - 7.5,) for w in range(5)]
    set_bytes = max(packed_size(s) for s in sets)
    clock.memory(len(sets), set_bytes, 4096)
    step = stride(set_bytes)
    skeletons = [pack_into(s, clock.staging[w * step:(w + 1) * step]) for w, s in enumerate(sets)]
    sizes = [packed_size(s) for s in sets]
    keys = [7 + 1000003 * w - (1 << 62) for w in range(len(sets))]
    for w, key in enumerate(keys):
        mask.mask(clock.staging[w * step:w * step + 8 * mask.words(sizes[w])], key)
    region = {**clock.region("candidate", set_bytes, 4096, None), "masked": True}
    side = WindowSide(CPU)
    side.attach(region)
    seen = []

    def call(args):
        seen.append((side.region.in_slot.clone(), int(side.region.key_word.item()), args[0].clone()))
        return args[0] * 2, args

    clock.send("open", epoch=11, timeout_s=20, side=region["key"], sizes=sizes, set_stride=step,
               snap_stride=stride(4096), keys=keys)
    written = side.run(epoch=11, skeletons=skeletons, call=call, timeout_s=20)
    answer = clock.receive()
    assert answer["status"] == "ok" and len(answer["times_ns"]) == 5
    for w, (slot, key, arg) in enumerate(seen):
        assert torch.equal(arg, sets[w][0])
        assert key == keys[w]
        assert not torch.equal(unpack_from(skeletons[w], slot)[0], sets[w][0])  # masked in the slot
        plain = slot[:8 * mask.words(sizes[w])].clone()
        mask.mask(plain, keys[w])
        assert torch.equal(unpack_from(skeletons[w], plain)[0], sets[w][0])
        snap = unpack_from(written[w], clock.snap[w * stride(4096):w * stride(4096) + 4096])
        assert torch.equal(snap["out"], sets[w][0] * 2)


def test_which_batches_are_masked():
    """A GPU side's large sets under the host engine; never on CPU (the unmasking is the host's
    work there too), never under the device engine (its release is a copy in device memory), never
    a small set (its copy costs less than the unmasking's kernels)."""
    big, small = mask.MASK_MIN_BYTES, mask.MASK_MIN_BYTES - 1
    assert mask.masks_sets(True, True, big)
    assert not mask.masks_sets(True, True, small)
    assert not mask.masks_sets(False, True, big)
    assert not mask.masks_sets(True, False, big)
