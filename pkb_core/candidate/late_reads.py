"""The late rank's reads held until the other ranks have returned: what makes a kernel without its
closing barrier fail a staggered trial every time, where a backend can hold a kernel's reads (a
kernel interpreter on the host; :mod:`pkb_core.candidate.stagger` starts the late rank late).

A kernel with an opening barrier meets the late rank there, and without its closing barrier a rank
returns while a peer still reads its input; a staggered trial's overwrite of that input is seen
only if the late rank's reads outlast the others' return, which on the CPU they rarely did (a new
user's such file failed 1 run of 7 at five trials). So, in a staggered trial, once the late rank's
kernel has made its first atomic operation (the arrival of a barrier, or of any handshake of the
kernel's own), each of its later reads first waits until every other rank has returned from its
call and overwritten its inputs, or until :data:`pkb_core.candidate.stagger.MOST_HOLD_S` has run
out (a kernel that does wait for its peers: the others cannot return before the late rank
arrives at their closing barrier, so this costs a correct kernel that time once per staggered
trial; the whole of it, not the late start's shorter hold, so that a loaded machine's slow
return is still waited for).
The others say they have returned with a file each in the group's own shared-memory folder.

Backends call :data:`LATE_READS`'s :meth:`~LateReads.synchronising` before each atomic operation
and :meth:`~LateReads.reading` before each read of their interpreter; nothing else holds a read,
so a backend that does not (a GPU's kernels) is staggered by the late start alone.
"""
from __future__ import annotations

import os
import time

#: How often a held read looks for the others' files, in seconds.
POLL_S = 0.001


class LateReads:
    """This process's gate on its kernels' reads (one per process: :data:`LATE_READS`)."""

    def __init__(self):
        self._waiting_for: list[str] = []
        self._budget = 0.0
        self._deadline = 0.0
        self._armed = False

    def arm(self, others: list[str], seconds: float) -> None:
        """The late rank's call begins: once its kernel has synchronised, hold its reads until
        every file of ``others`` exists, for at most ``seconds`` from then."""
        self._waiting_for, self._budget, self._armed, self._deadline = list(others), seconds, False, 0.0

    def disarm(self) -> None:
        """The call has returned: reads go on unheld."""
        self._waiting_for, self._armed = [], False

    def synchronising(self) -> None:
        """Before an atomic operation of a kernel: from here on its reads are held (once)."""
        if self._waiting_for and not self._armed:
            self._armed, self._deadline = True, time.monotonic() + self._budget

    def reading(self) -> None:
        """Before a read of a kernel: wait while held (see the module docstring)."""
        if not self._armed:
            return
        while self._waiting_for and time.monotonic() < self._deadline:
            self._waiting_for = [path for path in self._waiting_for if not os.path.exists(path)]
            if self._waiting_for:
                time.sleep(POLL_S)
        self.disarm()  # every other rank returned, or the time ran out: no read waits again


#: The gate of this process.
LATE_READS = LateReads()


def returned_path(folder: str, tag: str, rank: int) -> str:
    """The file by which ``rank`` says it returned from the staggered trial ``tag``."""
    return os.path.join(folder, f"pkb-returned-{tag}-{rank}")


def say_returned(folder: str, tag: str, rank: int) -> None:
    """This rank returned from the staggered trial ``tag`` and overwrote its inputs (where the folder
    takes no file, the late rank's reads wait out their time instead)."""
    try:
        with open(returned_path(folder, tag, rank), "wb"):
            pass
    except OSError:
        pass
