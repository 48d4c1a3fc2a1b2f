"""Builders started warm: forked from a zygote.

A builder (:mod:`pkb_core.compile.builder`) is a fresh process per solution, locked
down before the solution's code runs; spawned, it pays Python's and torch's
start-up (about 2 s of CPU) for what is often a source check and an import.
:class:`WarmBuilders` keeps one zygote (:mod:`pkb_core.launch.zygote`, role ``builder``)
per backend and forks each builder from it in milliseconds, for ``pkb build``, the
reward service's compile pool and the Ray actors': the child starts
from the zygote's clean state (nothing of any solution ever ran there) in a
session of its own, and is the same builder ``pkb run``'s compile phase forks
from its launch's zygote (:func:`pkb_core.launch.zygotes.fork_builder`), with the
same request, lockdown, answer and outcome cache. So the verdicts are ``pkb run``'s.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time

from pkb_core.launch.zygotes import _Zygote, fork_builder
from pkb_core.plugin.preload import preload_environment
from pkb_core.process.environment import allowed_environment

#: Seconds a builder zygote may take to start (Python, torch, the backend's modules).
STARTUP_S = 180.0


class WarmBuilders:
    """One builder zygote per backend (and preload set), started on first use.

    :param log_path: the zygotes' log; None: a file with no name (nothing of it is left on disk
        once this process ends, however it ends)."""

    def __init__(self, log_path):
        self.log_path = log_path
        self.lock = threading.Lock()
        self._zygotes: dict = {}
        self._log = None

    def starter(self, backend: str, preload=(), environment=()):
        """A :attr:`BuildPhase.starter <pkb_core.compile.phase.BuildPhase.starter>` for ``backend``."""
        def start(request: bytes, log, reply_fd: int, extra: dict, containment):
            # The zygote's environment is pkb's allow-list and the backend's own names (``environment``);
            # ``extra`` is what every builder gets over it.
            zygote = self._zygote(backend, tuple(preload), tuple(environment))
            return fork_builder(zygote, request, log, reply_fd, extra, containment, time.monotonic() + STARTUP_S)

        return start

    def _zygote(self, backend: str, preload: tuple, environment: tuple = ()) -> _Zygote:
        with self.lock:
            key = (backend, preload, environment)
            if key not in self._zygotes or self._zygotes[key].proc.poll() is not None:
                if self._log is None and self.log_path is None:
                    self._log = tempfile.TemporaryFile(prefix="pkb-builders-")  # unlinked at once
                elif self._log is None:
                    self.log_path.parent.mkdir(parents=True, exist_ok=True)
                    self._log = open(self.log_path, "ab")
                # Its children run solution code: only the variables they need (no token, no key).
                env = dict(allowed_environment(os.environ, environment), PYTHONUNBUFFERED="1",
                           **preload_environment(preload))
                self._zygotes[key] = _Zygote(backend, env, self._log)
            return self._zygotes[key]

    def stop(self) -> None:
        with self.lock:
            for zygote in self._zygotes.values():
                zygote.stop()
            self._zygotes.clear()
            if self._log is not None:
                self._log.close()
