"""The board: where the timekeepers of one node's judge ranks meet before each window of a batch,
and where the launcher tells them a batch is over.

One shared-memory file in the judge's own folder (no side maps it, or can name or replace it): a
word per local rank, which a timekeeper sets to the mark of the window it is about to open once
its own side has queued the call (the window opens when every rank's word has reached that mark),
and one ``stop`` word. The launcher, which watches the group being timed, writes ``stop`` when the
batch cannot finish (a rank died, or left the batch while its peers wait for it in a collective):
every timekeeper of the node then ends the batch at once instead of at its deadline. It reaches the
timekeepers through this file, not through the sides' gate regions, which live in the candidate's
folder, where a dying rank could unlink or replace them first.
"""
from __future__ import annotations

import mmap
import os
import struct

from pkb_core.harness.gates import HostWord, behind, cyclic_gap, open_plain_file

#: Bytes a rank's word takes (a cache line of its own).
SLOT = 64


def board_path(folder: str, token: str, side: str) -> str:
    """The board of one job's (``token``'s) batches of ``side`` in a judge rank's ``folder``."""
    return os.path.join(folder, f"pkb-board-{token}-{side}")


def board_bytes(ranks: int) -> int:
    """The bytes of a board of ``ranks`` ranks: a word each and the launcher's, at least a page."""
    return max(4096, (ranks + 1) * SLOT)


def _allocated(path: str, size: int) -> int:
    """An open descriptor of the board file at ``path``, made if absent, its ``size`` bytes
    allocated (every rank may be first: allocating what is allocated changes nothing). Allocated,
    not only sized: a page of a sized file is found missing when first touched, a SIGBUS where the
    filesystem is full; here it is an ``OSError`` (``ENOSPC``) while the board is made."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_board_file(path: str, ranks: int) -> None:
    """Make the board of ``ranks`` ranks at ``path`` with its memory, before any batch opens on it
    (the judge, as it arms the batch: a filesystem with no room then is the arm's to report,
    :meth:`pkb_core.judge.rank.JudgeRank.on_arm`)."""
    os.close(_allocated(path, board_bytes(ranks)))


def stop_board_file(path: str, last: int) -> bool:
    """Tell the timekeepers meeting on the board at ``path`` that the batch whose last mark is
    ``last`` is over (the launcher; written with ``pwrite``, the timekeepers read it between their
    polls). The ``stop`` word follows the local ranks' words; their count is the file's to tell,
    so the word is written after every possible count's slots: at the file's last slot. Only a
    plain file of one link (:func:`pkb_core.harness.gates.open_plain_file`), of a board's size at
    least, is written; whether it was."""
    fd = open_plain_file(path, os.O_WRONLY)
    if fd is None:
        return False
    try:
        size = os.fstat(fd).st_size
        if size < board_bytes(1):
            return False
        os.pwrite(fd, struct.pack("<i", cyclic_gap(last, 0)), size - SLOT)
        return True
    finally:
        os.close(fd)


class Board:
    """One rank's end of a board (see the module's docstring)."""

    def __init__(self, path: str, ranks: int, index: int, woken: bool = False):
        if not 0 <= index < ranks:
            raise ValueError(f"rank {index} is not one of the board's {ranks}")
        size = board_bytes(ranks)
        fd = _allocated(path, size)
        try:
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.words = [HostWord(self.map, r * SLOT, woken) for r in range(ranks)]
        self.mine = self.words[index]
        #: The launcher's word (:func:`stop_board_file`): the last mark of the batch it ended.
        self.stop = HostWord(self.map, size - SLOT)

    def stopped(self, last: int) -> bool:
        """Whether the launcher has ended the batch whose last mark is ``last`` (or a later one)."""
        return not behind(self.stop.read(), last)

    def meet(self, mark: int, deadline: float, spins: int | None, stop=None) -> bool:
        """Say this rank is at ``mark`` and wait until every rank is; False at ``deadline`` or once
        ``stop()`` says the batch is over."""
        if behind(self.mine.read(), mark):
            self.mine.write(mark)
        return all(word.wait(mark, deadline, spins, stop=stop) for word in self.words)

    def leave(self, last: int) -> None:
        """Release the other ranks from every later window of the batch (this one has stopped)."""
        self.mine.write(last)

    def close(self) -> None:
        for word in self.words:
            word.cell = None
        self.stop.cell = None
        try:
            self.map.close()
        except BufferError:
            pass  # freed with the process
