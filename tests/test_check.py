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
