"""Every way into a run reports its jobs the same way (pkb_core.launch.session): a plugin's
``pkb_report_job`` sees the record of a job judged through ``pkb serve``, through
``pkb_core.evaluate`` and through ``pkb generate --rounds``, as it does under ``pkb run``
(tests/test_plan.py)."""
import json
import os

import pytest

from tests.test_feedback_loop import ARGS, CORRECT, fenced, model_env  # noqa: F401 - model_env: a fixture

WATCHER = '''
import json, os
from pkb_core.plugin.hookspecs import hookimpl

@hookimpl
def pkb_report_job(record, reporter):
    with open(os.environ["PKBTEST_REPORTS"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "problem": record.problem, "verdict": record.verdict.value}) + "\\n")
'''


@pytest.fixture
def reports(fake_dist, tmp_path, monkeypatch):
    """Installs the watcher (a `pkb` plugin, for this process and those it starts); what it saw."""
    fake_dist("pkbtest-watcher", {"pkb": {"watcher": "pkbtest_watcher"}}, {"pkbtest_watcher": WATCHER})
    path = tmp_path / "reports.jsonl"
    monkeypatch.setenv("PKBTEST_REPORTS", str(path))
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    return lambda: [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_record_hook_fires_for_evaluate(reports, tmp_path):
    import pkb_core

    # judged by the backend it declares, as the service reads it (no backend= given)
    judged = pkb_core.evaluate(1, CORRECT + '\nBACKEND = "reference"\n', trials=1, out=tmp_path / "run")
    empty = pkb_core.evaluate(1, "\n", backend="reference", out=tmp_path / "run")  # answered without a launch: reported too
    assert (judged.verdict.value, empty.verdict.value) == ("pass", "compile-error")
    assert [(r["problem"], r["verdict"]) for r in reports()] == [("1_allreduce", "pass"),
                                                                  ("1_allreduce", "compile-error")]


@pytest.mark.parametrize("options, words", [
    ({"trials": 0}, "--trials 0 is less than 1"),
    ({"trials": True}, "--trials True is not a whole number"),
    ({"dtype": "fp64"}, "unknown dtype 'fp64'"),
    ({"timeout": -1}, "timeout -1 must be a number of seconds above 0"),
    ({"measure_perf": True, "timing_modes": ("window", "window")}, "timing mode window given twice"),
    ({"timing_modes": ("bogus",)}, "unknown timing mode 'bogus'"),
    ({"measure_perf": True, "timing_modes": ("window",), "size": "huge"}, "unknown size 'huge'"),
    ({"world_size": 0}, "world_size 0 must be a whole number of ranks"),  # was the default's W = 2, silently
    ({"world_size": True}, "world_size True must be a whole number of ranks"),
    ({"timing_modes": 5}, "timing modes 5 are not names of modes"),
    ({"timeout": True}, "timeout True must be a number of seconds above 0"),
    ({"measure_perf": "no"}, "measure_perf 'no' is not true or false"),  # was an error blaming the judge
    # A file judged by the reference backend's rules nobody chose (torch.distributed allowed) passed
    # where its own backend flags it; the service refuses a submission without one too.
    ({"backend": None}, 'no backend: pass backend="NAME"'),
])
def test_evaluate_refuses_what_pkb_run_refuses_before_anything_starts(reports, tmp_path, options, words):
    """A new user's ``evaluate(..., trials=0)`` passed with nothing checked, a repeated timing mode
    failed a correct file, a negative timeout read as the solution's ``timeout``: every value is
    checked where every way in makes its request (``make_request``), in one line, nothing run."""
    import pkb_core
    from pkb_core.errors import BadOption

    with pytest.raises(BadOption) as refused:
        pkb_core.evaluate(1, CORRECT, out=tmp_path / "run", **{"backend": "reference", **options})
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert reports() == [] and not (tmp_path / "run" / "records.jsonl").exists()


def test_the_record_hook_fires_for_a_job_judged_through_pkb_serve(reports, tmp_path):
    from pkb_core.client import Client
    from tests.test_serve import Server

    server = Server(tmp_path / "serve", "--devices", "2", "--timeout", "60")
    try:
        with Client(server.url, timeout=120) as client:
            judged = client.evaluate(1, CORRECT, backend="reference", trials=1)
            empty = client.evaluate(1, "\n", backend="reference")  # answered at intake
    finally:
        server.stop()
    assert (judged.verdict.value, empty.verdict.value) == ("pass", "compile-error")
    seen = reports()
    # Once each, in the service's process (its lanes hand their records to the service's session).
    assert sorted(r["verdict"] for r in seen) == ["compile-error", "pass"]
    assert {r["pid"] for r in seen} == {server.proc.pid} != {os.getpid()}


def test_the_record_hook_fires_for_a_round_of_pkb_generate(reports, pkb_invoke, model_env, tmp_path):  # noqa: F811
    model = model_env([lambda messages: fenced(CORRECT)])
    result = pkb_invoke("generate", *ARGS, "--rounds", "1", "--out", tmp_path / "loop")
    assert result.exit_code == 0, result.output
    assert model.failures == []
    assert [(r["problem"], r["verdict"]) for r in reports()] == [("1_allreduce", "pass")]
