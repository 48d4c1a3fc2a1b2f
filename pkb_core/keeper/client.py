"""A custom-kernel candidate's c10d store: a client of the group's keeper.

The keeper (:mod:`pkb_core.keeper`) serves counters and barriers, not a
key-value service: after :meth:`KeeperStore.seal` (pkb's code calls it before
the lockdown, so before any solution code) a SET of bytes or a GET of a key
ends the job as ``flagged``. This class is only the polite way to ask: the
keeper enforces its rules on whatever arrives on the connection, from this
class or not.

It is a ``torch.distributed.Store``, so ``init_process_group`` and
``new_group`` take it (neither uses the store by default), and torch symm_mem's
rendezvous on CUDA reaches the keeper's handle exchange through it.
"""
from __future__ import annotations

import base64
import json
import os
import socket
import threading
from datetime import timedelta

import torch.distributed as dist


class StoreRefused(RuntimeError):
    """The keeper answered with an error (before the seal: a pkb bug)."""


class KeeperStore(dist.Store):
    """One rank's connection to its group's keeper at ``host:port``."""

    def __init__(self, address: str, *, rank: int, token: str, timeout: timedelta):
        """:param address: ``unix:NAME`` (the keeper's abstract Unix socket, one node) or ``host:port``."""
        super().__init__()
        if address.startswith("unix:"):
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.settimeout(timeout.total_seconds())
            self._sock.connect("\0" + address[len("unix:"):])
        else:
            host, port = address.rsplit(":", 1)
            self._sock = socket.create_connection((host, int(port)), timeout=timeout.total_seconds())
        self._sock.settimeout(None)  # a barrier waits as long as the launcher's watchdog lets it
        self._file = self._sock.makefile("rb")
        self._lock = threading.Lock()
        self._timeout = timeout
        self._ask({"op": "hello", "rank": rank, "pid": os.getpid(), "token": token})

    def _ask(self, request: dict):
        with self._lock:
            self._sock.sendall(json.dumps(request).encode() + b"\n")
            line = self._file.readline()
        if not line:
            raise StoreRefused("the job's store keeper closed the connection")
        answer = json.loads(line)
        if "error" in answer:
            raise StoreRefused(str(answer["error"]))
        return answer["ok"]

    # -- what pkb's code uses after the seal ---------------------------------------------
    def seal(self) -> None:
        """From now on this connection gets only barriers (and, on CUDA, symm_mem's handle exchange)."""
        self._ask({"op": "seal"})

    def arrive(self, namespace: str, ranks) -> None:
        """Wait until every rank of ``ranks`` arrived at this barrier of ``namespace``."""
        self._ask({"op": "arrive", "ns": namespace, "ranks": sorted(ranks)})

    def vote(self, namespace: str, ranks, failed: bool) -> bool:
        """A barrier that returns whether any rank voted ``failed``."""
        return bool(self._ask({"op": "vote", "ns": namespace, "ranks": sorted(ranks), "failed": bool(failed)}))

    # -- torch.distributed.Store -------------------------------------------------------
    def set(self, key, value):
        value = value.encode() if isinstance(value, str) else bytes(value)
        self._ask({"op": "set", "key": key, "value": base64.b64encode(value).decode()})

    def get(self, key):
        return base64.b64decode(self._ask({"op": "get", "key": key}))

    def add(self, key, amount):
        return self._ask({"op": "add", "key": key, "amount": int(amount)})

    def check(self, keys):
        return all(self._ask({"op": "check", "key": key}) for key in keys)

    def wait(self, keys, timeout=None):
        for key in keys:
            self._ask({"op": "wait", "key": key})

    def delete_key(self, key):
        self._ask({"op": "delete", "key": key})
        return True

    def set_timeout(self, timeout):
        self._timeout = timeout

    @property
    def timeout(self):
        return self._timeout
