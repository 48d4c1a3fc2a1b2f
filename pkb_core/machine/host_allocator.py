"""The host's memory allocator in every process that runs a problem's or a solution's code: glibc's
``malloc`` with its thresholds fixed, so that two processes running the same code allocate alike
whatever each ran before.

Unset, glibc moves its mmap threshold as a process frees large blocks (from 128 KiB up to 32 MiB)
and trims the top of its heap at twice it, so whether a call's large temporaries come from the heap
or from fresh pages (a page fault each 4 KiB, zeroed) depends on the process's history. pkb's two
groups of a job have different histories (the candidate's runs the trials, window mode's reference
group its batches beside pkb's harness batches), and on the 2-core CPU machine (2026-11-30) the
reference against itself read problem 56 at 1.04-1.09 in six of eight runs, the reference group's
processes taking 2-2.5x the candidate's minor page faults and its receiving stage 10 % longer by
its own clock; with the thresholds fixed (32 MiB and 64 MiB, the values below) 1.01 and 0.98, and
with larger ones 1.00 and 0.98 (docs/benchmarks/2026-11-30-h200x2-window-suite.md). Whatever the
caller's environment sets is kept (``MALLOC_*`` passes to a candidate's processes).
"""
from __future__ import annotations

import os

#: glibc's tunables by environment: blocks of 32 MiB and more always mapped afresh (the dynamic
#: threshold's own ceiling, where it ends up in a long-running process), the heap's top trimmed only
#: past 64 MiB free; setting either turns the dynamic adjustment off.
ALLOCATOR_ENVIRONMENT = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}


def allocator_environment() -> dict:
    """The variables of :data:`ALLOCATOR_ENVIRONMENT` the caller's environment does not set."""
    return {name: value for name, value in ALLOCATOR_ENVIRONMENT.items() if name not in os.environ}
