"""The reward service as its users meet it: a real ``pkb serve`` on a free localhost port
(CPU mode: groups of CPU ranks), reached over HTTP by httpx and by pkb's clients.

One server serves most tests (its lanes stay warm between them, as in use); the
overload, token and restart tests start their own.
"""
import asyncio
import json
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
                                                      (1, "", {"backend": "triton"}),
                                                      (1, wrong, {"backend": "triton", "world_size": 3})]))
    assert [r.verdict.value for r in records] == ["pass", "compile-error", "compile-error", "fail"]
    assert "empty" in records[2].reason and records[3].world_size == 3


def test_a_source_that_is_no_solution_file_is_its_jobs_compile_error_not_a_refusal(server):
    """A reward API answers every submission with a record: an empty, undecodable or oversized
    source is a compile-error record with the reason, stored like any job."""
    cases = [("   \n", "the source is empty"), ("def solution(x):\n    return x  # \udcff\n", "not UTF-8 text"),
             ("#" * (600 << 10), "614400 bytes; this service takes at most 524288")]
    with Client(server.url) as client:
        for source, words in cases:
            view = client.submit(1, source, backend="triton", client="defects")
            assert view.state.value == "done" and view.record.verdict.value == "compile-error", view
            assert words in view.record.reason and view.record.feedback.summary == view.record.reason
            stored = httpx.get(f"{server.url}/v1/jobs/{view.id}", timeout=30).json()
            assert stored["state"] == "done" and stored["record"]["verdict"] == "compile-error"
        # What a client that decoded bytes with surrogateescape sends: a lone surrogate, escaped in JSON.
        raw = httpx.post(server.url + "/v1/jobs", timeout=30,
                         content=b'{"problem": "2", "source": "x = 1  # \\udcff", "backend": "triton"}')
        assert raw.status_code == 200 and raw.json()["record"]["verdict"] == "compile-error", raw.text
        # A batch gets one record per item, in order, whatever one of them holds.
        records = client.evaluate_many([(1, ALLREDUCE, {"backend": "triton"}), (2, "", {"backend": "triton"}),
                                        (1, "\udcff", {"backend": "triton"})], concurrency=3)
    assert [(r.problem, r.verdict.value) for r in records] == \
        [("1_allreduce", "pass"), ("2_allgather", "compile-error"), ("1_allreduce", "compile-error")]


def test_the_grpo_reward_function_of_the_docs_runs_as_written(server, monkeypatch):
    """docs/serve.md's GRPO sketch, run as written against a local service: a group of completions,
    one of them without code, gets one reward each, in order."""
    doc = (ROOT / "docs" / "serve.md").read_text()
    code = doc.split("### A reward function for a GRPO-style trainer", 1)[1].split("```python\n", 1)[1]
    code = code.split("\n```\n", 1)[0]
    monkeypatch.setenv("PKB_SERVER", server.url)
    namespace = {}
    exec(compile(code, "docs/serve.md (GRPO sketch)", "exec"), namespace)
    completions = ["I cannot write this kernel.",
                   f"Here is a one-shot all-reduce:\n```python\n{ALLREDUCE}# grpo\n```\nDone.",
                   "Sorry, no code this time."]

    async def score():
        try:
            return await namespace["rewards"](1, completions)
        finally:
            await namespace["PKB"].aclose()

    rewards = asyncio.run(score())
    assert len(rewards) == 3 and rewards[0] == rewards[2] == 0.0 and rewards[1] >= 1.0, rewards
    with Client(server.url) as client:
        records = [view.record for view in client.jobs(client="grpo")]
    assert sorted(r.verdict.value for r in records) == ["compile-error", "compile-error", "pass"]
    assert all("the source is empty" in r.reason for r in records if r.verdict.value == "compile-error")


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
    assert refused.returncode == 1 and f"Error: {unnamed}: cannot tell its problem" in refused.stderr
    nobody = subprocess.run([*command[:4], "--server", "http://127.0.0.1:9", "--backend", "triton", str(good)],
                            capture_output=True, text=True, timeout=60)
    assert nobody.returncode == 1 and "cannot reach the service" in nobody.stderr


def test_ctrl_c_in_pkb_submit_wait_says_the_jobs_go_on_and_how_to_reach_them(server, tmp_path):
    """Interrupting ``pkb submit --wait`` stops nothing on the service: it exited 2 without a word (a
    new user's pass, 2026-12-01); it says the jobs go on, their ids, and how to read or cancel them."""
    hang = tmp_path / "1_allreduce_hangs.py"
    hang.write_text("import time\n\n\ndef solution(x):\n    time.sleep(600)\n    return x\n")
    proc = subprocess.Popen([sys.executable, "-m", "pkb_core", "submit", "--server", server.url, "--backend",
                             "reference", "--client", "ctrl-c", "--wait", str(hang)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
    job_id = proc.stderr.readline().split()[0]  # the job's line, once it is queued
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    try:
        assert proc.returncode == 2, stderr
        assert f"interrupted: the 1 job(s) submitted go on on the service ({job_id}); `pkb jobs {job_id}` shows " \
               f"them, `pkb cancel {job_id}` stops them" in stderr, stderr
        with Client(server.url) as client:
            assert not client.get(job_id).state.final
    finally:
        with Client(server.url) as client:
            client.cancel_jobs(None, client="ctrl-c")


def test_pkb_submit_leaves_out_a_file_whose_name_is_not_printable_in_one_line(server, tmp_path):
    """The service refused the name, and the client's error line printed its newline raw: a second
    line that read as a job that passed (a hostile review, 2026-12-01)."""
    odd = tmp_path / "1_allreduce_n\nj1  done  1_allreduce  evil  pass  9.99x.py"
    odd.write_text(ALLREDUCE)
    sent = _pkb("submit", "--server", server.url, "--backend", "triton", str(odd), timeout=60)
    assert sent.returncode == 1 and sent.stderr.strip().splitlines() == [
        f"Error: {str(odd)!r}: its name holds a character that is not printable (a newline, a control code): "
        "rename it; not submitted"], sent.stderr


def _pkb(*args, env=None, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pkb_core", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def _errors(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


def test_pkb_submit_takes_each_files_declared_backend_and_leaves_out_only_the_bad_files(server, tmp_path):
    declared = tmp_path / "1_declared.py"
    declared.write_text('BACKEND = "triton"\n' + ALLREDUCE + "\n# declared\n")
    plain = tmp_path / "2_plain.py"
    plain.write_text(ALLGATHER + "\n# plain\n")
    latin = tmp_path / "1_latin.py"
    latin.write_bytes(b'x = "\xff"\n')
    command = ["submit", "--server", server.url, "--client", "cli-real"]
    # A file that declares no backend, and no --backend: nothing is sent.
    unbacked = _pkb(*command, str(declared), str(plain))
    assert unbacked.returncode == 4 and _errors(unbacked.stderr) == [
        'Error: no backend for 2_plain.py: pass --backend NAME, declare BACKEND = "NAME" in the file, '
        "or set backend in [submit] of pkb.toml"]
    with Client(server.url) as client:
        assert client.jobs(client="cli-real") == []
    # The file's declaration wins over a configured default; an undecodable file is one line, as is
    # one that is not there, and the other is still queued, its id printed as it is queued;
    # --wait prints the speedup of a timed job.
    env = dict(os.environ, PKB_SUBMIT_BACKEND="reference")
    missing = tmp_path / "1_missing.py"
    sent = _pkb(*command, "--measure-perf", "--wait", str(latin), str(missing), str(declared), env=env)
    assert sent.returncode == 1, sent.stderr
    assert _errors(sent.stderr) == [f"Error: {latin}: is not UTF-8 text (invalid start byte at byte 5); not submitted",
                                    f"Error: {missing}: cannot read it (No such file or directory); not submitted"]
    queued = [line.split()[0] for line in sent.stderr.splitlines() if line.endswith(str(declared))]
    with Client(server.url) as client:
        [job] = client.jobs(client="cli-real")
    assert job.backend == "triton" and job.record.solution == f"1_declared-{job.id}.py"
    [final] = sent.stdout.splitlines()
    assert queued == [job.id] and final.startswith(f"{job.id}  done       1_allreduce  {declared}  pass  "), final
    # The speedup as `pkb run` prints it: the ratio with its 95 % interval when it has one, and the reading.
    record = job.record
    reading = f"{record.difference} (host timing)"
    assert record.speedup is not None and record.difference and final.endswith(reading), final
    if record.speedup_ci:  # two decimals, or two significant digits below 0.1 (0.054x, not 0.05x)
        low, high = record.speedup_ci
        shown = [f"{v:.2f}" if v >= 0.1 else f"{v:.2g}" for v in (record.speedup, low, high)]
        assert f"  {shown[0]}x [{shown[1]}, {shown[2]}]  {reading}" in final, final
    lines = (server.data / "runs" / "triton-W2" / "records.jsonl").read_text().splitlines()
    assert sum(f'"solution": "1_declared-{job.id}.py"' in line for line in lines) == 1
    # A --backend that contradicts the file's declaration, and an option the service refuses: a line each.
    refused = _pkb(*command, "--backend", "reference", "--timeout", "5000", str(declared), str(plain))
    assert refused.returncode == 1 and refused.stdout == ""
    assert _errors(refused.stderr) == [
        f'Error: {declared}: it declares BACKEND = "triton" but --backend reference was given; not submitted',
        f"Error: {plain}: the service refused it: timeout 5000.0 is out of range (above 0, at most 30 s on this "
        "service) (422)"]  # the service's own --timeout bounds what a submission asks for


def test_a_file_that_does_not_parse_still_declares_its_backend_by_its_own_line():
    """A service user's batch of `pkb submit` stopped whole ("no backend for ...") at a model's file
    with a syntax error that did declare `BACKEND = "reference"`: it goes to its backend now, to be
    answered `compile-error` there. Only a line of its own from the first column counts."""
    from pkb_core.problem.solution_backend import declared_backend

    assert declared_backend('BACKEND = "reference"\ndef solution(x:\n    return x\n') == "reference"
    assert declared_backend('BACKEND: str = "triton"  # mine\nif (:\n') == "triton"
    assert declared_backend('def f(:\n    BACKEND = "triton"\n') is None  # indented: not the module's
    assert declared_backend('x = BACKEND = "triton" + (\n') is None
    # A file that parses is read by its syntax alone (the last top-level assignment).
    assert declared_backend('BACKEND = "cuda"\nBACKEND = "triton"\n') == "triton"


def test_one_call_cancels_every_unfinished_job_of_a_client(server):
    with Client(server.url) as client:
        bulk = [client.submit(1, HANG + f"# bulk {i}\n", backend="triton", client="bulk") for i in range(4)]
        bystander = client.submit(1, HANG + "# bystander\n", backend="triton", client="bystander")
        deadline = time.monotonic() + 120
        while not any(client.get(v.id).state.value == "running" for v in bulk) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert any(client.get(v.id).state.value == "running" for v in bulk)  # one runs, the others wait
        assert _pkb("cancel", "--server", server.url).returncode == 4
        assert httpx.post(server.url + "/v1/jobs/cancel", json={}, timeout=30).status_code == 422
        answer = _pkb("cancel", "--server", server.url, "--client", "bulk", "--json")
        assert answer.returncode == 0, answer.stderr
        said = json.loads(answer.stdout)
        assert sorted(said["cancelled"] + said["stopping"]) == sorted(v.id for v in bulk) and said["stopping"]
        assert [client.wait(v.id, timeout=60).state.value for v in bulk] == ["cancelled"] * 4
        assert not client.get(bystander.id).state.final
        by_id = client.cancel_jobs([bystander.id])
        assert set(by_id.cancelled + by_id.stopping) == {bystander.id}
        assert client.wait(bystander.id, timeout=60).state.value == "cancelled"


def test_a_busy_port_and_a_missing_serve_extra_are_one_line_and_exit_4(server, tmp_path):
    busy = _pkb("serve", "--port", str(server.port), "--data", str(tmp_path / "busy"))
    assert busy.returncode == 4 and _errors(busy.stderr) == [
        f"Error: port {server.port} on 127.0.0.1 is in use (another pkb serve?): stop what listens there, "
        "or choose another --port (0: any free one)"]
    assert not (tmp_path / "busy").exists()  # refused before the service touched anything
    shadow = tmp_path / "without-serve-extra" / "uvicorn"  # what an install without pkb[serve] lacks
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'uvicorn'\", name='uvicorn')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")]))
    missing = _pkb("serve", "--port", "0", "--data", str(tmp_path / "missing"), env=env)
    assert missing.returncode == 4 and _errors(missing.stderr) == [
        "Error: pkb serve needs pkb's serve extra, which is not installed (No module named 'uvicorn'): "
        "pip install 'pkb[serve]'"]


@pytest.mark.parametrize("body, status, words", [
    ("{not json", 400, "not JSON"),
    ({"problem": "1", "backend": "triton"}, 422, "missing field 'source'"),
    # no backend is judged by none: it was `reference`'s rules, under which an NCCL call passes
    ({"problem": "1", "source": "x"}, 422, "missing field 'backend'"),
    ({"problem": "1", "source": "x", "backend": "triton", "colour": "red"}, 422, "unknown field 'colour'"),
    ({"problem": "1", "source": "x", "backend": "triton", "trials": "five"}, 422, "Submission.trials: expected int"),
    ({"problem": "9999", "source": "x", "backend": "triton"}, 404, "9999"),
    ({"problem": "1", "source": "x", "backend": "nope"}, 404, "unknown backend 'nope'"),
    ({"problem": "1", "source": "x", "backend": "triton", "trials": 0}, 422, "trials 0 is out of range"),
    ({"problem": "1", "source": "x", "backend": "triton", "world_size": 64}, 422, "world size 64"),
    ({"problem": "1", "source": "x", "backend": "triton", "timing_modes": ["fast"]}, 422, "timing mode fast"),
    ({"problem": "1", "source": "x", "backend": "triton", "timing_modes": ["window", "window"]}, 422,
     "timing mode window given twice"),
    ({"problem": "1", "source": "x" * (9 << 20), "backend": "triton"}, 413, "at most"),
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
    # An unknown route or method answers in the API's shape, one line (it was FastAPI's {"detail": ...}).
    route = httpx.get(server.url + "/v1/nope")
    assert route.status_code == 404 and route.json() == {"error": "no route /v1/nope"}
    method = httpx.delete(server.url + "/v1/jobs")
    assert method.status_code == 405 and method.json() == {"error": "DELETE is not a method of /v1/jobs"}
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
        # Its line in the lane's records says so: no `error` that pkb report would count as a failure.
        lines = (server.data / "runs" / "triton-W2" / "records.jsonl").read_text().splitlines()
        [line] = [json.loads(text) for text in lines if f'"solution": "1_allreduce-{hanging.id}.py"' in text]
        assert line["verdict"] == "cancelled" and line["reason"].startswith("cancelled while it ran"), line
        hostile = client.evaluate(1, HOSTILE, backend="triton", client="cancel", timeout=10)
        # It stops what it can reach (its own peer rank: nothing else runs as its user).
        assert hostile.verdict.value in ("flagged", "fail", "crash", "error", "timeout"), hostile
        honest = client.evaluate(1, ALLREDUCE + "\n# after the hostile one\n", backend="triton", client="cancel")
        assert honest.verdict.value == "pass", honest.reason
        assert client.health()["ok"] is True


def test_a_service_that_cannot_be_reached_is_one_service_error():
    """Issue 55: not httpx's ConnectError, which a trainer's reward function would not expect."""
    from pkb_core.client.http import UNREACHABLE

    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    with Client(url) as client, pytest.raises(ServiceError) as raised:
        client.evaluate(1, ALLREDUCE, backend="triton")
    assert raised.value.status == UNREACHABLE and str(raised.value) == raised.value.message
    assert raised.value.message.startswith(f"cannot reach the service at {url}: ")
    assert "\n" not in raised.value.message

    async def stats():
        async with AsyncClient(url) as client:
            return await client.stats()

    with pytest.raises(ServiceError, match=f"^cannot reach the service at {url}: "):
        asyncio.run(stats())


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
        # A second service on the same data directory is refused, having touched nothing.
        intruder = _pkb("serve", "--port", "0", "--data", str(data), "--devices", "2")
        assert intruder.returncode == 4 and _errors(intruder.stderr) == [
            f"Error: the data directory {data} is in use by another pkb service (pid {first.proc.pid}): "
            "stop that one, or give this one another data directory (--data)"]
        assert "requeued" not in " ".join(client.get(job.id).note for job in waiting)
    # Killed with kill -9, the first one's lock goes with it: a new service takes the folder over.
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
    # A source that is no solution file is its record, at once, written where asked.
    empty = pkb_core.evaluate(1, "\n", backend="triton", out=tmp_path / "run")
    undecodable = pkb_core.evaluate(1, "x = '\udcff'\n", backend="triton")
    assert (empty.verdict.value, undecodable.verdict.value) == ("compile-error", "compile-error")
    assert "empty" in empty.reason and "not UTF-8 text" in undecodable.reason
    assert (tmp_path / "run" / "records.jsonl").read_text().count("\n") == 2


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
    from test_sealed import CUSTOM_BACKEND, EXPECTED_WINDOW as EXPECTED, GAIN_NOTHING  # the CPU headline: window

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
    """The service's lane processes (its children running pkb_core.serve.lane_process)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == server_pid and b"pkb_core.serve.lane_process" in cmdline:
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


def test_a_wait_for_a_full_queue_is_told_to_the_caller():
    """`pkb submit` waited silently on a full queue until a service user killed it: each wait (the
    service's Retry-After, at most 60 s) goes to the client's `on_full` with the service's line."""
    from pkb_core.client.http import _waiting_for_room

    told = []
    full = httpx.Response(429, headers={"Retry-After": "7"},
                          json={"error": "the queue is full (4 jobs waiting, at most 4)"})
    assert _waiting_for_room(full, lambda seconds, line: told.append((seconds, line))) == 7.0
    assert told == [(7.0, "the queue is full (4 jobs waiting, at most 4)")]
    long = httpx.Response(429, headers={"Retry-After": "600"}, text="not json")
    assert _waiting_for_room(long, lambda seconds, line: told.append((seconds, line))) == 60.0
    assert told[-1] == (60.0, "")
    assert _waiting_for_room(full, None) == 7.0  # no hook: the wait alone


def test_pkb_jobs_shows_and_waits_for_jobs_by_id(server):
    """`pkb jobs ID... --wait` prints each job's line once finished (the verdict and the file), exit 0
    when none failed; without ids, the newest jobs; a URL without its scheme is refused in words."""
    with Client(server.url) as client:
        job = client.submit(1, ALLREDUCE + "\n# pkb jobs\n", backend="triton", client="cli-jobs",
                            label="1_mine-{job}.py")
    waited = _pkb("jobs", job.id, "--wait", "--server", server.url)
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout.startswith(f"{job.id}  done") and "  pass" in waited.stdout, waited.stdout
    listed = _pkb("jobs", "--server", server.url)
    assert listed.returncode == 0 and job.id in listed.stdout, listed.stderr
    bare = _pkb("jobs", job.id, "--server", server.url.split("://", 1)[1])
    assert bare.returncode == 4 and "has no scheme: http://" in bare.stderr, bare.stderr
