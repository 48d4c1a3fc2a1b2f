"""What a record says about files like PKB's published trees (issue 43), end to end in CPU mode.

One `pkb run` over tests/fixtures/verdict_reasons (problems 1 and 26, reference backend):

* NVLink multicast is decided by what a file does, not by its names: a torch multimem
  operation with no other path, or a multicast address read without a check and handed to a
  kernel, is `unsupported` with the reason; a file whose multicast path sits behind a
  `multicast_ptr != 0` check or a `try` runs its fallback and passes; a fallback's own bug
  stays an `error`; a driver multicast call pkb cannot watch is `unsupported` before any
  builder starts. (A CPU has no multicast: it is always off here.)
* problem 26 accepts its splits as PKB's first commit returned them (lists of ints; PKB main's
  int64 tensors are the reference's own form), and still fails a wrong split;
* an error raised in pkb's code by the solution's own call names the solution's line first;
* a record that fails only a rule PKB's harness did not apply says so, and a wrong answer
  computed in the input it was handed names both.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "verdict_reasons"
NEEDS = "needs NVLink multicast; off on this machine (no GPU): "
PKB_NOTE = "(PKB's harness did not check this; the reference's semantics require it)"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reasons")
    env = {key: value for key, value in os.environ.items() if key != "PKB_ALLOW_MULTICAST"}
    result = subprocess.run([sys.executable, "-m", "pkb_core", "run", "--solutions", str(FIXTURES),
                             "--problem", "1,26", "--trials", "1", "--timeout", "60", "--out", str(out), "--json"],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.stdout.strip(), result.stderr[-3000:]
    records = {Path(r["solution"]).name: r for r in json.loads(result.stdout)["results"]}
    assert set(records) == {p.name for p in FIXTURES.glob("*.py")}
    return records, out, result.returncode


def test_a_multicast_only_file_is_unsupported_with_the_reason(run):
    records, _, code = run
    record = records["1_allreduce_multimem_only.py"]
    assert record["verdict"] == "unsupported", record["reason"]
    assert record["reason"] == ("rank 0: " + NEEDS + "it called torch.ops.symm_mem.multimem_all_reduce_ "
                                "(1_allreduce_multimem_only.py:8)")
    assert record["feedback"]["summary"] == record["reason"]
    assert code == 1  # other files of the run fail


def test_a_multicast_path_behind_a_runtime_check_runs_its_fallback(run):
    records, _, _ = run
    for name in ("1_allreduce_multicast_ptr_fallback.py", "1_allreduce_multimem_op_fallback.py"):
        assert records[name]["verdict"] == "pass", (name, records[name]["reason"])


def test_ptx_multimem_without_a_fallback_is_refused_by_what_it_does(run):
    records, _, _ = run
    record = records["1_allreduce_ptx_multimem.py"]
    assert record["verdict"] == "unsupported", record["reason"]
    assert record["reason"] == ("rank 0: " + NEEDS + "it read a symmetric handle's multicast_ptr (0 here), then "
                                "raised RuntimeError: CUDA error: an illegal memory access was encountered "
                                "(1_allreduce_ptx_multimem.py:21)")


def test_a_fallbacks_own_bug_is_an_error_not_unsupported(run):
    records, _, _ = run
    record = records["1_allreduce_fallback_with_a_bug.py"]
    assert record["verdict"] == "error"
    assert "shape '[3, -1, 7]' is invalid" in record["reason"] and "multicast" not in record["reason"]


def test_a_multicast_call_pkb_cannot_watch_is_unsupported_without_a_build(run):
    records, out, _ = run
    record = records["1_allreduce_cu_multicast_create.py"]
    assert record["verdict"] == "unsupported"
    assert record["reason"] == NEEDS + f"{FIXTURES / '1_allreduce_cu_multicast_create.py'} calls cuMulticastCreate"
    assert record["compile"] == {"seconds": 0.0, "cached": False}
    builds = {p.name.rsplit("-", 1)[0] for p in (out / "logs" / "builds").glob("*.log")}
    assert "1_allreduce_cu_multicast_create" not in builds  # no builder started for it
    assert "1_allreduce_multimem_only" in builds  # the others were built


def test_problem_26_takes_the_splits_as_lists_or_tensors_and_fails_a_wrong_split(run):
    records, _, _ = run
    assert records["26_moe_token_preprocess_list_splits.py"]["verdict"] == "pass"  # PKB main's tensors: the self-check
    wrong = records["26_moe_token_preprocess_wrong_split.py"]
    assert wrong["verdict"] == "fail"
    assert "out[0]: 1 of 2 elements differ at (0,)" in wrong["reason"] and "exact comparison" in wrong["reason"]


def test_an_error_of_the_solutions_own_call_names_its_line_first(run):
    records, _, _ = run
    record = records["1_allreduce_bad_dtype_argument.py"]
    assert record["verdict"] == "error"
    assert record["reason"].endswith("(1_allreduce_bad_dtype_argument.py:13; raised in mapped.py:49)"), \
        record["reason"]
    assert record["feedback"]["summary"].endswith("(1_allreduce_bad_dtype_argument.py:13; raised in mapped.py:49)")


def test_a_rule_pkbs_harness_did_not_apply_is_named_in_the_record(run):
    # the other rules (nesting, a modified input): tests/test_check.py, tests/test_run.py
    record = run[0]["1_allreduce_right_values_in_float64.py"]
    assert record["verdict"] == "fail"
    assert record["reason"] == f"trial 0: rank 0: out: dtype float64, expected float32 {PKB_NOTE}"
    assert record["feedback"]["summary"] == record["reason"]


def test_a_wrong_answer_computed_in_its_input_names_both(run):
    """A new user's `tensor.mul_(2); return tensor` read only "out: ... differ": the modified input,
    the cause, was said only where the answer happened to be right."""
    record = run[0]["1_allreduce_doubles_its_input.py"]
    assert record["verdict"] == "fail"
    assert record["reason"].startswith("trial 0: rank 0: out: ") and " elements differ" in record["reason"]
    assert record["reason"].endswith("; and the solution modified its input (argument 0) " + PKB_NOTE)


def test_multicast_is_off_unless_the_operator_allows_it_and_nothing_turns_it_off(tmp_path, monkeypatch):
    from pkb_core.plugin.multicast import multicast_claim_believable, multicast_off, multicast_refusal

    allowed = {"PKB_ALLOW_MULTICAST": "1"}
    assert multicast_off("cuda", allowed) is None
    assert multicast_off("cuda", {}) == "pkb allows it only with PKB_ALLOW_MULTICAST=1"
    assert multicast_off("cpu", allowed) == "no GPU"
    for name, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                        ("NVSHMEM_DISABLE_NVLS", "1")):
        assert multicast_off("cuda", {**allowed, name: value}) == f"{name}={value}"
    # where the operator allows it, nothing is refused up front and no rank's word is believed
    creates = FIXTURES / "1_allreduce_cu_multicast_create.py"
    monkeypatch.setenv("PKB_ALLOW_MULTICAST", "1")
    for name in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        monkeypatch.delenv(name, raising=False)
    assert multicast_refusal(creates, device="cuda") is None
    assert not multicast_claim_believable(str(FIXTURES / "1_allreduce_ptx_multimem.py"), "cuda")
    monkeypatch.delenv("PKB_ALLOW_MULTICAST")
    assert multicast_claim_believable(str(FIXTURES / "1_allreduce_ptx_multimem.py"), "cuda")
    quiet = tmp_path / "1_allreduce_quiet.py"
    quiet.write_text("def solution(tensor):\n    raise RuntimeError('CUDA error: an illegal memory access')\n")
    assert not multicast_claim_believable(str(quiet), "cuda")  # its source never names multicast
    # pkb's own exception raised by the file itself, and multicast named in a comment only: no claim
    # (a wrong file made itself unsupported so: a hostile review, 2026-12-02)
    forged = tmp_path / "1_allreduce_forged.py"
    forged.write_text("from pkb_core.errors import MulticastUnavailable\n\n\ndef solution(tensor):  # multimem\n"
                      "    raise MulticastUnavailable('off here')\n")
    assert not multicast_claim_believable(str(forged), "cuda")


def test_only_the_gates_own_refusal_makes_a_solution_unsupported(monkeypatch):
    from pkb_core.candidate import multicast_gate
    from pkb_core.errors import MulticastUnavailable

    monkeypatch.setattr(multicast_gate, "_WHY", "no GPU")
    assert multicast_gate.refusal(MulticastUnavailable("needs NVLink multicast (made by the solution)")) is None
    with pytest.raises(MulticastUnavailable) as refused:
        multicast_gate._RefusedOp("multimem_all_reduce_")()
    assert multicast_gate.refusal(refused.value).startswith("needs NVLink multicast")
