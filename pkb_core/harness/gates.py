"""A side's gate region: the judge-owned memory through which one timed call is handed over.

The judge's *timekeeper* (:mod:`pkb_core.judge.timekeeper`) owns one region per side it
times on a rank and exports it to that side (a CUDA IPC handle on GPU, a shared-memory
file in the side's own folder on CPU). The side can read and write it but never free it.
It holds three words and two slots:

``queued`` the side's host writes ``E + 1 + w`` once everything call ``w`` does is queued behind
           its gate (GPU: on the side's stream; CPU: the side is waiting for ``go``). The
           timekeeper starts window ``w``'s clock only after it, so the side's host work
           (Python, launches, messages) is never inside a window. Always host memory (a device
           region's is in its *announce page*), never written by a stream operation, which
           would wait behind the gate in a context of one hardware queue
``go``     the timekeeper writes ``E + 1 + w`` once call ``w``'s inputs are in ``in_slot``
``done``   the side writes ``E + 1 + w`` once call ``w``'s outputs and arguments are in ``out_slot``
``used``   the side writes how many bytes of ``out_slot`` call ``w`` filled, before ``done``: the
           host engine snapshots only those (its own account, and only to its cost: what lies
           past it is not in the snapshot, so a call whose layout reaches further fails its check)
``released``, ``taken``, ``key``  a masked set's (:mod:`pkb_core.harness.mask`): the timekeeper
           writes ``released`` once set ``w``, masked, is in ``in_slot``; the side writes ``taken``
           once it has copied it out; the timekeeper writes the window's key (eleven int32 words)
           as the window opens, just before ``go``
``in_slot``   one call's input set, released by the timekeeper from its private staging
``out_slot``  what one call produced (its outputs and argument buffers, :func:`pack_into`)

``E`` is the round's epoch (it only grows, so no word is ever reset). The words are int32
and compared cyclically, as CUDA's stream wait operations compare them. On GPU the side's
waits and writes are stream memory operations queued on its own stream, front-end waits
that hold no SM (a spinning kernel would hold its context's time slice and starve the
timekeeper's); on CPU they are futexes on the mapped words (:mod:`pkb_core.harness.host_wake`):
the writer wakes its waiter at once (a side that spins sees a word sooner only by the wake-up).
"""
from __future__ import annotations

import ctypes
import errno
import mmap
import os
import stat
import struct
import threading
import time

from pkb_core.env_settings import setting_from_env
from pkb_core.harness import host_wake

#: Byte offsets of the words in a region's header, and the header's size (slots start after it).
GO, DONE, QUEUED, USED, KEY, RELEASED, TAKEN = 0, 64, 128, 192, 256, 320, 384
#: A side's words that abandoning a batch sets to its last mark (every call announced, taken, done).
ABANDONED = (QUEUED, TAKEN, DONE)
#: The key's int32 words (ChaCha20's key and nonce: :mod:`pkb_core.harness.keystream_kernel`).
KEY_WORDS = 11
HEADER = 4096
#: Polls of a host word before a poll sleeps (CPU engine: the machine's cores are the sides' too).
SPINS = 200
#: The same for a word that is woken (CPU), whose writer wakes the sleeper at once: a poll that
#: spins there only takes a core from the process that is to write it.
WOKEN_SPINS = 10
#: A wait on a word no process wakes (a GPU host engine's, whose ``done`` the side's GPU writes)
#: naps this long between polls.
POLL_SLEEP_S = 50e-6
#: While spinning, the deadline is read every this many polls.
CLOCK_EVERY = 4096
#: Which engine a GPU judge's timekeeper runs (``PKB_TIMEKEEPER``): ``device`` (a CUDA context of
#: its own: gate words and slots in its device memory, CUDA events) or ``host`` (no CUDA context:
#: the words and slots in a shared-memory file the side's GPU maps, the host's clock; the side's
#: context is then the only one with work on its GPU inside a window), or ``auto`` (the default:
#: by the size of a batch's sets, below). CPU judges use ``host``.
ENGINE_ENV = "PKB_TIMEKEEPER"
ENGINES = ("auto", "host", "device")


def engine_choice() -> str:
    """The engine ``PKB_TIMEKEEPER`` asks for (``auto`` unset); ValueError, one line, for any other value."""
    return setting_from_env(ENGINE_ENV, ENGINES, "auto", "the judge's timekeeper engine: docs/timing.md, "
                                                         "\"The two engines\"")

#: Whether the host engine's sets are released ahead of their windows, masked (``PKB_MASKED_SETS``,
#: :mod:`pkb_core.harness.mask`): ``auto`` (the default: a GPU side's sets of 1 MiB and more),
#: ``on`` (every host-engine batch's, CPU sides' too, whose unmasking then runs in Triton's
#: interpreter: how the tests run the masked path end to end without a GPU), ``off`` (none).
MASK_ENV = "PKB_MASKED_SETS"
MASK_CHOICES = ("auto", "on", "off")


def mask_choice() -> str:
    """The masking ``PKB_MASKED_SETS`` asks for (``auto`` unset); ValueError, one line, for any other value."""
    return setting_from_env(MASK_ENV, MASK_CHOICES, "auto", "masked sets: docs/timing.md, \"A set released "
                                                            "ahead of its window\"")

#: ``auto`` (the default on GPU): the host engine for input sets of up to this many bytes, the
#: device engine above (its windows pay a switch between contexts, ~300 us, which a large call
#: outweighs; the host engine's copies through host memory grow with the set instead).
HOST_ENGINE_MAX_BYTES = 16 << 20


_FENCE = threading.Lock()
_FENCE.acquire()


def store_fence() -> None:
    """Make this thread's earlier stores visible before its later ones, to other processors and to
    a GPU reading host memory: the timekeeper's set or key before its ``go``. x86 keeps stores in
    order; ARM does not, and Python has no fence of its own. A lock released (a store-release:
    every earlier store first) and taken again (an acquire: every later access after it) is one."""
    _FENCE.release()
    _FENCE.acquire()


def cyclic_gap(value: int, target: int) -> int:
    """How far the int32 word ``value`` is past ``target``, as the words compare (cyclically:
    negative while it has not reached it)."""
    return ((value - target + (1 << 31)) % (1 << 32)) - (1 << 31)


def behind(value: int, target: int) -> bool:
    """True while the int32 word ``value`` has not reached ``target`` (cyclic compare)."""
    return cyclic_gap(value, target) < 0


def slot_layout(in_bytes: int, out_bytes: int) -> tuple[int, int, int]:
    """``(in_at, out_at, total)`` of a region with slots of these sizes (64-byte aligned)."""
    in_at = HEADER
    out_at = in_at + -(-max(1, in_bytes) // 64) * 64
    return in_at, out_at, out_at + -(-max(1, out_bytes) // 64) * 64


class HostWord:
    """An int32 word of a mapped shared-memory file (an aligned 4-byte store is atomic).

    ``woken``: its writers wake its waiters (:mod:`pkb_core.harness.host_wake`), so a wait sleeps
    on it in the kernel once its polls are spent, where a word the device writes (which no
    process wakes for) is polled with naps between."""

    def __init__(self, buffer, at: int, woken: bool = False):
        self.cell = ctypes.c_int32.from_buffer(buffer, at)
        self.address = ctypes.addressof(self.cell)
        self.woken = woken and host_wake.available()

    def read(self) -> int:
        return self.cell.value

    def write(self, value: int) -> None:
        self.cell.value = cyclic_gap(value, 0)  # as an int32
        if self.woken:
            host_wake.wake(self.address)

    def wait(self, target: int, deadline: float, spins: int | None = None, stop=None) -> bool:
        """Poll until the word reaches ``target``, ``spins`` times (default :data:`WOKEN_SPINS` for
        a woken word, else :data:`SPINS`) before each poll sleeps (on the word itself where it is
        woken, else a nap); False at ``deadline`` (``time.monotonic``), or once ``stop()`` is true
        (read where the deadline is: between sleeps, and every :data:`CLOCK_EVERY` spins)."""
        if spins is None:
            spins = WOKEN_SPINS if self.woken else SPINS
        polls = 0
        while True:
            seen = self.read()
            if not behind(seen, target):
                return True
            polls += 1
            if polls > spins:
                now = time.monotonic()
                if now > deadline or (stop is not None and stop()):
                    return False
                longest = min(deadline - now, host_wake.LONGEST_SLEEP_S)
                if not (self.woken and host_wake.sleep_on(self.address, seen, longest)):
                    time.sleep(POLL_SLEEP_S)
            elif polls % CLOCK_EVERY == 0 and (time.monotonic() > deadline or (stop is not None and stop())):
                return False  # a long spin (a GPU host engine's) still keeps a short deadline


#: The errors of a file that cannot be given its pages: its filesystem (or a quota on it) is full.
NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


def _created(path: str, size: int, touch) -> mmap.mmap:
    """Make the shared-memory file ``path`` of ``size`` bytes, every page of it allocated, mapped
    and written once (``touch``), then hand it to its folder's owner (a side's user): its mapping.

    Allocated (``posix_fallocate``), not only sized: a file sized by ``ftruncate`` gets its pages
    as they are first touched, and on a full filesystem that touch is a SIGBUS, which killed the
    timekeeper (a side that filled its own folder, or ``/dev/shm``, made its job the judge's
    ``error``). A full filesystem is now an ``OSError`` (:data:`NO_ROOM`) and the file is gone. Handed
    over last: until then only this process can open it, so no side can shrink it under the
    touch either (docs/trust.md, "Window mode")."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    mapped = None
    try:
        os.posix_fallocate(fd, 0, size)
        mapped = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        touch(mapped)
        folder = os.stat(os.path.dirname(os.path.abspath(path)))
        if os.geteuid() == 0 and folder.st_uid != 0:
            os.fchown(fd, folder.st_uid, folder.st_gid)
    except BaseException:
        if mapped is not None:
            mapped.close()
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
    finally:
        os.close(fd)
    return mapped


class HostRegion:
    """A gate region in a shared-memory file (CPU). The timekeeper creates it in the side's
    folder, owned by the folder's owner (the side's user, as the judge's parcels are); the
    side maps it by path. ``woken``: its words wake their waiters (CPU sides, whose every word a
    process writes; on a GPU the side's device writes ``done``)."""

    def __init__(self, path: str, size: int, *, create: bool, woken: bool = False):
        self.path = path
        self.size = size
        if create:
            self.map = _created(path, size, self.touch)
        else:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
            try:
                if os.fstat(fd).st_size < size:
                    raise ValueError(f"the gate region {os.path.basename(path)} is smaller than {size} bytes")
                # Populated now: a process's first touch of each page (a side's first batch on this
                # region, one of its pool's) would otherwise fault it in inside a window.
                self.map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
            finally:
                os.close(fd)
        self.go, self.done, self.queued, self.released, self.taken = (
            HostWord(self.map, at, woken) for at in (GO, DONE, QUEUED, RELEASED, TAKEN))
        self.used = HostWord(self.map, USED)  # read after done, never waited for
        #: A masked set's key (the timekeeper writes it as the window opens).
        self.key = (ctypes.c_int32 * KEY_WORDS).from_buffer(self.map, KEY)

    def touch(self, mapped=None) -> None:
        """Write every page once, so this process's copies inside a window never fault a page in
        (a fault per 4 KiB page made a 2 MiB window 1.4 ms on 2xH200). A region made here
        (``create``) is touched as it is made."""
        mapped = self.map if mapped is None else mapped
        step = mmap.PAGESIZE
        for at in range(0, self.size, step):
            mapped[at] = 0

    def view(self, at: int, n: int):
        """Bytes ``at..at+n`` as a writable memoryview (the timekeeper's copies)."""
        return memoryview(self.map)[at:at + n]

    def tensor(self, at: int, n: int):
        """Bytes ``at..at+n`` as a ``uint8`` tensor (a side's slots)."""
        import torch

        return torch.frombuffer(self.map, dtype=torch.uint8, offset=at, count=n)

    def write_key(self, key: list) -> None:
        """Write a window's key (:data:`KEY_WORDS` signed int32), before its ``go``."""
        self.key[:] = key

    def close(self) -> None:
        for word in (self.go, self.done, self.queued, self.used, self.released, self.taken):
            word.cell = None
        self.key = None
        try:
            self.map.close()
        except BufferError:
            pass  # a tensor view still holds it: freed with the process


class CudaMemory:
    """Device memory as a ``uint8`` tensor without copying (``__cuda_array_interface__``)."""

    def __init__(self, ptr: int, n: int):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def driver():
    """CUDA's driver API (cuda-python's ``cuda.bindings.driver``), or ImportError saying what is missing."""
    try:
        from cuda.bindings import driver as cuda_driver
    except ImportError as exc:  # pragma: no cover - GPU machines only
        raise ImportError("the judge's device clock needs cuda-python (pip install cuda-bindings)") from exc
    return cuda_driver


def checked(result):
    """The value of a driver call's ``(CUresult, value...)`` tuple; raises on an error."""
    cu = driver()
    err = result[0] if isinstance(result, tuple) else result
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver call failed: {err}")
    if isinstance(result, tuple) and len(result) == 2:
        return result[1]
    return result[1:] if isinstance(result, tuple) else None


def stream_wait(stream_handle: int, ptr: int, value: int) -> None:
    """Queue on ``stream_handle`` a wait until the int32 at ``ptr`` reaches ``value`` (cyclic >=)."""
    cu = driver()
    checked(cu.cuStreamWaitValue32(cu.CUstream(stream_handle), cu.CUdeviceptr(ptr), value & 0xFFFFFFFF,
                                   cu.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ))


def stream_write(stream_handle: int, ptr: int, value: int) -> None:
    """Queue on ``stream_handle`` a write of ``value`` into the int32 at ``ptr``."""
    cu = driver()
    checked(cu.cuStreamWriteValue32(cu.CUstream(stream_handle), cu.CUdeviceptr(ptr), value & 0xFFFFFFFF, 0))


def export_handle(ptr: int) -> str:
    """A CUDA IPC handle of the allocation at ``ptr``, as hex (it travels in a command)."""
    cu = driver()
    handle = checked(cu.cuIpcGetMemHandle(cu.CUdeviceptr(ptr)))
    return ctypes.string_at(handle.getPtr(), 64).hex()


def import_handle(handle: str) -> int:
    """Map another process's allocation from its hex IPC handle; its device pointer."""
    cu = driver()
    raw = ctypes.create_string_buffer(bytes.fromhex(handle), 64)
    ptr = checked(cu.cuIpcOpenMemHandle(cu.CUipcMemHandle(_ptr=ctypes.addressof(raw)),
                                        cu.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
    return int(ptr)


def map_host(ptr: int, nbytes: int) -> int:
    """Pin this process's host memory at ``ptr`` and map it into the current device; its
    device address (stream memory operations and kernels reach it over the bus)."""
    cu = driver()
    flags = getattr(cu, "CU_MEMHOSTREGISTER_DEVICEMAP", 2) | getattr(cu, "CU_MEMHOSTREGISTER_PORTABLE", 1)
    checked(cu.cuMemHostRegister(ptr, nbytes, flags))
    return int(checked(cu.cuMemHostGetDevicePointer(ptr, 0)))


def unmap_host(ptr: int) -> None:
    """Undo :func:`map_host`."""
    cu = driver()
    checked(cu.cuMemHostUnregister(ptr))


def close_handle(ptr: int) -> None:
    """Unmap memory mapped by :func:`import_handle`."""
    cu = driver()
    checked(cu.cuIpcCloseMemHandle(cu.CUdeviceptr(ptr)))


def open_plain_file(path: str, flags: int) -> int | None:
    """A descriptor of the shared-memory file at ``path`` (a host gate region, a board) if it is a
    plain file of one link, else None: a side may put anything at its region's name, and the
    launcher writes these files from outside (no link followed, no pipe waited on)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        return None
    return fd


def region_file_done(path: str, value: int) -> bool:
    """Whether the side of the host gate region at ``path`` has marked every call up to ``value``
    done (read with ``pread``, as :func:`abandon_region_file` writes)."""
    fd = open_plain_file(path, os.O_RDONLY)
    if fd is None:
        return False
    try:
        word = os.pread(fd, 4, DONE)
    finally:
        os.close(fd)
    return len(word) == 4 and not behind(struct.unpack("<i", word)[0], value)


def abandon_region_file(path: str, value: int) -> bool:
    """Mark every call up to ``value`` done in the host gate region at ``path``, from outside the
    side (the launcher, for a side whose process died mid-batch: nobody else would, and its
    timekeeper waited for the dead side until the batch's deadline). Written with ``pwrite``, not a
    mapping: a file the side shrank cannot fault this process, and the timekeeper reads the words
    within one of its sleeps. Only a plain file of one link is written; whether it was."""
    fd = open_plain_file(path, os.O_WRONLY)
    if fd is None:
        return False
    try:
        word = struct.pack("<i", cyclic_gap(value, 0))
        for at in ABANDONED:
            os.pwrite(fd, word, at)
        return True
    finally:
        os.close(fd)


#: Per device, this process's one stream for the words no gate may hold (:func:`side_stream`).
_SIDE_STREAMS: dict = {}


def side_stream(device):
    """This process's stream for the words an abandoned batch writes outside its gates, made on
    the first call and the same for every region.

    One a process, made by every side process at the same point of its start
    (:meth:`pkb_core.candidate.rank.CandidateRank.prepare`): a stream made with each region
    mapped (as until 2026-11-30) made a group's stream count depend on its history, and where a
    context has several hardware queues (CUDA's default of eight, which pkb's sides no longer
    run with: :data:`pkb_core.machine.device.GPU_ENVIRONMENT`), which of them the streams share."""
    import torch

    device = torch.device(device)
    if device not in _SIDE_STREAMS:
        _SIDE_STREAMS[device] = torch.cuda.Stream(device)
    return _SIDE_STREAMS[device]


class SideRegion:
    """A side's view of its gate region: the slots as tensors, the words as operations.

    On GPU the waits and writes are queued on the side's current stream; on CPU they happen now.

    Three layouts: a CUDA IPC handle and an ``announce`` page (a device timekeeper's region:
    ``ptr`` is device memory; ``queued`` is in the page, a file in the side's folder, which this
    host writes itself); a path on GPU (a host timekeeper's region: the file is mapped, pinned
    and mapped into the device, ``ptr`` is its device address, the stream operations wait on and
    write host memory, and ``queued`` is written by this host directly); a path on CPU.
    """

    def __init__(self, *, device, handle: str = "", path: str = "", announce: str = "", in_bytes: int,
                 out_bytes: int):
        import torch  # here, not at the top: the timekeeper imports this module, and no torch

        self.device = device
        self.pinned = None
        in_at, out_at, total = slot_layout(in_bytes, out_bytes)
        self.host = HostRegion(path, total, create=False, woken=device.type == "cpu") if path else None
        #: A device region's announce page (its ``queued``): written by this host, never queued.
        self.announce = HostRegion(announce, HEADER, create=False) if announce else None
        if device.type == "cuda":
            if self.host is not None:
                self.pinned = ctypes.addressof(ctypes.c_char.from_buffer(self.host.map))
                self.ptr = map_host(self.pinned, total)
            else:
                self.ptr = import_handle(handle)
            memory = torch.as_tensor(CudaMemory(self.ptr, total), device=device)
            self.side_stream = side_stream(device)
        else:
            memory = self.host.tensor(0, total)
        self.in_slot = memory[in_at:in_at + in_bytes]
        self.out_slot = memory[out_at:total]
        #: ``in_slot`` in whole 4-byte words (a masked release's unit: the slot's 64-byte rounding
        #: holds them), and the key's words (:mod:`pkb_core.harness.mask`).
        self.masked_slot = memory[in_at:in_at + -(-in_bytes // 4) * 4]
        self.key_words = memory[KEY:KEY + 4 * KEY_WORDS].view(torch.int32)

    def _stream(self) -> int:
        import torch

        return torch.cuda.current_stream(self.device).cuda_stream

    def wait_go(self, value: int, deadline: float) -> bool:
        if self.device.type == "cuda":
            stream_wait(self._stream(), self.ptr + GO, value)
            return True
        return self.host.go.wait(value, deadline)

    def wait_released(self, value: int, deadline: float) -> bool:
        """Wait until masked set ``value - E - 1`` is in ``in_slot`` (queued, on GPU)."""
        if self.device.type == "cuda":
            stream_wait(self._stream(), self.ptr + RELEASED, value)
            return True
        return self.host.released.wait(value, deadline)

    def write_taken(self, value: int) -> None:
        """Say the released set is copied out (queued behind the copy, on GPU)."""
        if self.device.type == "cuda":
            self._queue_writes((TAKEN, value))
        else:
            self.host.taken.write(value)

    def _queue_writes(self, *words: tuple) -> None:
        """Queue on the current stream (GPU), behind everything queued before, writes of
        ``(offset, value)`` words in order."""
        for at, value in words:
            stream_write(self._stream(), self.ptr + at, value)

    def write_done(self, value: int) -> None:
        if self.device.type == "cuda":
            self._queue_writes((DONE, value))
        else:
            self.host.done.write(value)

    def write_used(self, nbytes: int) -> None:
        """Say how many bytes of ``out_slot`` the call filled (queued before its ``done``)."""
        if self.device.type == "cuda":
            self._queue_writes((USED, nbytes))
        else:
            self.host.used.write(nbytes)

    def finish(self, nbytes: int, value: int) -> None:
        """:meth:`write_used` then :meth:`write_done` (what a call does once its outputs are in
        ``out_slot``: one method, which a fixture can patch for both)."""
        if self.device.type == "cuda":
            self._queue_writes((USED, nbytes), (DONE, value))
        else:
            self.host.used.write(nbytes)
            self.host.done.write(value)

    def write_queued(self, value: int) -> None:
        """Say that call ``value - E - 1`` is queued: this host writes the word itself, in the
        region's file or a device region's announce page. Never a stream operation: with one
        hardware queue a context (:data:`pkb_core.machine.device.GPU_ENVIRONMENT`) it would
        land only behind the gate it announces, which opens after it."""
        (self.host or self.announce).queued.write(value)

    def abandon(self, value: int) -> None:
        """Mark every call up to ``value`` done at once (a side that failed mid-batch), so the
        timekeeper's windows end now instead of at its deadline."""
        if self.device.type == "cuda":
            # ``queued`` by this host, at once: the timekeeper then opens every gate. ``taken``
            # and ``done`` on the side stream (at once where the context has queues to spare), and
            # behind everything the calls queued: their own writes land as their windows open
            # and would move the words back below ``value`` (the timekeeper then waited for a
            # call that never came until its deadline).
            self.write_queued(value)
            for stream in (self.side_stream.cuda_stream, self._stream()):
                for at in (TAKEN, DONE):
                    stream_write(stream, self.ptr + at, value)
        else:
            for word in (self.host.queued, self.host.taken, self.host.done):
                word.write(value)

    def close(self) -> None:
        self.in_slot = self.out_slot = self.masked_slot = self.key_words = None
        if self.device.type == "cuda" and getattr(self, "ptr", None):
            if self.pinned is not None:
                unmap_host(self.pinned)
            else:
                close_handle(self.ptr)
            self.ptr = None
        for page in (self.host, self.announce):
            if page is not None:
                page.close()
