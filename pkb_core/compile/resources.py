"""What builds may use: how many run at once on this node, and what a builder's environment adds.

Read by the compile phase (:mod:`pkb_core.compile.phase`), the service's build pool and the
compile-pool benchmark.
"""
from __future__ import annotations

import os

#: Memory one build may need: its two compiles at once (nvcc on torch's headers
#: peaks near 2 GiB, g++ on main.cpp with the precompiled header near 1.5 GiB).
BUILD_MEMORY_BYTES = 7 << 29
#: Compiles one build runs at once (ninja's ``MAX_JOBS``): its ``.cu`` and its ``main.cpp``.
BUILD_JOBS = 2


def default_workers(builds: int) -> int:
    """Builds at once: one per core, as far as memory allows, at most ``builds``.

    Each build runs its two compiles at once (:data:`BUILD_JOBS`), yet the
    pool still counts one build per core rather than two: the two are rarely
    both long (``main.cpp`` loads a precompiled header or is empty, the
    ``.cu`` is the long one, or the reverse for a header-light ``.cu``), so
    one build per core keeps every core busy, and the brief overlap costs less
    than half the cores waiting on short compiles."""
    cores = os.cpu_count() or 1
    try:
        with open("/proc/meminfo") as meminfo:
            available = next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable"))
        cores = min(cores, max(1, available // BUILD_MEMORY_BYTES))
    except (OSError, StopIteration, ValueError):
        pass
    return max(1, min(cores, builds))


def build_environment(device: str) -> dict:
    """What a builder's environment adds: ninja runs the build's two compiles
    at once (``MAX_JOBS``, unless the caller set it: torch's default is a job
    per core for every build, which oversubscribes a pool of builds), and the
    variables of the device's mode that the jobs' workers get
    (:func:`pkb_core.machine.device.device_environment`)."""
    from pkb_core.machine.device import device_environment

    jobs = {} if os.environ.get("MAX_JOBS") else {"MAX_JOBS": str(BUILD_JOBS)}
    return {**jobs, **device_environment(device)}
