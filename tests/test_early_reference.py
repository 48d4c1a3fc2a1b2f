"""Window mode's reference group of a job (pkb_core.launch.launcher.EarlyReferenceSide): forked as the
job begins where the job times window mode, set up before timing, stopped with the job however far
it got, and a start that failed said where window mode asks for the group."""
from types import SimpleNamespace

import pytest

from pkb_core.launch.launcher import EarlyReferenceSide


class _Launch:
    """The launcher's three calls, counted; ``set_up_fails``: the group's set-up raises."""

    def __init__(self, set_up_fails: bool = False):
        self.forked, self.set_up, self.stopped = [], [], []
        self.set_up_fails = set_up_fails

    def fork_reference_side(self, job, run_id):
        group = f"group-{len(self.forked)}"
        self.forked.append(group)
        return group

    def set_up_reference_side(self, group, job, run_id):
        self.set_up.append(group)
        if self.set_up_fails:
            raise RuntimeError("the reference could not be set up as a timed side: no heap")
        return group

    def stop_group(self, group):
        self.stopped.append(group)


def _job(modes=("window",), measure_perf=True, mode="eval"):
    return SimpleNamespace(mode=mode, measure_perf=measure_perf, timing_modes=modes)


LOCAL = SimpleNamespace(remote=None)


def test_a_job_that_times_window_mode_forks_its_group_as_it_begins_and_sets_it_up_once():
    launch = _Launch()
    side = EarlyReferenceSide(launch, _job(("latency", "window")), "run-ref", LOCAL)
    assert launch.forked == ["group-0"] and launch.set_up == []  # forked, not waited for
    side.set_up()
    side.set_up()
    assert side.group() == "group-0" and launch.set_up == ["group-0"] and launch.forked == ["group-0"]
    side.stop()
    assert launch.stopped == ["group-0"]


@pytest.mark.parametrize("job", [_job(("latency",)), _job(measure_perf=False), _job(mode="generate")])
def test_a_job_that_times_no_window_mode_forks_nothing(job):
    launch = _Launch()
    side = EarlyReferenceSide(launch, job, "run-ref", LOCAL)
    side.set_up()
    side.stop()
    assert launch.forked == launch.set_up == launch.stopped == []


def test_a_job_ended_before_timing_stops_the_group_it_forked():
    launch = _Launch()
    EarlyReferenceSide(launch, _job(), "run-ref", LOCAL).stop()
    assert launch.stopped == ["group-0"] and launch.set_up == []


def test_a_set_up_that_failed_is_raised_where_window_mode_asks_and_the_group_still_stopped():
    launch = _Launch(set_up_fails=True)
    side = EarlyReferenceSide(launch, _job(), "run-ref", LOCAL)
    side.set_up()  # before timing: kept, not raised there
    with pytest.raises(RuntimeError, match="could not be set up"):
        side.group()
    side.stop()
    assert launch.stopped == ["group-0"]


def test_a_group_not_forked_early_is_forked_when_asked_for_and_stopped():
    launch = _Launch()
    side = EarlyReferenceSide(launch, _job(), "run-ref", SimpleNamespace(remote="slurm"))
    assert launch.forked == []  # a multi-node job: window mode will say it is unavailable
    assert side.group() == "group-0"
    side.stop()
    assert launch.stopped == ["group-0"]
