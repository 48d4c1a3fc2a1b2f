"""`pkb compare`: noise-aware verdicts and CI exit codes, on recorded run directories."""
import json

import pytest

from pkb_core.results.compare import compare_runs, parse_fail_on
from pkb_core.errors import PkbError
from pkb_core.results.report import load_run


@pytest.fixture
def runs(fixtures):
    return fixtures / "runs" / "samples", fixtures / "runs" / "samples_b"


def _statuses(rows):
    return {r["solution"]: r["status"] for r in rows}


def test_statuses(runs):
    rows = compare_runs(load_run(runs[0]), load_run(runs[1]))
    assert _statuses(rows) == {
        "1_allreduce_a.py": "regressed",       # +20 %, spreads of 2 % do not overlap
        "1_allreduce_b.py": "unchanged",       # +10 % but each run's p10-p90 spans 80 %
        "1_allreduce_c.py": "improved",        # fail -> pass
        "1_allreduce_d.py": "unchanged",       # timeout in both
        "2_allgather_a.py": "improved",        # -30 %
        "2_allgather_b.py": "unchanged",       # flagged in both
        "3_broadcast_a.py": "only in B",
        "7_reducescatter_a.py": "unchanged",   # +3 %, under the 5 % threshold
        "9_layernorm_backward_a.py": "regressed",  # pass -> fail
        "10_embedding_lookup_a.py": "only in A",
        "11_allgather_gemm_AT_a.py": "unchanged",
    }
    by_name = {r["solution"]: r for r in rows}
    assert by_name["1_allreduce_a.py"]["change"] == pytest.approx(0.2)
    assert "inside" in by_name["1_allreduce_b.py"]["why"]
    assert by_name["9_layernorm_backward_a.py"]["why"] == "verdict pass -> fail"


def test_a_larger_threshold_hides_the_slowdown(runs):
    rows = compare_runs(load_run(runs[0]), load_run(runs[1]), threshold=0.25)
    assert _statuses(rows)["1_allreduce_a.py"] == "unchanged"


def test_exit_codes(pkb_invoke, runs):
    a, b = runs
    assert pkb_invoke("compare", a, a, "--fail-on", "median:5%").exit_code == 0
    assert pkb_invoke("compare", a, b).exit_code == 0  # no --fail-on: a report, never a failure
    result = pkb_invoke("compare", a, b, "--fail-on", "median:5%")
    assert result.exit_code == 1
    assert "FAIL: 2 regression(s) exceed median:5%" in result.output
    # At 25 % the 20 % slowdown no longer counts, but the broken verdict still fails the build.
    result = pkb_invoke("compare", a, b, "--fail-on", "median:25%", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["threshold"] == pytest.approx(0.25) and data["failing"] == 1
    assert data["counts"]["regressed"] == 1
    # The reverse direction has the 30 % slowdown of 2_allgather_a and a verdict regression (1_allreduce_c).
    result = pkb_invoke("compare", b, a, "--fail-on", "median:5%", "--json")
    assert result.exit_code == 1
    regressed = {r["solution"] for r in json.loads(result.stdout)["rows"] if r["status"] == "regressed"}
    assert regressed == {"2_allgather_a.py", "1_allreduce_c.py"}


def test_fail_on_parsing(pkb_invoke, runs):
    assert parse_fail_on("median:5%") == ("median", pytest.approx(0.05))
    assert parse_fail_on("median:2.5") == ("median", pytest.approx(0.025))
    for bad in ("median", "p90:5%", "median:fast"):
        with pytest.raises(PkbError):
            parse_fail_on(bad)
    result = pkb_invoke("compare", *runs, "--fail-on", "mean:5%")
    assert result.exit_code == 1 and result.output.strip().splitlines()[-1].startswith("Error: --fail-on metric")
