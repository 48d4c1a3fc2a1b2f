"""What a group of processes holds of the shared-memory filesystem, read from its files: where
its cgroup cannot say (:func:`pkb_core.conduct.window_rounds.held_by`, whose doing a full
filesystem is)."""
from __future__ import annotations

import os
import stat


#: Entries :func:`held_bytes` reads at most in a group's folder, and again in the shared-memory
#: root: a group's folder is its own to fill with names, and the root is writable by every user.
HELD_MAX_ENTRIES = 100_000


def held_bytes(folder: str, root: str) -> int:
    """The bytes of memory the files of a group's shared-memory folder take (their blocks: a sparse
    file holds only what was written; each file once, however many names it has), and, where the
    folder's owner is a user of its own (a candidate group's, not this process's), also what that
    user keeps directly in the shared-memory ``root`` (``/dev/shm``): what the group holds of the filesystem it shares
    with the judge, where its cgroup cannot say (:func:`pkb_core.conduct.window_rounds.held_by`;
    a file unlinked but still open is held and not found here). No link is followed; the folder is
    read first, and past :data:`HELD_MAX_ENTRIES` entries of either place the rest of it is not
    counted. 0 for a folder that is gone."""
    try:
        top = os.lstat(folder)
    except OSError:
        return 0
    seen: set = set()
    total = 0
    if stat.S_ISDIR(top.st_mode):
        total += _blocks_below(folder, top.st_dev, None, seen)
    if top.st_uid != os.geteuid():
        total += _blocks_below(root, top.st_dev, top.st_uid, seen)
    return total


def _blocks_below(folder: str, device: int, owner: int | None, seen: set) -> int:
    """The bytes the regular files under ``folder`` take on ``device`` (directly in it, ``owner``'s
    only where given, and everything in the folders it holds that are theirs), each file once over
    ``seen``; at most :data:`HELD_MAX_ENTRIES` entries read, walked without recursion (a group may
    nest folders as deep as it likes)."""
    total, left = 0, HELD_MAX_ENTRIES
    stack = [(folder, owner)]
    while stack and left > 0:
        path, whose = stack.pop()
        try:
            entries = os.scandir(path)
        except OSError:
            continue
        with entries:
            for entry in entries:
                left -= 1
                if left < 0:
                    break
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                key = (info.st_dev, info.st_ino)
                if info.st_dev != device or key in seen or (whose is not None and info.st_uid != whose):
                    continue
                seen.add(key)
                if stat.S_ISDIR(info.st_mode):
                    stack.append((entry.path, None))
                elif stat.S_ISREG(info.st_mode):
                    total += info.st_blocks * 512
    return total
