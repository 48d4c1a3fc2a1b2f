"""Suite fan-out (`pkb run --executor ...`): shards through submitit's local mode, SLURM parameters."""
import json
import os
import stat

import pytest

from pkb_core.launch.fanout import ExecutorOptions, engine_parameters, make_shards, run_sharded, shard_minutes

submitit = pytest.importorskip("submitit")


def _job(problem, n):
    from pkb_core.contracts.job import Job

    return Job(key=f"{problem}|{n}", slug=f"{problem}-s{n}", problem=problem, problem_id=int(problem.split("_")[0]),
               category="collective", problem_path=f"/nowhere/{problem}.py", backend="nosuch", solution=None,
               solution_label=f"s{n}", size="tiny", dtype="fp32", trials=1, mode="eval", measure_perf=False,
               warmup=0, iters=1, min_iters=1, save_outputs=False, timing_modes=("latency",), profile=False,
               params={})


def test_shards_are_problems_or_chunks():
    jobs = [_job("1_allreduce", 0), _job("1_allreduce", 1), _job("2_allgather", 0), _job("3_broadcast", 0)]
    assert [[j.key for j in s] for s in make_shards(jobs)] == [
        ["1_allreduce|0", "1_allreduce|1"], ["2_allgather|0"], ["3_broadcast|0"]]
    assert [len(s) for s in make_shards(jobs, jobs_per_shard=3)] == [3, 1]
    # The engine's limit covers every job running into its timeout (plus a launch start-up allowance).
    assert shard_minutes(jobs[:2], job_timeout=300) == (180 + 2 * 360) // 60


def test_slurm_shard_holds_one_node_exclusively(tmp_path, monkeypatch):
    options = ExecutorOptions(name="slurm", slurm_partition="gpu", slurm_account="proj", slurm_time=30,
                              slurm_cpus_per_task=32, slurm_options=("mem=0", "constraint=h100", "requeue"))
    params = engine_parameters(options, nproc=4, device="cuda", minutes=999, name="pkb-x")
    assert params == {"name": "pkb-x", "nodes": 1, "tasks_per_node": 1, "timeout_min": 30, "gpus_per_node": 4,
                      "cpus_per_task": 32, "slurm_partition": "gpu", "slurm_account": "proj",
                      "slurm_exclusive": True,
                      "slurm_additional_parameters": {"mem": "0", "constraint": "h100", "requeue": True}}
    # submitit accepts them and writes the sbatch flags (a fake srun makes it believe it is on SLURM).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "srun").chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    executor = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm")
    executor.update_parameters(**params)
    sbatch = executor._executor._make_submission_file_text("python -m x", "uid").splitlines()
    for flag in ("--nodes=1", "--ntasks-per-node=1", "--gpus-per-node=4", "--exclusive", "--partition=gpu",
                 "--account=proj", "--time=30", "--cpus-per-task=32", "--mem=0", "--constraint=h100", "--requeue"):
        assert f"#SBATCH {flag}" in sbatch, flag


def test_slurm_needs_to_know_the_ranks_per_node(pkb_invoke, tmp_path):
    result = pkb_invoke("run", "--executor", "slurm", "--problem", "1", "--out", tmp_path)
    assert result.exit_code == 1
    assert result.output.strip().endswith(
        "Error: --executor slurm needs --nproc N (ranks per node) or --slurm-gpus-per-node N")
    result = pkb_invoke("run", "--executor", "submitit-local", "--nnodes", "2", "--rdzv-endpoint", "h:1",
                        "--out", tmp_path)
    assert result.output.strip().endswith("Error: --executor submitit-local runs single-node jobs; --nnodes > 1 "
                                          "needs one `pkb run` per node (docs/cluster.md)")


def test_a_shard_the_engine_lost_becomes_error_records(tmp_path):
    from pkb_core.contracts.batch import LaunchSettings
    from pkb_core.results.records import read_records

    # The shard raises on its node (no such backend there): no record from the shard itself.
    settings = LaunchSettings(nproc=2, device="cpu", backend="nosuch", run_dir=tmp_path, job_timeout=30)
    made = run_sharded([_job("1_allreduce", 0), _job("2_allgather", 0)], settings,
                       ExecutorOptions(name="submitit-local", jobs_per_shard=2))
    records = read_records(tmp_path)
    assert [(r.key, r.verdict) for r in records] == [("1_allreduce|0", "error"), ("2_allgather|0", "error")]
    assert made == records  # what the fan-out returns is what it recorded
    reason = records[0].reason
    assert reason.startswith("engine job ") and "PkbError: unknown backend 'nosuch'" in reason, reason
    assert f"logs {tmp_path}/submitit/" in reason


def test_collective_pack_in_shards_lands_in_one_run_dir_and_resumes(pkb_invoke, tmp_path):
    args = ("run", "--problem", "collective", "--nproc", "2", "--trials", "1", "--executor", "submitit-local",
            "--jobs-per-shard", "4", "--out", tmp_path, "--json")
    result = pkb_invoke(*args)
    records = json.loads(result.stdout)["results"]
    assert sorted((r["problem_id"], r["verdict"]) for r in records) == [(i, "pass") for i in range(1, 9)]
    assert result.exit_code == 0
    # Two engine jobs, one launch each, one records file.
    assert len(list((tmp_path / "submitit").glob("*_submitted.pkl"))) == 2
    assert len(list((tmp_path / "logs").glob("launch-*.log"))) == 2
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(lines) == 8
    again = pkb_invoke(*args)
    assert "nothing to submit" in again.stderr
    assert json.loads(again.stdout)["results"] == records
    assert len(list((tmp_path / "submitit").glob("*_submitted.pkl"))) == 2
    assert (tmp_path / "records.jsonl").read_text().splitlines() == lines


def _fake_tools(tmp_path, monkeypatch, **scripts):
    """Put shell scripts named after SLURM tools first on PATH; each logs its arguments to calls.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {tmp_path}/calls.log\n{body}\n')
        (bin_dir / name).chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "calls.log"


def test_cpu_shards_on_slurm_ask_for_no_gpus(tmp_path, monkeypatch):
    params = engine_parameters(ExecutorOptions(name="slurm"), nproc=2, device="cpu", minutes=5, name="pkb-x")
    assert "gpus_per_node" not in params and "gres" not in params
    _fake_tools(tmp_path, monkeypatch, srun="exit 1")
    executor = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm")
    executor.update_parameters(**params)
    sbatch = executor._executor._make_submission_file_text("python -m x", "uid")
    assert "gpu" not in sbatch and "gres" not in sbatch, sbatch
    # Asked for explicitly, GPUs are requested in CPU mode too; on GPUs every rank gets one by default.
    explicit = ExecutorOptions(name="slurm", slurm_gpus_per_node=1)
    assert engine_parameters(explicit, nproc=2, device="cpu", minutes=5, name="x")["gpus_per_node"] == 1
    assert engine_parameters(ExecutorOptions(name="slurm"), 8, "cuda", 5, "x")["gpus_per_node"] == 8
    # submitit-local on CPU: 0, or it would narrow CUDA_VISIBLE_DEVICES for nothing.
    assert engine_parameters(ExecutorOptions(name="submitit-local"), 2, "cpu", 5, "x")["gpus_per_node"] == 0


def test_without_accounting_job_states_come_from_squeue_quietly(tmp_path, monkeypatch):
    from pkb_core.launch.slurm_watch import ENDED, QueueWatcher

    calls = _fake_tools(tmp_path, monkeypatch,
                        sacct='echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1',
                        squeue='printf "7_0|COMPLETED|n1\\n7_1|CANCELLED|n1\\n7_2|RUNNING|n2\\n"')
    printed = []
    watcher = QueueWatcher(echo=printed.append)
    for job_id in ("7_0", "7_1", "7_2", "5"):
        watcher.register_job(job_id)
    watcher.update()
    assert {j: watcher.get_state(j, mode="cache") for j in ("7_0", "7_1", "7_2", "5")} == {
        "7_0": "COMPLETED", "7_1": "CANCELLED", "7_2": "RUNNING", "5": ENDED}  # 5: no longer listed
    assert [watcher.is_done(j, mode="cache") for j in ("7_0", "7_1", "7_2", "5")] == [True, True, False, True]
    watcher.update()  # sacct is not asked again; only the unfinished job is
    sacct, *squeue = calls.read_text().splitlines()
    assert sacct.startswith("sacct -o JobID,State,NodeList --parsable2 -j ")
    assert squeue == ["squeue --noheader --array --states=all --format=%i|%T|%N --jobs=5,7",
                      "squeue --noheader --array --states=all --format=%i|%T|%N --jobs=7"]
    assert printed == [] and not watcher.accounting


def test_job_states_when_neither_sacct_nor_squeue_answers(tmp_path, monkeypatch):
    from pkb_core.launch.slurm_watch import QueueWatcher

    _fake_tools(tmp_path, monkeypatch, sacct='echo "sacct: error: slurmdbd: Connection refused" >&2; exit 1',
                squeue='echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1')
    printed = []
    watcher = QueueWatcher(echo=printed.append)
    watcher.register_job("9_0")
    for _ in range(3):
        watcher.update()
    assert watcher.get_state("9_0", mode="cache") == "UNKNOWN" and not watcher.is_done("9_0", mode="cache")
    assert watcher.accounting  # not disabled, only unreachable: asked again next time
    assert printed == ["slurm: cannot read the shards' states (sacct: accounting disabled or failing; squeue: "
                       "slurm_load_jobs error: Unable to contact slurm controller); retrying"]
    # squeue back, the job purged from the controller: it has ended.
    _fake_tools(tmp_path, monkeypatch, squeue='echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1')
    watcher.update()
    assert watcher.is_done("9_0", mode="cache")
