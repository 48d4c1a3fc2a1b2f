"""Cgroups: the kernel's own hold on a job's processes.

A process tree found through ``/proc`` loses races: a fork chain (each link forks
and exits at once) is gone from every pid a scan read before the signal arrives,
and escapes the freeze, the kill and the CPU probe that a scan drives. A cgroup
does not: every process a member forks is a member, no member can leave it (its
files are root's, and the lockdown mounts them read-only), and the kernel
freezes, counts and limits the members as a whole.

pkb makes one :class:`Cgroup` per candidate group (with a leaf per rank, so each
rank's CPU use is its own) and per builder, in a tree of its own per process
(:mod:`pkb_core.process.cgroup_tree`, which also says where that tree goes and
which version is used). pkb's own processes (launcher, judge, zygotes, lanes) are
never in one, so the memory limit's OOM killer picks only among the job's
processes. A cgroup gives:

* **freeze and thaw as a whole**: ``cgroup.freeze`` (v2), ``freezer.state`` (v1);
* **an end as a whole**: ``cgroup.kill`` (v2), or frozen, then every member killed,
  then thawed (a frozen process cannot fork, so no fork outruns the kill);
* **CPU use from the kernel's accounting**, dead members included:
  ``cpu.stat``'s ``usage_usec`` (v2), ``cpuacct.usage`` (v1);
* **a process cap**: ``pids.max`` (threads count);
* **a memory limit** that covers the job's shared-memory files (tmpfs pages are
  charged to the cgroup of the process that wrote them): ``memory.max`` with
  ``memory.oom.group`` (v2), ``memory.limit_in_bytes`` (v1);
* **which limit was hit**: ``memory.events``/``memory.oom_control``'s ``oom_kill``,
  ``pids.events``' ``max``.

"""
from __future__ import annotations

import os
import signal
import time

#: The v1 controllers pkb uses, and what each gives.
V1_CONTROLLERS = {"freezer": "freezing and ending a job as a whole",
                  "cpuacct": "CPU use from the kernel's accounting",
                  "memory": "a memory limit", "pids": "a process cap"}
#: The v2 controllers whose delegation makes version 2 the one to use.
V2_LIMITS = ("memory", "pids")
#: Seconds to wait for a freeze to take hold, and for the members of a killed cgroup to be gone.
FREEZE_WAIT_S = 2.0
KILL_WAIT_S = 10.0


class Cgroup:
    """One cgroup: a directory in the v2 hierarchy, or one per v1 controller.

    :param dirs: ``{controller: directory}`` (v1), or ``{"": directory}`` (v2).
    """

    def __init__(self, version: int, dirs: dict):
        self.version = version
        self.dirs = dict(dirs)
        #: The limits set on it (``memory_bytes``, ``pids``), for verdicts that name them.
        self.limits: dict = {}

    def __repr__(self) -> str:
        return f"Cgroup(v{self.version}, {self.path})"

    @property
    def path(self) -> str:
        """One of its directories (the one to enumerate members by)."""
        return self._dir("freezer", "pids", "cpuacct", "memory", "")

    def _dir(self, *controllers) -> str | None:
        for name in controllers:
            if name in self.dirs:
                return self.dirs[name]
        return next(iter(self.dirs.values()))

    def has(self, feature: str) -> bool:
        """Whether it offers ``feature``: ``freeze``, ``cpu``, ``memory`` or ``pids``."""
        if self.version == 2:
            files = {"freeze": "cgroup.freeze", "cpu": "cpu.stat", "memory": "memory.max", "pids": "pids.max"}
            return os.path.exists(os.path.join(self.dirs[""], files[feature]))
        return {"freeze": "freezer", "cpu": "cpuacct", "memory": "memory", "pids": "pids"}[feature] in self.dirs

    # -- the tree ----------------------------------------------------------------------
    def child(self, name: str) -> "Cgroup":
        """A new cgroup inside this one (its directories made, mode 0755, root's)."""
        dirs = {}
        for controller, folder in self.dirs.items():
            path = os.path.join(folder, name)
            if path not in dirs.values():  # two controllers of one v1 hierarchy share a folder
                os.mkdir(path, 0o755)
            dirs[controller] = path
        return Cgroup(self.version, dirs)

    def enable_limits(self) -> None:
        """Let this cgroup's children have memory and pids limits (v2: ``cgroup.subtree_control``;
        a cgroup that does so may hold no process itself)."""
        if self.version == 2:
            available = _read(os.path.join(self.dirs[""], "cgroup.controllers")).split()
            wanted = " ".join(f"+{c}" for c in V2_LIMITS if c in available)
            if wanted:
                _write(os.path.join(self.dirs[""], "cgroup.subtree_control"), wanted)

    def set_limits(self, *, memory_bytes: int | None, pids: int | None) -> list[str]:
        """Cap its memory (with everything its members write to shared memory) and its
        process count; what could not be set, as lockdown gaps."""
        gaps = []
        if memory_bytes:
            if not self.has("memory"):
                gaps.append("a memory limit per job (no memory cgroup controller)")
            else:
                try:
                    if self.version == 2:
                        _write(os.path.join(self.dirs[""], "memory.max"), str(memory_bytes))
                        _write(os.path.join(self.dirs[""], "memory.oom.group"), "1")  # the whole job, never a part
                        _write_if_exists(os.path.join(self.dirs[""], "memory.swap.max"), "0")
                    else:
                        # memory+swap may never be below memory: raised first when the limit rises
                        # (a job's need, once known), set again after it when it falls.
                        memsw = os.path.join(self.dirs["memory"], "memory.memsw.limit_in_bytes")
                        _write_if_exists(memsw, str(memory_bytes))
                        _write(os.path.join(self.dirs["memory"], "memory.limit_in_bytes"), str(memory_bytes))
                        _write_if_exists(memsw, str(memory_bytes))
                    self.limits["memory_bytes"] = memory_bytes
                except OSError as exc:
                    gaps.append(f"a memory limit per job ({exc.strerror})")
        if pids:
            if not self.has("pids"):
                gaps.append("a process cap per job (no pids cgroup controller)")
            else:
                try:
                    _write(os.path.join(self.dirs["" if self.version == 2 else "pids"], "pids.max"), str(pids))
                    self.limits["pids"] = pids
                except OSError as exc:
                    gaps.append(f"a process cap per job ({exc.strerror})")
        return gaps

    def procs_files(self) -> list[str]:
        """The files a process writes its pid (or 0: itself) into to join this cgroup."""
        return sorted({os.path.join(folder, "cgroup.procs") for folder in self.dirs.values()})

    def join(self, pid: int = 0) -> None:
        """Move ``pid`` (0: this process) into this cgroup, in every hierarchy."""
        join_cgroup(self.procs_files(), pid)

    def _folders(self, controller_dir: str) -> list[str]:
        """``controller_dir`` and every cgroup below it, deepest first."""
        return [root for root, _subdirs, _files in os.walk(controller_dir, topdown=False)]

    def pids(self) -> list[int]:
        """The live processes in it and in every cgroup below it."""
        found = []
        for folder in self._folders(self.path):
            try:
                found += [int(line) for line in _read(os.path.join(folder, "cgroup.procs")).split()]
            except (OSError, ValueError):
                continue
        return found

    def populated(self) -> bool:
        if self.version == 2:
            try:
                return "populated 1" in _read(os.path.join(self.dirs[""], "cgroup.events"))
            except OSError:
                return False
        return bool(self.pids())

    # -- freezing ----------------------------------------------------------------------
    def freeze(self) -> bool:
        """Freeze every member (and every process a member forks meanwhile); waits until
        the kernel says the cgroup is frozen. False where it has no freezer or the freeze
        did not take hold in :data:`FREEZE_WAIT_S`."""
        if not self.has("freeze"):
            return False
        if self.version == 2:
            _write(os.path.join(self.dirs[""], "cgroup.freeze"), "1")
            return _until(lambda: "frozen 1" in _read(os.path.join(self.dirs[""], "cgroup.events")), FREEZE_WAIT_S)
        state = os.path.join(self.dirs["freezer"], "freezer.state")
        _write(state, "FROZEN")
        # Reading the state moves FREEZING to FROZEN once every member stopped.
        return _until(lambda: _read(state).strip() == "FROZEN", FREEZE_WAIT_S)

    def thaw(self) -> None:
        if not self.has("freeze"):
            return
        if self.version == 2:
            _write(os.path.join(self.dirs[""], "cgroup.freeze"), "0")
        else:
            _write(os.path.join(self.dirs["freezer"], "freezer.state"), "THAWED")

    def thaw_all(self) -> None:
        """Thaw this cgroup and every one below it: a cgroup frozen itself stays frozen when only
        an ancestor is thawed (v1's ``freezer.self_freezing``, v2's own ``cgroup.freeze``), and a
        frozen process dies of its SIGKILL only once it thaws."""
        if not self.has("freeze"):
            return
        folder = self.dirs["" if self.version == 2 else "freezer"]
        name, thawed = ("cgroup.freeze", "0") if self.version == 2 else ("freezer.state", "THAWED")
        for path in reversed(self._folders(folder)):  # the outermost first
            try:
                _write(os.path.join(path, name), thawed)
            except OSError:
                continue

    # -- ending ------------------------------------------------------------------------
    def kill(self, wait_s: float = KILL_WAIT_S) -> bool:
        """End every member at once: ``cgroup.kill`` (v2), else frozen, each member killed,
        thawed (a frozen process cannot fork, so no fork outruns the kill; a member that was
        frozen dies as it thaws). Waits until it is empty; whether it is."""
        try:
            if self.version == 2 and os.path.exists(os.path.join(self.dirs[""], "cgroup.kill")):
                _write(os.path.join(self.dirs[""], "cgroup.kill"), "1")
            else:
                try:
                    frozen = self.freeze()
                    deadline = time.monotonic() + wait_s
                    while True:
                        members = self.pids()
                        for pid in members:
                            try:
                                os.kill(pid, signal.SIGKILL)
                            except (ProcessLookupError, PermissionError):
                                pass
                        # Without a freeze, sweep until a sweep finds nobody (no member can leave).
                        if frozen or not members or time.monotonic() > deadline:
                            break
                        time.sleep(0.001)
                finally:  # even when interrupted (a signal turned into an exit): no cgroup stays frozen
                    self.thaw_all()
        except OSError:
            pass  # gone already
        return _until(lambda: not self.populated(), wait_s)

    # -- accounting --------------------------------------------------------------------
    def cpu_ns(self) -> int | None:
        """CPU time its members used so far, in nanoseconds, members that are gone
        included (None without CPU accounting)."""
        try:
            if self.version == 2:
                for line in _read(os.path.join(self.dirs[""], "cpu.stat")).splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) * 1000
                return None
            if "cpuacct" not in self.dirs:
                return None
            return int(_read(os.path.join(self.dirs["cpuacct"], "cpuacct.usage")))
        except (OSError, ValueError):
            return None

    def memory_peak(self) -> int | None:
        """The most memory its members (with their shared-memory files) held at once so far, in
        bytes: v2's ``memory.peak`` (Linux 5.19 and later), v1's ``memory.max_usage_in_bytes``;
        None where neither can be read."""
        folder = self.dirs.get("" if self.version == 2 else "memory")
        if not folder:
            return None
        try:
            return int(_read(os.path.join(folder, "memory.peak" if self.version == 2 else
                                          "memory.max_usage_in_bytes")).split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def shmem_bytes(self) -> int | None:
        """The shared-memory (tmpfs) bytes charged to its members now, its cgroups below included:
        the pages of every shared-memory file a member wrote first, whatever the file's name,
        folder or link count, one unlinked but still open included. ``memory.stat``'s ``shmem``
        (v2, hierarchical), ``total_shmem`` (v1); None where it cannot be read."""
        folder = self.dirs.get("" if self.version == 2 else "memory")
        if not folder:
            return None
        try:
            text = _read(os.path.join(folder, "memory.stat"))
        except OSError:
            return None
        key = "shmem" if self.version == 2 else "total_shmem"
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
                return int(parts[1])
        return None

    def limit_hit(self) -> str | None:
        """Which limit the kernel enforced on its members, in words, with what they used, or None:
        the memory limit's OOM kill first (it ends processes), then the process cap (a fork refused)."""
        memory_mib = self.limits.get("memory_bytes", 0) >> 20
        if memory_mib and _counter(self._events("memory"), "oom_kill"):
            peak = self.memory_peak()
            used = f"its peak use was {peak >> 20} MiB of {memory_mib} MiB" if peak else f"{memory_mib} MiB"
            return f"killed by the memory limit ({used}, shared-memory files included)"
        pids = self.limits.get("pids")
        if pids and _counter(self._events("pids"), "max"):
            return f"its processes reached the process cap ({pids} processes and threads)"
        return None

    def _events(self, controller: str) -> str:
        """The controller's event counters, summed over this cgroup and every one below it
        (v1 counts an OOM kill in the cgroup of the process killed, a leaf; v2 counts
        hierarchically, so only the top is read)."""
        if controller == "memory":
            name = "memory.events" if self.version == 2 else "memory.oom_control"
        else:
            name = "pids.events"
        folder = self.dirs.get("" if self.version == 2 else controller)
        if not folder:
            return ""
        totals: dict = {}
        for path in [folder] if self.version == 2 else self._folders(folder):
            try:
                text = _read(os.path.join(path, name))
            except OSError:
                continue
            for line in text.splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1].isdigit():
                    totals[parts[0]] = totals.get(parts[0], 0) + int(parts[1])
        return "\n".join(f"{key} {value}" for key, value in totals.items())

    def remove(self) -> bool:
        """Remove it and every cgroup below it (they must be empty); whether all went."""
        done = True
        for folder in self.dirs.values():
            for path in self._folders(folder):
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError:
                    done = False
        return done


def join_cgroup(procs_files, pid: int = 0) -> None:
    """Write ``pid`` (0: the writing process) into each ``cgroup.procs`` file: a zygote's child
    joins its job's cgroup this way before it runs anything else."""
    for path in procs_files:
        _write(path, str(pid))


def _counter(text: str, name: str) -> int:
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            try:
                return int(parts[1])
            except ValueError:
                return 0
    return 0


def _until(done, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if done():
                return True
        except OSError:
            return True  # removed meanwhile: nothing left in it
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _write_if_exists(path: str, text: str) -> None:
    if os.path.exists(path):
        try:
            _write(path, text)
        except OSError:
            pass

