"""The limits every command that runs jobs takes: ``--memory-limit``, ``--max-processes``,
``--log-cap`` (``pkb run``, ``pkb bench``, ``pkb serve``; in ``pkb.toml`` as ``memory_limit``,
``max_processes``, ``log_cap`` under the command's table). Each job's candidate group, and
each build, runs in a cgroup of its own with them (docs/trust.md); the defaults are this
machine's (:mod:`pkb_core.machine.limits`)."""
from __future__ import annotations

import functools

import click


def limit_options(command):
    """Add the three options to ``command``; it receives them as one ``limits`` dict
    (``memory_mib``, ``max_processes``, ``log_cap_mib``: the :func:`pkb_core.launch.plan.launch_settings`
    keywords, None for a default)."""
    @click.option("--memory-limit", "memory_mib", type=click.IntRange(min=64), default=None, metavar="MIB",
                  help="Memory of each job's processes, shared-memory files included, in MiB (default: the "
                       "machine's share for its ranks, or the job's need where larger, at most half the memory "
                       "pkb may use); a job that exceeds it is killed and says what it used.")
    @click.option("--max-processes", type=click.IntRange(min=16), default=None,
                  help="Processes and threads each job may have at once (default 4096).")
    @click.option("--log-cap", "log_cap_mib", type=click.IntRange(min=1), default=None, metavar="MIB",
                  help="MiB of output each job's (and build's) log keeps; the rest is dropped with a note "
                       "(default 64).")
    @functools.wraps(command)
    def wrapped(*args, memory_mib, max_processes, log_cap_mib, **kwargs):
        limits = {"memory_mib": memory_mib, "max_processes": max_processes, "log_cap_mib": log_cap_mib}
        return command(*args, limits=limits, **kwargs)

    return wrapped
