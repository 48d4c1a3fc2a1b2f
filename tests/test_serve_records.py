"""Records a report can trust (issue 55), from a real ``pkb serve`` (CPU mode): every job the service
answers has its line in the service's run folders, whoever made its record, so ``pkb report`` of
them counts it; a timed record carries the speed-of-light fields of ``pkb run --measure-perf``'s;
a job run again after its lane died says so in its record, its line and its view.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pkb_core.client import Client
from pkb_core.results.records import read_records
from test_serve import ALLREDUCE, Server, _lane_pids

#: A correct solution whose first call in each run sleeps: a run long enough to lose its lane in.
SLOW_FIRST_CALL = ALLREDUCE + '''
import time as _time

_allreduce_solution, _slept = solution, []


def solution(tensor):
    if not _slept:
        _slept.append(_time.sleep(4))
    return _allreduce_solution(tensor)
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = Server(tmp_path_factory.mktemp("records") / "data", "--devices", "2", "--timeout", "30")
    yield running
    running.stop()


def _lines(server) -> dict:
    """Every record line of the service's run folders, by its solution's label."""
    return {record.solution: record for folder in (server.data / "runs").iterdir() for record in read_records(folder)}


def test_pkb_report_of_the_services_data_counts_every_job_it_answered(server):
    # A lane's record, the compile pool's, and two the service makes itself at intake.
    items = [(ALLREDUCE, {"measure_perf": True, "label": "honest-{job}.py"}),
             ("def solution(x:\n", {"label": "broken-{job}.py"}),
             ("", {"label": "empty-{job}.py"}),
             (ALLREDUCE + "\n# one rank\n", {"world_size": 1, "label": "alone-{job}.py"})]
    with Client(server.url) as client:
        records = client.evaluate_many([(1, source, {"backend": "triton", **options}) for source, options in items],
                                       concurrency=4)
    assert [r.verdict.value for r in records] == ["pass", "compile-error", "compile-error", "unsupported"]
    lines = _lines(server)
    assert all(lines.get(r.solution) == r for r in records), "each job's line is the record it was answered"
    report = subprocess.run([sys.executable, "-m", "pkb_core", "report", "--json", str(server.data / "runs" / "triton-W2")],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    rows = {row["solution"]: row for row in json.loads(report.stdout)["rows"]}
    assert {label: rows[label]["verdict"] for label in (r.solution for r in records[:3])} == \
        {records[0].solution: "pass", records[1].solution: "compile-error", records[2].solution: "compile-error"}
    # The speed of light, as pkb run --measure-perf records it (the service calibrates in CPU mode too).
    honest = records[0]
    assert honest.sol is not None and honest.sol.solution_fraction == honest.sol.floor_ms / honest.solution_ms
    assert honest.feedback.perf.floor_ms == honest.sol.floor_ms and honest.feedback.perf.solution_sol_fraction
    assert rows[honest.solution]["floor_ms"] == honest.sol.floor_ms and rows[honest.solution]["bound"]


def test_a_job_whose_lane_died_runs_again_and_its_record_line_and_view_say_so(server):
    with Client(server.url) as client:
        job = client.submit(1, SLOW_FIRST_CALL, backend="triton", label="rerun-{job}.py")
        deadline = time.monotonic() + 60
        while not (client.get(job.id).state.value == "running" and _lane_pids(server.proc.pid)):
            assert time.monotonic() < deadline, client.get(job.id)
            time.sleep(0.1)
        time.sleep(1.0)  # the lane has taken the job: its first call sleeps
        for pid in _lane_pids(server.proc.pid):
            os.kill(pid, signal.SIGKILL)
        lost = ("the lane's process ended (signal 9)",)
        deadline = time.monotonic() + 30
        while (view := client.get(job.id)).reruns is None:  # its view says so while it waits and runs again
            assert time.monotonic() < deadline, view
            time.sleep(0.1)
        assert view.reruns == lost and view.state.value != "done", view
        done = client.wait(job.id, timeout=120)
    assert done.state.value == "done" and done.record.verdict.value == "pass", done
    assert done.reruns == done.record.reruns == lost
    # Its one line in the run folder (the lost run left none) says so too.
    text = (server.data / "runs" / "triton-W2" / "records.jsonl").read_text()
    assert text.count(f'"solution": "{done.record.solution}"') == 1
    assert _lines(server)[done.record.solution] == done.record
