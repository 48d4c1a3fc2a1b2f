"""One planning path (pkb_core.launch.plan): `pkb run` and `pkb bench` plan their jobs and
launch settings the same way, so pkb.toml's [backends.<name>] table reaches the backend's
init hook from either command."""
import json

import pytest

OPTIONS_BACKEND = '''
import json, os
from pkb_core.plugin.backend import BackendInfo
from pkb_core.plugin.hookspecs import hookimpl

@hookimpl
def pkb_backend_info():
    return BackendInfo(name="optspy", devices=("cpu",), custom_kernels=False, environment=("PKBTEST_OPTIONS",))

@hookimpl
def pkb_backend_init(ctx):
    with open(os.environ["PKBTEST_OPTIONS"], "a") as f:
        f.write(json.dumps(dict(ctx.options)) + "\\n")
    return None
'''

GATHERING_ALLREDUCE = '''
import torch.distributed as dist

def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out
'''


@pytest.fixture
def optspy(fake_dist, tmp_path, monkeypatch):
    fake_dist("pkbtest-optspy", {"pkb.backends": {"optspy": "pkbtest_optspy"}}, {"pkbtest_optspy": OPTIONS_BACKEND})
    monkeypatch.setenv("PKBTEST_OPTIONS", str(tmp_path / "options.jsonl"))
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkb.toml").write_text('[backends.optspy]\nflavour = "from-pkb.toml"\n')
    folder = tmp_path / "solutions"
    folder.mkdir()
    (folder / "1_allreduce.py").write_text(GATHERING_ALLREDUCE)
    return folder


def _seen(tmp_path):
    return [json.loads(line) for line in (tmp_path / "options.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("command", [
    ("run", "--problem", "1", "--trials", "1"),
    ("bench", "--problem", "1", "--sizes", "4K", "--trials", "1", "--iters", "2", "--warmup", "0"),
])
def test_backend_options_from_pkb_toml_reach_init_from_every_command(pkb_invoke, optspy, tmp_path, command):
    result = pkb_invoke(*command, "--backend", "optspy", "--solutions", optspy, "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    seen = _seen(tmp_path)
    assert seen and all(options == {"flavour": "from-pkb.toml"} for options in seen)


def test_plan_jobs_refuses_world_sizes_with_the_records_reason(pkb_pm):
    from pkb_core.launch.plan import RunRequest, pair_solutions, plan_jobs
    from pkb_core.plugin.manager import get_backend_info
    from pkb_core.problem.registry import build_registry

    request = RunRequest(problems="1,9", backend="reference", solution=None, solutions=None, nproc=3, trials=1,
                         dtype="fp32", size="tiny", mode="eval", measure_perf=False, warmup=0, iters=1,
                         save_outputs=False)
    pairs = pair_solutions(request, build_registry(pkb_pm), get_backend_info(pkb_pm, "reference"))
    jobs, rejected = plan_jobs(request, pairs)
    refusals = {job.problem: why for job, why in rejected}
    admitted = {job.problem for job in jobs}
    assert admitted | set(refusals) == {spec.key for spec, _, _ in pairs}
    assert all(why.startswith("world size 3: ") for why in refusals.values())


OBSERVER = '''
import json, os
from pkb_core.plugin.hookspecs import hookimpl

def _log(**entry):
    with open(os.environ["PKBTEST_REPORTS"], "a") as f:
        f.write(json.dumps(entry) + "\\n")

@hookimpl
def pkb_report_job(record, reporter):
    _log(kind="job", problem=record.problem, verdict=record.verdict.value)
    reporter.stop("seen one job")

@hookimpl
def pkb_report_build(solution, result, done, total):
    _log(kind="build", solution=os.path.basename(solution), ok=result.ok, done=done, total=total)
'''


def test_a_third_party_observer_sees_builds_and_jobs_and_can_stop_the_run(pkb_invoke, fake_dist, tmp_path,
                                                                         monkeypatch):
    """The report hooks: a `pkb` plugin sees every build, then every record as it is written, and
    `reporter.stop` ends the run between jobs (the job that ran keeps its record, the next never starts)."""
    fake_dist("pkbtest-observer", {"pkb": {"observer": "pkbtest_observer"}}, {"pkbtest_observer": OBSERVER})
    monkeypatch.setenv("PKBTEST_REPORTS", str(tmp_path / "reports.jsonl"))
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    result = pkb_invoke("run", "--backend", "triton", "--problem", "1,2", "--trials", "1", "--out", tmp_path / "run",
                        "--json")
    seen = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
    builds = [s for s in seen if s["kind"] == "build"]
    jobs = [s for s in seen if s["kind"] == "job"]
    assert sorted(b["solution"] for b in builds) == ["1_allreduce.py", "2_allgather.py"]
    assert all(b["ok"] and b["total"] == 2 for b in builds)
    assert jobs == [{"kind": "job", "problem": "1_allreduce", "verdict": "pass"}]
    assert [r["problem"] for r in json.loads(result.stdout)["results"]] == ["1_allreduce"]
