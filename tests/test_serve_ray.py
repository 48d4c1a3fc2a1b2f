"""``pkb serve --ray`` and ``pkb_core.ray.EvaluatorPool`` against a real Ray cluster on this machine:
a head node and a worker node (``ray start``, each in a session of its own), each offering two
``pkb_slot`` logical resources (CPU mode's groups are placed by them). A mixed queue runs
through it while the worker node is killed; every job still ends with exactly one record.

Skipped where Ray is not installed (``pip install pkb[ray]``).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'pkb[ray]'): the --ray path is not tested")

from pkb_core.client import Client  # noqa: E402
from test_serve import ALLGATHER, ALLREDUCE, HANG, Server, _free_port  # noqa: E402

RAY = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]
WRONG = "def solution(x):\n    return x\n"
BROKEN = "def solution(x:\n"


class RayNode:
    """One ``ray start --block`` node; killing it kills every process of its session (its raylet,
    its workers and actors, and what they started), as a machine that leaves the cluster."""

    def __init__(self, *args, log: Path):
        self.log = log
        self.proc = subprocess.Popen([*RAY, "start", "--block", "--num-cpus", "2", "--num-gpus", "0",
                                      "--resources", json.dumps({"pkb_slot": 2}), "--disable-usage-stats", *args],
                                     stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        sid = self.proc.pid
        for _ in range(3):  # processes forked while we kill (a worker starting) are caught on the next pass
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        if os.getsid(int(entry.name)) == sid:
                            os.kill(int(entry.name), signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            time.sleep(0.2)
        self.proc.wait(timeout=30)


def _nodes(address: str) -> list:
    code = ("import json, ray; ray.init(address=%r, logging_level='ERROR'); "
            "print(json.dumps([[n['NodeID'], 'node:__internal_head__' in n['Resources']] "
            "for n in ray.nodes() if n['Alive']]))" % address)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _wait_for_nodes(address: str, count: int, deadline_s: float = 90) -> list:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            nodes = _nodes(address)
            if len(nodes) == count:
                return nodes
        except subprocess.SubprocessError:
            pass
        time.sleep(1)
    raise AssertionError(f"the Ray cluster did not reach {count} node(s)")


#: Where the test cluster keeps its temporary folder: no folder a builder's private /tmp covers.
OUTSIDE_TEMP = "/srv"


@pytest.fixture(scope="module")
def cluster():
    # A short folder (Ray's socket paths must fit in 107 bytes), outside the machine's temporary
    # folders, which every builder's private /tmp covers anyway: `ray start --temp-dir` elsewhere.
    os.makedirs(OUTSIDE_TEMP, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix="pkbray", dir=OUTSIDE_TEMP))
    temp.chmod(0o755)  # as Ray's own /tmp/ray is open: other users' processes could walk it
    port = _free_port()
    address = f"127.0.0.1:{port}"
    head = RayNode("--head", "--port", str(port), "--node-ip-address", "127.0.0.1", "--temp-dir", str(temp),
                   "--include-dashboard", "false", log=temp / "head.log")
    nodes = [head]
    try:
        _wait_for_nodes(address, 1)
        worker = RayNode("--address", address, "--node-ip-address", "127.0.0.1", log=temp / "worker.log")
        nodes.append(worker)
        ids = _wait_for_nodes(address, 2)
        yield {"address": address, "head": head, "worker": worker, "temp": temp, "nodes": nodes,
               "worker_id": next(node_id for node_id, is_head in ids if not is_head)}
    finally:
        for node in reversed(nodes):  # a node a test started again is in the list too
            if node.proc.poll() is None:
                node.kill()
        shutil.rmtree(temp, ignore_errors=True)


def _wait_until(what, deadline_s: float, step: float = 0.2):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(step)
    return None


def test_a_mixed_queue_survives_a_worker_node_that_leaves(cluster, tmp_path):
    server = Server(tmp_path / "data", "--ray", cluster["address"], "--timeout", "30", "--place-timeout", "8")
    try:
        with Client(server.url, timeout=60) as client:
            assert client.stats().devices == 4
            # Two jobs that hold their groups for a while (one per node), then the mixed queue behind them.
            held = [client.submit(1, HANG + f"# held {i}\n", backend="triton", timeout=10, label=f"held{i}")
                    for i in range(2)]
            expected = {"held0": "timeout", "held1": "timeout"}
            queue = [("ok1", 1, ALLREDUCE, "pass"), ("ok2", 2, ALLGATHER, "pass"), ("wrong", 1, WRONG, "fail"),
                     ("broken", 1, BROKEN, "compile-error"), ("ok3", 1, ALLREDUCE + "\n# 3\n", "pass"),
                     ("wrong2", 2, WRONG + "# 2\n", "fail")]
            jobs = held + [client.submit(problem, source, backend="triton", label=label)
                           for label, problem, source, _ in queue]
            expected.update({label: verdict for label, _, _, verdict in queue})
            too_big = client.submit(1, ALLREDUCE + "\n# w3\n", backend="triton", world_size=3, label="w3")

            def busy_on_worker():
                return [g for g in client.stats().groups
                        if g.job and g.node and g.node.endswith(cluster["worker_id"][:8])]

            hit = _wait_until(busy_on_worker, 120)
            assert hit, client.stats()
            cluster["worker"].kill()
            # A world size no node holds waits with the reason in its note, then fails at its deadline.
            note = _wait_until(lambda: client.get(too_big.id).note, 60, step=0.1)
            assert "no node of the Ray cluster has 3 pkb_slot" in note and "then fails" in note, note
            finished = {job.id: client.wait(job.id, timeout=240) for job in jobs}
            too_big = client.wait(too_big.id, timeout=60)
            listed = client.jobs(limit=100)
        records = {view.record.solution: view for view in finished.values() if view.record}
        assert len(records) == len(jobs), finished
        killed = records.pop(next(view.record.solution for view in finished.values() if view.id == hit[0].job))
        for label, view in records.items():
            assert view.state.value == "done" and view.record.verdict.value == expected[label], (label, view)
        # The job whose node left ran again on the head's group, or (when that also failed) is an error saying why.
        assert killed.record.verdict.value in (expected[killed.record.solution], "error"), killed
        assert too_big.record.verdict.value == "error" and "could start within 8 s" in too_big.record.reason, too_big
        assert len({view.id for view in listed}) == len(listed) == len(jobs) + 1
        # Exactly one record per job in the service's run folders, whoever made it (a lane, a build task,
        # the service for the world size no node held); a killed lane's run left none there.
        lines = [json.loads(line) for path in (tmp_path / "data" / "runs").rglob("records.jsonl")
                 for line in path.read_text().splitlines()]
        labels = [line["solution"] for line in lines]
        assert sorted(labels) == sorted(set(labels)) and set(labels) == {*expected, "w3"}, labels
        assert killed.reruns == killed.record.reruns  # its view and its record say whether it ran again
        # The compile pool ran as Ray tasks (each in a folder of its own), not in the front's builders.
        assert not (tmp_path / "data" / "logs" / "builders.log").exists()
        _a_node_that_returns_gets_a_group(cluster, server)
    finally:
        server.stop()


def _a_node_that_returns_gets_a_group(cluster, server):
    """The worker node starts again: two jobs at once run on two groups, one of them on the new node,
    and cancelling that one reaches its candidate there."""
    worker = RayNode("--address", cluster["address"], "--node-ip-address", "127.0.0.1",
                     log=cluster["temp"] / "worker2.log")
    cluster["worker"] = worker
    cluster["nodes"].append(worker)
    new_id = next(node_id for node_id, is_head in _wait_for_nodes(cluster["address"], 2) if not is_head)
    with Client(server.url, timeout=60) as client:
        both = [client.submit(1, HANG + f"# again {i}\n", backend="triton", timeout=8) for i in range(2)]

        def on_the_new_node():
            return [g for g in client.stats().groups if g.job and g.node and g.node.endswith(new_id[:8])]

        there = _wait_until(on_the_new_node, 120)
        assert there, client.stats()
        # A cancel reaches the candidate through the actor: that job ends cancelled, the other runs out its time.
        client.cancel(there[0].job)
        ends = {job.id: client.wait(job.id, timeout=120) for job in both}
        assert ends[there[0].job].state.value == "cancelled", ends[there[0].job]
        other = next(view for job_id, view in ends.items() if job_id != there[0].job)
        assert other.record.verdict.value == "timeout", other


def test_the_evaluator_pool_answers_a_ray_driver_without_http(cluster, tmp_path):
    code = f"""
import ray
from pkb_core.ray import EvaluatorPool
ray.init(address={cluster['address']!r}, logging_level="ERROR")
pool = EvaluatorPool.remote(data_dir={str(tmp_path / 'pool')!r}, device="cpu", timeout=30)
one = ray.get(pool.evaluate.remote(1, {ALLREDUCE!r}, backend="triton"))
many = ray.get(pool.evaluate_many.remote([(1, {WRONG!r}, {{"backend": "triton"}}),
                                          (1, {ALLREDUCE!r}, {{"backend": "triton"}})]))
print("VERDICTS", type(one).__name__, one.verdict.value, *[r.verdict.value for r in many])
ray.get(pool.close.remote())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    line = next((line for line in out.stdout.splitlines() if line.startswith("VERDICTS")), None)
    assert line is not None, out.stdout[-2000:] + out.stderr[-4000:]
    assert line.split()[1:] == ["Record", "pass", "fail", "pass"], line


def _kill_group_actors(cluster) -> int:
    """SIGKILL every group actor of the cluster's nodes (their processes are named ``ray::GroupActor...``)."""
    sessions = {node.proc.pid for node in cluster["nodes"] if node.proc.poll() is None}
    killed = 0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.getsid(int(entry.name)) in sessions and \
                    (entry / "cmdline").read_bytes().startswith(b"ray::GroupActor"):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            pass
    return killed


def test_a_job_whose_group_dies_twice_is_an_error_saying_why(cluster, tmp_path):
    server = Server(tmp_path / "data", "--ray", cluster["address"], "--timeout", "60")
    try:
        with Client(server.url, timeout=60) as client:
            job = client.submit(1, HANG + "# dies twice\n", backend="triton", timeout=40)

            def its_group():
                return next((g.id for g in client.stats().groups if g.job == job.id), None)

            first = _wait_until(its_group, 120)
            assert first, client.get(job.id)
            # The group's actor process takes its name (``ray::GroupActor``) only once Ray has made
            # it: on a busy machine that comes seconds after the job shows on the group, so wait for
            # a process to kill instead of looking once (the test once found none under load).
            time.sleep(1)  # the actor has the task (the job's state is set as the task goes to it)
            assert _wait_until(lambda: _kill_group_actors(cluster), 60, step=0.5)
            # It runs again on a new group (the requeue's note lasts until that group takes it).
            second = _wait_until(lambda: (its_group() or first) != first and its_group(), 120)
            assert second, client.get(job.id)
            time.sleep(1)
            assert _wait_until(lambda: _kill_group_actors(cluster), 60, step=0.5)
            final = client.wait(job.id, timeout=120)
        assert final.record.verdict.value == "error", final
        # Both runs' ends in its reason: the first from the job's reruns, the last its own.
        assert "ran 2 times (before: " in final.record.reason, final.record.reason
        assert final.record.reason.count("Ray actor is gone") == 2, final.record.reason
        assert "Ray actor is gone" in final.record.reason, final.record.reason
    finally:
        server.stop()


#: A second driver of the cluster: it finds the pool by name and tries every way at a job (argv: the job
#: id, then the pool's token or nothing), printing each outcome as a JSON line.
INTRUDER = """
import json, sys, ray
from pkb_core.ray import EvaluatorPool
ray.init(address=sys.argv[1], logging_level="ERROR")
job_id, token = sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else None)

def attempt(name, call):
    try:
        print(json.dumps([name, "answered", repr(call())[:300]]))
    except Exception as exc:
        print(json.dumps([name, type(exc).__name__, isinstance(exc, PermissionError), str(exc)[-300:]]))

if token is None:
    actor = ray.get_actor("pkb-evaluator", namespace="pkb")
    attempt("jobs", lambda: ray.get(actor.jobs.remote("guessed")))
    attempt("view", lambda: ray.get(actor.view.remote("guessed", job_id)))
    attempt("cancel", lambda: ray.get(actor.cancel.remote("guessed", job_id)))
    attempt("cancel_jobs", lambda: ray.get(actor.cancel_jobs.remote("guessed", all=True)))
    attempt("no_token", lambda: ray.get(actor.cancel.remote(job_id)))
    attempt("ray_call", lambda: ray.get(actor.__ray_call__.remote(lambda pool: pool._pool.cancel(job_id))))
else:
    pool = EvaluatorPool.find(token)
    attempt("lists_it", lambda: job_id in [view.id for view in ray.get(pool.jobs.remote())])
    attempt("cancel", lambda: ray.get(pool.cancel.remote(job_id)).id)
"""


def test_the_evaluator_pool_answers_only_its_token(cluster, tmp_path):
    """Another driver that finds the pool by name, without its token, can neither read nor cancel
    the honest client's running job (which passes); with the token it can."""
    (tmp_path / "intruder.py").write_text(INTRUDER)
    slow = ALLREDUCE + "\nimport time\ntime.sleep(6)  # running while the intruder tries\n"
    code = f"""
import json, subprocess, sys, time, ray
from pkb_core.ray import EvaluatorPool
ray.init(address={cluster['address']!r}, logging_level="ERROR")
pool = EvaluatorPool.remote(data_dir={str(tmp_path / 'pool')!r}, device="cpu", timeout=60)
job = ray.get(pool.submit.remote(1, {slow!r}, backend="triton"))
deadline = time.monotonic() + 120
while ray.get(pool.view.remote(job.id)).state.value != "running" and time.monotonic() < deadline:
    time.sleep(0.1)

def intruder(*args):
    out = subprocess.run([sys.executable, {str(tmp_path / 'intruder.py')!r}, {cluster['address']!r}, *args],
                         capture_output=True, text=True, timeout=180)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("[")] or [out.stderr[-2000:]]

print("STRANGER", json.dumps(intruder(job.id)))
print("STATE", ray.get(pool.view.remote(job.id)).state.value)
print("RECORD", ray.get(pool.wait.remote(job.id, 120)).record.verdict.value)
hang = ray.get(pool.submit.remote(1, {HANG!r}, backend="triton", timeout=30))
print("HOLDER", json.dumps(intruder(hang.id, pool.token)))
print("CANCELLED", ray.get(pool.wait.remote(hang.id, 60)).state.value)
ray.get(pool.close.remote())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=400)
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.stdout.splitlines() if " " in line}
    assert "CANCELLED" in lines, out.stdout[-3000:] + out.stderr[-4000:]
    stranger = json.loads(lines["STRANGER"])
    assert [attempt[0] for attempt in stranger] == ["jobs", "view", "cancel", "cancel_jobs", "no_token",
                                                    "ray_call"], stranger
    for name, outcome, *rest in stranger:  # each refused as a PermissionError that says why
        if name == "no_token":  # Ray refuses it first: the method's signature wants two arguments
            assert outcome == "TypeError", (name, outcome, rest)
            continue
        assert outcome != "answered" and rest[0] is True and "answers only calls with its pool's token" in rest[1], \
            (name, outcome, rest)
    assert lines["STATE"] == "running" and lines["RECORD"] == "pass", lines
    holder = dict((attempt[0], attempt[1:]) for attempt in json.loads(lines["HOLDER"]))
    assert holder["lists_it"] == ["answered", "True"], holder
    assert holder["cancel"][0] == "answered", holder
    assert lines["CANCELLED"] == "cancelled", lines


#: At import in its builder, a solution looks for the Ray nodes' sockets (under the cluster's
#: temporary folder, and Ray's default /tmp/ray) and tries to connect to each; it fails its
#: build saying what it saw, so its record shows the probe ran where builds run.
PROBE = '''
import glob, os, socket
if "PKB_WORKER_SETTINGS" not in os.environ:
    seen = sorted(set(glob.glob("/tmp/ray/session_*/sockets/*") + glob.glob({temp!r} + "/session_*/sockets/*")))
    connected = []
    for path in {sockets!r}:
        try:
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(path)
                connected.append(path)
        except OSError:
            pass
    raise SystemExit(f"pkbtest builder saw {{seen}} connected {{connected}}")
'''


def test_a_ray_build_sees_no_ray_socket(cluster, tmp_path):
    sockets = sorted(set(map(str, Path("/tmp/ray").glob("session_*/sockets/*"))) |
                     set(map(str, cluster["temp"].glob("session_*/sockets/*"))))
    # Both nodes' sockets are under the cluster's temporary folder (the worker takes the head's), outside /tmp.
    assert len(sockets) >= 4 and all(path.startswith(str(cluster["temp"])) for path in sockets), sockets
    source = PROBE.format(temp=str(cluster["temp"]), sockets=sockets) + ALLREDUCE
    code = f"""
import ray
from pkb_core.ray import EvaluatorPool
ray.init(address={cluster['address']!r}, logging_level="ERROR")
pool = EvaluatorPool.remote(name="pkb-probe", data_dir={str(tmp_path / 'pool')!r}, device="cpu", timeout=30)
record = ray.get(pool.evaluate.remote(1, {source!r}, backend="reference"))
print("RECORD", record.verdict.value, repr(record.reason))
ray.get(pool.close.remote())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    line = next((line for line in out.stdout.splitlines() if line.startswith("RECORD")), None)
    assert line is not None, out.stdout[-2000:] + out.stderr[-4000:]
    assert "pkbtest builder saw [] connected []" in line, line
    # The build's worker keeps its builders' log in a file with no name: no folder of it on the node,
    # while the worker lives or after it is killed (an earlier version's is swept by the build task).
    assert not list(Path(tempfile.gettempdir()).glob("pkb-ray-builders-*"))
