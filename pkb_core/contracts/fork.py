"""What the launcher asks a zygote (:mod:`pkb_core.launch.zygote`): :class:`ForkRequest`, one
JSON line on the zygote's control socket, with the descriptors it names attached."""
from __future__ import annotations

import typing

import attrs

from pkb_core.contracts.serial import Contract, optional

#: The descriptors a fork request may hand the child, by the name it gives each.
DESCRIPTORS = (
    "stdin",          # its commands (a rank) or its request (a builder)
    "reply",          # its answers
    "output",         # its standard output and error: the job's log, or the build's
    "keeper_listen",  # global rank 0 of a candidate group: its store keeper's listening socket
    "keeper_report",  # ... and the pipe the keeper reports refusals on
    "netns",          # the group's network namespace (loopback only), which the child enters
)


@attrs.frozen(kw_only=True)
class ForkRequest(Contract):
    """A new child of a zygote: what it becomes and what it is handed.

    The child, before it runs anything else, joins the cgroup (``cgroup``: the
    ``cgroup.procs`` files of its leaf, :mod:`pkb_core.process.cgroups`), enters the
    network namespace when one is handed, and sends its output through a pump capped
    at ``log_cap`` bytes (:mod:`pkb_core.process.log_cap`)."""

    ROLES: typing.ClassVar[tuple[str, ...]] = ("candidate", "builder", "judge")

    #: ``candidate``, ``builder`` (from a candidate zygote) or ``judge`` (from a judge zygote).
    role: str = attrs.field(validator=attrs.validators.in_(ROLES))
    #: Variables set over the zygote's own environment (the candidate's settings and rank).
    env: dict = attrs.field(factory=dict)
    #: The names of the attached descriptors, in order (each one of :data:`DESCRIPTORS`).
    fds: tuple[str, ...] = attrs.field(converter=tuple, validator=attrs.validators.deep_iterable(
        attrs.validators.in_(DESCRIPTORS)))
    #: The ``cgroup.procs`` files the child writes itself into first (none: no cgroup).
    cgroup: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    #: Bytes of output the child's log takes before the rest is dropped (None: no cap).
    log_cap: int | None = optional()
    #: The ``cgroup.procs`` files of the cgroup its output pump joins (the group's, beside the
    #: ranks' leaves: its copying is not the rank's CPU use after an answer); none: the child's.
    pump_cgroup: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    #: Whether the child makes an IPC namespace of its own first (:mod:`pkb_core.process.ipcns`).
    own_ipc: bool = False


@attrs.frozen(kw_only=True)
class ZygoteRequest(Contract):
    """A new zygote, asked of a launch's *base* (``python -m pkb_core.launch.zygote --base``): a
    JSON line on the base's control socket with one descriptor attached, the new zygote's own
    control socket. The base reads nothing else of it: the zygote's environment comes on that
    socket (:class:`ZygoteEnvironment`), so no variable of the judge's passes through the memory
    that later zygotes are forked from."""

    #: The backend whose modules the zygote imports, or ``--judge`` for the judge's zygote.
    kind: str = attrs.field(validator=attrs.validators.min_len(1))


@attrs.frozen(kw_only=True)
class ZygoteEnvironment(Contract):
    """The first line on a zygote's control socket when it was forked from a base: the whole
    environment it takes on before it imports anything of its kind (the base's, for a candidate
    zygote; the launcher's, for the judge's)."""

    env: dict = attrs.field(factory=dict)
