"""The launcher's hold on a set of worker processes: start, command, watch, stop.

A :class:`RankGroup` is the ``nproc`` processes of one role on this node (the
judge's for a launch, or one job's candidate), each started by the launcher in
a session of its own with a c10d store the launcher serves. :meth:`RankGroup.command`
sends one command to every rank and waits for every answer; it is also the
watchdog: no answers by the deadline is :class:`JobEnded` ``timeout``; an
error from one rank while its peers hang ends after a short grace as
``error``; a process that dies is ``crash`` with the signal's name.

:meth:`RankGroup.freeze` and :meth:`RankGroup.thaw` stop and continue every
process of every rank's process group with SIGSTOP/SIGCONT. The launcher
freezes a candidate whenever it is not its turn, so nothing it left running on
the host (a thread, a child) can run while the judge works or the reference is
timed. A candidate cannot leave its process group (:mod:`pkb_core.lockdown`).
"""
from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from pkb_core.channel import REPLY_FD_ENV, LineReader

#: Seconds to wait, after one rank reported an error, for the others to answer.
ERROR_GRACE_S = 10.0
#: Seconds to wait for the rest of a group's answers after a process died.
DEATH_GRACE_S = 1.0


class JobEnded(Exception):
    """The job cannot go on: ``verdict`` and ``reason`` are its record's."""

    def __init__(self, verdict: str, reason: str):
        super().__init__(f"{verdict}: {reason}")
        self.verdict = verdict
        self.reason = reason


class _Worker:
    def __init__(self, rank: int, proc: subprocess.Popen, reply_fd: int):
        self.rank = rank
        self.proc = proc
        self.reader = LineReader(reply_fd)
        self.phase = "starting"

    def send(self, message: dict) -> bool:
        import json

        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False


class RankGroup:
    """``nproc`` worker processes of one role (``judge`` or ``candidate``).

    :param env: environment of every process (rank variables are added).
    :param log_path: where their standard output and error go.
    :param label: how verdict reasons name this group (``"rank"`` for a
        candidate, ``"judge rank"`` for the judge).
    """

    def __init__(self, role: str, nproc: int, *, env: dict, log_path: Path, label: str, world_size=None,
                 rank_offset: int = 0):
        self.role = role
        self.label = label
        self.events: dict = {}
        self.selector = selectors.DefaultSelector()
        self.workers: list[_Worker] = []
        self.log = open(log_path, "ab")
        world_size = world_size or nproc
        for local in range(nproc):
            rank = rank_offset + local
            read_fd, write_fd = os.pipe()
            worker_env = dict(env, RANK=str(rank), LOCAL_RANK=str(local), WORLD_SIZE=str(world_size),
                              **{REPLY_FD_ENV: str(write_fd)})
            proc = subprocess.Popen([sys.executable, "-m", "pkb_core.worker", role], stdin=subprocess.PIPE,
                                    stdout=self.log, stderr=subprocess.STDOUT, env=worker_env,
                                    pass_fds=(write_fd,), start_new_session=True)
            os.close(write_fd)
            worker = _Worker(rank, proc, read_fd)
            self.workers.append(worker)
            self.selector.register(read_fd, selectors.EVENT_READ, worker)
        self.pids = [w.proc.pid for w in self.workers]
        self.frozen = False

    # -- commands -------------------------------------------------------------
    def command(self, op: str, payload=None, *, deadline: float, grace: float = ERROR_GRACE_S) -> list[dict]:
        """Send ``op`` to every rank (``payload``: one dict for all, or a list
        with one per rank) and return the answers in rank order.

        :raises JobEnded: timeout, error or crash, as the module docstring says.
        """
        self.thaw()
        payloads = payload if isinstance(payload, list) else [payload or {}] * len(self.workers)
        for worker, extra in zip(self.workers, payloads):
            worker.phase = op
            worker.send({"op": op, **extra})
        return self.gather(op, deadline=deadline, grace=grace)

    def gather(self, op: str, *, deadline: float, grace: float = ERROR_GRACE_S) -> list[dict]:
        answers: dict[int, dict] = {}
        first_error_at = None
        dead_at = None
        while len(answers) < len(self.workers):
            now = time.monotonic()
            limit = deadline
            if first_error_at is not None:
                limit = min(limit, first_error_at + min(grace, max(0.5, deadline - first_error_at)))
            if dead_at is not None:
                limit = min(limit, dead_at + DEATH_GRACE_S)
            if now >= limit:
                break
            for key, _ in self.selector.select(timeout=limit - now):
                worker = key.data
                for message in worker.reader.read_messages():
                    if "event" in message and "op" not in message:
                        name = str(message["event"])[:40]
                        self.events[name] = self.events.get(name, 0) + 1
                    elif "malformed" in message:
                        answers.setdefault(worker.rank, {"error": f"sent a malformed message ({message['malformed'][:100]})"})
                    elif message.get("op") == op and worker.rank not in answers:
                        answers[worker.rank] = message
                        worker.phase = f"{op} done"
                    else:
                        continue
                    if "error" in answers.get(worker.rank, {}) and first_error_at is None:
                        first_error_at = time.monotonic()
                if worker.reader.closed:
                    self.selector.unregister(key.fd)
                    if worker.rank not in answers:
                        dead_at = dead_at or time.monotonic()
        if len(answers) == len(self.workers):
            errors = [(r, a) for r, a in sorted(answers.items()) if "error" in a]
            if errors:
                raise self._error(errors)
            return [answers[w.rank] for w in self.workers]
        errors = [(r, a) for r, a in sorted(answers.items()) if "error" in a]
        died = self._deaths()
        if died:
            raise JobEnded("crash", f"{died} ({self.phases()})")
        if errors:
            rank, answer = errors[0]
            raise self._error(errors, hung=True)
        waited = "" if deadline - time.monotonic() > 0 else "no result before the deadline"
        raise JobEnded("timeout", f"{waited} ({self.phases()})")

    def _error(self, errors, hung=False) -> JobEnded:
        rank, answer = errors[0]
        text = f"{self.label} {rank}: {answer['error']}" + (" (its peers did not finish)" if hung else "")
        return JobEnded("flagged" if answer.get("refused") else "error", text)

    def phases(self) -> str:
        return ", ".join(f"{self.label} {w.rank}: {w.phase}" for w in self.workers)

    def _deaths(self) -> str | None:
        """``"<label> r died with SIGxxx"`` for the first process that died, else None."""
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
        found.sort(key=lambda item: item[0])
        return found[0][1] if found else None

    # -- freezing and stopping -------------------------------------------------
    def _signal_groups(self, sig) -> None:
        for pid in self.pids:
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def freeze(self) -> None:
        if not self.frozen:
            self._signal_groups(signal.SIGSTOP)
            self.frozen = True

    def thaw(self) -> None:
        if self.frozen:
            self._signal_groups(signal.SIGCONT)
            self.frozen = False

    def alive(self) -> bool:
        return all(w.proc.poll() is None for w in self.workers)

    def stop(self, *, stacks: bool = False, deadline: float | None = None) -> None:
        """End every process and its children. ``stacks``: ask for Python
        stacks in the log first (a stuck group). Politely (``exit``) when
        ``deadline`` is given and the group is healthy, else SIGKILL."""
        if deadline is not None and self.alive() and not self.frozen:
            try:
                self.command("exit", deadline=deadline)
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
        self._signal_groups(signal.SIGKILL)
        self._signal_groups(signal.SIGCONT)
        for worker in self.workers:
            try:
                worker.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if worker.proc.stdin:
                try:
                    worker.proc.stdin.close()
                except OSError:
                    pass
            try:
                os.close(worker.reader.fd)
            except OSError:
                pass
        self.selector.close()
        self.log.close()
