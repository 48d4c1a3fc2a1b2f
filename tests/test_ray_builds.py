"""The Ray build pool's bookkeeping of cancels (``pkb_core.ray.builds.RayBuilds``), with its Ray task
and ``ray.get`` replaced by local stand-ins: what a cancel does before, during and after a build.
The pool against a real cluster is in test_serve_ray.py."""
import threading
from types import SimpleNamespace

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'pkb[ray]')")

from pkb_core.ray import builds  # noqa: E402
from pkb_core.serve.builds import CANCELLED  # noqa: E402

JOB = SimpleNamespace(solution=None, to_json=lambda: {})
SETTINGS = SimpleNamespace(to_json=lambda: {}, run_dir="/nonexistent")


@pytest.fixture
def pool(monkeypatch):
    release = threading.Event()

    def get(task):
        release.wait(10)
        return None, None, f"built {task}"

    monkeypatch.setattr(builds, "build_task", SimpleNamespace(remote=lambda job, source, settings: "task"))
    monkeypatch.setattr(builds.ray, "get", get)
    monkeypatch.setattr(builds.ray, "cancel", lambda task, force: None)
    yield builds.RayBuilds(workers=1), release
    release.set()


def _submit(pool, job_id):
    ended = threading.Event()
    outcome = {}
    pool.submit(JOB, SETTINGS, lambda built, record, error: (outcome.update(error=error), ended.set()), job_id)
    return ended, outcome


def test_a_cancel_keeps_a_queued_build_from_starting_and_a_late_one_is_forgotten(pool):
    builds_, release = pool
    first_done, first = _submit(builds_, "first")
    queued_done, queued = _submit(builds_, "queued")  # waits for the one worker
    builds_.cancel("queued")
    release.set()
    assert first_done.wait(10) and queued_done.wait(10)
    assert first["error"] == "built task" and queued["error"] == CANCELLED
    # A cancel that comes after its build ended is nothing: the same id built again is built.
    builds_.cancel("first")
    again_done, again = _submit(builds_, "first")
    assert again_done.wait(10) and again["error"] == "built task"
    assert not builds_._cancelled and not builds_._live
