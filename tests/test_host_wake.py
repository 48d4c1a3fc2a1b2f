"""Futexes on shared-memory words (pkb_core.harness.host_wake): CPU mode's gates and device
barrier sleep on a word and are woken by its writer, where they napped between polls."""
import mmap
import os
import time

import pytest

from pkb_core.harness import host_wake
from pkb_core.harness.gates import HostWord

pytestmark = pytest.mark.skipif(not host_wake.available(), reason="no futexes on this machine")


def _shared_word(woken=True):
    memory = mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED)
    return memory, HostWord(memory, 0, woken)


def _after(delay_s, action):
    """Fork a child that runs ``action`` after ``delay_s`` and exits; its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            time.sleep(delay_s)
            action()
        finally:
            os._exit(0)
    return pid


def test_a_sleeper_is_woken_by_another_processs_write_long_before_its_timeout():
    memory, word = _shared_word()
    pid = _after(0.2, lambda: word.write(7))
    started = time.monotonic()
    assert host_wake.sleep_on(word.address, 0, 5.0)
    woke = time.monotonic() - started
    os.waitpid(pid, 0)
    assert word.read() == 7
    assert 0.15 < woke < 2.0, woke  # woken by the write, not at the 5 s timeout


def test_a_sleep_on_a_word_that_already_changed_returns_at_once():
    memory, word = _shared_word()
    word.write(3)
    started = time.monotonic()
    assert host_wake.sleep_on(word.address, 2, 5.0)  # the caller saw 2; it holds 3 now
    assert time.monotonic() - started < 1.0


def test_a_sleep_nobody_wakes_ends_at_its_timeout():
    memory, word = _shared_word()
    started = time.monotonic()
    assert host_wake.sleep_on(word.address, 0, 0.1)
    assert 0.09 < time.monotonic() - started < 2.0


def test_a_woken_words_wait_sees_a_write_from_another_process_without_spinning():
    memory, word = _shared_word()
    pid = _after(0.2, lambda: word.write(5))
    assert word.wait(5, time.monotonic() + 10, spins=0)
    os.waitpid(pid, 0)


def test_a_write_that_wakes_no_one_is_still_seen_within_the_cap():
    # A side whose own code stores the word without a wake delays only its own window.
    memory, word = _shared_word()
    silent = HostWord(memory, 0, woken=False)

    def write():
        memory[8:16] = time.monotonic_ns().to_bytes(8, "little")  # when (one clock for every process)
        silent.write(9)

    pid = _after(0.05, write)
    assert word.wait(9, time.monotonic() + 10, spins=0)
    seen = time.monotonic_ns()
    os.waitpid(pid, 0)
    # From the write, not from the fork: on a loaded machine the child may start late.
    assert seen - int.from_bytes(memory[8:16], "little") < 10 * host_wake.LONGEST_SLEEP_S * 1e9


def test_a_wait_past_its_deadline_says_so():
    memory, word = _shared_word()
    started = time.monotonic()
    assert not word.wait(1, time.monotonic() + 0.05, spins=0)
    assert time.monotonic() - started < 2.0
