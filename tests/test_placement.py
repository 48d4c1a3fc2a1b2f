"""CPU mode's placement (pkb_core/machine/placement.py): local rank r of every group, the judge's
too, on the r-th core the launch may use; the judge's timekeepers on all of them."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this system")

CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def _in_a_process(code: str) -> dict:
    """Run ``code`` in a fresh interpreter (placing this one would place pytest) and read the JSON
    it prints last."""
    found = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                           check=True)
    return json.loads(found.stdout.strip().splitlines()[-1])


def test_every_rank_that_connects_on_cpu_is_placed_and_its_timekeeper_is_not():
    """``connect`` (the judge's and every group's start) puts local rank r on the r-th core; a child
    the placed process starts with ``unplaced_environment`` (the judge's timekeeper) runs on every
    core again once it calls ``unplace``, whatever it does after (its NUMA settling)."""
    found = _in_a_process("""
        import json, os, subprocess, sys
        from types import SimpleNamespace
        from pkb_core.harness.worker_loop import connect
        from pkb_core.machine.placement import unplaced_environment

        placed = {}
        for local_rank in (0, 1, 2):
            connect(SimpleNamespace(device_type="cpu", local_rank=local_rank, store_timeout=5))
            placed[local_rank] = sorted(os.sched_getaffinity(0))
        child = subprocess.run([sys.executable, "-c", "import os; from pkb_core.machine.placement import unplace; "
                                "before = sorted(os.sched_getaffinity(0)); unplace(); "
                                "print(before, sorted(os.sched_getaffinity(0)))"],
                               env=dict(os.environ, **unplaced_environment()), capture_output=True, text=True)
        before, after = child.stdout.strip().split("] [")
        print(json.dumps({"placed": placed, "before": json.loads(before + "]"), "after": json.loads("[" + after)}))
    """)
    assert found["placed"] == {str(r): [CORES[r % len(CORES)]] for r in (0, 1, 2)}
    assert found["before"] == [CORES[2 % len(CORES)]] and found["after"] == CORES


def test_a_process_pkb_did_not_place_hands_nothing_on():
    found = _in_a_process("""
        import json, os
        from pkb_core.machine.placement import unplaced_environment

        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # narrowed, but not by pkb
        print(json.dumps(unplaced_environment()))
    """)
    assert found == {}


_TELLS_ITS_CORES = '''
import os


def solution(tensor):
    raise ValueError(f"cores {sorted(os.sched_getaffinity(0))}")
'''


def test_a_candidates_rank_runs_on_its_own_core(pkb_invoke, tmp_path):
    """End to end: the candidate's rank 0 (whose error the record keeps: the lowest rank's) ran on
    the first core, whatever the machine's scheduler would have chosen."""
    folder = tmp_path / "sols"
    folder.mkdir()
    (folder / "1_allreduce.py").write_text(_TELLS_ITS_CORES)
    result = pkb_invoke("run", "--backend", "reference", "--solutions", folder, "--trials", "1",
                        "--out", tmp_path / "run", "--json")
    record, = json.loads(result.stdout)["results"]
    assert record["verdict"] == "error" and f"cores [{CORES[0]}]" in record["reason"], record
