"""CPU mode places rank r of every group on the r-th core the process may use
(pkb_core.machine.placement): two groups of the same code otherwise ran under the scheduler's
placement of the moment, which differed between groups for a whole job."""
import json
import os

from pkb_core.machine.placement import cpu_rank_core

#: A solution whose answer is wrong unless its rank runs on exactly the core pkb places it on.
_PLACEMENT_PROBE = """
import os

import torch.distributed as dist


def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    cores = {cores!r}
    wanted = {{cores[dist.get_rank() % len(cores)]}}
    return out if os.sched_getaffinity(0) == wanted else out + 1
"""


def test_a_rank_is_placed_on_its_own_core_in_every_group(pkb_invoke, tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    probe = tmp_path / "1_allreduce.py"
    probe.write_text(_PLACEMENT_PROBE.format(cores=cores))
    result = pkb_invoke("run", "--backend", "reference", "--solution", probe, "--trials", "1", "--measure-perf",
                        "--timing-mode", "window", "--iters", "6", "--min-iters", "6", "--out", tmp_path / "run",
                        "--json")
    record = json.loads(result.stdout)["results"][0]
    # its trials and its timed calls (checked) both ran on the core of its rank
    assert record["verdict"] == "pass", record


def test_the_core_of_a_rank_is_taken_in_turn_from_the_process_affinity(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5, 3, 9})
    assert [cpu_rank_core(r) for r in range(4)] == [3, 5, 9, 3]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set())
    assert cpu_rank_core(0) is None
