"""Masked sets (pkb_core.harness.mask): a GPU host engine's large sets are released into
``in_slot`` ahead of their windows XORed with ChaCha20's keystream under a key of each window's
own, which the timekeeper writes only as the window opens. Here the keystream kernel runs in
Triton's interpreter (the same source the GPU compiles) and a masked batch runs through a real
CPU timekeeper, with this process as the side."""
import shutil
import struct
import time
from pathlib import Path

import pytest
import torch

from pkb_core.harness import mask
from pkb_core.harness.gates import KEY_WORDS, MASK_ENV
from pkb_core.harness.keystream_kernel import BLOCKS, xor_keystream
from pkb_core.harness.parcel import pack_into, packed_size, skeleton_end, unpack_from
from pkb_core.harness.windows import WindowSide
from pkb_core.judge.clock import stride
from test_window_clock import window_records

CPU = torch.device("cpu")


def _chacha20_block(key: list, counter: int) -> list:
    """RFC 8439's block function, written out in Python: the test's own account of the cipher."""
    def rotl(v, n):
        return ((v << n) | (v >> (32 - n))) & 0xFFFFFFFF

    def quarter(s, a, b, c, d):
        s[a] = (s[a] + s[b]) & 0xFFFFFFFF; s[d] = rotl(s[d] ^ s[a], 16)  # noqa: E702
        s[c] = (s[c] + s[d]) & 0xFFFFFFFF; s[b] = rotl(s[b] ^ s[c], 12)  # noqa: E702
        s[a] = (s[a] + s[b]) & 0xFFFFFFFF; s[d] = rotl(s[d] ^ s[a], 8)  # noqa: E702
        s[c] = (s[c] + s[d]) & 0xFFFFFFFF; s[b] = rotl(s[b] ^ s[c], 7)  # noqa: E702

    words = [k & 0xFFFFFFFF for k in key]
    start = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574, *words[:8], counter & 0xFFFFFFFF, *words[8:]]
    s = list(start)
    for _ in range(10):
        for a, b, c, d in ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                           (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)):
            quarter(s, a, b, c, d)
    return [(x + y) & 0xFFFFFFFF for x, y in zip(s, start)]


def _unsigned(tensor) -> list:
    return [v & 0xFFFFFFFF for v in tensor.tolist()]


def test_the_kernel_is_chacha20_by_rfc_8439s_test_vector():
    # RFC 8439, 2.3.2: key 00 01 .. 1f, nonce 00 00 00 09 00 00 00 4a 00 00 00 00, block counter 1.
    nonce = bytes.fromhex("000000090000004a00000000")
    key = list(struct.unpack("<8i", bytes(range(32)))) + list(struct.unpack("<3i", nonce))
    out = torch.zeros(16, dtype=torch.int32)
    xor_keystream(torch.tensor(key, dtype=torch.int32), torch.zeros(16, dtype=torch.int32), out, 16, first=1)
    assert _unsigned(out) == [0xE4E7F110, 0x15593BD1, 0x1FDD0F50, 0xC47120A3, 0xC7F4D1C7, 0x0368C033, 0x9AAA2204,
                              0x4E6CD4C3, 0x466482D2, 0x09AA9F07, 0x05D7C214, 0xA2028BD9, 0xD19C12B5, 0xB94E16DE,
                              0xE883D0CB, 0x4E3C50A2]


def test_every_block_of_a_long_stream_and_nothing_past_its_end():
    key = mask.new_key()
    n = 16 * (BLOCKS + 2) + 5  # three programs, the last block cut short
    out = torch.full((n + 16,), 7, dtype=torch.int32)
    xor_keystream(torch.tensor(key, dtype=torch.int32), torch.zeros(n + 16, dtype=torch.int32), out, n)
    got = _unsigned(out)
    for block in (0, 1, BLOCKS - 1, BLOCKS, BLOCKS + 1):
        assert got[16 * block:16 * block + 16] == _chacha20_block(key, block), block
    assert got[16 * (BLOCKS + 2):n] == _chacha20_block(key, BLOCKS + 2)[:5]
    assert got[n:] == [7] * 16  # the words past n_words are untouched


def test_a_masked_set_unmasks_under_its_key_and_not_under_another():
    plain = torch.randint(0, 256, (4096,), dtype=torch.uint8)
    staged = plain.clone()
    key = mask.new_key()
    mask.mask_in_place(staged, key)
    assert not torch.equal(staged, plain)
    key_words = torch.tensor(key, dtype=torch.int32)
    side = mask.Unmasker(staged, key_words)
    side.take(4096)
    assert torch.equal(side(4096), plain)
    key_words.copy_(torch.tensor(mask.new_key(), dtype=torch.int32))
    assert not torch.equal(side(4096), plain)


def test_a_masked_batch_through_the_timekeeper_is_unreadable_before_its_window(clock):
    """The side sees each set masked in in_slot until its window's key is written; its call reads
    the set unmasked, and what it leaves is what the judge's snapshot holds."""
    sets = [(torch.arange(64, dtype=torch.float32) * (w + 1),) for w in range(4)]
    set_bytes = max(packed_size(s) for s in sets)
    out_bytes = 4096
    clock.memory(len(sets), set_bytes, out_bytes)
    step = stride(set_bytes)
    skeletons = [pack_into(s, clock.staging[w * step:(w + 1) * step]) for w, s in enumerate(sets)]
    sizes = [packed_size(s) for s in sets]
    keys = [mask.new_key() for _ in sets]
    for w, key in enumerate(keys):
        mask.mask_in_place(clock.staging[w * step:w * step + 4 * mask.words(sizes[w])], key)
    region = {**clock.region("candidate", set_bytes, out_bytes, None), "masked": True}
    side = WindowSide(CPU)
    side.attach(region)
    seen = []

    def call(args):
        slot = side.region.in_slot
        seen.append((slot.clone(), side.region.key_words.clone()))
        return args[0] * 2, args

    clock.send("open", side=region["key"], epoch=5, sizes=sizes, set_stride=step, snap_stride=stride(out_bytes),
               timeout_s=60, keys=keys)
    written = side.run(epoch=5, skeletons=skeletons, call=call, timeout_s=60)
    answer = clock.receive()
    assert answer["status"] == "ok" and len(answer["times_ns"]) == len(sets)
    for w, (slot, key_words) in enumerate(seen):
        assert key_words.tolist() == keys[w]  # written as window w opened
        raw = unpack_from(skeletons[w], slot)[0]
        assert not torch.equal(raw, sets[w][0])  # in_slot holds the set masked
        at = w * stride(out_bytes)
        got = unpack_from(written[w], clock.snap[at:at + out_bytes])
        assert torch.equal(got["out"], sets[w][0] * 2) and torch.equal(got["args"][0], sets[w][0])
        assert skeleton_end(skeletons[w]) <= 4 * mask.words(sizes[w])
    assert len(keys[0]) == KEY_WORDS
    side.close()


def test_a_null_side_answers_the_release_of_a_masked_batch(clock):
    sets = [(torch.ones(32),) for _ in range(3)]
    set_bytes = max(packed_size(s) for s in sets)
    clock.memory(len(sets), set_bytes, 4096)
    step = stride(set_bytes)
    for w, s in enumerate(sets):
        pack_into(s, clock.staging[w * step:(w + 1) * step])
    region = {**clock.region("null", set_bytes, 4096, None), "masked": True}
    side = WindowSide(CPU)
    side.attach(region)
    clock.send("open", side=region["key"], epoch=1, sizes=[packed_size(s) for s in sets], set_stride=step,
               snap_stride=stride(4096), timeout_s=60, keys=[mask.new_key() for _ in sets])
    side.run(epoch=1, skeletons=[None] * len(sets), call=None, timeout_s=60)
    assert clock.receive()["status"] == "ok"
    side.close()


def test_time_a_side_takes_before_saying_taken_is_inside_its_window_beyond_the_allowance(clock):
    """A side that does work before its gate and says ``taken`` late (work that needs no value of the
    set) gets it for free unless the clock starts no later than an honest take after the release."""
    sets = [(torch.arange(32, dtype=torch.float32) + w,) for w in range(3)]
    set_bytes = max(packed_size(s) for s in sets)
    clock.memory(len(sets), set_bytes, 4096)
    step = stride(set_bytes)
    sizes = [packed_size(s) for s in sets]
    region = {**clock.region("candidate", set_bytes, 4096, None), "masked": True}
    side = WindowSide(CPU)
    side.attach(region)
    honest_write = side.region.write_taken

    def late(value):
        time.sleep(0.03)  # "work" before the gate
        honest_write(value)

    side.region.write_taken = late
    windows = {}
    for epoch, allowance in ((10, None), (20, 1_000_000)):
        keys = [mask.new_key() for _ in sets]
        for w, key in enumerate(keys):
            pack_into(sets[w], clock.staging[w * step:(w + 1) * step])
            mask.mask_in_place(clock.staging[w * step:w * step + 4 * mask.words(sizes[w])], key)
        clock.send("open", side=region["key"], epoch=epoch, sizes=sizes, set_stride=step, snap_stride=stride(4096),
                   timeout_s=60, keys=keys, take_allowance_ns=allowance)
        # No call: the windows hold no unmasking (Triton's interpreter, milliseconds on CPU) either.
        side.run(epoch=epoch, skeletons=[None] * len(sets), call=None, timeout_s=60)
        answer = clock.receive()
        assert answer["status"] == "ok", answer
        # Without an allowance the window waits for the late take; with one it opens at its end.
        assert answer["take_ns"] >= 25_000_000 if allowance is None else answer["take_ns"] < 25_000_000
        windows[allowance] = min(answer["times_ns"])
    side.close()
    assert windows[None] < 25_000_000  # the late take was outside the window
    assert windows[1_000_000] >= 25_000_000  # and is inside it beyond the allowance


def test_a_masked_window_job_end_to_end(pkb_invoke, tmp_path, monkeypatch):
    """``PKB_MASKED_SETS=on`` masks a CPU job's sets (the GPU's default path, with the kernel in
    Triton's interpreter): the honest file passes through the judge's masking, the groups' taking
    and unmasking and the take allowance, and the record says so; a rebound loop that reads
    ``in_slot`` itself (and never says ``taken``) reads masked bytes and fails, well before the
    job's time."""
    monkeypatch.setenv(MASK_ENV, "on")
    folder = tmp_path / "solutions"
    folder.mkdir()
    fixtures = Path(__file__).parent / "fixtures" / "windows_hostile"
    for name in ("1_allreduce_honest.py", "1_allreduce_rebound_loop.py"):
        shutil.copy(fixtures / name, folder)
    records = window_records(pkb_invoke, folder, tmp_path / "run", "--iters", "12", "--min-iters", "12",
                             "--timeout", "600")
    honest = records["1_allreduce_honest.py"]
    assert honest["verdict"] == "pass", honest
    window = honest["stats"]["modes"]["window"]
    assert window["masked_sets"] == "true"
    takes = {side: d.get("take_us") for side, d in window["window_diagnostics"].items()}
    assert all(isinstance(t, (int, float)) and t > 0 for t in takes.values()), takes
    rebound = records["1_allreduce_rebound_loop.py"]
    # It never says taken: its windows open at the allowance's end, on the masked bytes it reads.
    assert rebound["verdict"] == "fail" and "timed call" in rebound["reason"], rebound


def _masked_batch(tmp_path, count: int, set_bytes: int = 4096, out_bytes: int = 4096):
    """A host engine made in this process, with staging holding ``count`` masked sets: the clock,
    the sizes and the keys."""
    from pkb_core.judge.timekeeper import HostClock

    clock = HostClock(spins=None, woken=True)
    clock.region("candidate", set_bytes, out_bytes, str(tmp_path / "region"))
    clock.make_staging(count * stride(set_bytes), count * stride(out_bytes), str(tmp_path / "staging"),
                       str(tmp_path / "snap"))
    sets = [(torch.arange(32, dtype=torch.float32) + w,) for w in range(count)]
    sizes, keys = [packed_size(s) for s in sets], [mask.new_key() for _ in sets]
    staging = clock.staging.tensor(0, count * stride(set_bytes))
    for w, s in enumerate(sets):
        at = w * stride(set_bytes)
        pack_into(s, staging[at:at + stride(set_bytes)])
        mask.mask_in_place(staging[at:at + 4 * mask.words(sizes[w])], keys[w])
    return clock, sizes, keys


def test_a_side_that_took_its_set_is_not_charged_another_ranks_lateness(tmp_path):
    """With two ranks on the board, a rank whose side took its set at once waits for the other
    rank before its window opens: that wait is not its side's. (Its clock started at the end of
    the take allowance instead, so every window of the compared sides held the slowest rank's
    release and the judge's own sides', with no allowance, did not.)"""
    import threading

    from pkb_core.harness.board import Board

    clock, sizes, keys = _masked_batch(tmp_path, 3)
    board_path = str(tmp_path / "board")
    board, other = Board(board_path, 2, 0, woken=True), Board(board_path, 2, 1, woken=True)
    side = WindowSide(CPU)
    side.attach({"path": str(tmp_path / "region"), "in_bytes": 4096, "out_bytes": 4096, "masked": True})

    def late_rank(epoch):
        for w in range(len(sizes)):
            time.sleep(0.04)  # the other rank's side is slow to queue each call
            other.meet(epoch + 1 + w, time.monotonic() + 30, None)
        other.leave(epoch + len(sizes))

    answers = {}
    thread = threading.Thread(target=lambda: answers.update(clock.open(
        "candidate", 7, sizes, stride(4096), stride(4096), time.monotonic() + 30, board, keys=keys,
        take_allowance_ns=1_000_000)))
    peer = threading.Thread(target=late_rank, args=(7,))
    thread.start()
    peer.start()
    side.run(epoch=7, skeletons=[None] * len(sizes), call=None, timeout_s=30)
    thread.join()
    peer.join()
    assert answers["status"] == "ok", answers
    assert max(answers["times_ns"]) < 20_000_000, answers["times_ns"]  # not the other rank's 40 ms
    side.close()
    clock.close()


def test_a_timekeeper_that_fails_mid_batch_releases_the_other_ranks(tmp_path):
    """An exception inside a batch (here its staging gone) still leaves the board: the other
    rank's later windows do not wait for this one until their deadline."""
    from pkb_core.harness.board import Board

    clock, sizes, keys = _masked_batch(tmp_path, 2)
    board_path = str(tmp_path / "board")
    board, other = Board(board_path, 2, 0, woken=True), Board(board_path, 2, 1, woken=True)
    clock.regions["candidate"][0].queued.write(1 + 3)  # the side announced every call
    staging, clock.staging = clock.staging, None
    with pytest.raises(AttributeError):  # the first set's release, before the first window's meeting
        clock.open("candidate", 1, sizes, stride(4096), stride(4096), time.monotonic() + 30, board, keys=keys,
                   take_allowance_ns=1_000_000)
    clock.staging = staging
    started = time.monotonic()
    assert other.meet(3, time.monotonic() + 10, None)  # rank 0 left the batch: no wait
    assert time.monotonic() - started < 2
    clock.close()


def test_the_take_allowance_is_the_slowest_ranks_high_take_with_room():
    from pkb_core.conduct.window_rounds import TAKE_ROOM_NS, take_allowance_ns
    from pkb_core.contracts.commands_judge import WindowTimes

    def times(take, high):
        return WindowTimes(times_ns=[1], status="ok", take_ns=take, take_high_ns=high)

    # Rank 1's 90th percentile, not either rank's median: a copy-engine step past the median is honest.
    assert take_allowance_ns([times(40_000, 45_000), times(42_000, 50_000)]) == 55_000 + TAKE_ROOM_NS
    assert take_allowance_ns([times(40_000, None)]) == 44_000 + TAKE_ROOM_NS  # a timekeeper without it
    assert take_allowance_ns([times(None, None), times(40_000, 45_000)]) is None  # not masked everywhere
    assert take_allowance_ns([]) is None
