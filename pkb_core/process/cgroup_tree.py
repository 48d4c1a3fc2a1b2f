"""Where pkb's cgroups go: this process's own tree, and the stale trees of processes gone.

Every cgroup pkb makes (:class:`pkb_core.process.cgroups.Cgroup`: one per candidate
group and per builder) lives in a tree of its own per pkb process
(:class:`CgroupTree`, ``pkb-<pid>-<token>``), made on first use by
:func:`process_tree` beneath the cgroup the process runs in. The trees of pkb
processes that died without removing theirs are ended and removed on the way
(:func:`sweep_stale_trees`).

Version 2 is used where the machine delegates its memory and pids controllers to
the cgroup pkb runs in (or, where that cgroup holds other processes and so cannot
pass them on, to its nearest ancestor that does: pkb's tree then lives there);
else the version 1 controllers ``freezer``, ``cpuacct``, ``memory`` and ``pids``
(a hybrid machine's, or a v1 one's); else version 2 without limits. Where no cgroup can be made (not root, nothing mounted, a read-only
``/sys/fs/cgroup``), :func:`process_tree` says why, and the callers fall back to
sessions (:mod:`pkb_core.process.sessions`) and record the gap.
"""
from __future__ import annotations

import os
import secrets

from pkb_core.process.cgroups import V1_CONTROLLERS, V2_LIMITS, Cgroup, _read, _write

#: Prefix of the trees pkb makes (``pkb-<pid>-<token>``).
TREE_PREFIX = "pkb-"


class CgroupTree:
    """This process's own cgroup tree (``<the cgroup it runs in, or its nearest ancestor that
    delegates memory and pids>/pkb-<pid>-<token>``), where
    every cgroup it makes lives. Made once per process by :func:`process_tree`."""

    def __init__(self, root: Cgroup):
        self.root = root
        self._count = 0

    @property
    def version(self) -> int:
        return self.root.version

    def group(self, name: str, *, memory_bytes: int | None = None, pids: int | None = None,
              leaves=()) -> tuple[Cgroup, list, list[str]]:
        """A new cgroup for a group of processes, with its limits, and a leaf cgroup inside it
        for each of ``leaves`` (a candidate group's ranks; none: the processes join the group
        itself); ``(group, leaves, gaps)``. Raises OSError if it cannot be made."""
        self._count += 1
        group = self.root.child(f"{name}-{self._count}")
        try:
            gaps = group.set_limits(memory_bytes=memory_bytes, pids=pids)
            made = [group.child(leaf) for leaf in leaves]
        except OSError:
            group.remove()
            raise
        if not group.has("freeze"):
            gaps.append("freezing and ending a job as a whole (no freezer cgroup controller)")
        if not group.has("cpu"):
            gaps.append("the job's CPU use from the kernel's accounting (no cpuacct cgroup controller)")
        return group, made, gaps

    def remove(self) -> bool:
        """End whatever is left in the tree and remove it (at this process's end); whether it went."""
        self.root.kill(wait_s=2.0)
        return self.root.remove()


_TREE: list = []  # [CgroupTree | None, why not]


def process_tree() -> tuple[CgroupTree | None, str | None]:
    """This process's cgroup tree, made on first use (and the stale trees of pkb processes
    that died without removing theirs, ended and removed on the way); or None and why
    there is none (the gap records list)."""
    if not _TREE:
        _TREE.extend(_make_tree())
    return _TREE[0], _TREE[1]


def _make_tree() -> tuple[CgroupTree | None, str | None]:
    if os.geteuid() != 0:
        return None, "cgroups per job (pkb is not root): a job's processes are found through /proc"
    own = own_cgroups()
    choice = _choose(own)
    if choice is None:
        return None, ("cgroups per job (no usable cgroup hierarchy under /sys/fs/cgroup): a job's processes "
                      "are found through /proc")
    version, dirs = choice
    parent = Cgroup(version, dirs)
    sweep_stale_trees(parent)
    try:
        root = parent.child(f"{TREE_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
        root.enable_limits()
    except OSError as exc:
        return None, f"cgroups per job ({exc.strerror} under {parent.path}): a job's processes are found through /proc"
    return CgroupTree(root), None


def own_cgroups() -> dict:
    """``{"v2": dir}`` and ``{controller: dir}`` for each v1 controller pkb uses: the
    directories of the cgroups this process is in, where their hierarchies are mounted."""
    mounts = {}
    try:
        with open("/proc/self/mountinfo") as info:
            for line in info:
                fields = line.split()
                sep = fields.index("-")
                fstype, options = fields[sep + 1], fields[sep + 3].split(",")
                root, point = fields[3], fields[4]
                if fstype == "cgroup2":
                    mounts.setdefault("v2", (root, point))
                elif fstype == "cgroup":
                    for controller in V1_CONTROLLERS:
                        if controller in options:
                            mounts.setdefault(controller, (root, point))
        with open("/proc/self/cgroup") as cgroups:
            memberships = [line.rstrip("\n").split(":", 2) for line in cgroups]
    except (OSError, ValueError):
        return {}
    found = {}
    for _id, controllers, path in memberships:
        names = ["v2"] if controllers == "" else controllers.split(",")
        for name in names:
            if name in mounts:
                root, point = mounts[name]
                relative = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
                folder = os.path.normpath(os.path.join(point, relative))
                if os.path.isdir(folder):
                    found[name] = folder
    return found


def _choose(own: dict) -> tuple[int, dict] | None:
    """Version 2 where its memory and pids controllers reach pkb's cgroup, else the v1
    controllers there are, else version 2 without limits, else None."""
    v2 = own.get("v2")
    if v2 and os.access(v2, os.W_OK):
        if _delegates(v2) or _delegate(v2):
            return 2, {"": v2}
        nearest = _delegating_ancestor(v2)
        if nearest is not None:
            return 2, {"": nearest}
    v1 = {c: own[c] for c in V1_CONTROLLERS if c in own and os.access(own[c], os.W_OK)}
    if v1:
        return 1, v1
    if v2 and os.access(v2, os.W_OK) and os.path.exists(os.path.join(v2, "cgroup.procs")):
        return 2, {"": v2}  # its core only: freeze, kill, CPU (the root cgroup has no cgroup.freeze itself)
    return None


def _delegates(folder: str) -> bool:
    """Whether the children of ``folder`` get the memory and pids controllers."""
    delegated = _read_or(os.path.join(folder, "cgroup.subtree_control")).split()
    return all(c in delegated for c in V2_LIMITS)


def _delegating_ancestor(v2: str) -> str | None:
    """The nearest writable ancestor of ``v2`` whose children get the memory and pids
    controllers, or None.

    A cgroup that holds processes cannot pass controllers to its children (v2's rule of no
    internal processes), so where pkb shares its cgroup with others (a container's command
    shell, a service manager's unit without ``Delegate=yes``) it cannot limit a job beneath
    it; its tree then goes beside it, under that ancestor, which still holds every limit the
    ancestors set."""
    folder = os.path.dirname(v2)
    while os.path.exists(os.path.join(folder, "cgroup.procs")):
        if _delegates(folder) and os.access(folder, os.W_OK):
            return folder
        if os.path.ismount(folder):
            return None
        folder = os.path.dirname(folder)
    return None


def _delegate(v2: str) -> bool:
    """Try to enable the memory and pids controllers for the children of ``v2`` (possible
    where it holds no process itself, or it is the root)."""
    available = _read_or(os.path.join(v2, "cgroup.controllers")).split()
    if not all(c in available for c in V2_LIMITS):
        return False
    try:
        _write(os.path.join(v2, "cgroup.subtree_control"), " ".join(f"+{c}" for c in V2_LIMITS))
        return True
    except OSError:
        return False


def sweep_stale_trees(parent: Cgroup) -> None:
    """End and remove the trees (``pkb-<pid>-...``) of pkb processes that are gone."""
    try:
        entries = os.listdir(parent.path)
    except OSError:
        return
    for entry in entries:
        if not entry.startswith(TREE_PREFIX):
            continue
        try:
            owner = int(entry[len(TREE_PREFIX):].split("-", 1)[0])
        except ValueError:
            continue
        if owner == os.getpid() or _alive(owner):
            continue
        stale = Cgroup(parent.version, {c: os.path.join(folder, entry) for c, folder in parent.dirs.items()
                                        if os.path.isdir(os.path.join(folder, entry))})
        if stale.dirs:
            stale.kill(wait_s=2.0)
            stale.remove()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_or(path: str, default: str = "") -> str:
    try:
        return _read(path)
    except OSError:
        return default
