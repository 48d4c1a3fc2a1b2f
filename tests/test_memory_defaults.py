"""Issue 54 item 5: no honest job is killed by a default limit. A group's memory limit follows from
the machine (the memory pkb may use, shared among the groups a node runs side by side) and the job
(its inputs' size, built on the meta device), never from a constant a problem outgrows: problem 68
(a 2 GiB table shard per rank at W = 2) was killed by the former 4 GiB per rank on 2xH200."""
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from pkb_core.machine import limits

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="a cgroup of its own needs root")


def _problem_68():
    from pkb_core.plugin.manager import get_plugin_manager
    from pkb_core.problem.registry import build_registry

    return build_registry(get_plugin_manager()).get("68")


def test_problem_68s_inputs_are_measured_without_their_memory():
    """The shard is 2 GiB per rank at W = 2 and 1 GiB at W = 4 (bf16), read from shapes on the meta
    device in about a second, not from 2 GiB of tensors; a problem whose inputs read their own
    values (routing counts) is unknown rather than wrong."""
    import json

    from pkb_core.problem.footprint import input_bytes

    spec = _problem_68()
    params = json.dumps(spec.params("default"), sort_keys=True)
    extra = 20000 * 8 + 256 * 256 * 2  # the query ids and the projection
    assert input_bytes(str(spec.path), "default", 2, "bf16", params) == (2 << 30) + extra
    assert input_bytes(str(spec.path), "default", 4, "bf16", params) == (1 << 30) + extra
    from pkb_core.plugin.manager import get_plugin_manager
    from pkb_core.problem.registry import build_registry

    routed = build_registry(get_plugin_manager()).get("85")
    assert input_bytes(str(routed.path), "tiny", 2, "bf16", json.dumps(routed.params("tiny"))) is None


def test_the_default_follows_the_machine_and_the_job(monkeypatch):
    """Half the memory pkb may use, split by the node's GPUs among the groups that may run at once;
    raised to the job's need where that is larger, never past the half; ``--memory-limit`` wins."""
    two_gib = 2 << 30
    monkeypatch.setattr(limits, "machine_mib", lambda: 256 << 10)  # 2xH200's 256 GiB
    assert limits.memory_mib(2, gpus=2, input_bytes=two_gib) == 128 << 10  # was 8192: problem 68's crash
    assert limits.memory_mib(2, gpus=8) == 32 << 10                      # four W = 2 lanes side by side
    assert limits.memory_mib(1, gpus=64) == limits.RANK_BASE_MIB         # the share is less than a process
    assert limits.memory_mib(2, gpus=64, input_bytes=two_gib) == 2 * (limits.RANK_BASE_MIB + 4 * 2048)
    assert limits.memory_mib(2, 3000, gpus=2) == 3000
    monkeypatch.setattr(limits, "machine_mib", lambda: 8 << 10)
    assert limits.memory_mib(2, input_bytes=two_gib) == 4 << 10          # the need, capped at the half
    monkeypatch.setattr(limits, "machine_mib", lambda: 1024)
    assert limits.memory_mib(2) == limits.MIN_MEMORY_MIB


def test_the_memory_pkb_may_use_is_its_cgroups_limit_where_one_is_set(monkeypatch, tmp_path):
    """A container's limit (the lowest of pkb's cgroup and its ancestors) is what pkb may use, above
    or below MemTotal (a VM whose memory grows as it is used reads 31 GiB at its start); v2's ``max``
    and v1's page-rounded 2**63 are no limit."""
    from pkb_core.process import cgroup_tree

    outer = tmp_path / "v2" / "process_api"
    own = outer / "job"
    own.mkdir(parents=True)
    (tmp_path / "v2" / "memory.max").write_text("max\n")
    (outer / "memory.max").write_text(f"{256 << 30}\n")
    (own / "memory.max").write_text("max\n")
    monkeypatch.setattr(cgroup_tree, "own_cgroups", lambda: {"v2": str(own)})
    assert limits.cgroup_limit_mib() == 256 << 10
    assert limits.machine_mib() == 256 << 10
    v1 = tmp_path / "v1" / "a"
    v1.mkdir(parents=True)
    (tmp_path / "v1" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (v1 / "memory.limit_in_bytes").write_text(f"{8 << 30}\n")
    monkeypatch.setattr(cgroup_tree, "own_cgroups", lambda: {"memory": str(v1), "v2": str(own)})
    assert limits.machine_mib() == 8 << 10
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    monkeypatch.setattr(cgroup_tree, "own_cgroups", lambda: {"memory": str(v1)})
    assert limits.cgroup_limit_mib() is None  # then MemTotal
    assert limits.machine_mib() > 0


@ROOT_ONLY
def test_a_group_started_before_its_job_is_given_the_jobs_need(monkeypatch, tmp_path):
    """The next job's group starts during this one, with the machine's share; once its job is known
    (problem 68 at W = 2 on a node of 8 GPUs and 128 GiB, whose share is 16 GiB), its cgroup's limit
    is raised to the job's need before any of its code runs. ``--memory-limit`` is never changed."""
    from pkb_core.contracts.batch import LaunchSettings
    from pkb_core.launch.launcher import Launch
    from pkb_core.process.cgroups import Cgroup
    from pkb_core.process.containment import Containment, own_tree

    tree, why = own_tree()
    if tree is None or not tree.root.has("memory"):
        pytest.skip(f"no memory cgroup can be made here: {why}")
    monkeypatch.setattr(limits, "machine_mib", lambda: 128 << 10)
    monkeypatch.setattr(limits, "node_gpus", lambda device: 8)
    spec = _problem_68()
    job = SimpleNamespace(problem_path=str(spec.path), size="default", dtype="bf16", params=spec.params("default"))
    launch = Launch.__new__(Launch)  # no judge, zygote or process-wide setting: only its limits
    launch.settings = LaunchSettings(nproc=2, device="cpu", backend="reference", run_dir=tmp_path, job_timeout=60)
    share = launch._memory_mib()
    assert share == 16 << 10
    cgroup, _, _ = tree.group("fit", memory_bytes=share << 20)
    try:
        group = SimpleNamespace(containment=Containment(cgroup=cgroup))
        launch._fit_memory(group, job)
        need = 2 * (limits.RANK_BASE_MIB + limits.DATA_COPIES * 2048)
        assert cgroup.limits["memory_bytes"] == need << 20
        folder = cgroup.dirs.get("memory") or cgroup.dirs[""]
        name = "memory.max" if cgroup.version == 2 else "memory.limit_in_bytes"
        assert int(Path(folder, name).read_text()) == need << 20  # the kernel's, not only pkb's note
        launch.settings = LaunchSettings(nproc=2, device="cpu", backend="reference", run_dir=tmp_path,
                                         job_timeout=60, memory_mib=512)
        launch._fit_memory(group, job)
        assert cgroup.limits["memory_bytes"] == need << 20
    finally:
        Cgroup.kill(cgroup, wait_s=1.0)
        cgroup.remove()
