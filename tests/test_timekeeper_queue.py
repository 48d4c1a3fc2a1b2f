"""The host engine's timekeeper on GPU sides opens no window before the side has queued its
whole batch, or has stopped queueing (pkb_core.judge.timekeeper; docs/timing.md, "How a window
is timed"). GPU sides are played here by threads that write the words as a GPU's stream would."""
from __future__ import annotations

import threading
import time

from pkb_core.harness.gates import HostRegion, slot_layout
from pkb_core.judge import timekeeper
from pkb_core.judge.timekeeper import HostClock, _queued_ahead

SET = 64


def _clock(tmp_path, stall_s: float = 0.2):
    clock = HostClock(stall_s=stall_s)
    clock.region("candidate", SET, SET, str(tmp_path / "gates"))
    clock.make_staging(SET * 8, SET * 8, str(tmp_path / "staging"), str(tmp_path / "snap"))
    return clock


PACE_S = 0.02


def _side(tmp_path, epoch: int, count: int, queued_first: int, log: list, late_s: float = 0.0):
    """A GPU-like side: after ``late_s`` (its command's trip, a first launch), announces its first
    ``queued_first`` calls one every ``PACE_S`` (its host queueing them; its stream's queue then
    full), and each later call once the device has finished the one before it."""
    _, _, total = slot_layout(SET, SET)
    region = HostRegion(str(tmp_path / "gates"), total, create=False)
    deadline = time.monotonic() + 10
    time.sleep(late_s)
    for w in range(queued_first):
        time.sleep(PACE_S)
        region.queued.write(epoch + 1 + w)
    for w in range(count):
        mark = epoch + 1 + w
        assert region.go.wait(mark, deadline)
        log.append(("go", w, region.queued.read() - epoch))
        region.used.write(0)
        region.done.write(mark)
        region.queued.write(max(epoch + queued_first, mark + 1))
    region.close()


def _open(clock, epoch, count):
    return clock.open("candidate", epoch, [SET] * count, SET, SET, time.monotonic() + 10)


def test_no_window_opens_before_the_whole_batch_is_queued(tmp_path, monkeypatch):
    monkeypatch.setattr(timekeeper, "QUEUE_IDLE_S", 2.0)  # a loaded machine may pause the side a while
    clock, log = _clock(tmp_path), []
    side = threading.Thread(target=_side, args=(tmp_path, 100, 6, 6, log))
    side.start()
    answer = _open(clock, 100, 6)
    side.join()
    clock.close()
    assert answer["status"] == "ok" and len(answer["times_ns"]) == 6
    assert answer["queued_ahead"] == 6 and answer["not_queued_ahead"] is None
    # The first window opened once the sixth call was announced, not once the first was.
    assert answer["first_wait_ns"] >= 5 * PACE_S * 1e9
    assert all(queued == 6 for _, _, queued in log)


def test_a_side_that_reaches_its_batch_late_is_still_waited_for(tmp_path, monkeypatch):
    """The wait for a batch's calls counts from the first one announced: a side whose host
    reaches the batch after longer than ``QUEUE_IDLE_S`` (but within the stall) still has its whole
    batch queued before the first window (it was opened call by call before)."""
    monkeypatch.setattr(timekeeper, "QUEUE_IDLE_S", 0.5)  # far above the side's pace, on a loaded machine too
    clock, log = _clock(tmp_path, stall_s=3.0), []
    late = 1.0  # past QUEUE_IDLE_S, within the stall
    side = threading.Thread(target=_side, args=(tmp_path, 40, 5, 5, log, late))
    side.start()
    answer = _open(clock, 40, 5)
    side.join()
    clock.close()
    assert answer["status"] == "ok" and answer["queued_ahead"] == 5 and answer["not_queued_ahead"] is None
    assert all(queued == 5 for _, _, queued in log)


def test_a_side_that_never_starts_its_batch_is_stalled_not_waited_for(tmp_path):
    """No announcement within the stall: nothing counted as queued ahead, and the gates open
    anyway (the side's first call waits on the device), the record saying from which call."""
    clock, log = _clock(tmp_path), []
    side = threading.Thread(target=_side, args=(tmp_path, 60, 3, 0, log, 0.0))
    side.start()
    began = time.monotonic()
    answer = _open(clock, 60, 3)
    side.join()
    clock.close()
    assert answer["status"] == "ok" and answer["queued_ahead"] == 0 and answer["not_queued_ahead"] == 0
    assert time.monotonic() - began < 3


def test_a_side_that_stops_queueing_is_timed_from_where_it_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(timekeeper, "QUEUE_IDLE_S", 0.5)
    clock, log = _clock(tmp_path), []
    side = threading.Thread(target=_side, args=(tmp_path, 7, 8, 3, log))
    side.start()
    began = time.monotonic()
    answer = _open(clock, 7, 8)
    side.join()
    clock.close()
    assert answer["status"] == "ok" and len(answer["times_ns"]) == 8
    assert answer["queued_ahead"] == 3
    assert answer["not_queued_ahead"] is None  # each later call was queued before its gate opened
    assert time.monotonic() - began < 5


def test_the_count_is_read_cyclically(tmp_path):
    _, _, total = slot_layout(SET, SET)
    region = HostRegion(str(tmp_path / "words"), total, create=True)
    epoch = (1 << 31) - 2  # the batch's marks wrap past the int32 range
    region.queued.write(epoch + 4)
    assert _queued_ahead(region.queued, epoch, 4, time.monotonic() + 5, 0.2) == 4
    region.queued.write(epoch + 1)
    began = time.monotonic()
    assert _queued_ahead(region.queued, epoch, 4, time.monotonic() + 5, 0.2) == 1
    assert time.monotonic() - began < 1  # gave up once the word stopped moving
    region.queued.write(epoch - 5)  # a word left behind by an earlier batch: nothing announced
    assert _queued_ahead(region.queued, epoch, 4, time.monotonic() + 5, 0.2) == 0
    region.close()


def test_a_batch_that_ends_early_opens_every_later_gate_and_release(tmp_path):
    """A GPU side's stream, queued ahead, waits on go (and, for masked sets, released) for every
    call of its batch: a batch the timekeeper ends early (here its side never takes a masked set)
    writes both words up to the batch's last mark, so that stream drains instead of hanging."""
    clock = _clock(tmp_path, stall_s=0.05)
    region = clock.regions["candidate"][0]
    region.queued.write(5 + 4)  # the whole batch of four announced
    answer = clock.open("candidate", 5, [SET] * 4, SET, SET, time.monotonic() + 0.3, keys=[[0] * 11] * 4)
    assert "never taken" in answer["status"] and answer["times_ns"] == []
    assert region.go.read() == 5 + 4 and region.released.read() == 5 + 4
