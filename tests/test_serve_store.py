"""The service's job store (pkb_core.serve.store), as the scheduler reads it on every pass."""
from pkb_core.contracts.serve import JobState, Submission
from pkb_core.serve.store import JobStore


def test_waiting_jobs_keep_their_submissions_parsed_once_and_track_the_table(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    for n in range(3):
        store.add(f"j{n}", Submission(problem="1", source=f"# file {n}\n", client=f"c{n}"),
                  problem="1_allreduce", world_size=2, dedup_key=str(n))
    first = store.waiting()
    assert [(w["id"], w["state"], w["submission"].source) for w in first] == \
        [(f"j{n}", JobState.QUEUED, f"# file {n}\n") for n in range(3)]
    # The next pass reuses the parsed submissions and sees the table's changes: a state, a planned
    # job, a job that left the queue, a new one.
    store.set_state("j0", JobState.READY)
    store.set_job("j0", {"planned": True})
    store.set_state("j1", JobState.RUNNING)
    store.add("j3", Submission(problem="1", source="# file 3\n"), problem="1_allreduce", world_size=2,
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
