"""Temporary folders that name their maker: made by pkb, removed by pkb, swept when the maker is gone.

What a solution's code and its compilers write while it builds (a builder's
temporary folder, ``pkb-build-*``; a Ray build task's, ``pkb-ray-build-*``) must
not outlive the build, whatever ends it: a normal exit, an exception, SIGKILL of
the builder, its time limit. The build itself cannot promise that (a killed
process runs no code), so its folder is made and removed by the process that
starts the build:

* :func:`make` makes ``<root>/<prefix><pid>-<start time>-<random>`` (mode 0700,
  this user's), named after its maker (a pid and its start time name one process;
  a pid alone may be reused), and hands it to the maker's warden
  (:mod:`pkb_core.process.warden`), which removes it if the maker is killed outright;
* :func:`remove` removes it (the maker's ``finally``, once the build's processes are ended);
* :func:`sweep` removes the folders of a prefix whose maker is gone (run by the next
  maker on the machine), and those of the unnamed form earlier pkb versions left
  (``mkdtemp``'s ``<prefix><8 characters>``) once nothing changed in them for
  :data:`UNNAMED_AGE_S`.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import tempfile
import time

from pkb_core.process.own_mounts import remove_tree
#: Seconds after which a folder of the unnamed form (no maker in its name) counts as left behind:
#: far longer than any build may take.
UNNAMED_AGE_S = 24 * 3600
_NAMED = re.compile(r"(\d+)-(\d+)-[0-9a-f]+")
_UNNAMED = re.compile(r"[a-z0-9_]{8}")


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def make(prefix: str, root: str | None = None) -> str:
    """A new folder ``<root>/<prefix><pid>-<start time>-<random>`` (``root``: the temporary
    folder, ``$TMPDIR`` or ``/tmp``), 0700 whatever the umask, watched by this process's warden."""
    from pkb_core.process.warden import warden

    root = root or tempfile.gettempdir()
    pid = os.getpid()
    path = os.path.join(root, f"{prefix}{pid}-{start_time(pid) or 0}-{secrets.token_hex(4)}")
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)
    warden().watch(folder=path)
    return path


def remove(path: str) -> None:
    """Remove ``path`` and everything in it, and tell the warden it is done."""
    from pkb_core.process.warden import warden

    remove_tree(path)  # a build's output folder is a mount of its own (compile/output.py)
    warden().forget(folder=path)


@contextlib.contextmanager
def held(prefix: str, root: str | None = None):
    """A new folder of ``prefix`` (:func:`make`) for the ``with`` block, removed at its end however
    it ends; the stale folders of the prefix are swept first (:func:`sweep`)."""
    sweep(prefix, root)
    path = make(prefix, root)
    try:
        yield path
    finally:
        remove(path)


def sweep(prefix: str, root: str | None = None, now: float | None = None) -> list[str]:
    """Remove this user's folders ``<root>/<prefix>*`` whose maker is gone (see the module
    docstring); the paths removed."""
    root = root or tempfile.gettempdir()
    now = time.time() if now is None else now
    removed = []
    try:
        entries = os.listdir(root)
    except OSError:
        return removed
    for entry in entries:
        if not entry.startswith(prefix):
            continue
        path = os.path.join(root, entry)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        rest = entry[len(prefix):]
        named = _NAMED.fullmatch(rest)
        if named:
            started = start_time(int(named.group(1)))
            # "0": made where no start time could be read; then only a pid that is gone says so.
            stale = started is None or (named.group(2) != "0" and started != named.group(2))
        else:
            stale = bool(_UNNAMED.fullmatch(rest)) and now - st.st_mtime > UNNAMED_AGE_S
        if stale:
            remove_tree(path)
            removed.append(path)
    return removed
