"""The reward service as its users meet it: a real ``pkb serve`` on a free localhost port
(CPU mode: groups of CPU ranks), reached over HTTP by httpx and by pkb's clients.

One server serves most tests (its lanes stay warm between them, as in use); the
overload, token and restart tests start their own.
"""
import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from pkb_core.client import AsyncClient, Client, ServiceError

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "backends" / "triton" / "pkb_triton" / "samples"
ALLREDUCE = (SAMPLES / "1_allreduce.py").read_text()
ALLGATHER = (SAMPLES / "2_allgather.py").read_text()
HANG = "import time\n\ndef solution(*args):\n    while True:\n        time.sleep(0.05)\n"
#: A hostile candidate: it leaves a process behind, writes into every folder it can reach,
#: and signals every process it can see, before returning a wrong answer.
HOSTILE = '''
import os, signal, glob

def solution(x):
    if os.fork() == 0:
        import time
        while True:
            time.sleep(0.01)
    for path in glob.glob("/dev/shm/*") + glob.glob("/tmp/*"):
        try:
            open(os.path.join(path, "planted.pyc"), "wb").write(b"x")
        except OSError:
            pass
    for pid in range(2, 4000):
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
    return x
'''


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A ``pkb serve`` process and its URL."""

    def __init__(self, data: Path, *args, token=None, host="127.0.0.1"):
        self.data = data
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data.parent / f"{data.name}-serve.log"
        env = dict(os.environ, **({"PKB_SERVE_TOKEN": token} if token else {}))
        self.proc = subprocess.Popen([sys.executable, "-m", "pkb_core", "serve", "--host", host, "--port",
                                      str(self.port), "--data", str(data), *args],
                                     stderr=open(self.log, "ab"), env=env, start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                httpx.get(self.url + "/v1/health", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError(f"pkb serve did not start: {self.log.read_text()}")

    def kill(self, sig=signal.SIGKILL) -> None:
        os.kill(self.proc.pid, sig)
        self.proc.wait(timeout=60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill(signal.SIGTERM)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = Server(tmp_path_factory.mktemp("serve") / "data", "--devices", "4", "--timeout", "30")
    yield running
    running.stop()


def test_a_submission_over_http_gets_pkb_runs_verdict_and_an_identical_one_its_record(server):
    body = {"problem": "1", "source": ALLREDUCE, "backend": "triton", "client": "http-test"}
    response = httpx.post(server.url + "/v1/jobs", json=body, timeout=30)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["state"] in ("queued", "building", "ready", "running")
    done = httpx.get(f"{server.url}/v1/jobs/{job['id']}/wait", params={"timeout": 60}, timeout=90).json()
    assert done["state"] == "done" and done["record"]["verdict"] == "pass", done
    assert done["record"]["world_size"] == 2 and done["record"]["trials"] == 5
    again = httpx.post(server.url + "/v1/jobs", json=body, timeout=30)
    assert again.status_code == 200 and again.json()["same_as"] == job["id"]
    assert again.json()["record"]["key"] == done["record"]["key"]
    fresh = httpx.post(server.url + "/v1/jobs", json={**body, "fresh": True}, timeout=30).json()
    assert fresh.get("same_as") is None and fresh["state"] != "done"
    with Client(server.url) as client:
        assert client.wait(fresh["id"], timeout=60).record.verdict.value == "pass"
        listed = client.jobs(client="http-test")
        assert {v.id for v in listed} >= {job["id"], fresh["id"]}
        stats = client.stats()
        assert stats.states.get("done", 0) >= 3 and stats.devices == 4
        assert any(group.world_size == 2 and group.backend == "triton" for group in stats.groups)


def test_the_clients_evaluate_wrong_and_correct_solutions(server):
    wrong = "def solution(x):\n    return x\n"
    with Client(server.url) as client:
        record = client.evaluate(1, wrong, backend="triton", client="sync")
        assert record.verdict.value == "fail" and "differ" in record.reason
    records = asyncio.run(_evaluate_many(server.url, [(2, ALLGATHER + "\n# async 1\n", {"backend": "triton"}),
                                                      (1, "def solution(x:\n", {"backend": "triton"}),
                                                      (1, wrong, {"backend": "triton", "world_size": 3})]))
    assert [r.verdict.value for r in records] == ["pass", "compile-error", "fail"]
    assert records[2].world_size == 3


async def _evaluate_many(url, items):
    async with AsyncClient(url) as client:
        return await client.evaluate_many(items, concurrency=3)


def test_pkb_submit_waits_and_exits_like_pkb_run(server, tmp_path):
    good, bad = tmp_path / "1_allreduce_mine.py", tmp_path / "1_allreduce_wrong.py"
    good.write_text(ALLREDUCE + "\n# submitted\n")
    bad.write_text("def solution(x):\n    return x * 2\n")
    command = [sys.executable, "-m", "pkb_core", "submit", "--server", server.url, "--backend", "triton", "--wait"]
    passed = subprocess.run([*command, str(good)], capture_output=True, text=True, timeout=120)
    assert passed.returncode == 0 and " done " in passed.stdout and "pass" in passed.stdout, passed.stderr
    failed = subprocess.run([*command, str(good), str(bad)], capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and "fail" in failed.stdout
    unnamed = tmp_path / "mine.py"
    unnamed.write_text(ALLREDUCE)
    refused = subprocess.run([*command, str(unnamed)], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "cannot tell the problem of mine.py" in refused.stderr
    nobody = subprocess.run([*command[:4], "--server", "http://127.0.0.1:9", str(good)], capture_output=True,
                            text=True, timeout=60)
    assert nobody.returncode == 1 and "cannot reach the service" in nobody.stderr


@pytest.mark.parametrize("body, status, words", [
    ("{not json", 400, "not JSON"),
    ({"problem": "1"}, 422, "missing field 'source'"),
    ({"problem": "1", "source": "x", "colour": "red"}, 422, "unknown field 'colour'"),
    ({"problem": "1", "source": "x", "trials": "five"}, 422, "Submission.trials: expected int"),
    ({"problem": "9999", "source": "x"}, 404, "9999"),
    ({"problem": "1", "source": "x", "backend": "nope"}, 404, "unknown backend 'nope'"),
    ({"problem": "1", "source": "x", "trials": 0}, 422, "trials 0 is out of range"),
    ({"problem": "1", "source": "x", "world_size": 64}, 422, "world size 64"),
    ({"problem": "1", "source": "x", "timing_modes": ["fast"]}, 422, "timing mode fast"),
    ({"problem": "1", "source": "x" * (600 << 10)}, 413, "at most"),
    ({"problem": "1", "source": "   "}, 422, "empty"),
])
def test_a_bad_request_is_one_line_of_4xx(server, body, status, words):
    if isinstance(body, str):
        response = httpx.post(server.url + "/v1/jobs", content=body, timeout=30)
    else:
        response = httpx.post(server.url + "/v1/jobs", json=body, timeout=30)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert words in error and "\n" not in error


def test_unknown_jobs_and_bad_queries_are_4xx(server):
    assert httpx.get(server.url + "/v1/jobs/nope").status_code == 404
    assert httpx.get(server.url + "/v1/jobs", params={"state": "lost"}).status_code == 422
    assert httpx.get(server.url + "/v1/jobs", params={"limit": "many"}).status_code == 422
    assert httpx.get(server.url + "/v1/jobs/nope/wait", params={"timeout": 999}).status_code in (404, 422)
    assert "/v1/jobs" in httpx.get(server.url + "/openapi.json").json()["paths"]


def test_a_running_job_is_cancelled_and_a_hostile_one_does_not_reach_the_next(server):
    with Client(server.url) as client:
        hanging = client.submit(1, HANG, backend="triton", client="cancel")
        deadline = time.monotonic() + 60
        while client.get(hanging.id).state.value != "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.get(hanging.id).state.value == "running"
        cancelled = client.cancel(hanging.id)
        assert client.wait(cancelled.id, timeout=30).state.value == "cancelled"
        hostile = client.evaluate(1, HOSTILE, backend="triton", client="cancel", timeout=10)
        # It stops what it can reach (its own peer rank: nothing else runs as its user).
        assert hostile.verdict.value in ("flagged", "fail", "crash", "error", "timeout"), hostile
        honest = client.evaluate(1, ALLREDUCE + "\n# after the hostile one\n", backend="triton", client="cancel")
        assert honest.verdict.value == "pass", honest.reason
        assert client.health()["ok"] is True


def test_a_full_queue_answers_429_and_a_token_guards_a_service(tmp_path):
    with pytest.raises(subprocess.CalledProcessError) as refused:
        subprocess.run([sys.executable, "-m", "pkb_core", "serve", "--host", "0.0.0.0", "--data", str(tmp_path / "x")],
                       check=True, capture_output=True, text=True, env={**os.environ, "PKB_SERVE_TOKEN": ""})
    assert "--token" in refused.value.stderr
    busy = Server(tmp_path / "busy", "--devices", "2", "--max-queued", "2", "--timeout", "20", token="s3cret")
    try:
        assert httpx.get(busy.url + "/v1/stats").status_code == 401
        assert httpx.get(busy.url + "/v1/health").status_code == 200
        headers = {"Authorization": "Bearer s3cret"}
        statuses = []
        for index in range(6):
            response = httpx.post(busy.url + "/v1/jobs", headers=headers, timeout=30,
                                  json={"problem": "1", "source": HANG + f"# {index}\n", "backend": "triton"})
            statuses.append(response.status_code)
            if response.status_code == 429:
                assert int(response.headers["retry-after"]) >= 1 and "queue is full" in response.json()["error"]
        assert statuses[:2] == [201, 201] and 429 in statuses
        with Client(busy.url, token="wrong") as client, pytest.raises(ServiceError) as denied:
            client.stats()
        assert denied.value.status == 401
    finally:
        busy.stop()


def test_a_killed_service_loses_no_job(tmp_path):
    data = tmp_path / "data"
    first = Server(data, "--devices", "2", "--timeout", "20")
    with Client(first.url) as client:
        done = client.submit(1, ALLREDUCE, backend="triton")
        done_record = client.wait(done.id, timeout=60).record
        assert done_record.verdict.value == "pass"
        waiting = [client.submit(2, ALLGATHER + f"\n# restart {i}\n", backend="triton") for i in range(3)]
    first.kill(signal.SIGKILL)
    second = Server(data, "--devices", "2", "--timeout", "20")
    try:
        with Client(second.url) as client:
            assert client.get(done.id).record == done_record
            finished = [client.wait(job.id, timeout=120) for job in waiting]
            assert [v.state.value for v in finished] == ["done"] * 3
            assert all(v.record.verdict.value == "pass" for v in finished)
        assert "queued again" in second.log.read_text() or all(v.started_at for v in finished)
    finally:
        second.stop()


def test_evaluate_in_process_gives_pkb_runs_record(tmp_path):
    import pkb_core

    record = pkb_core.evaluate(1, ALLREDUCE, backend="triton", trials=2, out=tmp_path / "run")
    assert record.verdict.value == "pass" and record.trials == 2
    assert (tmp_path / "run" / "records.jsonl").read_text().count("\n") == 1
    with pytest.raises(pkb_core.PkbError, match="unknown backend"):
        pkb_core.evaluate(1, ALLREDUCE, backend="nope")


def test_priority_then_fair_share_decide_who_runs_next(tmp_path):
    one_group = Server(tmp_path / "fair", "--devices", "2", "--timeout", "30")
    try:
        with Client(one_group.url) as client:
            blocker = client.submit(1, HANG, backend="triton", client="blocker", timeout=6)
            deadline = time.monotonic() + 60
            while client.get(blocker.id).state.value != "running" and time.monotonic() < deadline:
                time.sleep(0.1)
            greedy = [client.submit(2, ALLGATHER + f"\n# greedy {i}\n", backend="triton", client="greedy")
                      for i in range(3)]
            polite = client.submit(2, ALLGATHER + "\n# polite\n", backend="triton", client="polite")
            urgent = client.submit(2, ALLGATHER + "\n# urgent\n", backend="triton", client="late", priority=5)
            views = {v.id: client.wait(v.id, timeout=120) for v in [*greedy, polite, urgent]}
        order = [job_id for job_id, _ in sorted(views.items(), key=lambda item: item[1].started_at)]
        assert all(v.record.verdict.value == "pass" for v in views.values())
        # The high priority first; then one of greedy's, then polite's (it had none running), then greedy's rest.
        assert order[0] == urgent.id
        assert order.index(polite.id) <= 2, order
    finally:
        one_group.stop()


def test_the_attack_set_gets_pkb_runs_verdicts_through_the_service(fake_dist, tmp_path):
    """docs/trust.md's attack fixtures, submitted one by one to a warm service, end as they end under
    `pkb run` (tests/test_sealed.py), each its own job's verdict, and the honest control passes."""
    from test_sealed import CUSTOM_BACKEND, EXPECTED, GAIN_NOTHING

    fake_dist("pkbtest-plainpy", {"pkb.backends": {"plainpy": "pkbtest_plainpy"}}, {"pkbtest_plainpy": CUSTOM_BACKEND})
    folder = ROOT / "tests" / "fixtures" / "adversarial"
    attacks = Server(tmp_path / "attacks", "--devices", "2", "--timeout", "60")
    try:
        items = [(1, (folder / name).read_text(), {"backend": "plainpy", "trials": 2, "measure_perf": True,
                                                   "warmup": 3, "iters": 20, "label": name})
                 for name in sorted(EXPECTED)]
        with Client(attacks.url, timeout=120) as client:
            records = dict(zip(sorted(EXPECTED), client.evaluate_many(items, concurrency=4)))
    finally:
        attacks.stop()
    for name, (verdict, text) in EXPECTED.items():
        assert records[name].verdict.value == verdict, (name, records[name].reason)
        assert text in records[name].reason, (name, records[name].reason)
    for name in GAIN_NOTHING:
        assert not (records[name].claimed_speedup or 0) > 1, (name, records[name].speedup)


def _lane_pids(server_pid: int) -> list[int]:
    """The service's lane processes (its children running pkb_core.serve.lane)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == server_pid and b"pkb_core.serve.lane" in cmdline:
                found.append(int(entry))
    return found


def test_a_lane_that_dies_runs_its_job_once_more_then_records_an_error(server):
    with Client(server.url) as client:
        job = client.submit(1, HANG + "# lane killer\n", backend="triton", timeout=25, client="faults")
        for attempt in range(2):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                view = client.get(job.id)
                if view.state.value == "running" and len(_lane_pids(server.proc.pid)) > 0:
                    break
                time.sleep(0.1)
            time.sleep(1.0)  # the lane has taken the job
            for pid in _lane_pids(server.proc.pid):
                os.kill(pid, signal.SIGKILL)
        done = client.wait(job.id, timeout=60)
        assert done.state.value == "done" and done.record.verdict.value == "error", done
        assert "ran 2 times" in done.record.reason
        # The service goes on: a new group runs the next job.
        assert client.evaluate(1, ALLREDUCE + "\n# after the lanes died\n", backend="triton").verdict.value == "pass"
