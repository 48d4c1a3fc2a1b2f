"""The launch's two kinds of fork server (pkb_core.launch.zygote): the judge's zygote has the
launcher's environment, the candidates' an allow-listed one, and neither forks the other's
children, so what the judge is handed never lies in memory a candidate is forked from. Both are
forked from the launch's base, which holds neither's."""
from __future__ import annotations

import os
import time

import pytest

from pkb_core.contracts.fork import ForkRequest
from pkb_core.contracts.outcome import JobEnded
from pkb_core.launch.zygote import JUDGE
from pkb_core.launch.zygotes import _Zygote


@pytest.mark.parametrize("kind, role", [(JUDGE, "candidate"), ("reference", "judge")])
def test_a_zygote_refuses_the_other_kinds_child(tmp_path, kind, role):
    with open(tmp_path / "zygote.log", "ab") as log:
        zygote = _Zygote(kind, dict(os.environ, PYTHONUNBUFFERED="1"), log)
        read, write = os.pipe()
        try:
            with pytest.raises(JobEnded, match="exited with status 1"):
                zygote.fork(ForkRequest(role=role, fds=["stdin"]), [read], time.monotonic() + 120)
        finally:
            os.close(read)
            os.close(write)
            zygote.stop()
    assert f"a {kind} zygote was asked for a {role}" in (tmp_path / "zygote.log").read_text()


def _memory_holds(pid: int, needle: bytes) -> bool:
    """Whether ``needle`` lies anywhere in the readable memory of process ``pid``."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                if needle in mem.read(end - start):
                    return True
            except (OSError, OverflowError, ValueError):
                continue
    return False


@pytest.mark.skipif(os.geteuid() != 0, reason="reading a zygote's memory (it is not dumpable) needs root")
def test_the_base_forks_the_judges_zygote_and_the_judges_variables_reach_no_other(tmp_path):
    from pkb_core.launch.zygotes import ZygoteBase, _Zygote
    from pkb_core.process.environment import allowed_environment
    from pkb_core.plugin.preload import PRELOAD_ENV

    secret = "pkb-test-" + os.urandom(12).hex()
    candidates = dict(allowed_environment(os.environ), PYTHONUNBUFFERED="1")
    judges = dict(os.environ, PYTHONUNBUFFERED="1", PKB_SERVE_TOKEN=secret)
    base = ZygoteBase(env=candidates, log_path=tmp_path / "launch.log")
    zygotes = []
    try:
        # The judge's variables are not read at start-up: its zygote is forked. A preload or an
        # interpreter setting must be in place before the process starts: those are not.
        assert base.forks(judges) and base.forks(candidates)
        assert not base.forks(dict(candidates, **{PRELOAD_ENV: "/x/libnccl.so"}))
        assert not base.forks(dict(judges, PYTHONMALLOC="malloc"))
        assert not base.forks({k: v for k, v in candidates.items() if k != "PATH"})
        with open(tmp_path / "launch.log", "ab") as log:
            judge = _Zygote(JUDGE, judges, log, base)
            zygotes.append(judge)
            judge.wait_ready(time.monotonic() + 120)
            candidate = _Zygote("reference", candidates, log, base)
            zygotes.append(candidate)
            candidate.wait_ready(time.monotonic() + 120)
        assert {judge.proc.pid, candidate.proc.pid} <= _children(base.server.proc.pid)  # forked, not started
        needle = secret.encode()
        assert _memory_holds(judge.proc.pid, needle)  # the scan finds it where it is
        assert not _memory_holds(candidate.proc.pid, needle)
        assert not _memory_holds(base.server.proc.pid, needle)
    finally:
        for zygote in zygotes:
            zygote.stop()
        base.stop()


def _children(pid: int) -> set:
    return {int(child) for task in os.listdir(f"/proc/{pid}/task")
            for child in open(f"/proc/{pid}/task/{task}/children").read().split()}


def test_a_new_child_never_inherits_the_exit_of_an_earlier_child_of_its_pid():
    """Pids wrap (32768 of them, within minutes on a busy machine): a child forked with the pid of
    one that exited earlier read that exit as its own, and the launcher, which reads its ranks'
    exits while it waits for their answers, called an honest rank dead ("exited with status 0
    before it answered")."""
    from pkb_core.launch.zygotes import _Forked, _Zygote

    zygote = object.__new__(_Zygote)
    zygote.exits, zygote.pending = {}, []
    zygote._take([{"exited": 4242, "code": 0}])  # an earlier child of pid 4242 ended
    zygote._take([{"pid": 4242}])  # the zygote forked a new one with that pid
    assert 4242 not in zygote.exits and zygote.pending == [{"pid": 4242}]
    zygote.read_exits = lambda: None
    assert _Forked(zygote, 4242).poll() is None
    zygote._take([{"exited": 4242, "code": 3}])  # the new one's own exit
    assert _Forked(zygote, 4242).poll() == 3
