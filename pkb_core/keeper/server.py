"""The store keeper: a candidate group's c10d store, served inside the group's own sandbox.

Every candidate group needs a rendezvous: its ranks find each other, and the
harness's barriers (and a solution's ``dist.barrier()``) count arrivals. That
service is a process of the group's own, the *keeper*, forked by the group's
rank 0 before any job code runs (:func:`pkb_core.keeper.process.start_keeper`, :mod:`pkb_core.keeper.process`).
It lives in rank 0's session, so the launcher's freeze and kill of the
candidate reach it, it is non-dumpable, and its memory is capped
(``RLIMIT_DATA``): whatever a candidate asks of its store costs the candidate's
own sandbox, never the launcher or the judge (whose store is separate).

Two kinds, chosen by the backend:

``counter`` (custom-kernel backends)
    pkb's own protocol (:mod:`pkb_core.keeper.client` is its client):
    JSON lines over the connection each rank opens before its lockdown. Until a
    rank *seals* its connection (its own pkb code does, just before the
    lockdown and the solution's import), the keeper is a small key-value store
    with bounded values, for the backend's start-up (an NVSHMEM unique id, the
    symmetric heap's first rendezvous). A sealed connection may only:

    - ``arrive`` at a barrier: a namespace of the harness's, the ranks of the
      group; the keeper counts generations itself, so an arrival carries no
      value, and answers every member when the last one arrives;
    - ``vote``: a barrier that answers whether any rank said "failed" (the
      device barrier's agreement); at most :data:`VOTES` per rank and job;
    - on CUDA, take part in torch symm_mem's handle exchange
      (``<prefix>/<seq>/<rank>``, :meth:`CounterKeeper._sealed`): set its own
      rank's entry once, at most :data:`EXCHANGE_BYTES` long, read the entries
      of an exchange it took part in, pass the exchange's barrier; at most
      :data:`EXCHANGES` per rank and job. This is the one channel a sealed
      candidate has through its store, bounded by construction: at most
      ``EXCHANGES`` entries of the sizes the heap's first (pre-seal) exchange
      had (torch's rendezvous request: a fixed-size struct) per rank and job.

    Anything else (a SET of payload bytes, a GET of another key, a counter
    read, a line too long) is refused: the keeper writes the reason to the
    launcher's report pipe and kills the rank, and the job is ``flagged``
    ("moved data through the job's store").

``tcpstore`` (the reference backend, whose solutions may build NCCL/gloo
    groups over it): torch's own ``TCPStore`` server on the same socket, with
    the same home and the same memory cap.
"""
from __future__ import annotations

import base64
import json
import os
import re
import selectors
import signal
import socket

#: Bytes of a sealed connection's line (a request); a longer one is refused.
SEALED_LINE = 4096
#: Bytes of a line before the seal (start-up values: ids and handles).
SETUP_LINE = 1 << 20
#: Bytes all unsealed values together may hold.
SETUP_BYTES = 16 << 20
#: Bytes of one symm_mem exchange entry (a rendezvous request is a few dozen).
EXCHANGE_BYTES = 256
#: Exchange entries one sealed rank may set per job (one per symmetric allocation).
EXCHANGES = 512
#: Votes one sealed rank may cast per job (the device barrier agrees twice).
VOTES = 8
#: Barriers that may wait open at once (a rank running ahead of its peers).
OPEN_BARRIERS = 4096
#: The barrier namespaces of the harness (:class:`pkb_core.harness.barrier.StoreBarrier` prefixes).
NAMESPACES = ("pkb-harness", "pkb-timing", "pkb-barrier", "pkb-agree")
#: Extra address space the keeper may use beyond what it holds when it starts.
MEMORY_HEADROOM = 256 << 20

_EXCHANGE_KEY = re.compile(r"^(?P<prefix>[\w./:-]{1,160})/(?P<seq>\d{1,9})/(?P<rank>\d{1,6})$")
def _exchange_name(prefix: str) -> str:
    """What an exchange is, whichever group's store it runs over: the last part of its prefix
    (torch's ``CUDASymmetricMemory``; a sub-group's store only puts its own prefix in front)."""
    return prefix.rsplit("/", 1)[-1]


class Refused(Exception):
    """A sealed connection asked for something the keeper does not serve."""


class _Conn:
    def __init__(self, sock):
        self.sock = sock
        self.buffer = b""
        self.rank = None
        self.pid = None
        self.sealed = False
        self.generations: dict = {}
        self.exchanged: set = set()
        self.votes = 0
        self.exchanges = 0


class CounterKeeper:
    """The ``counter`` kind (see the module docstring).

    :param report_fd: the launcher's report pipe: one JSON line per refusal.
    :param token: what every connection's ``hello`` must carry.
    :param cuda: whether symm_mem's handle exchange is served after the seal.
    """

    def __init__(self, listen: socket.socket, world_size: int, report_fd: int, token: str, cuda: bool,
                 peer_uid: int | None = None):
        self.listen = listen
        self.peer_uid = peer_uid
        self.greeted: set = set()  # ranks that said hello: one connection each, ever
        os.set_blocking(report_fd, False)  # a full pipe drops reports, never stalls the keeper
        self.world_size = world_size
        self.report_fd = report_fd
        self.token = token
        self.cuda = cuda
        self.values: dict[str, bytes] = {}
        self.held = 0
        self.entry_sizes: dict[str, set] = {}  # exchange name -> its entries' sizes (seen before the seal)
        self.barriers: dict = {}   # (ns, ranks, generation) -> {rank: (conn, flag)}
        self.parked: list = []     # (conn, request) waiting for keys
        self.selector = selectors.DefaultSelector()

    def serve(self) -> None:
        self.listen.setblocking(False)
        self.selector.register(self.listen, selectors.EVENT_READ, None)
        while True:
            for key, _ in self.selector.select():
                if key.data is None:
                    try:
                        sock, _ = self.listen.accept()
                    except OSError:
                        continue
                    conn = _Conn(sock)
                    if not self._admit(conn):
                        sock.close()  # not one of the group's processes: nothing of it is the group's doing
                        continue
                    sock.setblocking(True)
                    self.selector.register(sock, selectors.EVENT_READ, conn)
                else:
                    self._read(key.data)

    # -- connections ---------------------------------------------------------------
    def _admit(self, conn: _Conn) -> bool:
        """On a Unix socket the kernel names the peer (``SO_PEERCRED``): its pid is the
        one a refusal kills (never a pid the peer claims), and only the group's own
        user is served. Over TCP (ranks on other nodes) nobody is killed."""
        if conn.sock.family != socket.AF_UNIX:
            return True
        import struct

        pid, uid, _gid = struct.unpack("3i", conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                  struct.calcsize("3i")))
        # The group's ranks connect at start-up, still as the launcher's user, and become the
        # group's own user at their lockdown; any other user is another job's candidate.
        if self.peer_uid is not None and uid not in (self.peer_uid, os.getuid()):
            return False
        conn.pid = pid
        return True

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.buffer += data
        while b"\n" in conn.buffer:
            line, conn.buffer = conn.buffer.split(b"\n", 1)
            if not self._line(conn, line):
                return
        if len(conn.buffer) > (SEALED_LINE if conn.sealed else SETUP_LINE):
            self._refuse(conn, f"a store request of more than {len(conn.buffer)} bytes")

    def _line(self, conn: _Conn, line: bytes) -> bool:
        try:
            if len(line) > (SEALED_LINE if conn.sealed else SETUP_LINE):
                raise Refused(f"a store request of {len(line)} bytes")
            try:
                request = json.loads(line)
                op = request["op"]
            except (ValueError, KeyError, TypeError):
                raise Refused("a store request that is not pkb's protocol") from None
            self._handle(conn, op, request)
            return True
        except Refused as refused:
            self._refuse(conn, str(refused))
            return False

    def _drop(self, conn: _Conn) -> None:
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        self.parked = [(c, r) for c, r in self.parked if c is not conn]

    def _send(self, conn: _Conn, answer: dict) -> None:
        try:
            conn.sock.sendall(json.dumps(answer).encode() + b"\n")
        except OSError:
            self._drop(conn)

    def _refuse(self, conn: _Conn, what: str) -> None:
        """Report ``what`` to the launcher and kill the process that asked it (its pid as
        the kernel gave it, :meth:`_admit`). A connection that never greeted with the
        group's token is dropped unreported: it proves nothing about the group."""
        if conn.rank is None:
            self._drop(conn)
            return
        line = json.dumps({"rank": conn.rank, "refused": what[:300]}).encode()[:4000] + b"\n"
        try:
            os.write(self.report_fd, line)
        except OSError:  # a full pipe: the first reports are there already
            pass
        if conn.pid is not None:
            try:
                os.kill(conn.pid, signal.SIGKILL)
            except OSError:
                pass
        self._drop(conn)

    # -- requests ------------------------------------------------------------------
    def _handle(self, conn: _Conn, op: str, request: dict) -> None:
        if conn.rank is None:
            if op != "hello" or request.get("token") != self.token:
                raise Refused("a store connection without pkb's greeting")
            rank = request.get("rank")
            if not (isinstance(rank, int) and 0 <= rank < self.world_size):
                raise Refused("a greeting with no valid rank")
            conn.rank = rank
            if rank in self.greeted:  # a second connection would start unsealed: a way around the seal
                raise Refused(f"a second greeting for rank {rank} (each rank connects once)")
            self.greeted.add(rank)
            self._send(conn, {"ok": None})
            return
        if op == "seal":
            conn.sealed = True
            self._send(conn, {"ok": None})
        elif op in ("arrive", "vote"):
            self._arrive(conn, request, vote=op == "vote")
        elif conn.sealed:
            self._sealed(conn, op, request)
        else:
            self._setup(conn, op, request)

    def _arrive(self, conn: _Conn, request: dict, vote: bool) -> None:
        ns, ranks = request.get("ns"), request.get("ranks")
        if ns not in NAMESPACES or not isinstance(ranks, list) or not ranks or \
                any(not isinstance(r, int) or not 0 <= r < self.world_size for r in ranks) or \
                ranks != sorted(set(ranks)) or conn.rank not in ranks:
            raise Refused(f"a barrier the harness does not make ({str(ns)[:40]!r}, ranks {str(ranks)[:80]})")
        if vote:
            conn.votes += 1
            if conn.votes > VOTES:
                raise Refused(f"more than {VOTES} votes")
        name = (ns, tuple(ranks))
        generation = conn.generations.get(name, 0) + 1
        conn.generations[name] = generation
        arrived = self.barriers.setdefault((*name, generation), {})
        if len(self.barriers) > OPEN_BARRIERS:
            raise Refused(f"more than {OPEN_BARRIERS} barriers open at once")
        arrived[conn.rank] = (conn, bool(request.get("failed")) if vote else False)
        if len(arrived) == len(ranks):
            del self.barriers[(*name, generation)]
            failed = any(flag for _, flag in arrived.values())
            for member, _ in arrived.values():
                self._send(member, {"ok": failed if vote else None})

    def _sealed(self, conn: _Conn, op: str, request: dict) -> None:
        """After the seal: torch symm_mem's handle exchange on CUDA, nothing else.

        torch's exchange (``StoreExchange``) sets ``<prefix>/<seq>/<rank>``
        and reads every rank's entry of the same ``<seq>``, ``<rank>`` being a rank
        within the group whose store it runs over (PKB's files rendezvous on a
        problem's ``ep_group`` or ``pp_group`` too: ``0//2//CUDASymmetricMemory/8/0``
        on torch 2.11, a key that names no global rank); its barrier is
        c10d's ``Store::barrier``: add 1 to ``<prefix>/<seq>/num_members``, the
        last rank sets ``<prefix>/<seq>/last_member``, all wait for it. Each rank
        sets one entry per exchange (which slot is not checked: a sub-group's
        slot numbers name no global rank, and a rank taking a peer's slot only
        breaks its own job), never one already set, of a size that exchange's
        entries had before the seal, in whichever group (torch exchanges
        fixed-size structs; an exchange the heap's first rendezvous did not
        make is refused); the
        barrier's flag is stored as ``1`` whatever was sent; reads are of
        exchanges the rank took part in."""
        key = request.get("key")
        if not self.cuda or not isinstance(key, str):
            raise Refused(f"a {str(op)[:20]!r} of the job's store after the lockdown "
                          "(moved data through the job's store)")
        head, _, tail = key.rpartition("/")
        entry = _EXCHANGE_KEY.match(key)
        if op == "set" and entry is not None and head not in conn.exchanged and key not in self.values:
            value = _value(request)
            sizes = self.entry_sizes.get(_exchange_name(entry["prefix"]))
            if sizes is None or len(value) not in sizes:  # an exchange the heap never made before the seal
                raise Refused(f"a SET of {len(value)} bytes after the lockdown (moved data through the job's store)")
            self._count_exchange(conn)
            conn.exchanged.add(head)
            self.values[key] = value
        elif op == "set" and tail == "last_member" and len(_value(request)) <= 16:
            self.values[key] = b"1"
        elif op == "add" and tail == "num_members" and request.get("amount") == 1 and key not in conn.exchanged:
            conn.exchanged.add(key)  # a count of arrivals: no value of the rank's
            now = int(self.values.get(key, b"0")) + 1
            self.values[key] = str(now).encode()
            self._send(conn, {"ok": now})
            return
        elif op == "wait" and tail == "last_member":
            self._get(conn, request)
            return
        elif op in ("get", "wait") and entry is not None and head in conn.exchanged:
            self._get(conn, request)
            return
        else:
            raise Refused(f"a {str(op)[:20]!r} of {key[:80]!r} after the lockdown (moved data through the job's store)")
        self._send(conn, {"ok": None})
        self._wake()

    def _count_exchange(self, conn: _Conn) -> None:
        conn.exchanges += 1
        if conn.exchanges > EXCHANGES:
            raise Refused(f"more than {EXCHANGES} handle exchanges (moved data through the job's store)")

    def _setup(self, conn: _Conn, op: str, request: dict) -> None:
        """Before the seal (pkb's own code only): a bounded key-value store."""
        key = request.get("key")
        if not isinstance(key, str) or len(key) > 512:
            raise Refused(f"a store {op!r} without a valid key")
        if op == "set":
            value = _value(request)
            self.held += len(value) - len(self.values.get(key, b""))
            if self.held > SETUP_BYTES:
                raise Refused(f"more than {SETUP_BYTES} bytes held in the job's store")
            self.values[key] = value
            entry = _EXCHANGE_KEY.match(key)
            if entry is not None and len(value) <= EXCHANGE_BYTES:  # the heap's first rendezvous: its entry size
                self.entry_sizes.setdefault(_exchange_name(entry["prefix"]), set()).add(len(value))
            self._send(conn, {"ok": None})
            self._wake()
        elif op == "add":
            amount = request.get("amount")
            if not isinstance(amount, int):
                raise Refused("a store add of no integer")
            now = int(self.values.get(key, b"0")) + amount
            self.values[key] = str(now).encode()
            self._send(conn, {"ok": now})
            self._wake()
        elif op == "check":
            self._send(conn, {"ok": key in self.values})
        elif op == "delete":
            self.held -= len(self.values.pop(key, b""))
            self._send(conn, {"ok": None})
        elif op in ("get", "wait"):
            self._get(conn, request)
        else:
            raise Refused(f"a store operation pkb does not serve ({str(op)[:40]!r})")

    def _get(self, conn: _Conn, request: dict) -> None:
        if request["key"] in self.values:
            value = self.values[request["key"]]
            self._send(conn, {"ok": base64.b64encode(value).decode() if request["op"] == "get" else None})
        else:
            self.parked.append((conn, request))

    def _wake(self) -> None:
        parked, self.parked = self.parked, []
        for conn, request in parked:
            self._get(conn, request)


def _value(request: dict) -> bytes:
    try:
        return base64.b64decode(request["value"], validate=True)
    except (KeyError, TypeError, ValueError):
        raise Refused("a store SET without a valid value") from None
