"""The service's job store (pkb_core.serve.store), as the scheduler reads it on every pass."""
from pkb_core.contracts.job import Job
from pkb_core.contracts.record import Record
from pkb_core.contracts.serve import JobState, Submission
from pkb_core.results.records import job_record
from pkb_core.serve.store import STOPPED_WHILE_RUNNING, JobStore


def test_waiting_jobs_keep_their_submissions_parsed_once_and_track_the_table(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    for n in range(3):
        store.add(f"j{n}", Submission(problem="1", backend="reference", source=f"# file {n}\n", client=f"c{n}"),
                  problem="1_allreduce", world_size=2, dedup_key=str(n))
    first = store.waiting()
    assert [(w["id"], w["state"], w["submission"].source) for w in first] == \
        [(f"j{n}", JobState.QUEUED, f"# file {n}\n") for n in range(3)]
    # The next pass reuses the parsed submissions and sees the table's changes: a state, a planned
    # job, a job that left the queue, a new one.
    store.set_state("j0", JobState.READY)
    store.set_job("j0", {"planned": True})
    store.set_state("j1", JobState.RUNNING)
    store.add("j3", Submission(problem="1", backend="reference", source="# file 3\n"), problem="1_allreduce", world_size=2,
              dedup_key="3")
    again = {w["id"]: w for w in store.waiting()}
    assert set(again) == {"j0", "j2", "j3"}
    assert again["j0"]["state"] == JobState.READY and again["j0"]["job"] == {"planned": True}
    assert again["j2"]["submission"] is first[2]["submission"]
    assert again["j3"]["submission"].source == "# file 3\n"
    # A job that leaves the queue is forgotten, and read again if it ever waits again.
    assert "j1" not in store._waiting_submissions
    store.set_state("j1", JobState.QUEUED)
    assert {w["id"] for w in store.waiting()} == {"j0", "j1", "j2", "j3"}
    store.close()


def _job(label: str) -> Job:
    return Job(key=f"1_allreduce|triton|{label}", slug=label, problem_id=1, problem="1_allreduce",
               category="collective", problem_path="/p/1_allreduce.py", backend="triton", solution=f"/s/{label}",
               solution_label=label, size="tiny", dtype="fp32", trials=3, mode="eval", measure_perf=False,
               warmup=3, iters=20, min_iters=10, save_outputs=False, timing_modes=("latency",), profile=False,
               params={"n": 16})


def test_a_job_run_again_after_its_group_was_lost_says_why_in_its_view_and_its_record(tmp_path):
    """Issue 55: the scheduler requeues a running job whose lane died (store.requeue), and a restarted
    service the jobs its predecessor ran (store.recover); each time the job's ``reruns`` gain the why,
    which its view shows meanwhile and its next run's record (job_record) keeps."""
    store = JobStore(tmp_path / "jobs.db")
    for name in ("lost", "waiting"):
        store.add(name, Submission(problem="1", backend="reference", source=f"# {name}\n"), problem="1_allreduce", world_size=2,
                  dedup_key=name)
        store.set_job(name, _job(f"{name}.py").to_json())
        store.set_state(name, JobState.READY)
    assert store.view("lost").reruns is None and "reruns" not in store.view("lost").to_json()
    store.set_state("lost", JobState.RUNNING)
    died = "the lane's process ended (signal 9)"
    assert store.requeue("lost", died)
    view = store.view("lost")
    assert (view.state, view.note, view.reruns) == (JobState.READY, f"requeued: {died}", (died,))
    assert not store.requeue("lost", "again"), "only a running job is requeued"
    assert not store.requeue("waiting", died) and store.view("waiting").reruns is None
    # Running again when its service is killed: the next service queues it again, and says so.
    store.set_state("lost", JobState.RUNNING)
    assert store.recover() == 2
    view = store.view("lost")
    assert view.state == JobState.QUEUED and view.reruns == (died, STOPPED_WHILE_RUNNING)
    assert store.view("waiting").reruns is None, "a job that had not run is not a rerun"
    job, _ = store.planned("lost")
    record = job_record(job, 2, "pass")
    assert record.reruns == (died, STOPPED_WHILE_RUNNING) and Record.from_json(record.to_json()) == record
    assert {v.id: v.reruns for v in store.views()}["lost"] == view.reruns  # the list shows them too
    store.close()


def test_a_full_queues_retry_after_is_the_time_one_job_takes_to_leave_it(tmp_path, monkeypatch):
    """A service user was told `Retry-After: 600` for a queue that emptied in 1.4 s: the whole
    queue at the last hour's rate, for a service up a minute. It is the jobs over the bound (and
    one) at the rate jobs left the queue for a group since the service started (within the hour)."""
    import time
    from types import SimpleNamespace

    from pkb_core.contracts.serve import JobState
    from pkb_core.serve.service import Service

    store = JobStore(tmp_path / "jobs.db")
    for n in range(6):  # six jobs started in the last minute; one answered at submission never queued
        store.add(f"j{n}", Submission(problem="1", backend="reference", source=f"# {n}\n"), problem="1_allreduce",
                  world_size=2, dedup_key=str(n))
        store.set_state(f"j{n}", JobState.RUNNING)
    store.add("now", Submission(problem="1", backend="reference", source="x"), problem="1_allreduce", world_size=2,
              dedup_key="now", state=JobState.DONE)
    assert store.started_since(time.time() - 60) == 6
    service = SimpleNamespace(store=store, started=time.time() - 60, config=SimpleNamespace(max_queued=4))
    # 6 starts in 60 s: one every 10 s; the queue at its bound (4 waiting) needs one to leave.
    assert Service._retry_after(service, 4) == 10
    assert Service._retry_after(service, 6) == 30  # three over: three starts
    assert Service._retry_after(SimpleNamespace(store=JobStore(tmp_path / "empty.db"), started=time.time(),
                                                config=service.config), 4) == 30  # nothing started yet


def test_a_finished_job_made_under_other_claim_rules_is_not_the_answer_to_a_new_request(tmp_path, monkeypatch):
    """A hostile review: the service handed back a stored record of the same request, and a record
    made before only window mode's speedup was claimed carried a latency-mode claim. The rules a
    claim is made under are part of what makes two requests the same."""
    from pkb_core.config import load_config
    from pkb_core.contracts.serve import Submission
    from pkb_core.launch.session import Session
    from pkb_core.plugin.manager import get_plugin_manager
    from pkb_core.serve import intake as intake_module

    session = Session.here(get_plugin_manager(), load_config(tmp_path), device="cpu", backend="reference",
                           world_size=2)
    intake = intake_module.Intake(session, devices=2, sources=tmp_path / "sources", max_source_bytes=1 << 20,
                                  job_timeout=60.0, max_timeout=600.0)
    submission = Submission(problem="1", source="def solution(x):\n    return x\n", backend="reference",
                            measure_perf=True, timing_modes=("latency",))
    now = intake.plan(submission, "a").dedup_key
    assert intake.plan(submission, "b").dedup_key == now
    monkeypatch.setattr(intake_module, "CLAIM_RULES", intake_module.CLAIM_RULES - 1)
    assert intake.plan(submission, "c").dedup_key != now


def test_a_record_made_by_other_judge_code_is_not_the_answer_and_a_tenants_label_is_its_own(tmp_path, monkeypatch):
    """A hostile review (2026-12-02): after a fix to a problem's reference the service still served
    the pass an identical submission had earned before it; and a label another tenant chose merged
    two tenants' records in the run folders' report (an identical source under it shared a key)."""
    from pkb_core.config import load_config
    from pkb_core.contracts.serve import Submission
    from pkb_core.launch.session import Session
    from pkb_core.plugin.manager import get_plugin_manager
    from pkb_core.serve import intake as intake_module

    session = Session.here(get_plugin_manager(), load_config(tmp_path), device="cpu", backend="reference",
                           world_size=2)
    intake = intake_module.Intake(session, devices=2, sources=tmp_path / "sources", max_source_bytes=1 << 20,
                                  job_timeout=60.0, max_timeout=600.0)
    submission = Submission(problem="1", source="def solution(x):\n    return x\n", backend="reference",
                            label="mine.py")
    now = intake.plan(submission, "a").dedup_key
    monkeypatch.setattr(intake_module, "code_fingerprint", lambda: "another judge")
    assert intake.plan(submission, "b").dedup_key != now
    alice, bob = intake.plan(submission, "c", "alice").job, intake.plan(submission, "d", "bob").job
    assert (alice.solution_label, bob.solution_label) == ("alice:mine.py", "bob:mine.py")
    assert alice.key != bob.key
    assert intake.plan(submission, "e").job.solution_label == "mine.py"  # no tokens: the label as given
