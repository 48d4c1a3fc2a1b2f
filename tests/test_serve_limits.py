"""The reward service's bounds, against a real ``pkb serve`` (issue 54, item 4): request bodies
capped before they are read, JSON with bounded nesting, per-client quotas, retention, and tokens
that make each client see and cancel only its own jobs (the single ``--token`` still the admin).

Every abuse is followed by an honest request that succeeds. Submissions at world size 1 are
answered at once (``unsupported``: no problem runs on one rank) with their source stored, so
most of these tests start no build and no group.
"""
import json
import os
import signal
import socket
import sqlite3
import time

import httpx
import pytest

from pkb_core.client import Client, ServiceError
from test_serve import ALLREDUCE, HANG, Server, _errors, _pkb

ADMIN = "admin-token-0123456789"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}
MIB = 1 << 20


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A service in the single-token setup, with small per-client quotas."""
    running = Server(tmp_path_factory.mktemp("limits") / "data", "--devices", "2", "--timeout", "20",
                     "--client-max-jobs", "3", "--client-max-source-mb", "1", token=ADMIN)
    yield running
    running.stop()


def _raw(port: int, head: str, parts=(), timeout: float = 30.0, lossy: bool = False):
    """Send ``head`` (request line and headers) and the body ``parts`` on a socket of its own, as far as
    the server reads them, then read the answer: ``(status, headers, JSON body, bytes of body sent,
    seconds)``. A server that stops reading and closes cuts the sending short; its answer is still read.
    ``lossy``: the answer may be lost to the connection's reset (status, headers and body None then)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    start, sent = time.monotonic(), 0
    try:
        sock.sendall(head.encode())
        for part in parts:
            sock.sendall(part)
            sent += len(part)
    except (BrokenPipeError, ConnectionResetError):
        pass
    data = b""
    try:
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
            top, _, body = data.partition(b"\r\n\r\n")
            length = [int(line.split(b":")[1]) for line in top.split(b"\r\n") if line.lower().startswith(b"content-length:")]
            if length and len(body) >= length[0]:
                break
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    elapsed = time.monotonic() - start
    top, _, body = data.partition(b"\r\n\r\n")
    if lossy and not body:
        return None, None, None, sent, elapsed
    lines = top.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body), sent, elapsed


def _chunked(total: int, size: int = 256 << 10):
    """A chunked body of ``total`` bytes of JSON-ish filler, then its last chunk."""
    for _ in range(total // size):
        yield b"%x\r\n" % size + b"[" * size + b"\r\n"
    yield b"0\r\n\r\n"


def _head(path: str, *, length: int | None = None, token: str | None = ADMIN) -> str:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    if token:
        lines.append(f"Authorization: Bearer {token}")
    return "\r\n".join(lines) + "\r\n\r\n"


def _one_rank(source: str, client: str, **extra) -> dict:
    """A submission the service answers at once (no problem runs on one rank), its source stored."""
    return {"problem": "1", "source": source, "backend": "triton", "world_size": 1, "client": client, **extra}


def _honest(server, client: str, headers=ADMIN_HEADERS) -> dict:
    response = httpx.post(server.url + "/v1/jobs", json=_one_rank(f"def solution(x):\n    return x  # {client}\n",
                                                                   client), headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["record"]["verdict"] == "unsupported"
    return response.json()


def _one_line(response_json: dict, *words) -> str:
    error = response_json["error"]
    assert "\n" not in error and all(word in error for word in words), error
    return error


def test_a_body_over_its_cap_is_refused_before_it_is_read(guarded):
    """A 600 MiB Content-Length with ten bytes sent: 413 at once (the body is never awaited);
    a chunked body with no length: 413 as soon as it passes 8 MiB, most of it never sent."""
    status, headers, body, _, elapsed = _raw(guarded.port, _head("/v1/jobs", length=600 * MIB), [b'{"problem"'])
    assert status == 413 and elapsed < 10, (status, elapsed)
    _one_line(body, str(600 * MIB), "at most 8388608")
    assert headers.get("connection") == "close"
    # Over the cap before a token is even looked at: an unauthenticated one is refused the same way.
    status, _, _, _, _ = _raw(guarded.port, _head("/v1/jobs", length=600 * MIB, token=None), [b"{"])
    assert status == 413
    # Chunked past the cap: nothing kept past it, the rest read and dropped up to DRAIN_LIMIT in
    # all, so a client that sends its whole body before reading gets its answer, the connection whole.
    status, headers, body, sent, elapsed = _raw(guarded.port, _head("/v1/jobs"), _chunked(24 * MIB))
    assert status == 413 and elapsed < 30, (status, elapsed)
    _one_line(body, "passed 8388608 bytes")
    assert headers.get("connection") != "close" and sent > 24 * MIB  # all of it sent, and read
    # Past DRAIN_LIMIT it is cut off: the 413 and the connection closed (the answer may be lost to
    # the reset of a connection closed with bytes unread: a client sending 64 MiB before it reads).
    status, _, _, sent, elapsed = _raw(guarded.port, _head("/v1/jobs"), _chunked(64 * MIB), lossy=True)
    assert status in (413, None) and elapsed < 30, (status, elapsed)
    assert sent < 48 * MIB, sent  # the server stopped reading near DRAIN_LIMIT and closed
    # Under the cap, chunked, honest: taken.
    honest = json.dumps(_one_rank("def solution(x):\n    return x  # chunked\n", "bodies")).encode()
    status, _, body, _, _ = _raw(guarded.port, _head("/v1/jobs"), [b"%x\r\n" % len(honest) + honest + b"\r\n",
                                                                    b"0\r\n\r\n"])
    assert status == 200 and body["record"]["verdict"] == "unsupported", body
    with Client(guarded.url, token=ADMIN) as client:
        assert client.evaluate(1, ALLREDUCE, backend="triton", client="bodies").verdict.value == "pass"


def test_a_bulk_cancel_over_its_cap_is_refused(guarded):
    status, _, body, _, elapsed = _raw(guarded.port, _head("/v1/jobs/cancel", length=2 * MIB), [b'{"ids": ['])
    assert status == 413 and elapsed < 10
    _one_line(body, "at most 1048576")
    status, _, body, sent, _ = _raw(guarded.port, _head("/v1/jobs/cancel"), _chunked(8 * MIB))
    assert status == 413 and sent > 8 * MIB, (status, sent)  # read to its end and dropped: the answer whole
    _one_line(body, "passed 1048576 bytes")
    status, _, _, sent, _ = _raw(guarded.port, _head("/v1/jobs/cancel"), _chunked(64 * MIB), lossy=True)
    assert status in (413, None) and sent < 48 * MIB, (status, sent)  # cut off past DRAIN_LIMIT
    # A route that reads no body refuses a declared large one too.
    status, _, _, _, _ = _raw(guarded.port, _head("/v1/jobs/nope/cancel", length=MIB), [b"x"])
    assert status == 413
    honest = httpx.post(guarded.url + "/v1/jobs/cancel", json={"ids": ["j-none"]}, headers=ADMIN_HEADERS, timeout=30)
    assert honest.status_code == 200 and honest.json() == {"cancelled": [], "stopping": []}


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/jobs/cancel"])
def test_malformed_and_deeply_nested_json_is_400_in_one_line(guarded, path):
    def post(content: bytes):
        return httpx.post(guarded.url + path, content=content, headers=ADMIN_HEADERS, timeout=30)

    for content, words in [(b"{not json", "not JSON"), (b'{"ids": ["a"', "not JSON"), (b"\xff\xfe{", "not JSON"),
                           (b'{"ids": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests deeper than 64 levels"),
                           (b"[" * 65 + b"]" * 65, "nests deeper than 64 levels")]:
        response = post(content)
        assert response.status_code == 400, (content[:20], response.text)
        _one_line(response.json(), words)
    # 64 levels parse: what is wrong then is the shape (422), not the nesting.
    assert post(b"[" * 64 + b"]" * 64).status_code == 422
    if path == "/v1/jobs":
        _honest(guarded, "json")
    else:
        assert post(b'{"ids": []}').json() == {"cancelled": [], "stopping": []}


def test_a_client_over_its_quota_is_refused_in_one_line_naming_the_limit(guarded):
    for index in range(3):
        taken = httpx.post(guarded.url + "/v1/jobs", json=_one_rank(f"x = {index}\n", "quota-jobs"),
                           headers=ADMIN_HEADERS, timeout=30)
        assert taken.status_code == 200, taken.text
    over = httpx.post(guarded.url + "/v1/jobs", json=_one_rank("x = 9\n", "quota-jobs"), headers=ADMIN_HEADERS,
                      timeout=30)
    assert over.status_code == 429 and "retry-after" not in over.headers
    _one_line(over.json(), "'quota-jobs' keeps 3 jobs", "at most 3 per client", "--client-max-jobs")
    # The client does not retry a quota (waiting does not cure it): one line, at once.
    started = time.monotonic()
    with Client(guarded.url, token=ADMIN) as client, pytest.raises(ServiceError) as refused:
        client.submit(1, "x = 10\n", backend="triton", world_size=1, client="quota-jobs")
    assert refused.value.status == 429 and time.monotonic() - started < 5
    # Bytes: two sources of 400 KiB fit in 1 MiB, a third does not.
    big = [f"# {n}\n" + "x = 1\n" * ((400 << 10) // 6) for n in range(3)]
    for source in big[:2]:
        assert httpx.post(guarded.url + "/v1/jobs", json=_one_rank(source, "quota-bytes"), headers=ADMIN_HEADERS,
                          timeout=30).status_code == 200
    over = httpx.post(guarded.url + "/v1/jobs", json=_one_rank(big[2], "quota-bytes"), headers=ADMIN_HEADERS,
                      timeout=30)
    assert over.status_code == 429
    _one_line(over.json(), "'quota-bytes' keeps", "at most 1048576 per client", "--client-max-source-mb")
    # Nothing of the refused one was written; each kept source is kept once: in its file, not in the store.
    files = {p.read_text() for p in (guarded.data / "sources").rglob("*.py")}
    assert big[0] in files and big[1] in files and big[2] not in files
    with sqlite3.connect(f"file:{guarded.data / 'jobs.sqlite'}?mode=ro", uri=True) as db:
        kept = [json.loads(row[0])["source"] for row in db.execute(
            "SELECT submission FROM jobs WHERE client = 'quota-bytes'")]
    assert kept == ["", ""]
    _honest(guarded, "quota-other")  # another client is not held by their quotas


def test_finished_jobs_older_than_the_retention_are_pruned_at_start(tmp_path):
    """A job finished longer ago than --retention-days leaves the store and, once no other job
    names it, its source file; a newer job that shares its source keeps the file."""
    data = tmp_path / "data"
    first = Server(data, "--devices", "2", "--retention-days", "1")
    try:
        old, kept = (_honest(first, "retention", headers={}) for _ in range(2))  # one text: one file
        other = httpx.post(first.url + "/v1/jobs", json=_one_rank("x = 'alone'\n", "retention"), timeout=30).json()
    finally:
        first.stop()
    with sqlite3.connect(data / "jobs.sqlite") as db:
        paths = dict(db.execute("SELECT id, source_path FROM jobs"))
        db.executemany("UPDATE jobs SET finished_at = ? WHERE id = ?",
                       [(time.time() - 2 * 86400, old["id"]), (time.time() - 2 * 86400, other["id"])])
    assert paths[old["id"]] == paths[kept["id"]] != paths[other["id"]]
    # Logs of the lanes' run directories: one last written before the retention, one since.
    logs = data / "runs" / "reference-W2" / "logs"
    (logs / "builds").mkdir(parents=True, exist_ok=True)
    stale, fresh = logs / "builds" / "job-old.log", logs / "job-new.log"
    stale.write_text("old build output\n")
    fresh.write_text("a job of today\n")
    os.utime(stale, (time.time() - 2 * 86400,) * 2)
    records = data / "runs" / "reference-W2" / "records.jsonl"
    records.touch()
    os.utime(records, (time.time() - 2 * 86400,) * 2)
    second = Server(data, "--devices", "2", "--retention-days", "1")
    try:
        assert "pruned 2 job(s), 1 source file(s) and 1 log(s) older than 1 days" in second.log.read_text()
        assert not stale.exists() and fresh.exists() and records.exists()
        assert httpx.get(f"{second.url}/v1/jobs/{old['id']}", timeout=30).status_code == 404
        assert httpx.get(f"{second.url}/v1/jobs/{other['id']}", timeout=30).status_code == 404
        assert httpx.get(f"{second.url}/v1/jobs/{kept['id']}", timeout=30).json()["record"]["verdict"] == "unsupported"
        assert os.path.exists(paths[kept["id"]]) and not os.path.exists(paths[other["id"]])
        _honest(second, "retention-after", headers={})
    finally:
        second.stop()


#: What a service of the first schema wrote (before owners, quotas and retention): one finished job.
OLD_STORE = """
CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, state TEXT NOT NULL,
    client TEXT NOT NULL, priority INTEGER NOT NULL, problem TEXT NOT NULL, backend TEXT NOT NULL,
    world_size INTEGER NOT NULL, dedup_key TEXT NOT NULL, submission TEXT NOT NULL, job TEXT, record TEXT,
    note TEXT NOT NULL DEFAULT '', same_as TEXT, attempts INTEGER NOT NULL DEFAULT 0, submitted_at REAL NOT NULL,
    started_at REAL, finished_at REAL);
INSERT INTO jobs (id, state, client, priority, problem, backend, world_size, dedup_key, submission, note,
    submitted_at, finished_at) VALUES ('j-old', 'cancelled', 'alice', 0, '1_allreduce', 'triton', 2, 'k',
    '{"problem": "1", "source": "x = 1  # caf\u00e9\\n", "backend": "triton"}', 'cancelled before it ran',
    strftime('%s', 'now') - 60, strftime('%s', 'now') - 30);
"""


@pytest.fixture
def tokens_server(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with sqlite3.connect(data / "jobs.sqlite") as db:
        db.executescript(OLD_STORE)
    tokens = tmp_path / "tokens.toml"
    tokens.write_text('admin = "root-token-0123456789"\n\n[clients]\nalice = "alice-token-0123456789"\n'
                      'bob = "bob-token-0123456789"\n')
    tokens.chmod(0o600)
    running = Server(data, "--devices", "2", "--timeout", "20", "--tokens", str(tokens), "--client-max-jobs", "5",
                     token=ADMIN)
    yield running
    running.stop()


def test_a_client_sees_and_cancels_only_its_own_jobs_and_the_admin_all(tokens_server):
    url = tokens_server.url
    alice, bob = (Client(url, token=f"{name}-token-0123456789") for name in ("alice", "bob"))
    root, legacy = Client(url, token="root-token-0123456789"), Client(url, token=ADMIN)
    try:
        assert httpx.get(url + "/v1/jobs", timeout=30).status_code == 401
        assert httpx.get(url + "/v1/jobs", headers={"Authorization": "Bearer nope"}, timeout=30).status_code == 401
        mine = alice.submit(1, HANG + "# alice\n", backend="triton")
        theirs = bob.submit(1, HANG + "# bob\n", backend="triton", client="shared-tag")
        assert mine.client == "alice"  # no tag given: the token's client name
        # Another client's job is exactly an unknown one: 404, the same line.
        unknown = httpx.get(url + "/v1/jobs/j-unknown", headers=_bearer("alice"), timeout=30)
        for method, path in [("GET", f"/v1/jobs/{theirs.id}"), ("GET", f"/v1/jobs/{theirs.id}/wait?timeout=0"),
                             ("POST", f"/v1/jobs/{theirs.id}/cancel")]:
            response = httpx.request(method, url + path, headers=_bearer("alice"), timeout=30)
            assert response.status_code == 404, (path, response.text)
            assert response.json()["error"] == unknown.json()["error"].replace("j-unknown", theirs.id)
        assert httpx.get(url + "/v1/jobs/j-old", headers=_bearer("alice"), timeout=30).status_code == 404
        # The old store was migrated: its job has no owner (the admin's alone), its source's bytes, no file.
        with sqlite3.connect(f"file:{tokens_server.data / 'jobs.sqlite'}?mode=ro", uri=True) as db:
            assert db.execute("PRAGMA user_version").fetchone()[0] == 1
            assert db.execute("SELECT owner, source_bytes, source_path FROM jobs WHERE id = 'j-old'").fetchone() == \
                (None, len("x = 1  # caf\u00e9\n".encode()), None)
        assert [v.id for v in alice.jobs()] == [mine.id]
        assert [v.id for v in alice.jobs(client="shared-tag")] == []
        assert set(alice.stats().clients) <= {"alice"}
        # Alice cancels all she may: her own job only; bob's names nothing to her.
        assert alice.cancel_jobs([theirs.id]).to_json() == {"cancelled": [], "stopping": []}
        said = alice.cancel_jobs(all=True)
        assert set(said.cancelled + said.stopping) == {mine.id}
        assert alice.wait(mine.id, timeout=30).state.value == "cancelled"
        assert not bob.get(theirs.id).state.final
        # The admin (the file's and --token's alike) sees every job, the old store's too, and cancels any.
        for admin in (root, legacy):
            assert {mine.id, theirs.id, "j-old"} <= {v.id for v in admin.jobs()}
            assert admin.get("j-old").client == "alice" and admin.get(theirs.id).client == "shared-tag"
        assert root.cancel(theirs.id).id == theirs.id
        assert bob.wait(theirs.id, timeout=30).state.value == "cancelled"
        # The quota is the token's client's, whatever tags its jobs carry: alice keeps 1 job, 4 more fit.
        hers = []
        for index in range(4):
            view = alice.submit(1, f"x = {index}\n", backend="triton", world_size=1, client=f"tag-{index}")
            assert view.record.verdict.value == "unsupported" and alice.get(view.id).client == f"tag-{index}"
            hers.append(view.id)
        with pytest.raises(ServiceError) as over:
            alice.submit(1, "x = 5\n", backend="triton", world_size=1, client="tag-5")
        assert over.value.status == 429 and "client 'alice' keeps 5 jobs" in over.value.message
        honest = bob.submit(1, "x = 'bob'\n", backend="triton", world_size=1)
        assert bob.get(honest.id).record.verdict.value == "unsupported"
        # Deduplication stays within a client: bob's copy of alice's source is his own job, not
        # "the same as" hers (her job's id, and her record naming the solution by it, leaked); his
        # own repeat is answered from his first.
        copied = bob.submit(1, "x = 0\n", backend="triton", world_size=1, client="tag-0")
        assert copied.same_as is None and hers[0] not in copied.record.solution, copied
        repeat = bob.submit(1, "x = 'bob'\n", backend="triton", world_size=1)
        assert repeat.same_as == honest.id, repeat
    finally:
        for client in (alice, bob, root, legacy):
            client.close()


def test_a_tenant_does_not_learn_from_the_shared_build_cache(tokens_server):
    """The build cache is shared by content: a record's `compile.cached` told alice that bob had
    submitted her guessed source before her (a hostile review's probe). A client's records come
    without `compile`; the admin's keep it."""
    url = tokens_server.url
    alice, bob = (Client(url, token=f"{name}-token-0123456789") for name in ("alice", "bob"))
    root = Client(url, token="root-token-0123456789")
    try:
        source = ("import torch.distributed as dist\n\n\ndef solution(tensor):\n    out = tensor.clone()\n"
                  "    dist.all_reduce(out)\n    return out\n# a guessed source\n")
        first = bob.wait(bob.submit(1, source, backend="reference", trials=1).id, timeout=120)
        second = alice.wait(alice.submit(1, source, backend="reference", trials=1).id, timeout=120)
        for view in (first, second):
            assert view.record.verdict.value == "pass", view.record.reason
            assert view.record.compile is None, view.record
            assert alice.jobs() and all(v.record is None or v.record.compile is None for v in alice.jobs())
        assert root.get(second.id).record.compile is not None  # the admin sees the machinery
    finally:
        for client in (alice, bob, root):
            client.close()


def _bearer(name: str) -> dict:
    return {"Authorization": f"Bearer {name}-token-0123456789"}


@pytest.mark.parametrize("text, mode, words", [
    ('[clients]\na = "t-123"\n', 0o644, "can be read by other users (mode 644): chmod 600"),
    ('[clients]\na = "same-token"\nb = "same-token"\n', 0o600, "client 'b' has a token that another client"),
    ('[client]\na = "t-123"\n', 0o600, "unknown field 'client'"),
    ('admin = ""\n', 0o600, "the token of 'admin' must be non-empty"),
])
def test_a_tokens_file_that_cannot_be_used_is_one_line_and_exit_4(tmp_path, text, mode, words):
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(text)
    tokens.chmod(mode)
    result = _pkb("serve", "--port", "0", "--data", str(tmp_path / "data"), "--tokens", str(tokens), timeout=60)
    [line] = _errors(result.stderr)
    assert result.returncode == 4 and words in line, result.stderr
    assert not (tmp_path / "data").exists()  # refused before the service touched anything


HANGS_ON_IMPORT = "import time\n\ntime.sleep(1000)\n\ndef solution(x):\n    return x\n"


def test_a_client_whose_builds_hang_leaves_a_builder_to_others_and_its_cancel_kills_them(tmp_path):
    """One client's sources that hang their builds hold one of two builders at most (a builder
    stays for every other client: another's honest job passes while they hang), and cancelling
    them kills their builds at once (a hung build held its builder until the build limit, 600 s by
    default, after its job was cancelled, and the cancelling client's next job waited behind it)."""
    service = Server(tmp_path / "data", "--devices", "2", "--timeout", "30", "--build-jobs", "2",
                     "--build-timeout", "500")
    try:
        with Client(service.url, timeout=120) as client:
            hung = [client.submit(1, HANGS_ON_IMPORT + f"# {i}\n", backend="reference", client="alice")
                    for i in range(3)]
            deadline = time.monotonic() + 30
            while client.get(hung[0].id).state.value != "building" and time.monotonic() < deadline:
                time.sleep(0.1)
            other = client.submit(1, ALLREDUCE, backend="triton", client="bob")
            assert client.wait(other.id, timeout=90).record.verdict.value == "pass"
            assert [client.get(job.id).state.value for job in hung] == ["building", "queued", "queued"]
            for job in hung:
                assert client.cancel(job.id).state.value == "cancelled"
            started = time.monotonic()
            again = client.submit(1, ALLREDUCE + "\n# again\n", backend="triton", client="alice")
            assert client.wait(again.id, timeout=90).record.verdict.value == "pass"
            assert time.monotonic() - started < 60
            assert [client.get(job.id).state.value for job in hung] == ["cancelled"] * 3
    finally:
        service.stop()
