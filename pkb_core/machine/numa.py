"""Where on a NUMA machine the judge's timekeeper runs and keeps its memory.

The host engine's windows (docs/timing.md) are made of PCIe traffic between a side's GPU and
the timekeeper's shared-memory files (the gate words the GPU waits on and writes, the input
set it reads, the outputs it writes) and of the timekeeper's polls of those words. Memory on
the other socket from the GPU, or a timekeeper polling from there, adds a hop to each. A file's
pages are placed where the process that first touched them ran, so a timekeeper left to the
scheduler would place one side's gate region on one node and the next side's on another, and
two groups of the same code would differ for a whole job by where their regions happened to
land. So a timekeeper on a machine of several nodes runs on its GPU's node (or, where the
machine does not say which that is, on the node it started on) and allocates its memory
there: every side's region of a rank on one node.

Linux only (``/sys`` and the ``set_mempolicy`` and ``move_pages`` system calls, x86_64 and
aarch64); elsewhere, and on a machine of one node, nothing is changed.
"""
from __future__ import annotations

import ctypes
import os
import platform

_NODES = "/sys/devices/system/node"
#: System call numbers by machine (``set_mempolicy``, ``move_pages``).
_SYSCALLS = {"x86_64": (238, 279), "aarch64": (237, 239)}
MPOL_PREFERRED = 1


def parse_list(text: str) -> list[int]:
    """The numbers of a kernel list such as ``0-3,8,10-11``."""
    found = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        found.extend(range(int(low), int(high or low) + 1))
    return found


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def online_nodes() -> list[int]:
    """The machine's online NUMA nodes (``[0]`` where it does not say)."""
    text = _read(os.path.join(_NODES, "online"))
    return parse_list(text) if text else [0]


def node_cpus(node: int) -> list[int]:
    """The CPUs of ``node`` (empty where the machine does not say)."""
    text = _read(os.path.join(_NODES, f"node{node}", "cpulist"))
    return parse_list(text) if text else []


def pci_node(bus_id: str) -> int | None:
    """The node a PCI device (``0000:1b:00.0``) is attached to, or None (``-1``: the machine,
    often a virtual one, does not say)."""
    text = _read(f"/sys/bus/pci/devices/{bus_id.lower()}/numa_node")
    try:
        node = int(text) if text else -1
    except ValueError:
        return None
    return node if node >= 0 else None


def gpu_bus_id(device) -> str | None:
    """``device``'s PCI address as ``/sys`` names it, from torch's device properties (None on
    CPU, or where this torch does not report it)."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    index = torch.cuda.current_device() if device.index is None else device.index
    props = torch.cuda.get_device_properties(index)
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if not all(isinstance(part, int) for part in parts):
        return None
    return f"{parts[0]:04x}:{parts[1]:02x}:{parts[2]:02x}.0"


def current_node() -> int | None:
    """The node of the CPU this thread runs on now (None where it cannot be read)."""
    libc = ctypes.CDLL(None, use_errno=True)
    cpu, node = ctypes.c_uint(), ctypes.c_uint()
    try:
        if libc.getcpu(ctypes.byref(cpu), ctypes.byref(node)) == 0:
            return node.value
    except AttributeError:
        pass
    return None


def settle_on(node: int | None) -> dict:
    """Run this process on ``node``'s CPUs and prefer its memory for what it allocates from now
    on (``node`` None: the node it runs on now). What was done, for the record: ``nodes`` (the
    machine's), ``node`` and ``pinned`` (False on a machine of one node, where nothing is done,
    or where the system refused)."""
    nodes = online_nodes()
    done = {"nodes": len(nodes), "node": node, "pinned": False}
    if len(nodes) < 2:
        return done
    if node is None:
        node = current_node()
        done["node"] = node
    calls = _SYSCALLS.get(platform.machine())
    cpus = set(node_cpus(node)) & os.sched_getaffinity(0) if node is not None else set()
    if not cpus or calls is None:
        return done
    os.sched_setaffinity(0, cpus)
    mask = ctypes.c_ulong(1 << node) if node < 64 else None
    if mask is None:
        return done
    libc = ctypes.CDLL(None, use_errno=True)
    done["pinned"] = libc.syscall(calls[0], MPOL_PREFERRED, ctypes.byref(mask), 65) == 0  # 64 bits: maxnode - 1
    return done


def page_node(buffer) -> int | None:
    """The node holding the first page of a writable buffer (an ``mmap``), or None where the
    system cannot say (its pages were never touched, or no ``move_pages``)."""
    calls = _SYSCALLS.get(platform.machine())
    if calls is None:
        return None
    address = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(buffer)))
    status = ctypes.c_int(-1)
    libc = ctypes.CDLL(None, use_errno=True)
    # move_pages(pid 0, one page, its address, no target nodes: only ask where it is)
    if libc.syscall(calls[1], 0, ctypes.c_ulong(1), ctypes.byref(address), None, ctypes.byref(status), 0) != 0:
        return None
    return status.value if status.value >= 0 else None
