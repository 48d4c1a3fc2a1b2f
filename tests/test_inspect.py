"""`pkb inspect` on a tiny saved-outputs run directory written by the test."""
import json

import pytest
import torch

from pkb_core.judge.check import compare_leaf
from pkb_core.cli.inspect import leaf_difference

SLUG = "1_allreduce-1_allreduce_c-W2-default"


@pytest.fixture
def run(tmp_path):
    """Rank 0 matches the reference; rank 1 differs in 3 of 12 elements of its float leaf."""
    record = {"key": "k", "problem_id": 1, "problem": "1_allreduce", "category": "collective", "backend": "triton",
              "solution": "/somewhere/1_allreduce_c.py", "world_size": 2, "size": "default", "dtype": "fp32",
              "mode": "eval", "verdict": "fail", "reason": "out[0]: 3 of 12 elements differ", "trials": 5}
    (tmp_path / "records.jsonl").write_text(json.dumps(record) + "\n")
    folder = tmp_path / "outputs" / SLUG
    folder.mkdir(parents=True)
    ref = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    counts = torch.tensor([3, 1], dtype=torch.int64)
    bad = ref.clone()
    bad[0, 2] += 0.5   # rel 0.25
    bad[2, 1] += 3.0   # abs 3, rel 1/3: the worst
    bad[2, 3] -= 1.0
    inputs = [torch.ones(3, 4)]
    torch.save({"candidate": [ref.clone(), counts.clone()], "reference": [ref, counts], "inputs": inputs},
               folder / "rank0.pt")
    torch.save({"candidate": [bad, counts.clone()], "reference": [ref, counts], "inputs": inputs}, folder / "rank1.pt")
    return tmp_path


def test_inspect_shows_leaves_and_where_they_differ(pkb_invoke, run):
    result = pkb_invoke("inspect", run, "--problem", "1")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"== {SLUG}  [fail] out[0]: 3 of 12 elements differ" in out
    assert "candidate[0]: float32 (3, 4) [0, 1, 2, 3, 4, 5, ...]" in out
    assert "candidate[1]: int64 (2,) [3, 1]" in out
    assert "inputs[0]: float32 (3, 4) [1, 1, 1, 1, 1, 1, ...]" in out
    rank0, rank1 = out.split("rank 1\n")
    assert "check: candidate matches the reference" in rank0
    assert "check: out[0]: 3 of 12 elements differ, max abs err 3 at (2, 1)" in rank1
    assert ("out[0]: 3 of 12 elements differ; max abs err 3, max rel err 0.3333; first at (0, 2): got 2.5, "
            "expected 2") in rank1
    assert "out[1]" not in rank1  # the integer leaf matches


def test_inspect_one_rank_by_problem_name(pkb_invoke, run):
    result = pkb_invoke("inspect", run, "--problem", "allreduce", "--rank", "1", "--values", "2")
    assert result.exit_code == 0, result.output
    assert "rank 0" not in result.stdout and "rank 1" in result.stdout
    assert "candidate[0]: float32 (3, 4) [0, 1, ...]" in result.stdout


def test_inspect_bad_input_is_one_line(pkb_invoke, run, tmp_path):
    for args, start in [(["--problem", "2"], "Error: no saved outputs for problem '2'"),
                        (["--problem", "1", "--rank", "5"], "Error: no rank 5 in"),
                        (["--problem", "1", "--solution", "nope.py"], "Error: no saved outputs for problem '1' and")]:
        result = pkb_invoke("inspect", run, *args)
        assert result.exit_code == 1 and result.output.strip().splitlines()[-1].startswith(start), result.output
    # The ranks there are, in their order (a new user read "have: rank1, rank0").
    assert pkb_invoke("inspect", run, "--problem", "1", "--rank", "5").output.rstrip().endswith("(have: rank0, rank1)")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = pkb_invoke("inspect", empty, "--problem", "1")
    assert result.exit_code == 1 and result.output.strip().startswith("Error: no saved outputs in")
    assert "--save-outputs" in result.output


def test_leaf_difference_agrees_with_the_check():
    ref = torch.linspace(-1, 1, 64, dtype=torch.bfloat16)
    cand = ref.clone()
    cand[10] = 5
    cand[40] = float("nan")
    text = leaf_difference(cand, ref)
    assert compare_leaf(cand, ref).startswith("2 of 64 elements differ")
    assert text.startswith("2 of 64 elements differ; max abs err inf") and "first at (10,)" in text
    assert "max abs err inf" in compare_leaf(cand, ref)  # the two say the same
    assert leaf_difference(ref.clone(), ref) is None
    ints = torch.tensor([1, 2, 3])
    assert leaf_difference(torch.tensor([1, 5, 3]), ints).startswith("1 of 3 elements differ; max abs err 3")
    assert leaf_difference(torch.zeros(2), torch.zeros(3)) == "shape (2,), expected (3,)"


def test_dryrun_payload_has_no_reference():
    from pkb_core.cli.inspect import describe_payload

    lines = describe_payload({"candidate": (torch.zeros(2), 3)})
    assert lines[:2] == ["candidate[0]: float32 (2,) [0, 0]", "candidate[1]: int 3"]
    assert lines[-1].startswith("no reference output saved")


def test_inspect_checks_an_exact_problem_as_its_verdict_did(pkb_invoke, run):
    """Problem 1 is EXACT: on integer-valued inputs the judge compares bit for bit, so a result off
    by one part in a million failed the run, and inspect says so too (it said the candidate
    matched, checking with float32's default tolerance)."""
    folder = run / "outputs" / SLUG
    ref = torch.arange(12, dtype=torch.float32).reshape(3, 4) * 3
    torch.save({"candidate": [ref * (1 + 1e-6)], "reference": [ref], "inputs": [torch.ones(3, 4)]}, folder / "rank0.pt")
    torch.save({"candidate": [ref * (1 + 1e-6)], "reference": [ref], "inputs": [torch.full((3, 4), 0.5)]},
               folder / "rank1.pt")
    result = pkb_invoke("inspect", run, "--problem", "1")
    assert result.exit_code == 0, result.output
    rank0, rank1 = result.stdout.split("rank 1\n")
    assert "check: out[0]: 11 of 12 elements differ" in rank0 and "rtol=0" in rank0
    # full-mantissa inputs: the run's bound needs every rank's reference; the problem's tolerance stands in
    assert "check: candidate matches the reference" in rank1
