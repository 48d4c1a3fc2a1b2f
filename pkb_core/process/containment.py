"""What holds a candidate group (or a builder) from outside: its cgroup, its network, its log cap.

The launcher makes a :class:`Containment` for each candidate group before the
group's processes start (:func:`contain`), and hands it to the zygotes with the
fork request (:class:`pkb_core.contracts.fork.ForkRequest`): each rank joins its
own leaf of the group's cgroup (:mod:`pkb_core.process.cgroups`), enters the
group's network namespace (:mod:`pkb_core.process.netns`, one-node launches) and
writes its output through a capped pump (:mod:`pkb_core.process.log_cap`). The
launcher then freezes, thaws, measures and ends the group through it
(:class:`pkb_core.launch.ranks.RankGroup`), and a verdict names the limit a job
hit (:meth:`Containment.limit_hit`). A builder gets a cgroup of its own the same
way (:mod:`pkb_core.compile.phase`). What could not be made is listed in
:attr:`Containment.gaps`, which every record of the group's job carries under
``lockdown_gaps``; the group then runs as before (sessions, ``/proc``).
"""
from __future__ import annotations

import os

from pkb_core.process.cgroup_tree import CgroupTree, process_tree
from pkb_core.process.cgroups import Cgroup

_WATCHED: list = []


def own_tree() -> tuple[CgroupTree | None, str | None]:
    """This process's cgroup tree; the first time, handed to its warden (ended and removed even if
    this process is killed) and removed at its exit."""
    tree, why = process_tree()
    if tree is not None and not _WATCHED:
        import atexit

        from pkb_core.process.warden import warden

        _WATCHED.append(tree)
        warden().watch(cgroup=tree.root.dirs)

        def remove():
            if tree.remove():
                warden().forget(cgroup=tree.root.dirs)

        atexit.register(remove)
    return tree, why


class Containment:
    """One candidate group's (or builder's) cgroup, network namespace and log cap.

    :param cgroup: the group's cgroup (None: none could be made).
    :param leaves: one cgroup per local rank inside it (a builder: none, it joins ``cgroup``).
    :param netns_fd: the group's network namespace (None: the machine's network).
    """

    def __init__(self, *, cgroup: Cgroup | None = None, leaves=(), netns_fd: int | None = None,
                 log_cap_per_rank: int | None = None, gaps=(), output: Cgroup | None = None, own_ipc: bool = False):
        self.cgroup = cgroup
        self.leaves = list(leaves)
        #: The leaf the ranks' output pumps join (their copying is no rank's CPU use after an answer).
        self.output = output
        self.netns_fd = netns_fd
        #: Whether each of its processes makes an IPC namespace of its own (:mod:`pkb_core.process.ipcns`).
        self.own_ipc = own_ipc
        self.log_cap_per_rank = log_cap_per_rank
        self.gaps = list(gaps)

    def procs_files(self, local: int | None = None) -> tuple[str, ...]:
        """The ``cgroup.procs`` files rank ``local`` (None: a builder) joins, or none."""
        if self.cgroup is None:
            return ()
        target = self.leaves[local] if local is not None and self.leaves else self.cgroup
        return tuple(target.procs_files())

    def pump_procs_files(self) -> tuple[str, ...]:
        """The ``cgroup.procs`` files a rank's output pump joins, or none."""
        return tuple(self.output.procs_files()) if self.output is not None else ()

    @property
    def can_freeze(self) -> bool:
        return self.cgroup is not None and self.cgroup.has("freeze")

    def cpu_ns(self) -> list[int | None]:
        """Each rank's CPU use so far (its leaf's accounting, the processes that ended included)."""
        return [leaf.cpu_ns() for leaf in self.leaves]

    def limit_hit(self) -> str | None:
        return self.cgroup.limit_hit() if self.cgroup is not None else None

    def verify(self, pids) -> list[str]:
        """Gaps for the local ranks (``pids``, in local-rank order) that are not where they should be:
        a rank that failed to join its cgroup or to enter the group's network."""
        from pkb_core.process.ipcns import shares_ipc_with_this_process
        from pkb_core.process.netns import same_namespace

        gaps = []
        for local, pid in enumerate(pids):
            if pid is None:
                continue
            if self.leaves and pid not in self.leaves[local].pids():
                gaps.append(f"rank {local} is not in its job's cgroup: its processes are found through /proc")
            if self.netns_fd is not None and not same_namespace(pid, self.netns_fd):
                gaps.append(f"rank {local} is not in its job's network namespace: local services are reachable")
            if self.own_ipc and shares_ipc_with_this_process(pid):
                gaps.append(f"rank {local} shares the machine's IPC namespace: its System V objects and message "
                            "queues outlive it, and other jobs reach them")
        self.gaps += gaps
        return gaps

    def end(self) -> bool:
        """End every process in the cgroup at once; whether it is empty."""
        return self.cgroup.kill() if self.cgroup is not None else True

    def close(self) -> None:
        """Release what was made: the namespace's descriptor, the (emptied) cgroup."""
        if self.netns_fd is not None:
            os.close(self.netns_fd)
            self.netns_fd = None
        if self.cgroup is not None:
            self.cgroup.kill(wait_s=2.0)
            self.cgroup.remove()
            self.cgroup = None


def contain(name: str, *, memory_bytes: int | None, max_processes: int | None, ranks: int | None = None,
            network: bool = False, make=None, log_cap: int | None = None,
            device: str = "cpu") -> tuple[Containment, object]:
    """A containment for a new group of processes, and ``make()`` called inside its network
    namespace (the store keeper's listening socket: the group's ranks must reach it from
    inside), or outside where there is none.

    :param ranks: the group's local ranks, each with a leaf cgroup of its own (None: one
        process, a builder, which joins the group's cgroup itself).
    :param network: whether to give the group a network namespace of its own (a one-node
        launch; across nodes the ranks reach their peers over the machine's network).
    :param log_cap: bytes of output the group's log takes (split among its ranks).
    :param device: the group's (``cpu``, ``cuda``): whether its processes get IPC namespaces of their
        own (:func:`pkb_core.process.ipcns.wants_own_ipc`)."""
    gaps = []
    cgroup, leaves = None, []
    tree, why = own_tree()
    if tree is None:
        gaps.append(why)
    else:
        try:
            names = ([f"rank{local}" for local in range(ranks)] + ["output"]) if ranks else []
            cgroup, leaves, more = tree.group(name, memory_bytes=memory_bytes, pids=max_processes, leaves=names)
            gaps += more
        except OSError as exc:
            gaps.append(f"cgroups per job ({exc}): a job's processes are found through /proc")
    netns_fd, made = None, None
    if network:
        from pkb_core.process.netns import make_inside

        try:
            netns_fd, made = make_inside(make)
        except OSError as exc:
            gaps.append(f"a network of its own ({exc.strerror or exc}): local services are reachable")
    if netns_fd is None and make is not None:
        made = make()
    per_rank = max(1, log_cap // (ranks or 1)) if log_cap else None
    output = leaves.pop() if leaves else None
    from pkb_core.process.ipcns import wants_own_ipc

    wanted = wants_own_ipc(device)
    own_ipc = wanted and os.geteuid() == 0
    if not wanted:
        gaps.append(f"an IPC namespace of its own (not on {device} unless PKB_IPC_NAMESPACES=on): System V "
                    "objects and message queues it makes outlive it, and other jobs reach them")
    return Containment(cgroup=cgroup, leaves=leaves, netns_fd=netns_fd, log_cap_per_rank=per_rank, gaps=gaps,
                       output=output, own_ipc=own_ipc), made
