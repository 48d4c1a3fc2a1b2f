"""Output comparison: exact for integers, both parts for complex, NaN placement, tolerances."""
import torch

from pkb_core.judge.check import compare


def test_identical_outputs_pass():
    x = torch.randn(4, 5)
    assert compare((x, {"a": x.int()}), (x.clone(), {"a": x.int()})) is None


def test_integer_outputs_are_exact():
    ref = torch.arange(10)
    cand = ref.clone()
    cand[3] += 1
    message = compare(cand, ref)
    assert "1 of 10 elements differ" in message and "(3,)" in message


def test_small_float_error_passes_large_fails():
    ref = torch.randn(100, dtype=torch.float32) * 10
    assert compare(ref * (1 + 1e-6), ref) is None
    bad = ref.clone()
    bad[7] += 1.0
    assert "at (7,)" in compare(bad, ref)


def test_bf16_tolerance_is_looser_than_fp32():
    ref = torch.randn(64, dtype=torch.float32)
    nudged = ref * 1.005
    assert compare(nudged, ref) is not None
    assert compare(nudged.bfloat16(), ref.bfloat16()) is None


def test_nan_where_reference_has_none_fails():
    ref = torch.ones(4)
    cand = ref.clone()
    cand[2] = float("nan")
    assert "NaN" in compare(cand, ref)
    assert compare(torch.tensor([float("nan")]), torch.tensor([float("nan")])) is None


def test_complex_compares_both_parts():
    ref = torch.randn(8, dtype=torch.complex64)
    assert compare(ref.conj().resolve_conj(), ref) is not None
    assert compare(ref.clone(), ref) is None


def test_dtype_shape_and_structure_mismatch():
    ref = torch.zeros(2, 3)
    assert "dtype float64" in compare(ref.double(), ref)
    assert "shape (3, 2)" in compare(torch.zeros(3, 2), ref)
    assert "structure" in compare([ref], (ref, ref))


def test_tensor_subclass_is_refused():
    class Lazy(torch.Tensor):
        pass

    ref = torch.zeros(3)
    assert "plain torch.Tensor" in compare(ref.as_subclass(Lazy), ref)


def test_problem_tolerance_overrides_default():
    ref = torch.ones(10)
    assert compare(ref * 1.01, ref) is not None
    assert compare(ref * 1.01, ref, {"rtol": 0.02}) is None


def test_a_list_of_ints_is_the_same_answer_as_a_1d_integer_tensor():
    """Problem 26's splits: List[int] in PKB's first commit, int64 tensors since (issue 43)."""
    ref = (torch.tensor([3, 5]), torch.tensor([4, 4]), torch.zeros(2, 4))
    assert compare(([3, 5], (4, 4), torch.zeros(2, 4)), ref) is None
    assert "out[0]: 1 of 2 elements differ at (1,) (got 6, expected 5); exact comparison" in \
        compare(([3, 6], [4, 4], torch.zeros(2, 4)), ref)
    assert "out[0]: shape (3,), expected (2,)" in compare(([3, 5, 0], [4, 4], torch.zeros(2, 4)), ref)
    # only integers, only where the reference has a 1-D integer tensor
    assert "output structure" in compare([3.5, 5.0], torch.tensor([3, 5]))
    assert "output structure" in compare([True, 5], torch.tensor([1, 5]))
    assert "output structure" in compare([[3, 5]], torch.tensor([[3, 5]]))


def test_floats_equal_to_the_integer_splits_are_the_same_answer():
    """PKB's own reference of problem 26 sums an fp32 mask: ``tolist()`` gives floats (issue 55)."""
    ref = (torch.tensor([3, 5]), torch.tensor([4, 4]), torch.zeros(2, 4))
    assert compare(([3.0, 5.0], [4.0, 4], torch.zeros(2, 4)), ref) is None
    assert "out[1]: 1 of 2 elements differ at (0,) (got 3, expected 4); exact comparison" in \
        compare(([3.0, 5.0], [3.0, 4.0], torch.zeros(2, 4)), ref)
    assert "output structure" in compare(([3.0, 5.0], [4.5, 3.5], torch.zeros(2, 4)), ref)
    assert "output structure" in compare([float("nan"), 5.0], torch.tensor([3, 5]))


def test_a_rule_pkbs_harness_did_not_apply_is_named_only_when_it_is_the_only_one_broken():
    note = "(PKB's harness did not check this; the reference's semantics require it)"
    right = torch.randn(8)
    assert compare(right.double(), right) == f"out: dtype float64, expected float32 {note}"
    assert compare(right.double() + 1, right) == "out: dtype float64, expected float32"  # the values are wrong too
    assert compare(torch.tensor([1.0, 2.0]), torch.tensor([1, 2])).endswith(note)
    assert compare(torch.tensor([1.5, 2.0]), torch.tensor([1, 2])) == "out: dtype float32, expected int64"
    assert compare((right,), right).endswith(f"differs from the reference's tensor {note}")
    assert not compare((right + 1,), right).endswith(note)


def test_every_tensor_handed_over_is_compared_by_its_path_whatever_comes_back():
    """The judge's check of a call's arguments after it compares each tensor it handed over with
    what came back at the same path: one sent back missing (an argument as an empty tuple, a
    tensor wrapped in a list) is a modified input, not nothing to compare; a changed one too; a
    tree with fewer arguments could not be read back."""
    from types import SimpleNamespace

    from pkb_core.judge.rank import JudgeRank

    judge = SimpleNamespace(problem=SimpleNamespace(mutates=()))
    x, pair = torch.arange(4.0), [torch.ones(2), torch.zeros(3)]
    before = [x, pair, 7]

    def after(*args):
        return JudgeRank._arguments_after(judge, list(args), before, before, None)

    assert after(x.clone(), [t.clone() for t in pair], None) is None
    for sent, path in (([(), [t.clone() for t in pair], None], "argument 0"),
                       ([x.clone(), (), None], "argument 1[0]"),
                       ([[x.clone()], [t.clone() for t in pair], None], "argument 0"),
                       ([x.clone(), [pair[0].clone()], None], "argument 1[1]"),
                       ([x + 1, [t.clone() for t in pair], None], "argument 0")):
        found = after(*sent)
        assert found is not None and f"modified its input ({path})" in str(found), (sent, found)
    assert after(x.clone()) == "the solution's arguments could not be read back"


def test_out_of_range_integer_lists_and_an_overwritten_infinity_are_differences():
    """A list of ints stands for a 1-D integer tensor only where every value fits its dtype
    (``torch.tensor`` would wrap ``[-251]`` into uint8's ``[5]``); an input whose infinity was
    overwritten with the largest finite value is not identical to it (NaNs still match NaNs)."""
    from pkb_core.harness.trees import identical

    assert compare([5], torch.tensor([5], dtype=torch.uint8)) is None
    assert compare([-251], torch.tensor([5], dtype=torch.uint8)) is not None
    assert compare([2 ** 40], torch.tensor([0], dtype=torch.int32)) is not None
    inf_nan = torch.tensor([float("inf"), float("nan"), 1.0])
    largest = torch.tensor([torch.finfo(torch.float32).max, float("nan"), 1.0])
    assert identical(inf_nan, inf_nan.clone()) and not identical(inf_nan, largest)
    assert identical(torch.tensor([complex(float("nan"), 0), 1 + 2j]), torch.tensor([complex(float("nan"), 0), 1 + 2j]))


def test_a_difference_below_six_digits_is_shown_with_the_digits_it_needs():
    """A result off by one part in a million failed the check while its line read "got 30,
    expected 30" (a new user's pass): values that print alike at six digits get all of theirs."""
    import torch

    from pkb_core.judge.check import compare

    ref = torch.arange(12, dtype=torch.float32).reshape(3, 4) * 3
    line = compare(ref * (1 + 1e-6), ref, {"rtol": 0.0, "atol": 0.0})
    assert "(got 33.000030517578125, expected 33.0)" in line, line
    assert "(got 1, expected 0)" in compare(ref + 1, ref, {"rtol": 0.0, "atol": 0.0})


def test_python_float_outputs_match_infinities_and_nan_only_themselves():
    """A float output (no built-in problem returns one; a problem pack's may) of -inf where +inf is
    expected differs (the tolerance's inf had read it equal), and +inf matches +inf (inf - inf is
    NaN, which had read it different)."""
    inf = float("inf")
    assert compare(-inf, inf) is not None and compare(1.0, inf) is not None and compare(inf, 1.0) is not None
    assert compare(inf, inf) is None and compare(-inf, -inf) is None
    assert compare(float("nan"), float("nan")) is None and compare(float("nan"), 1.0) is not None
    assert compare(1.0 + 1e-14, 1.0) is None and compare(1.1, 1.0) is not None
