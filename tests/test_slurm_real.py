"""`pkb run --executor slurm` against a real SLURM: a one-node cluster on this machine.

`.ci/start-slurm` starts one (munge, slurmctld, slurmd from Debian's packages,
accounting off); `.ci/run` calls it. Where SLURM is not there or does not
answer, every test here is skipped with the reason. Each `pkb run` is a
separate process with this test's Python, as a user would start it; submitit
writes that Python into the sbatch script, so the shards find the same pkb.
"""
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("submitit")

FIXTURES = Path(__file__).parent / "fixtures"
#: `pkb run` options every test here uses: CPU mode, two ranks per shard, one trial.
CPU_RUN = ("run", "--executor", "slurm", "--device", "cpu", "--nproc", "2", "--trials", "1", "--json")


def slurm_unavailable() -> str | None:
    """Why this machine cannot run SLURM jobs now, or None when `srun hostname` works."""
    if not all(map(shutil.which, ("sbatch", "srun", "scontrol"))):
        return "no sbatch/srun on PATH (a one-node SLURM: sudo .ci/start-slurm --install)"
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
    if ping.returncode != 0 or "is UP" not in ping.stdout:
        lines = (ping.stdout + ping.stderr).strip().splitlines() or [f"exit status {ping.returncode}"]
        return f"SLURM controller not responding: `scontrol ping`: {lines[0]} (.ci/start-slurm starts one)"
    try:
        done = subprocess.run(["srun", "--immediate=10", "--time=1", "hostname"], capture_output=True, text=True,
                              timeout=30)
    except subprocess.TimeoutExpired:
        return "SLURM controller not responding: `srun hostname` gave no answer in 30 s (.ci/start-slurm)"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"SLURM cannot run a job here: `srun hostname`: {why} (.ci/start-slurm starts one)"
    return None


@pytest.fixture(scope="module")
def slurm():
    why = slurm_unavailable()
    if why:
        pytest.skip(why)


@pytest.fixture
def out(slurm, tmp_path):
    """The run directory; afterwards, whatever its runs left in the queue (a test that failed
    half-way, a `pkb run` killed by its time limit) is cancelled."""
    run_dir = tmp_path / "run"
    yield run_dir
    ids = sorted({script.name.split("_")[0] for script in run_dir.glob("submitit/*_submission.sh")})
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, timeout=30)


def pkb(*args, timeout=150):
    """One `pkb` process; returns (exit status, records of --json, stderr)."""
    done = subprocess.run([sys.executable, "-m", "pkb_core", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PKB_DEVICE": "cpu"})
    records = json.loads(done.stdout)["results"] if done.stdout.strip() else None
    return done.returncode, records, done.stderr


def assert_quiet_engine(stderr):
    """Accounting is off on this cluster: nothing about sacct reaches the user."""
    assert "sacct" not in stderr and "Bypassing" not in stderr and "accounting" not in stderr, stderr


def verdicts(records):
    return [(r["problem_id"], r["solution"], r["verdict"]) for r in records]


def test_cpu_suite_in_two_shards_records_and_resumes(out):
    args = (*CPU_RUN, "--problem", "1,2", "--out", out)
    status, records, stderr = pkb(*args)
    assert status == 0, stderr
    assert verdicts(records) == [(1, "reference", "pass"), (2, "reference", "pass")]
    assert "slurm: 2 shard(s) of 2 job(s) submitted" in stderr, stderr
    assert_quiet_engine(stderr)
    # One job array of two elements, asking for no GPUs: a CPU node has none to give.
    folder = out / "submitit"
    [script] = folder.glob("*_submission.sh")
    array_id = script.name.split("_")[0]
    sbatch = script.read_text()
    assert "#SBATCH --array=0-1%2" in sbatch and "#SBATCH --exclusive" in sbatch
    assert "gpu" not in sbatch and "gres" not in sbatch, sbatch
    assert f"{sys.executable} -u -m submitit.core._submit" in sbatch
    # Each shard ran under SLURM (its log is srun's) and returned what it recorded.
    for index in (0, 1):
        assert f"JobEnvironment(job_id={array_id}_{index}," in (folder / f"{array_id}_{index}_0_log.out").read_text()
        outcome, result = pickle.loads((folder / f"{array_id}_{index}_0_result.pkl").read_bytes())
        assert outcome == "success" and result["records"] == 1, (outcome, result)
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(lines) == 2

    # The same command again: everything is recorded, nothing is submitted.
    status, again, stderr = pkb(*args)
    assert status == 0 and again == records, stderr
    assert "every job already has a record" in stderr and "nothing to submit" in stderr
    assert list(folder.glob("*_submission.sh")) == [script]

    # Drop the allgather's record: only that job goes out again, the allreduce's record stays as it was.
    kept = [line for line in lines if json.loads(line)["problem_id"] == 1]
    (out / "records.jsonl").write_text("".join(line + "\n" for line in kept))
    status, resumed, stderr = pkb(*args)
    assert status == 0, stderr
    assert "slurm: 1 shard(s) of 1 job(s) submitted" in stderr, stderr
    assert verdicts(resumed) == verdicts(records)
    now = (out / "records.jsonl").read_text().splitlines()
    assert len(now) == 2 and now[0] == kept[0] and json.loads(now[1])["problem_id"] == 2
    assert len(list(folder.glob("*_submission.sh"))) == 2


def _squeue(array_id):
    done = subprocess.run(["squeue", "--noheader", "--array", "--states=all", "--format=%i %T", f"--jobs={array_id}"],
                          capture_output=True, text=True, timeout=30)
    return dict(line.split() for line in done.stdout.splitlines() if line.strip())


def processes_of(job_id):
    """Pids of the processes that belong to SLURM job ``job_id`` (``ARRAY_INDEX``), by their environment."""
    array_id, index = job_id.split("_")
    wanted = {f"SLURM_ARRAY_JOB_ID={array_id}".encode(), f"SLURM_ARRAY_TASK_ID={index}".encode()}
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and wanted <= set((proc / "environ").read_bytes().split(b"\0")):
                pids.append(int(proc.name))
        except OSError:  # gone, or not ours to read
            pass
    return pids


def test_failing_shards_become_records_not_hangs(out, tmp_path):
    """Two shards side by side: one whose job crashes (its shard records `crash`), and one
    whose job hangs until the test cancels the shard (`scancel`), as SLURM would at a
    node failure or a time limit; that shard never writes a result, and with accounting
    off only squeue can say it ended. It becomes an `error` record naming the engine job."""
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    for name in ("1_allreduce_crash.py", "1_allreduce_hang.py"):
        shutil.copy(FIXTURES / "solutions" / name, solutions / name)
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "pkb_core", *CPU_RUN, "--solutions", solutions, "--jobs-per-shard", "1",
         "--no-slurm-exclusive", "--timeout", "600", "--out", out],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PKB_DEVICE": "cpu"})
    try:
        # Wait for the crash to be recorded and the hanging shard to be running, then cancel that shard.
        cancelled = None
        while cancelled is None:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() - started < 90, "the shards did not start within 90 s"
            scripts = list((out / "submitit").glob("*_submission.sh")) if (out / "submitit").exists() else []
            records = (out / "records.jsonl").read_text() if (out / "records.jsonl").exists() else ""
            if scripts and '"crash"' in records:
                array_id = scripts[0].name.split("_")[0]
                states = _squeue(array_id)
                if sorted(states.values()) == ["COMPLETED", "RUNNING"]:  # the crash's shard is over
                    [cancelled] = [job for job, state in states.items() if state == "RUNNING"]
                    shard_pids = processes_of(cancelled)
                    assert shard_pids, "the running shard's processes are not visible here"
                    subprocess.run(["scancel", cancelled], check=True, timeout=30)
            time.sleep(0.5)
        stdout, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 1, stderr  # crash and error fail the run
    records = {Path(r["solution"]).stem.split("_")[-1]: r for r in json.loads(stdout)["results"]}
    assert records["crash"]["verdict"] == "crash" and "SIGABRT" in records["crash"]["reason"], records["crash"]
    lost = records["hang"]
    assert lost["verdict"] == "error", lost
    reason = lost["reason"]
    assert reason.startswith(f"engine job {cancelled}: "), reason
    assert "has not produced any output (state: CANCELLED" in reason, reason
    assert f"(logs {out}/submitit/{cancelled}_0_log.err)" in reason, reason
    assert_quiet_engine(stderr)
    # SLURM ended the cancelled shard's processes (all that carry its job's environment).
    deadline = time.monotonic() + 15
    while processes_of(cancelled) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_of(cancelled) == []
    # SLURM ended its launch's warden with it: the run swept the launch folder it left in /dev/shm
    # (it stayed until the next pkb run on the machine).
    from pkb_core.launch.scratch import OWNER_FILE

    left = [folder for folder in Path("/dev/shm").glob("pkb-*") if (folder / OWNER_FILE).exists()
            and int((folder / OWNER_FILE).read_text().split()[0]) in shard_pids]
    assert not left, left


@pytest.mark.parametrize("option, message", [
    (("--slurm-gpus-per-node", "1"), "Invalid generic resource (gres) specification"),
    (("--slurm-partition", "nosuch"), "Invalid partition name specified"),
])
def test_a_request_the_cluster_cannot_meet_fails_at_submission(slurm, tmp_path, option, message):
    status, records, stderr = pkb(*CPU_RUN, "--problem", "1", *option, "--out", tmp_path, timeout=60)
    assert status == 1 and records is None
    assert "Error: --executor slurm: submission failed: sbatch: error: " in stderr, stderr
    assert message.lower() in stderr.lower(), stderr
    assert not (tmp_path / "records.jsonl").exists()
