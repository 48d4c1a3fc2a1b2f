"""What nothing pkb started may outlive: a warden per pkb process, for the ends that run no code.

pkb cleans up after itself on every ending that runs its code: a finished run,
Ctrl-C (SIGINT) and SIGTERM (both turned into an exit that runs every ``finally``).
``kill -9`` and a crash of the interpreter run nothing. For those, each pkb process
that starts jobs (``pkb run``, ``pkb bench``, a service's lane, the service with its
compile pool) has a *warden*: ``python -m pkb_core.process.warden``, a small process
in a session of its own that only reads a pipe from its owner. The owner writes
what must not outlive it (JSON lines):

``{"cgroup": [dir, ...]}``   its cgroup tree (:mod:`pkb_core.process.cgroup_tree`): every process in it is ended
``{"folder": path}``         a folder (a launch's ``/dev/shm/pkb-<launch>``, a build's temporary one): removed
``{"user": uid}``            a candidate group's user: its files directly in ``/dev/shm`` removed
``{"session": sid}``         a session of processes (where there is no cgroup): ended
``{"forget": {...}}``        one of the above, cleaned by the owner already

When the pipe ends (the owner exited, however: the kernel closes its descriptors),
or its parent is no longer the owner, the warden ends and removes what is still
listed, then exits. Its own start costs one small interpreter per pkb process.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading

#: Seconds between the warden's looks at its parent (the pipe's end is the usual signal).
PARENT_POLL_S = 1.0


class Warden:
    """The owner's handle on its warden process (see the module docstring)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.proc = subprocess.Popen([sys.executable, "-m", "pkb_core.process.warden", str(os.getpid())],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
                                     env=_light_environment())
        from pkb_core.process.reaper import spawned

        spawned(self.proc.pid)

    def _send(self, message: dict) -> None:
        with self._lock:
            try:
                self.proc.stdin.write(json.dumps(message).encode() + b"\n")
                self.proc.stdin.flush()
            except (OSError, ValueError):
                pass  # the warden is gone: the owner's own cleanup still runs

    def watch(self, **item) -> None:
        """Have the warden clean ``item`` (one of ``cgroup``, ``folder``, ``user``, ``session``)
        if this process ends without doing it."""
        self._send(item)

    def forget(self, **item) -> None:
        """``item`` was cleaned by this process: the warden leaves it alone."""
        self._send({"forget": item})


_WARDEN: list = []
_WARDEN_LOCK = threading.Lock()


def warden() -> Warden:
    """This process's warden, started on first use."""
    with _WARDEN_LOCK:
        if not _WARDEN or _WARDEN[0].proc.poll() is not None:
            _WARDEN[:] = [Warden()]
        return _WARDEN[0]


def _light_environment() -> dict:
    """What the warden needs to start Python and import this module: nothing secret."""
    keep = ("PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "LANG", "LC_ALL")
    return {name: os.environ[name] for name in keep if name in os.environ}


# -- the warden's side -------------------------------------------------------------------
def _key(item: dict) -> tuple:
    kind, value = next(iter(item.items()))
    return kind, json.dumps(value, sort_keys=True)


def watch_owner(owner: int, stream) -> dict:
    """Read the owner's lines until the pipe ends or the owner is gone; what is left to clean."""
    listed: dict = {}
    buffer = b""
    fd = stream.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], PARENT_POLL_S)
        if not ready:
            if os.getppid() != owner:
                return listed
            continue
        data = os.read(fd, 1 << 16)
        if not data:
            return listed
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict) or len(message) != 1:
                continue
            if "forget" in message and isinstance(message["forget"], dict) and len(message["forget"]) == 1:
                listed.pop(_key(message["forget"]), None)
            else:
                listed[_key(message)] = message


def clean(listed: dict) -> None:
    """End and remove everything ``listed`` (cgroups and sessions first, then files)."""
    from pkb_core.process.cgroups import Cgroup
    from pkb_core.process.own_mounts import remove_tree
    from pkb_core.process.sessions import kill_sessions

    items = list(listed.values())
    for item in items:
        if "cgroup" in item:
            dirs = item["cgroup"]
            version = 2 if list(dirs) == [""] else 1
            tree = Cgroup(version, {c: d for c, d in dirs.items() if os.path.isdir(d)})
            if tree.dirs:
                tree.kill(wait_s=5.0)
                tree.remove()
    sessions = [item["session"] for item in items if "session" in item]
    if sessions:
        kill_sessions(sessions)
    for item in items:
        if "folder" in item and str(item["folder"]).startswith("/"):
            remove_tree(item["folder"])  # a launch folder is a mount of its own (own_mounts)
    users = [int(item["user"]) for item in items if "user" in item]
    if users:
        sweep_users(users)


def sweep_users(uids, root: str = "/dev/shm") -> None:
    """Remove what the users ``uids`` (candidate groups') left directly in ``root``."""
    wanted = set(uids)
    try:
        entries = os.listdir(root)
    except OSError:
        return
    for entry in entries:
        path = os.path.join(root, entry)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid not in wanted:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def main() -> int:
    owner = int(sys.argv[1])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # a terminal's or a group's signal is the owner's to act on
    listed = watch_owner(owner, sys.stdin.buffer)
    clean(listed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
