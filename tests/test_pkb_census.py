"""scripts/pkb-census: PKB's trees fetched from a git repository at a commit, imported, run, reported.

A throwaway repository stands in for PKB's (no network in tests): its tree folder has PKB's
naming, one correct file and one PKB numbering pkb dropped; the run uses the reference
backend (``PKB_CENSUS_BACKEND``), as a CPU has no CUDA."""
import json
import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "pkb-census"
TREE = "solutions_cuda_bf16_h100_8_someone_model"
ALLREDUCE = '''import torch.distributed as dist


def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out
'''


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def test_the_census_takes_the_trees_of_a_commit_and_reports_each_run(tmp_path):
    pkb = tmp_path / "pkb-repo"
    (pkb / TREE).mkdir(parents=True)
    _git(tmp_path, "init", "-q", str(pkb))
    (pkb / TREE / "1_allreduce_cuda.py").write_text(ALLREDUCE)
    (pkb / TREE / "47_fsdp_adamw_sharded_cuda.py").write_text(ALLREDUCE)
    _git(pkb, "add", "-A")
    _git(pkb, "commit", "-qm", "the trees")
    commit = subprocess.run(["git", "-C", str(pkb), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    (pkb / TREE / "1_allreduce_cuda.py").write_text("def solution(tensor):\n    return tensor\n")  # not committed
    out = tmp_path / "census"
    result = subprocess.run([str(SCRIPT), str(out), str(pkb), "--", "--timeout", "60"], capture_output=True,
                            text=True, timeout=600,
                            env={**os.environ, "PKB_COMMIT": commit, "PKB_CENSUS_BACKEND": "reference", "TRIALS": "1"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"PKB at {commit[:7]}" in result.stdout
    assert "not mapped" in result.stdout and "47_fsdp_adamw_sharded" in result.stdout
    report = json.loads((out / "reports" / f"{TREE}.json").read_text())
    assert "verdicts" in (out / "reports" / f"{TREE}.txt").read_text()
    records = [json.loads(line) for line in (out / "runs" / TREE / "records.jsonl").read_text().splitlines()]
    assert [(r["problem"], r["verdict"]) for r in records] == [("1_allreduce", "pass")]  # the committed file
    assert report and not (pkb / TREE / "1_allreduce_cuda.py").read_text().startswith("import")  # clone untouched
