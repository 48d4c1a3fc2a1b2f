"""The store keeper of a candidate group (pkb_core.keeper), run for real: a keeper process and
clients (KeeperStore) in threads or forked children. Before the seal it is a bounded key-value store;
after it, barriers only (and on CUDA torch symm_mem's handle exchange), and any other request kills the
rank that made it and is reported on the launcher's pipe."""
import json
import os
import signal
import socket
import threading
from datetime import timedelta

import pytest

from pkb_core.keeper import server as keeper
from pkb_core.keeper.client import KeeperStore
from pkb_core.keeper.process import serve as serve_keeper

TOKEN = "t0ken"


@pytest.fixture
def start_keeper():
    started = []

    def start(world_size=2, cuda=False, peer_uid=None):
        # As the launcher makes it on one node (pkb_core.keeper.listener.KeeperSocket): an abstract Unix socket.
        from pkb_core.keeper.listener import KeeperSocket

        made = KeeperSocket(unix=True)
        listen, report_read, report_write = made.listen, made.report_read, made.report_write
        pid = os.fork()
        if pid == 0:
            try:
                os.close(report_read)
                serve_keeper("counter", listen.fileno(), report_write, world_size, TOKEN, cuda, peer_uid=peer_uid)
            finally:
                os._exit(1)
        os.close(report_write)
        started.append(pid)
        listen.close()

        def connect(rank):
            return KeeperStore(made.address, rank=rank, token=TOKEN, timeout=timedelta(seconds=10))

        def report():
            try:
                return [json.loads(line) for line in os.read(report_read, 1 << 16).splitlines()]
            except BlockingIOError:
                return []
        connect.address = made.address
        return connect, report

    yield start
    for pid in started:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _in_child(action) -> int:
    """Run ``action`` in a forked child; its exit code or minus its signal."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            action()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _both(fn):
    """``fn(rank)`` for ranks 0 and 1 at once; their results."""
    results = [None, None]

    def run(rank):
        results[rank] = fn(rank)
    threads = [threading.Thread(target=run, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return results


def test_sealed_ranks_meet_at_barriers_and_votes(start_keeper):
    connect, report = start_keeper()
    stores = [connect(0), connect(1)]
    for store in stores:
        store.seal()
    for _ in range(3):
        _both(lambda r: stores[r].arrive("pkb-barrier", [0, 1]))
    _both(lambda r: stores[r].arrive("pkb-harness", [r]))  # a subgroup of one passes alone
    assert _both(lambda r: stores[r].vote("pkb-agree", [0, 1], failed=False)) == [False, False]
    assert _both(lambda r: stores[r].vote("pkb-agree", [0, 1], failed=r == 1)) == [True, True]
    assert report() == []


def test_before_the_seal_it_is_a_bounded_key_value_store(start_keeper):
    connect, report = start_keeper()
    a, b = connect(0), connect(1)
    a.set("uid", b"\x00\x01id")
    assert b.get("uid") == b"\x00\x01id"
    assert a.add("n", 2) == 2 and b.add("n", 1) == 3
    assert a.check(["uid"]) and not a.check(["nothing"])


@pytest.mark.parametrize("attack", ["set", "get", "add", "flood", "foreign barrier", "votes"])
def test_a_sealed_rank_that_asks_for_data_is_killed_and_reported(start_keeper, attack):
    connect, report = start_keeper()
    peer = connect(0)
    peer.set("left-before-the-seal", b"secret")

    def attacker():
        store = connect(1)
        store.seal()
        if attack == "set":
            store.set("payload/1", b"\x00" * 512)
        elif attack == "get":
            store.get("left-before-the-seal")
        elif attack == "add":
            store.add("counter", 1 << 40)
        elif attack == "flood":
            store._sock.sendall(b"x" * (keeper.SEALED_LINE + 10))
            store._file.readline()
        elif attack == "foreign barrier":
            store.arrive("mine", [0, 1])
        else:
            for _ in range(keeper.VOTES + 1):
                store.vote("pkb-agree", [1], failed=True)

    assert _in_child(attacker) == -signal.SIGKILL
    (line,) = report()
    assert line["rank"] == 1, line


def test_cuda_handle_exchange_is_served_bounded_after_the_seal(start_keeper):
    connect, report = start_keeper(cuda=True)
    stores = [connect(0), connect(1)]
    _both(lambda r: stores[r].set(f"0/symm/0/{r}", b"\x07" * 40))  # the heap's first rendezvous, before the seal
    for store in stores:
        store.seal()

    def exchange(rank):
        store = stores[rank]
        store.set(f"0/symm/3/{rank}", bytes([rank]) * 40)
        store.wait([f"0/symm/3/{r}" for r in (0, 1)])  # c10d's multiGet waits, then gets
        got = [store.get(f"0/symm/3/{r}") for r in (0, 1)]
        if store.add("0/symm/4/num_members", 1) == 2:
            store.set("0/symm/4/last_member", b"anything")
        store.wait(["0/symm/4/last_member"])
        return got

    assert _both(exchange) == [[b"\x00" * 40, b"\x01" * 40]] * 2

    def subgroup_exchange(rank):
        """The same exchange over a sub-group's store (torch 2.11: ``0//2//<name>``), its
        entries by rank within the group: here the group (1, 0), so rank 1 writes slot 0."""
        store, prefix = stores[rank], "0//2//symm"
        slot = (1, 0).index(rank)
        store.set(f"{prefix}/12/{slot}", bytes([rank]) * 40)
        store.wait([f"{prefix}/12/{s}" for s in (0, 1)])
        return [store.get(f"{prefix}/12/{s}") for s in (0, 1)]

    assert _both(subgroup_exchange) == [[b"\x01" * 40, b"\x00" * 40]] * 2
    assert report() == []


EXCHANGE_ATTACKS = {
    # a rank's second entry in one exchange (its own slot, then its peer's)
    "two entries": (lambda store: (store.set("0/symm/9/1", b"x" * 40), store.set("0/symm/9/0", b"x" * 40)),
                    "a 'set' of '0/symm/9/0'"),
    "oversized": (lambda store: store.set("0/symm/10/1", b"x" * (keeper.EXCHANGE_BYTES + 1)),
                  f"a SET of {keeper.EXCHANGE_BYTES + 1} bytes"),
    # entries keep the size of the exchange's first (pre-seal) entries, in any group
    "other size": (lambda store: store.set("0//2//symm/11/0", b"x" * 41), "a SET of 41 bytes"),
    # an "exchange" the heap never made before the seal: a payload in disguise
    "new exchange": (lambda store: store.set("0/payload/1/1", b"x" * 40), "a SET of 40 bytes"),
}


@pytest.mark.parametrize("attack", sorted(EXCHANGE_ATTACKS))
def test_a_sealed_rank_that_stretches_the_handle_exchange_is_killed(start_keeper, attack):
    connect, report = start_keeper(cuda=True)
    action, reason = EXCHANGE_ATTACKS[attack]

    def attacker():
        store = connect(1)
        store.set("0/symm/0/1", b"\x07" * 40)  # the heap's first rendezvous, before the seal
        store.seal()
        action(store)

    assert _in_child(attacker) == -signal.SIGKILL
    (line,) = report()
    assert line["rank"] == 1 and line["refused"].startswith(reason), line


def _raw(connect):
    """A plain connection to the keeper, as any process could open one."""
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect("\0" + connect.address[len("unix:"):])
    raw.settimeout(10)
    return raw


def test_a_connection_without_the_token_is_dropped_unreported(start_keeper):
    """A process that is not one of the group's ranks (another job's, say) proves nothing about the
    group: it is closed, nobody is killed, nothing is reported against the group."""
    connect, report = start_keeper()
    raw = _raw(connect)
    raw.sendall(json.dumps({"op": "hello", "rank": 0, "pid": os.getpid(), "token": "guessed"}).encode() + b"\n")
    assert raw.recv(100) == b""
    assert report() == []


def test_a_flood_of_strangers_never_stalls_the_keeper(start_keeper):
    """Hundreds of connections that say nothing valid (each once filled the report pipe, and a keeper
    blocked on it served the honest next job nothing): the group's ranks still meet."""
    connect, report = start_keeper()
    for _ in range(1000):
        raw = _raw(connect)
        raw.sendall(b"not pkb's protocol\n")
        raw.recv(10)
        raw.close()
    assert _both(lambda rank: connect(rank).add("met", 1)) in ([1, 2], [2, 1])
    assert report() == []


def test_the_keeper_kills_the_peer_the_kernel_names_never_a_claimed_pid(start_keeper):
    """A refused request kills the process that sent it, by the pid SO_PEERCRED gives, whatever pid
    its greeting claimed (a claimed pid once let a candidate have the keeper kill the launcher)."""
    connect, report = start_keeper()
    bystander = os.fork()
    if bystander == 0:
        signal.pause()
        os._exit(0)

    def attacker():
        raw = _raw(connect)
        raw.sendall(json.dumps({"op": "hello", "rank": 1, "pid": bystander, "token": TOKEN}).encode() + b"\n")
        raw.recv(100)
        raw.sendall(b"not pkb's protocol\n")
        raw.recv(100)

    try:
        assert _in_child(attacker) == -signal.SIGKILL
        assert os.waitpid(bystander, os.WNOHANG) == (0, 0)  # alive
    finally:
        os.kill(bystander, signal.SIGKILL)
        os.waitpid(bystander, 0)
    assert [line["rank"] for line in report()] == [1]


def test_a_second_greeting_for_a_rank_is_refused(start_keeper):
    """Each rank connects once: a new connection would start unsealed, a way around the seal
    (reconnect, greet again, move payloads through SET/GET)."""
    connect, report = start_keeper()
    first = connect(1)
    first.seal()

    def again():
        store = connect(1)
        store.set("payload", b"\x00" * 64)

    assert _in_child(again) == -signal.SIGKILL
    assert "second greeting for rank 1" in report()[0]["refused"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_another_users_connection_is_closed_unanswered(start_keeper):
    """Only the group's own user (its sandbox uid) is served: another job's candidates are other users."""
    connect, report = start_keeper(peer_uid=0x70000001)

    def stranger():
        os.setgid(0x70000002)
        os.setuid(0x70000002)
        raw = _raw(connect)
        try:
            raw.sendall(json.dumps({"op": "hello", "rank": 0, "pid": os.getpid(), "token": TOKEN}).encode() + b"\n")
            assert raw.recv(100) == b""
        except (ConnectionResetError, BrokenPipeError):
            pass  # closed before it read the greeting (or before it was sent)

    assert _in_child(stranger) == 0
    assert report() == []


def test_the_judges_store_takes_no_connection_once_its_door_is_closed():
    """The launcher closes the judge's store to new connections once the judge's ranks are in:
    they go on, a later process (a reference-backend candidate) cannot get in, and the server
    does not spin."""
    import resource
    import time

    import torch.distributed as dist

    from pkb_core.launch.stores import JudgeStore

    judge_store = JudgeStore(2, startup_s=5)
    host, port = judge_store.address.rsplit(":", 1)
    rank = dist.TCPStore(host, int(port), 2, is_master=False, timeout=timedelta(seconds=5))
    rank.set("before", b"1")
    judge_store.close_door()
    used = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(0.5)
    after = resource.getrusage(resource.RUSAGE_SELF)
    assert (after.ru_utime + after.ru_stime) - (used.ru_utime + used.ru_stime) < 0.1
    assert rank.add("still", 1) == 1 and rank.get("before") == b"1"
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=1.0)
