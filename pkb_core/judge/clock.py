"""A judge rank's handle on its timekeepers (:mod:`pkb_core.judge.timekeeper`).

The judge rank starts a timekeeper (its child: it dies with the rank) for each engine it
uses, asks it for each side's gate region and for the private staging and snapshot memory,
writes each round's input sets into the staging and reads the snapshots back to check them.
The staging and the snapshots are mapped here and in the timekeeper only (a CUDA IPC handle
that never leaves the judge, or files in the judge's own folder), never in a side's process.

Which engine times a batch (``PKB_TIMEKEEPER``, :data:`pkb_core.harness.gates.ENGINE_ENV`):
on CPU always the host engine; on GPU ``host``, ``device``, or ``auto`` (the default): the
host engine for input sets of up to :data:`~pkb_core.harness.gates.HOST_ENGINE_MAX_BYTES`,
the device engine above (docs/timing.md, "The two engines").
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile

import torch

from pkb_core.harness.copies import copies_choice
from pkb_core.harness.call_events import call_events_choice
from pkb_core.harness.gates import HEADER, HOST_ENGINE_MAX_BYTES, NO_ROOM, CudaMemory, HostRegion, engine_choice, \
    import_handle, slot_layout
from pkb_core.judge.region_pool import RegionPool, pool_size
from pkb_core.judge.timekeeper import NODE_ENV
from pkb_core.machine import numa, placement
from pkb_core.machine.device import TIMEKEEPER_GPU_ENVIRONMENT

#: Bytes between consecutive sets in the staging (and snapshots in the snapshot memory).
ALIGN = 4096


def stride(nbytes: int) -> int:
    return -(-max(1, nbytes) // ALIGN) * ALIGN


class TimekeeperFailed(RuntimeError):
    """The timekeeper answered an error or went away: the judge's fault, unless the judge finds
    it was a side's (:meth:`pkb_core.judge.rank.JudgeRank.on_open`, ``on_arm``). ``status``: its
    exit status where it exited (negative: the signal that ended it); ``errno``: the error number
    of the ``OSError`` it answered, where it answered one."""

    def __init__(self, message: str, status: int | None = None, errno: int | None = None):
        super().__init__(message)
        self.status = status
        self.errno = errno


class NoRoom(TimekeeperFailed):
    """The judge could not make a file of shared memory (a gate region, a board, the staging) for
    want of room on its filesystem (:data:`pkb_core.harness.gates.NO_ROOM`). ``what`` it was
    making, in which ``folder``, of how many bytes (``needed``); the filesystem's free and whole
    bytes as the judge found them just after. Whose doing it is, the launcher decides by who
    holds the room (:func:`pkb_core.conduct.window_rounds.arm_failed`)."""

    def __init__(self, failed: TimekeeperFailed, what: str, folder: str, needed: int):
        super().__init__(str(failed), failed.status, failed.errno)
        self.what, self.folder, self.needed = what, folder, needed
        try:
            found = os.statvfs(folder)
            self.free, self.whole = found.f_bavail * found.f_frsize, found.f_blocks * found.f_frsize
        except OSError:
            self.free = self.whole = None
        #: The filesystem that is full, by its mount point (``/dev/shm``).
        self.filesystem = os.path.abspath(folder)
        while not os.path.ismount(self.filesystem) and os.path.dirname(self.filesystem) != self.filesystem:
            self.filesystem = os.path.dirname(self.filesystem)


def _no_room(failed: TimekeeperFailed) -> bool:
    return failed.errno in NO_ROOM


class JudgeClock:
    """The timekeepers of one judge rank (see the module docstring): the engine a batch's
    input sets call for, started on first use.

    :param local_rank: this rank's place among the judge ranks of its node, and
        ``local_ranks`` their number: the host engine's timekeepers meet on a board
        (:class:`pkb_core.harness.board.Board`) before each window.
    """

    def __init__(self, device, folder: str | None = None, rank: int = 0, *, local_rank: int = 0,
                 local_ranks: int = 1):
        self.device = device
        self.folder = folder or tempfile.mkdtemp(prefix="pkb-clock-")
        self.rank, self.local_rank, self.local_ranks = rank, local_rank, local_ranks
        self.choice = engine_choice() if device.type == "cuda" else "host"
        self.keepers: dict = {}
        self.engine_of: dict = {}
        #: The boards this rank was told to meet on since it last left them: one file per job and
        #: side, which outlives the job unless it is removed (a service's lane runs job after job).
        self.boards: set = set()

    def engine_for(self, set_bytes: int) -> str:
        if self.choice != "auto":
            return self.choice
        return "host" if set_bytes <= HOST_ENGINE_MAX_BYTES else "device"

    def arm(self, side: str, set_bytes: int) -> "Timekeeper":
        """The timekeeper that times ``side``'s next batch, of sets of ``set_bytes``. A job's
        sides all arm sets of one size, so a new engine means a new job: the other engine's
        timekeeper and its memory go (a sweep's small sizes would otherwise keep the host
        engine's staging, hundreds of MiB of shared memory, through its large ones)."""
        engine = self.engine_for(set_bytes)
        if engine not in self.keepers:
            for other in list(self.keepers):
                self.keepers.pop(other).close()
            self.engine_of.clear()
            self.keepers[engine] = Timekeeper(self.device, self.folder, self.rank, engine)
        self.engine_of[side] = engine
        return self.keepers[engine]

    def of(self, side: str) -> "Timekeeper":
        """The timekeeper ``side`` was last armed on."""
        return self.keepers[self.engine_of[side]]

    def board(self, token: str, side: str) -> dict:
        """What a host engine's ``open`` needs to meet the node's other judge ranks (nothing
        for one rank)."""
        if self.local_ranks < 2 or not token:
            return {}
        from pkb_core.harness.board import board_path

        path = board_path(self.folder, token, side)
        self.boards.add(path)
        return {"board": path, "ranks": self.local_ranks, "index": self.local_rank}

    def make_board(self, token: str, side: str) -> None:
        """Make ``side``'s board of this job (``token``) with its memory now, as the batch is armed
        (nothing for one rank). :class:`NoRoom` where its filesystem has no room for it."""
        meeting = self.board(token, side)
        if not meeting:
            return
        from pkb_core.harness.board import board_bytes, make_board_file

        try:
            make_board_file(meeting["board"], meeting["ranks"])
        except OSError as exc:
            if exc.errno not in NO_ROOM:
                raise
            raise NoRoom(TimekeeperFailed(str(exc), errno=exc.errno), f"the {side}'s board", self.folder,
                         board_bytes(meeting["ranks"])) from None

    def leave_boards(self) -> None:
        """Remove the boards of the jobs before (each rank of the node removes those it met on; a
        board already gone is no matter). Called once no batch of theirs can run: a new job."""
        _unlink(self.boards)
        self.boards.clear()

    def close(self) -> None:
        for keeper in self.keepers.values():
            keeper.close()
        self.leave_boards()


class Timekeeper:
    """One timekeeper process and the memory it shares with this judge rank."""

    def __init__(self, device, folder: str, rank: int, engine: str):
        self.device = device
        self.rank = rank  # in every file's name: a launch's ranks may share a folder
        self.folder = folder
        #: The host engine (CPU, or ``host`` on GPU: files in shared memory, no CUDA context of
        #: its own) or the device engine (a CUDA context, device memory, events).
        self.engine = engine
        self.host_engine = engine == "host"
        #: How every side's harness copies, told with each region (:mod:`pkb_core.harness.copies`).
        self.copies = copies_choice(on_gpu=device.type == "cuda")
        #: Whether the groups' sides bracket each windowed call with events of their own, told
        #: with each region (:mod:`pkb_core.harness.call_events`).
        self.call_events = call_events_choice() == "on"
        ordinal = "cpu" if device.type != "cuda" else "host" if self.host_engine else \
            str(torch.cuda.current_device() if device.index is None else device.index)
        bus_id = numa.gpu_bus_id(device)
        node = numa.pci_node(bus_id) if bus_id else None
        # CPU: the judge rank's core is its own; the timekeeper, which wakes every side, runs on all.
        env = dict(os.environ, PKB_TIMEKEEPER_DEVICE=ordinal, PYTHONUNBUFFERED="1",
                   **{NODE_ENV: "" if node is None else str(node)}, **TIMEKEEPER_GPU_ENVIRONMENT,
                   **placement.unplaced_environment())
        self.proc = subprocess.Popen([sys.executable, "-m", "pkb_core.judge.timekeeper"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, text=True)
        self.staging = self.snap = None
        self._host: list = []  # the host engine's staging and snapshot files, mapped here
        self.mapped: list = []  # device pointers of the staging and snapshots mapped here (GPU)
        self.capacity = (0, 0)
        #: Per side: its pool of gate regions (:mod:`pkb_core.judge.region_pool`).
        self.pools: dict = {}
        self.pool_ident = 0
        self.generation = 0
        self.pending = None

    # -- the conversation --------------------------------------------------------
    def send(self, op: str, **fields) -> None:
        try:
            self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise TimekeeperFailed(f"the timekeeper is gone ({exc})") from None
        self.pending = op

    def receive(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            try:
                status = self.proc.wait(timeout=5)  # its output ends a moment before it is reaped
            except subprocess.TimeoutExpired:
                status = None
            raise TimekeeperFailed(f"the timekeeper exited (status {status})", status)
        answer = json.loads(line)
        if answer.pop("op", None) != self.pending:
            raise TimekeeperFailed(f"the timekeeper answered out of turn: {line[:200]}")
        self.pending = None
        if "error" in answer:
            raise TimekeeperFailed(f"the timekeeper failed: {answer['error']}", errno=answer.get("errno"))
        return answer

    def ask(self, op: str, **fields) -> dict:
        self.send(op, **fields)
        return self.receive()

    # -- memory ---------------------------------------------------------------------
    def region(self, side: str, in_bytes: int, out_bytes: int, folder: str | None) -> dict:
        """The gate region ``side``'s next batch runs on, with slots of at least these sizes,
        as the side attaches it (:class:`pkb_core.harness.windows.WindowSide`): one of the
        side's pool (:mod:`pkb_core.judge.region_pool`), made on first use. ``key`` names it
        to the timekeeper."""
        folder = folder or self.folder
        pool = self.pools.get(side)
        if pool is None or not pool.fits(in_bytes, out_bytes, folder):  # a new job's candidate has a folder of its own
            if pool is not None:
                self._release(pool)
            in_bytes, out_bytes = max(in_bytes, 64), max(out_bytes, 64)
            self.pool_ident += 1
            pool = RegionPool(ident=self.pool_ident, in_bytes=in_bytes, out_bytes=out_bytes, folder=folder,
                              size=pool_size(slot_layout(in_bytes, out_bytes)[2], self.host_engine))
            self.pools[side] = pool
        index = pool.next_index()
        if index not in pool.regions:
            self.generation += 1
            key = f"{side}.{index}"
            # A name no side can foresee: the folder may be the side's own, where a file or a
            # folder planted at the next name would make the timekeeper's creation fail.
            path = os.path.join(folder, f"pkb-gates-r{self.rank}-{self.engine}-{side}-{self.generation}-"
                                        f"{secrets.token_hex(8)}")
            try:
                found = self.ask("region", side=key, in_bytes=pool.in_bytes, out_bytes=pool.out_bytes, path=path)
            except TimekeeperFailed as failed:
                if not _no_room(failed):
                    raise
                needed = slot_layout(pool.in_bytes, pool.out_bytes)[2] if self.host_engine else HEADER
                raise NoRoom(failed, f"the {side}'s gate region", folder, needed) from None
            pool.regions[index] = {**found, "in_bytes": pool.in_bytes, "out_bytes": pool.out_bytes,
                                   "generation": self.generation, "folder": folder, "pool": pool.ident, "key": key,
                                   "copies": self.copies, "call_events": self.call_events}
        return pool.regions[index]

    def _release(self, pool: RegionPool) -> None:
        """Let a pool that a new one replaces go (host engine): the timekeeper's mappings of its
        regions and their files. A side that still maps one keeps its pages until it unmaps; a
        device engine's pool is one region, which the new pool's first replaces by its key."""
        if not self.host_engine or not pool.regions:
            return
        self.ask("forget", sides=[region["key"] for region in pool.regions.values()])
        _unlink([region["path"] for region in pool.regions.values()])

    def memory(self, k: int, set_bytes: int, snap_bytes: int) -> None:
        """Staging for ``k`` sets of ``set_bytes`` and snapshots of ``snap_bytes``, mapped here."""
        need = (k * stride(set_bytes), k * stride(snap_bytes))
        if need[0] <= self.capacity[0] and need[1] <= self.capacity[1]:
            return
        need = (max(need[0], self.capacity[0]), max(need[1], self.capacity[1]))
        self.staging = self.snap = None
        self._unmap()  # before the timekeeper frees them: its next allocation may take their addresses
        paths = self._memory_paths()
        self.capacity = (0, 0)  # the old memory is gone in the timekeeper too, whether or not the new is made
        try:
            found = self.ask("staging", staging_bytes=need[0], snap_bytes=need[1], staging_path=paths[0],
                             snap_path=paths[1])
        except TimekeeperFailed as failed:
            if not _no_room(failed) or not self.host_engine:
                raise
            raise NoRoom(failed, "the judge's staging and snapshots", self.folder, need[0] + need[1]) from None
        if not self.host_engine:
            self.mapped = [import_handle(found["staging"]), import_handle(found["snap"])]
            self.staging = torch.as_tensor(CudaMemory(self.mapped[0], need[0]), device=self.device)
            self.snap = torch.as_tensor(CudaMemory(self.mapped[1], need[1]), device=self.device)
        else:
            self._host = [HostRegion(found["staging"], need[0], create=False), HostRegion(found["snap"], need[1],
                                                                                          create=False)]
            self.staging, self.snap = (region.tensor(0, n) for region, n in zip(self._host, need))
        self.capacity = need

    def _memory_paths(self) -> list[str]:
        """The files of the staging and the snapshots (the host engine's; the device engine's are
        device memory, and these paths only name them)."""
        return [os.path.join(self.folder, f"pkb-clock-r{self.rank}-{self.engine}-{name}")
                for name in ("staging", "snap")]

    def _unmap(self) -> None:
        """Close this process's mappings of the old staging and snapshots (CUDA refuses to map
        an allocation at an address this process still has mapped: ``ALREADY_MAPPED``)."""
        if self.mapped:
            from pkb_core.harness.gates import close_handle

            torch.cuda.synchronize(self.device)
            for ptr in self.mapped:
                close_handle(ptr)
        self.mapped = []

    def close(self) -> None:
        """End the timekeeper and remove the files of its memory (the host engine's staging,
        snapshots and gate regions live in shared-memory files until they are unlinked)."""
        self.staging = self.snap = None
        self._host = []
        self._unmap()
        try:
            self.send("exit")
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            self.proc.kill()
        if self.host_engine:
            _unlink([*self._memory_paths(),
                     *(region["path"] for pool in self.pools.values() for region in pool.regions.values())])


def _unlink(paths) -> None:
    """Remove the host engine's files (gone already where their folder went with its job)."""
    for path in paths:
        try:
            os.unlink(path)
        except (OSError, TypeError):
            pass  # never made, or its folder is gone already
