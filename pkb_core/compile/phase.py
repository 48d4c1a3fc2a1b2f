"""The compile phase: every job's solution built, in parallel, before any job starts.

Building is the slow part of evaluating model-generated CUDA (tens of seconds per
file with torch's headers), and it needs CPUs, not GPUs. So :func:`run_jobs
<pkb_core.launch.jobs.run_jobs>` first hands every distinct solution of its jobs to
:class:`BuildPhase`: a pool of builder processes (:mod:`pkb_core.compile.builder`), as
many as the node's cores and memory allow (:func:`pkb_core.compile.resources.default_workers`), each running
the backend's compile hook on one solution ahead of time, with its compiles
(the cuda backend's ``.cu`` and ``main.cpp``) two at a time
(:func:`pkb_core.compile.resources.build_environment`). What they build lands in the backend's
content-addressed cache; the jobs' candidates then load it in milliseconds, so
a job's timeout no longer pays for compiling.

The phase's own cache remembers each solution's outcome by content (the file,
the backend, the device type, torch and pkb versions, the toolchain variables
of :data:`pkb_core.compile.outcomes.KEY_ENVIRONMENT`): a solution built before is not built again, and
one that failed gets its ``compile-error`` again from the cache, with the
compiler's message, without rebuilding. A build that exceeds its own limit
(``--build-timeout``) or whose process dies is ``compile-error`` with the
reason and is not cached (it may be the machine's fault). Each build runs as
a user of its own, drawn as a candidate group's is, and sees pkb's cache
through a layer of its own (:mod:`pkb_core.compile.output`): what it builds
lands in its output folder, and the phase publishes it into the cache,
checked, once the build succeeded and its processes are ended. Each build's
temporary folder (``pkb-build-*``) is the phase's: made before its builder
starts, bounded (the builder mounts a tmpfs of its memory limit's size on it, in
its own mount namespace, charged to its cgroup), and removed once its processes
are ended, however the build ended (an answer, an exception, SIGKILL, its time
limit); the folders of phases that were killed outright are swept at the next
phase's start (:mod:`pkb_core.process.temp_folders`). The phase's
throughput, builds per hour of wall time, is in :attr:`BuildPhase.summary`
(``pkb build`` prints it).
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pkb_core.cache import cache_dir
from pkb_core.contracts.verdict import Verdict
from pkb_core.contracts.build import BuildAnswer, BuildRequest, BuildResult, SourceChecked
from pkb_core.compile import output
from pkb_core.compile.resources import build_environment, default_workers
from pkb_core.compile.outcomes import failure_verdict, outcome_path, read_outcome, store_outcome
from pkb_core.contracts.serial import ContractError
from pkb_core.process.channel import REPLY_FD_ENV

#: Seconds one build may take unless told otherwise.
BUILD_TIMEOUT_S = 600.0
#: The most a builder's reply pipe may carry: its source check's line and one answer (a message of
#: at most ``BUILD_MESSAGE_CHARS`` characters, JSON-escaped). More is the solution's code writing there.
MAX_REPLY_BYTES = 1 << 20
#: The names of builds' temporary folders (``<tmp>/pkb-build-<pid>-<start>-<random>``).
SCRATCH_PREFIX = "pkb-build-"


class BuildCancelled(Exception):
    """The phase was stopped by its ``cancelled`` event; its builders were killed."""


class BuildPhase:
    """Builds solutions for one backend in parallel (see the module docstring).

    :param on_result: called as each solution finishes: ``on_result(path, result, done, total)``.

    After :meth:`run`, :attr:`summary` says what it did: builds made (not
    from the cache), of them failed, from the cache, builders, wall seconds
    and builds per hour of wall time (the compile phase's throughput).
    """

    def __init__(self, *, backend: str, device: str, run_dir: Path, options: dict | None = None, preload=(),
                 workers: int | None = None, timeout: float = BUILD_TIMEOUT_S, on_result=None, starter=None,
                 memory_mib: int | None = None, max_processes: int | None = None, log_cap_mib: int | None = None,
                 hidden=(), environment=(), cancelled=None):
        self.backend = backend
        self.device = device
        self.run_dir = Path(run_dir)
        self.options = options or {}
        self.preload = preload
        self.workers = workers
        self.timeout = timeout
        self.on_result = on_result
        #: How a builder process starts: None spawns ``python -m pkb_core.compile.builder`` (a
        #: multi-node launch's compile phase); ``pkb run`` forks each from its launch's candidate zygote
        #: (:meth:`pkb_core.launch.launcher.Launch.builder_starter`), ``pkb build``, the reward service
        #: and the Ray actors from a warm zygote per backend (:class:`pkb_core.launch.warm_builders.WarmBuilders`).
        self.starter = starter
        #: Each builder's limits (its cgroup: :func:`pkb_core.machine.limits.build_memory_mib`) and log cap.
        from pkb_core.machine import limits

        self.memory_bytes = limits.build_memory_mib(memory_mib) << 20
        self.max_processes = limits.max_processes(max_processes)
        self.log_cap = limits.log_cap_bytes(log_cap_mib)
        #: Folders hidden from every build besides the run directory (the service's data directory).
        self.hidden = tuple(str(folder) for folder in hidden)
        #: The backend's own variables a builder gets besides pkb's allow-list (``BackendInfo.environment``).
        self.environment = tuple(environment)
        #: A :class:`threading.Event` set to stop the phase (the service's cancel of a job that builds):
        #: its builders are killed and :meth:`run` raises :class:`BuildCancelled`.
        self.cancelled = cancelled
        self.summary: dict = {}
        #: The users of this phase's builds alive (each build runs as a user of its own).
        self._users: set[int] = set()

    def run(self, requests: list[tuple]) -> dict:
        """``requests``: ``(solution path, problem path)`` pairs; returns ``{solution path: BuildResult}``."""
        from pkb_core.process import temp_folders
        from pkb_core.process.reaper import become_subreaper

        become_subreaper()  # a compiler whose builder was killed becomes this process's child, and is reaped
        temp_folders.sweep(SCRATCH_PREFIX)  # what builds of phases killed outright left
        output.sweep()
        distinct = {}
        for solution, problem_path in requests:
            if solution:
                distinct.setdefault(str(solution), str(problem_path))
        results, queue = {}, []
        refusals = self._refusals(distinct)
        for solution, problem_path in distinct.items():
            if solution in refusals:
                results[solution] = refusals[solution]
                self._report(solution, refusals[solution], results, len(distinct))
                continue
            cached = self._cached(solution)
            if cached is not None:
                results[solution] = cached
                self._report(solution, cached, results, len(distinct))
            else:
                queue.append((solution, problem_path))
        running: list[tuple] = []
        # Files of the same content build once: a copy waits for its first to finish, then takes
        # its outcome from the cache (a batch of a model's completions repeats itself).
        content = {solution: self._path(solution) for solution, _ in queue}
        workers = self.workers or default_workers(len({content[s] for s, _ in queue}))
        started, made = time.monotonic(), len(queue)
        try:
            while queue or running:
                building = {content[build["solution"]] for build in running}
                for item in [item for item in queue if content[item[0]] not in building]:
                    if len(running) >= workers:
                        break
                    queue.remove(item)
                    solution, problem_path = item
                    cached = self._cached(solution)
                    if cached is not None:
                        results[solution] = cached
                        self._report(solution, cached, results, len(distinct))
                        continue
                    running.append(self._start(solution, problem_path))
                    building.add(content[solution])
                time.sleep(0.05)
                if self.cancelled is not None and self.cancelled.is_set():
                    raise BuildCancelled()
                for build in list(running):
                    result = self._finished(build)
                    if result is not None:
                        running.remove(build)
                        results[build["solution"]] = result
                        self._report(build["solution"], result, results, len(distinct))
        finally:
            # Interrupted (Ctrl-C, a signal turned into SystemExit): builders run in sessions of
            # their own, so nothing else would stop them or the compilers they started.
            for build in running:
                _kill(build)
                _release(build)
        wall = time.monotonic() - started
        fresh = [result for result in results.values() if not result.cached]
        self.summary = {"built": len(fresh), "failed": sum(not r.ok for r in fresh),
                        "cached": len(results) - len(fresh),
                        "workers": min(workers, made) if made else 0, "wall_s": round(wall, 1),
                        "builds_per_hour": round(len(fresh) * 3600 / wall) if fresh and wall > 0 else None}
        return results

    def _refusals(self, solutions) -> dict:
        """``{solution: BuildResult}`` for the solutions refused from their text alone: no
        solution file (empty, not UTF-8: :func:`pkb_core.compile.source_defects.file_defect`),
        ``compile-error``; an import the backend cannot serve, a multicast call pkb cannot watch
        where multicast is off (:func:`pkb_core.candidate.solution.source_refusal`),
        ``unsupported``. At once, no builder started, nothing cached (the answer
        depends on this machine's settings, and costs a read)."""
        from pkb_core.candidate.solution import source_refusal
        from pkb_core.compile.source_defects import file_defect
        from pkb_core.plugin.manager import backend_infos, get_plugin_manager
        from pkb_core.problem.source import read_solution

        info = backend_infos(get_plugin_manager(backend=self.backend)).get(self.backend)
        if info is None:
            return {}  # the builder reports the missing backend
        refused = {}
        for solution in solutions:
            try:
                defect = file_defect(read_solution(solution))
            except OSError:
                defect = None  # the builder says why it cannot be read
            if defect:
                refused[solution] = BuildResult(False, defect, 0.0)
                continue
            reason = source_refusal(info, solution, self.device)
            if reason:
                refused[solution] = BuildResult(False, reason, 0.0, verdict=Verdict.UNSUPPORTED)
        return refused

    # -- one build ---------------------------------------------------------------
    def _start(self, solution: str, problem_path: str) -> dict:
        from pkb_core.process import temp_folders

        scratch = temp_folders.make(SCRATCH_PREFIX)
        user, made = None, None
        try:
            user, made = output.take(self._users, cache_dir())
            return self._spawn(solution, problem_path, scratch, user, made)
        except BaseException:
            temp_folders.remove(scratch)  # no build took them
            output.release(user, made, self._users)
            raise

    def _spawn(self, solution: str, problem_path: str, scratch: str, user: int | None, made: str | None) -> dict:
        from pkb_core.plugin.preload import preload_environment
        from pkb_core.process.containment import contain
        from pkb_core.process.environment import allowed_environment
        from pkb_core.process.ipcns import OWN_IPC_ENV
        from pkb_core.process.netns import NETNS_FD_ENV
        from pkb_core.process.reaper import spawned
        from pkb_core.process.sessions import spawner_environment

        logs = self.run_dir / "logs" / "builds"
        logs.mkdir(parents=True, exist_ok=True)
        log = open(logs / f"{Path(solution).stem}-{hashlib.sha1(solution.encode()).hexdigest()[:6]}.log", "wb")
        read_fd, write_fd = os.pipe()
        extra = build_environment(self.device)
        # A builder runs the solution's code: it gets an allow-listed environment (no token, no key).
        env = dict(allowed_environment(os.environ, self.environment), PYTHONUNBUFFERED="1",
                   **{REPLY_FD_ENV: str(write_fd)}, **preload_environment(self.preload), **extra,
                   **spawner_environment())
        request = BuildRequest(backend=self.backend, solution=solution, problem_path=problem_path,
                               device=self.device, options=self.options, run_dir=str(self.run_dir),
                               hidden=self.hidden, log_cap=self.log_cap, scratch=scratch,
                               scratch_bytes=self.memory_bytes, user=user, output=made)
        line = json.dumps(request.to_json()).encode()
        # A cgroup of its own, which the builder is in before it reads its request (so before
        # any of the solution's code runs): its compilers too, ended with it, within its limits.
        # And a network of its own (only its loopback): no abstract Unix socket of the machine's.
        containment, _ = contain(f"build-{Path(solution).stem[:40]}", memory_bytes=self.memory_bytes,
                                 max_processes=self.max_processes, network=True, device=self.device)
        if self.starter is not None:
            proc = self.starter(line, log, write_fd, extra, containment)
        else:
            netns = () if containment.netns_fd is None else (containment.netns_fd,)
            if netns:
                env[NETNS_FD_ENV] = str(containment.netns_fd)
            if containment.own_ipc:
                env[OWN_IPC_ENV] = "1"
            proc = subprocess.Popen([sys.executable, "-m", "pkb_core.compile.builder"], stdin=subprocess.PIPE,
                                    stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=(write_fd, *netns),
                                    start_new_session=True)
            spawned(proc.pid)
            if containment.cgroup is not None:
                try:
                    containment.cgroup.join(proc.pid)
                except OSError as exc:
                    containment.gaps.append(f"a cgroup per build ({exc.strerror})")
            proc.stdin.write(line)
            proc.stdin.close()
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        return {"solution": solution, "proc": proc, "reply": read_fd, "data": bytearray(), "log": log,
                "started": time.monotonic(), "containment": containment, "scratch": scratch, "user": user,
                "output": made, "users": self._users}

    def _finished(self, build: dict) -> BuildResult | None:
        data = build["data"]
        try:
            while len(data) <= MAX_REPLY_BYTES:
                chunk = os.read(build["reply"], 1 << 16)
                if not chunk:
                    break
                data += chunk
        except BlockingIOError:
            pass
        seconds = time.monotonic() - build["started"]
        code = build["proc"].poll()
        if len(data) > MAX_REPLY_BYTES:
            # The solution's code writes into the reply pipe (its import ran in the builder): no
            # answer is that long, and a writer that keeps the pipe full would hold this loop, and
            # with it the time limit and a cancel, for as long as it writes.
            _kill(build)
            _release(build)
            return BuildResult(False, f"the build process wrote more than {MAX_REPLY_BYTES >> 20} MiB to its reply "
                                      f"pipe, where its answer is one line (log: {build['log'].name})", seconds)
        if code is None:
            if seconds <= self.timeout:
                return None
            _kill(build)
            result, cacheable = BuildResult(
                False, f"the build did not finish within {self.timeout:.0f} s (--build-timeout)", seconds), False
        else:
            result, cacheable = self._answer(build, code, seconds)
            _kill(build)  # whatever the solution's import left running dies with its builder
            if result.ok and build["output"] is not None:
                result, cacheable = _published(build, result)
        _release(build)
        if cacheable:
            try:
                store_outcome(self._path(build["solution"]), build["solution"], self.backend, result)
            except OSError:
                pass  # not kept (a full disk, a folder gone): the next run builds it again, the verdict stands
        return result

    def _answer(self, build, code, seconds) -> tuple[BuildResult, bool]:
        """The builder's answer and whether it may be cached (a process that
        died or answered nothing may have met the machine's trouble, not the
        solution's). A builder that died says how, before anything it wrote
        is read: the line it wrote before it died is no answer."""
        lines = build["data"].decode(errors="replace").strip().splitlines()
        checked = json.dumps(SourceChecked().to_json())
        if code != 0 or not lines or lines[-1] == checked:
            return self._died(build, code, seconds), False
        try:
            line = json.loads(lines[-1])
            if not isinstance(line, dict):
                raise ValueError
        except (ValueError, IndexError, RecursionError):
            return BuildResult(False, f"the build process sent no answer it could read (log: {build['log'].name})",
                               seconds), False
        try:
            answer = BuildAnswer.from_json(line)
        except (ContractError, TypeError, ValueError) as exc:  # the solution's code ran in that process
            return BuildResult(False, f"the build process sent a malformed answer ({str(exc)[:200]}; log: "
                                      f"{build['log'].name})", seconds), False
        if answer.ok:
            return BuildResult(True, "", seconds), True
        message = answer.message or "the build failed"
        verdict = failure_verdict(answer.verdict)
        if verdict == Verdict.UNSUPPORTED and lines[0] == checked:
            # Said after the solution's code ran (the source check had passed): not believed.
            verdict = Verdict.COMPILE_ERROR
            message += " (reported once its code was imported: a compile error, not unsupported)"
        return BuildResult(False, message, seconds, verdict=verdict), True

    def _died(self, build, code, seconds) -> BuildResult:
        """How a builder that gave no answer ended, in words: killed by the lockdown (a network
        socket or an io_uring while the solution's code ran: ``flagged``), by its memory
        limit, by another signal, or an exit without an answer."""
        log = build["log"].name
        hit = build["containment"].limit_hit()
        if hit:
            return BuildResult(False, f"the build was {hit} (log: {log})", seconds)
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            if name == "SIGSYS":
                return BuildResult(False, "the build process was killed for a system call the lockdown forbids "
                                          "(a network socket or an io_uring) while the solution's code ran "
                                          f"(log: {log})", seconds, verdict=Verdict.FLAGGED)
            return BuildResult(False, f"the build process died with {name} without an answer (log: {log})", seconds)
        return BuildResult(False, f"the build process exited with status {code} without an answer (log: {log})",
                           seconds)

    # -- the outcome cache (:mod:`pkb_core.compile.outcomes`) ----------------------------
    def _path(self, solution: str) -> Path:
        return outcome_path(self.backend, Path(solution), self.device)

    def _cached(self, solution: str) -> BuildResult | None:
        return read_outcome(self._path(solution), solution)

    def _report(self, solution, result, results, total):
        if self.on_result:
            self.on_result(solution, result, len(results), total)


def _published(build: dict, result: BuildResult) -> tuple[BuildResult, bool]:
    """Publish a succeeded build's output into pkb's cache (:func:`pkb_core.compile.output.publish`,
    once its processes are ended): ``result``, or a ``compile-error`` naming what pkb refused to
    publish (nothing of it is), and whether it may be cached (not where the machine failed: a
    full disk)."""
    try:
        output.publish(build["output"], cache_dir())
    except output.Refused as exc:
        return BuildResult(False, f"pkb did not publish the build's output into its cache: {exc}",
                           result.seconds), True
    except OSError as exc:
        return BuildResult(False, f"pkb could not publish the build's output into its cache ({exc})",
                           result.seconds), False
    return result, True


def _release(build: dict) -> None:
    """What a build held, once its processes are ended (:func:`_kill`): its reply pipe, its log,
    its cgroup and network, its temporary folder and its output folder with whatever was written
    there, and its user (:func:`pkb_core.compile.output.release`)."""
    from pkb_core.process import temp_folders

    if build.get("released"):
        return  # once: a phase ended by an error releases its running builds, this one among them
    build["released"] = True
    os.close(build["reply"])
    build["log"].close()
    build["containment"].close()
    temp_folders.remove(build["scratch"])
    output.release(build["user"], build["output"], build["users"])


def _kill(build: dict) -> None:
    """End a builder and everything it started (its compilers): its cgroup as a whole, else its session."""
    from pkb_core.process.reaper import reap_orphans
    from pkb_core.process.sessions import kill_sessions

    containment, proc = build["containment"], build["proc"]
    if containment.cgroup is None or not containment.cgroup.has("freeze"):
        kill_sessions([proc.pid])
    containment.end()
    proc.wait()
    reap_orphans()
