"""The launcher's hold on a set of worker processes: start, command, watch, stop.

A :class:`RankGroup` is the processes of one role, one per rank (the judge's
for a launch, or one job's candidate), each in a session of its own, with a
c10d store of its own (the judge's served by the launcher, a candidate's by
its keeper, :mod:`pkb_core.keeper`, whose refusals end the job as
``flagged``). :meth:`RankGroup.command` sends one command to
every rank and waits for every answer; it is also the watchdog: no answers by
the deadline is :class:`JobEnded` ``timeout``; an error from one rank while
its peers hang ends after a short grace as ``error``; a process that dies is
``crash`` with the signal's name (SIGSYS, the candidate lockdown's, is
``flagged``).

:meth:`RankGroup.freeze` and :meth:`RankGroup.thaw` stop and continue every
process of a candidate group. The launcher freezes a candidate whenever it is
not its turn, so nothing it left running on the host (a thread, a child) can run
while the judge works or the reference is timed. Where the group has a cgroup
(:mod:`pkb_core.process.containment`), the kernel freezes, measures and ends it
as a whole, every process a member forked included, none able to leave; else
every process of every rank's session gets SIGSTOP/SIGCONT (a candidate cannot
leave its session, :mod:`pkb_core.process.sessions`, but a fork chain can outrun
the scans that find them).

Where the processes come from: the judge's are forked by the launch's
:class:`pkb_core.launch.zygotes.JudgeZygote`, a candidate's by its
:class:`pkb_core.launch.zygotes.Zygotes` (:mod:`pkb_core.launch.zygote`); ranks on other nodes are reached
through :class:`pkb_core.launch.nodes.Conductor`.
"""
from __future__ import annotations

import json
import os
import secrets
import selectors
import signal
import time

from pkb_core.contracts.commands import command_of, decode_answer, encode
from pkb_core.contracts.commands_candidate import End
from pkb_core.contracts.messages import REASON_CHARS, Exit, Failure
from pkb_core.contracts.outcome import JobEnded
from pkb_core.contracts.verdict import Verdict
from pkb_core.process.channel import LineReader, send_line
from pkb_core.process.sessions import cpu_ms_during, kill_sessions, signal_pids, signal_sessions

#: Seconds to wait, after one rank reported an error, for the others to answer.
ERROR_GRACE_S = 10.0
#: Seconds to wait for the rest of a group's answers after a process died.
DEATH_GRACE_S = 1.0
#: Seconds between looks at the cancel flag while waiting for answers.
CANCEL_POLL_S = 0.25
#: CPU milliseconds in the short probe after an answer above which a rank is watched longer
#: (an answered rank blocks on its next read: an honest one reads ~0).
SUSPECT_MS = 2.0
#: How much longer a suspect rank is watched, and the share of that whole stretch of CPU time
#: above which it is busy. Work left running fills the stretch; an honest rank's library threads
#: settle early in it (pkb's own reference of problem 49 on 2xH200: 24 ms of a 220 ms stretch
#: after a trial's all-to-alls, which a 10 % share flagged).
LONG_PROBE_S = 0.3
LONG_PROBE_SHARE = 0.2
#: Distinct event names a group's counts keep (pkb's harness sends a few); later names count
#: under :data:`OTHER_EVENTS`.
EVENT_NAMES = 64
OTHER_EVENTS = "(other names)"


def wait_for_exit(poll, timeout: float):
    """Call ``poll()`` until it gives an exit status or ``timeout`` seconds pass (then None):
    the wait of a process this one cannot ``waitpid`` (a zygote's child, a rank on another node)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        code = poll()
        if code is not None:
            return code
        time.sleep(0.01)
    return None


class _Worker:
    """One rank's process as the launcher sees it: a command stream, a reply stream."""

    def __init__(self, rank: int, proc, stdin, reply_fd: int):
        self.rank = rank
        self.proc = proc
        self.stdin = stdin
        self.reader = LineReader(reply_fd)
        self.phase = "starting"

    def send(self, message: dict) -> bool:
        return send_line(self.stdin, message)


class RankGroup:
    """Worker processes of one role (``judge`` or ``candidate``), one per rank.

    :param workers: every rank's :class:`_Worker` (from :meth:`JudgeZygote.fork_workers`,
        :meth:`Zygotes.fork_workers` or another node's conductor).
    :param label: how verdict reasons name this group (``"rank"`` for a
        candidate, ``"judge rank"`` for the judge).
    :param remote: the other nodes' part of the group (:class:`pkb_core.launch.nodes.Conductor`), if any.
    """

    def __init__(self, role: str, workers: list, *, label: str, log=None, remote=None, group_id: str = "",
                 containment=None):
        self.role = role
        #: The group's cgroup, network namespace and log cap (:mod:`pkb_core.process.containment`), if any.
        self.containment = containment
        #: Each local rank's cgroup members when first watched after an answer (the rank and what
        #: it started before its first call, its store keeper): a process not among them is new.
        self._settled_pids: list[set] | None = None
        self.label = label
        self.log = log
        self.remote = remote
        self.group_id = group_id
        #: How many times each named event came in (the harness's ``barrier``, ...), at most
        #: :data:`EVENT_NAMES` names (a worker writes these lines itself: a candidate that wrote
        #: millions of names grew the launcher, outside every cgroup, by 1.2 GB).
        self.events: dict = {}
        self.selector = selectors.DefaultSelector()
        self.workers: list[_Worker] = sorted(workers, key=lambda w: w.rank)
        for worker in self.workers:
            self.selector.register(worker.reader.fd, selectors.EVENT_READ, worker)
        self.pids = [w.proc.pid for w in self.workers if w.proc.pid is not None]
        self.frozen = False
        self.ready = False
        #: Why the backend cannot run in this group, as its processes said when ready (None: it can).
        self.unsupported = None
        #: Whether a rank's word that the solution failed for want of NVLink multicast makes the
        #: job ``unsupported`` (the launcher's own finding for the group's job:
        #: :func:`pkb_core.plugin.multicast.multicast_claim_believable`); otherwise it is an ``error``.
        self.multicast_believed = False
        #: The read end of the store keeper's report pipe (a candidate group's; :mod:`pkb_core.keeper`).
        self.keeper_report = None
        self._refusal = None
        #: The processes the last freeze stopped (the thaw continues exactly these).
        self._stopped: list = []
        #: Why the group was cancelled from another thread (:meth:`cancel`), or None.
        self.cancelled: str | None = None

    # -- commands -------------------------------------------------------------
    def command(self, request, *, deadline: float, grace: float = ERROR_GRACE_S, watch=None) -> list:
        """Send ``request`` (one :class:`pkb_core.contracts.messages.Request` for every rank,
        or a list with one per rank, all of one command of this group's role) and return
        the answers in rank order, each read with the command's answer class
        (:mod:`pkb_core.contracts.commands`).

        :raises JobEnded: timeout, error or crash, as the module docstring says; an answer
            that does not fit its class is the rank's error.
        """
        command = self.send(request)
        return self.gather(command.op, command.answer, deadline=deadline, grace=grace, watch=watch)

    def send(self, request):
        """Send ``request`` (as :meth:`command` does) without waiting: the command, whose
        answers :meth:`gather` reads (a window batch: the candidate's calls run while the
        judge's timekeeper opens their windows)."""
        self.thaw()
        requests = request if isinstance(request, list) else [request] * len(self.workers)
        found = {command_of(self.role, r) for r in requests}
        if len(found) != 1:
            raise ValueError(f"one command per call, not {sorted(c.op for c in found)}")
        command = found.pop()
        for worker, one in zip(self.workers, requests):
            worker.phase = command.op
            # An answer counts only if it echoes this command's nonce, and bytes a
            # rank wrote before the command was sent are dropped: no answer can be
            # written ahead of its command (the launcher's clock times the command).
            worker.reader.discard()
            worker.nonce = secrets.token_hex(8)
            worker.send(encode(one, worker.nonce))
        return command

    def _count_event(self, name: str) -> None:
        """Count one event named ``name``; past :data:`EVENT_NAMES` names, a new one counts as
        :data:`OTHER_EVENTS`."""
        if name not in self.events and len(self.events) >= EVENT_NAMES:
            name = OTHER_EVENTS
        self.events[name] = self.events.get(name, 0) + 1

    def gather(self, op: str, answer: type, *, deadline: float, grace: float = ERROR_GRACE_S, watch=None) -> list:
        """Every rank's answer to ``op``, read once with the ``answer`` class (events on the way
        are counted in :attr:`events`); a line that is not JSON or does not fit the class is
        that rank's :class:`Failure`. ``watch``: called at every poll while answers are awaited
        (at least every :data:`CANCEL_POLL_S`): what else the caller looks after meanwhile."""
        answers: dict = {}
        first_error_at = None
        dead_at = None
        next_exit_poll = time.monotonic() + CANCEL_POLL_S
        while len(answers) < len(self.workers):
            now = time.monotonic()
            limit = deadline
            if first_error_at is not None:
                limit = min(limit, first_error_at + min(grace, max(0.5, deadline - first_error_at)))
            if dead_at is not None:
                limit = min(limit, dead_at + DEATH_GRACE_S)
            if now >= limit:
                break
            if self.cancelled:
                raise JobEnded(Verdict.CANCELLED, f"{self.cancelled} ({self.phases()})")
            if watch is not None:
                watch()
            for key, _ in self.selector.select(timeout=min(limit - now, CANCEL_POLL_S)):
                worker = key.data
                for message in worker.reader.read_messages():
                    if "event" in message and "op" not in message:
                        self._count_event(str(message["event"])[:40])
                    elif "malformed" in message:
                        answers.setdefault(worker.rank, Failure(error=f"sent a malformed message "
                                                                      f"({str(message['malformed'])[:100]})"))
                    elif message.get("op") == op and worker.rank not in answers and \
                            message.pop("nonce", None) == getattr(worker, "nonce", None):
                        del message["op"]
                        answers[worker.rank] = decode_answer(op, answer, message)
                        worker.phase = f"{op} done"
                    if isinstance(answers.get(worker.rank), Failure) and first_error_at is None:
                        first_error_at = time.monotonic()
                if worker.reader.closed:
                    self.selector.unregister(key.fd)
                    if worker.rank not in answers:
                        dead_at = dead_at or time.monotonic()
            if dead_at is None and time.monotonic() >= next_exit_poll:
                # A rank's pipe stays open while a child of its holds it: its exit is read too
                next_exit_poll = time.monotonic() + CANCEL_POLL_S
                if any(w.proc.poll() is not None for w in self.workers if w.rank not in answers):
                    dead_at = time.monotonic()
        errors = [(r, a) for r, a in sorted(answers.items()) if isinstance(a, Failure)]
        if len(answers) == len(self.workers):
            if errors:
                raise self._error(errors[0])
            return [answers[w.rank] for w in self.workers]
        died = self._deaths(answered=set(answers))
        refusal = self.store_refusal()
        if refusal:
            raise JobEnded(Verdict.FLAGGED, f"{refusal} ({self.phases()})")
        if died and "SIGSYS" in died:
            raise JobEnded(Verdict.FLAGGED, f"{died}: it made a system call the candidate lockdown forbids (a network "
                                      f"socket or an io_uring: a NCCL or gloo communicator of its own) ({self.phases()})")
        if died:
            raise JobEnded(Verdict.CRASH, f"{died} ({self.phases()})")
        if errors:
            raise self._error(errors[0], hung=True)
        raise JobEnded(Verdict.TIMEOUT, self.phases())

    def _error(self, found, hung=False) -> JobEnded:
        rank, answer = found
        text = f"{self.label} {rank}: {answer.error[:REASON_CHARS]}" + (" (its peers did not finish)" if hung else "")
        if answer.multicast_off and not answer.refused:
            if self.multicast_believed:
                return JobEnded(Verdict.UNSUPPORTED, text)
            text += (" (the rank blamed NVLink multicast being off; not believed: pkb allows multicast here, "
                     "or the solution's source never names it)")
        return JobEnded(Verdict.FLAGGED if answer.refused else Verdict.ERROR, text)

    def store_refusal(self) -> str | None:
        """What the group's store keeper refused (it killed the rank that asked), or None."""
        if self._refusal is None and self.keeper_report is not None:
            try:
                data = os.read(self.keeper_report, 1 << 16)
            except OSError:  # nothing written (the pipe does not block)
                data = b""
            for line in data.splitlines():
                try:
                    report = json.loads(line)
                    self._refusal = (f"{self.label} {report['rank']} moved data through the job's store: the store "
                                     f"keeper refused {str(report['refused'])[:300]} and killed it")
                    break
                except (ValueError, KeyError, TypeError):
                    continue
        return self._refusal

    def phases(self) -> str:
        return ", ".join(f"{self.label} {w.rank}: {w.phase}" for w in self.workers)

    def _deaths(self, answered: set = frozenset()) -> str | None:
        """``"<label> r died with SIGxxx"`` for the first process that died, else None; a rank
        not among ``answered`` that exited, with status 0 too, died before its answer."""
        time.sleep(0.05)
        found = []
        for worker in self.workers:
            code = worker.proc.poll()
            if code is None:
                continue
            if code < 0:
                name = signal.Signals(-code).name
                # A rank killed by the launcher's own stop is not the cause.
                found.append((name in ("SIGKILL", "SIGTERM"), f"{self.label} {worker.rank} died with {name}"))
            elif code != 0:
                found.append((True, f"{self.label} {worker.rank} exited with status {code}"))
            elif worker.rank not in answered:
                found.append((True, f"{self.label} {worker.rank} exited with status 0 before it answered"))
        found.sort(key=lambda item: item[0])
        return found[0][1] if found else None

    # -- host activity ----------------------------------------------------------
    def busy_after_answer(self, probe_s: float = 0.02) -> list[tuple[int, float]]:
        """``[(rank, cpu_ms)]`` for ranks whose processes (any thread, any
        child) used more than a third of ``probe_s`` of CPU time during the
        probe, right after answering: an answered command leaves a worker
        blocked on its next read, so that time is work the solution left
        running. Read from the kernel's accounting (the rank's cgroup, or
        ``/proc``), not from the candidate.

        With cgroups, a rank that used more than :data:`SUSPECT_MS` in the
        probe, or whose cgroup holds a process it did not hold when first
        watched (its store keeper is no suspect; a fork chain's new links
        are), is watched :data:`LONG_PROBE_S` longer and is busy if it used more than
        :data:`LONG_PROBE_SHARE` of the whole stretch: on a loaded machine a
        20 ms probe may give what it left running too little CPU to read, or an
        honest rank's last steps too much, and the verdict would then depend on
        the load."""
        if self.remote is not None:
            self.remote.request_busy(self.group_id, probe_s)
        local = [w for w in self.workers if w.proc.pid is not None]
        busy = self._cgroup_busy(probe_s, [w.rank for w in local])
        if busy is None:
            used = cpu_ms_during(probe_s, [w.proc.pid for w in local])
            busy = [(w.rank, ms) for w, ms in zip(local, used) if ms > probe_s * 1e3 / 3]
        if self.remote is not None:
            busy += self.remote.busy(self.group_id)
        return sorted(busy)

    def _cgroup_busy(self, probe_s: float, ranks: list[int]) -> list[tuple[int, float]] | None:
        """:meth:`busy_after_answer` from the local ranks' cgroups (the processes that ended
        meanwhile included: a fork chain cannot hide); None without them."""
        if self.containment is None or not self.containment.leaves:
            return None
        before = self.containment.cpu_ns()
        if None in before:
            return None
        leaves = self.containment.leaves
        if self._settled_pids is None:
            self._settled_pids = [set(leaf.pids()) for leaf in leaves]
        time.sleep(probe_s)
        after = self.containment.cpu_ns()
        used = [((a or 0) - b) / 1e6 for a, b in zip(after, before)]
        # Even a rank over a third of the short probe is only a suspect: on a loaded machine an
        # honest rank still finishing its answer's last steps can read so (14 ms of 20 ms was seen,
        # with two busy processes beside the suite); work left running fills the longer stretch too.
        suspects = [i for i, (ms, leaf, settled) in enumerate(zip(used, leaves, self._settled_pids))
                    if ms > SUSPECT_MS or not set(leaf.pids()) <= settled]
        busy = []
        if not suspects:
            return busy
        time.sleep(LONG_PROBE_S)
        longer = self.containment.cpu_ns()
        stretch_ms = (probe_s + LONG_PROBE_S) * 1e3
        for i in suspects:
            ms = ((longer[i] or 0) - before[i]) / 1e6
            if ms > stretch_ms * LONG_PROBE_SHARE:
                busy.append((ranks[i], ms))
        return busy

    def _contained(self) -> bool:
        """Whether the kernel freezes and ends this group as a whole (its cgroup)."""
        return self.containment is not None and self.containment.can_freeze

    # -- freezing and stopping -------------------------------------------------
    def _signal_groups(self, sig) -> None:
        signal_sessions(self.pids, sig)
        self._signal_remote(sig)

    def _signal_remote(self, sig) -> None:
        if self.remote is not None:
            self.remote.signal(self.group_id, sig)

    def freeze(self) -> None:
        if not self.frozen:
            if self._contained():
                self.frozen = True  # first: a thaw must follow even if an exit interrupts the freeze
                self.containment.cgroup.freeze()  # every member at once, and whatever it forks meanwhile
            else:
                # A stopped process cannot fork: the thaw continues exactly these, with no /proc scan
                # inside a timed command's clock (the reference's side has none).
                self._stopped = signal_sessions(self.pids, signal.SIGSTOP)
            self._signal_remote(signal.SIGSTOP)
            self.frozen = True

    def thaw(self) -> None:
        if self.frozen:
            if self._contained():
                self.containment.cgroup.thaw()
            else:
                signal_pids(self._stopped, signal.SIGCONT)
            self._signal_remote(signal.SIGCONT)
            self.frozen = False

    def _kill_local(self) -> None:
        """End every process of the group on this node: its cgroup as a whole, else its sessions."""
        if self._contained():
            self.containment.end()
        else:
            kill_sessions(self.pids)

    def cancel(self, reason: str) -> None:
        """End the group's job from another thread: its processes are killed and the
        command waiting on them ends at once with ``reason``."""
        self.cancelled = reason
        self._kill_local()

    def alive(self) -> bool:
        return all(w.proc.poll() is None for w in self.workers)

    def stop(self, *, stacks: bool = False, deadline: float | None = None) -> None:
        """End every process and its children. ``stacks``: ask for Python
        stacks in the log first (a stuck group). With a ``deadline`` and a
        healthy group, politely first: a candidate's ``end`` (the backend's
        finalize hook), then ``exit``."""
        if deadline is not None and self.alive():
            try:
                if self.role == "candidate":
                    self.command(End(), deadline=deadline)
                self.command(Exit(), deadline=deadline)
            except JobEnded:
                pass
        if stacks and self.alive():
            self.thaw()
            for pid in self.pids:
                try:
                    os.kill(pid, signal.SIGUSR1)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.5)
        if self._contained():
            self.containment.end()  # frozen, killed, thawed: no fork outruns it
            self._signal_remote(signal.SIGKILL)
            self._signal_remote(signal.SIGCONT)
        else:
            self._signal_groups(signal.SIGKILL)
            kill_sessions(self.pids)  # again until none is left: a fork chain outruns one sweep
            self._signal_groups(signal.SIGCONT)
        if self.remote is not None:
            self.remote.stop(self.group_id)
        for worker in self.workers:
            worker.proc.wait(timeout=10)
            for close in (worker.stdin.close, lambda: os.close(worker.reader.fd)):
                try:
                    close()
                except OSError:
                    pass
        self.selector.close()
        if self.keeper_report is not None:
            os.close(self.keeper_report)
            self.keeper_report = None
        if self.log:
            self.log.close()

