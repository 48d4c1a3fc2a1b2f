"""How pkb's harness copies a window's set in and its outputs out (pkb_core.harness.copies): the
judge's choice (``PKB_HARNESS_COPIES``) reaches every side with its gate region, and both ways
copy the same bytes."""
import shutil
from pathlib import Path

import pytest
import torch

from pkb_core.harness.copies import COPIES_ENV, TOGETHER_MAX_BYTES, copies_choice, copy_all, copy_into
from pkb_core.harness.windows import WindowSide
from pkb_core.judge.clock import Timekeeper
from test_window_clock import CPU, _arm, _snapshot, window_records

VALUES = [torch.randn(3, 4), torch.randn(5).to(torch.bfloat16), torch.tensor(2.5), torch.rand(6) > 0.5,
          torch.randn(4, dtype=torch.complex64), torch.arange(10, dtype=torch.int64), torch.empty(0)]


@pytest.mark.parametrize("copies", ["engine", "kernels"])
@pytest.mark.parametrize("value", VALUES, ids=lambda v: f"{v.dtype}{list(v.shape)}")
def test_both_ways_copy_the_same_bytes(value, copies):
    into = torch.zeros_like(value)
    copy_into(into, value, copies)
    assert torch.equal(torch.view_as_real(into) if into.is_complex() else into,
                       torch.view_as_real(value) if value.is_complex() else value)


def test_a_strided_tensor_is_copied_by_copy_(monkeypatch):
    used = []
    monkeypatch.setattr(torch, "bitwise_or", lambda *a, **k: used.append(a))
    value = torch.arange(12.0).reshape(3, 4).t()  # not one contiguous run of bytes
    into = torch.zeros(4, 3)
    copy_into(into, value, "kernels")
    assert torch.equal(into, value) and not used


def test_many_copies_with_kernels_are_one_launch_of_the_widest_words(monkeypatch):
    """``copy_all`` copies every pair's bytes: the contiguous ones of any dtype in one
    ``_foreach_copy_`` of the widest integer their lengths and addresses allow (int16 here: a
    bool tensor of 6 bytes, its address even), the strided one by ``copy_``; with the copy
    engine, or a single pair, one by one."""
    calls = []
    real = torch._foreach_copy_
    monkeypatch.setattr(torch, "_foreach_copy_", lambda a, b: (calls.append([t.dtype for t in a]), real(a, b))[1])
    values = [v for v in VALUES if v.numel()] + [torch.arange(12.0).reshape(3, 4).t()]
    into = [torch.zeros_like(v) for v in values]
    copy_all(zip(into, values), "kernels")
    for got, value in zip(into, values):
        assert torch.equal(torch.view_as_real(got) if got.is_complex() else got,
                           torch.view_as_real(value) if value.is_complex() else value)
    assert len(calls) == 1 and len(calls[0]) == len(values) - 1 and set(calls[0]) == {torch.int16}, calls
    wide = [torch.randn(8), torch.randn(4, 2)]
    into = [torch.zeros_like(v) for v in wide]
    copy_all(zip(into, wide), "kernels")
    assert calls[-1] == [torch.int64, torch.int64] and all(torch.equal(a, b) for a, b in zip(into, wide))
    # A tensor over the bound is copied on its own (the multi-tensor kernel crawls on large ones).
    large = [torch.randn(8), torch.randn(TOGETHER_MAX_BYTES // 4 + 1), torch.randn(3, 2)]
    into = [torch.zeros_like(v) for v in large]
    copy_all(zip(into, large), "kernels")
    assert calls[-1] == [torch.int64, torch.int64] and all(torch.equal(a, b) for a, b in zip(into, large))
    calls.clear()
    into = [torch.zeros_like(v) for v in wide]
    copy_all(zip(into, wide), "engine")
    copy_all([(into[0], wide[0])], "kernels")
    assert not calls and all(torch.equal(a, b) for a, b in zip(into, wide))


def test_a_pair_on_two_devices_is_copied_by_copy_not_a_kernel():
    """A call's output on the host exported into a device's view of a slot (problem 26 returns
    CPU tensors) is one pair on two devices: ``copy_``, never the kernel over bytes, which needs
    both on one device (on 2xH200 the reference group failed with "Expected all tensors to be on
    the same device" in window mode); the other pairs are still copied together. Here the device
    is ``meta``, which ``copy_`` accepts from the host."""
    host = torch.arange(4.0)
    on_meta = torch.empty(4, device="meta")
    copy_into(on_meta, host, "kernels")
    small = [torch.randn(3), torch.randn(2)]
    into = [torch.zeros_like(v) for v in small]
    copy_all([(on_meta, host), *zip(into, small)], "kernels")
    assert all(torch.equal(a, b) for a, b in zip(into, small))


def test_a_choice_that_does_not_exist_is_one_line(monkeypatch):
    monkeypatch.setenv(COPIES_ENV, "dma")
    with pytest.raises(ValueError, match=r"^PKB_HARNESS_COPIES='dma' is not one of engine, kernels \("):
        copies_choice()
    monkeypatch.delenv(COPIES_ENV)
    # unset: kernels where the sides are on a GPU (the copy engine's windows grow in steps there),
    # the host's copy_ on CPU; a value set is taken on either
    assert copies_choice() == "engine" and copies_choice(on_gpu=True) == "kernels"
    monkeypatch.setenv(COPIES_ENV, "engine")
    assert copies_choice(on_gpu=True) == "engine"


def test_the_judges_choice_reaches_the_side_with_its_region(tmp_path, monkeypatch):
    """The timekeeper's regions say how to copy; a side that attaches one exports its calls that
    way (with kernels: one multi-tensor copy a call for its output and its argument), and the
    judge reads the same outputs back."""
    monkeypatch.setenv(COPIES_ENV, "kernels")
    keeper = Timekeeper(CPU, str(tmp_path), 0, "host")
    side = WindowSide(CPU)
    used = []
    real = torch._foreach_copy_
    monkeypatch.setattr(torch, "_foreach_copy_", lambda a, b: (used.append(len(a)), real(a, b))[1])
    try:
        sets = [(torch.arange(16, dtype=torch.float32) + 100 * w,) for w in range(4)]
        skeletons, region, layout = _arm(keeper, sets)
        assert region["copies"] == "kernels"
        side.attach(region)
        assert side.copies == "kernels"
        keeper.send("open", epoch=3, timeout_s=20, **layout)
        written = side.run(epoch=3, skeletons=skeletons, call=lambda args: (args[0] * 2, args), timeout_s=20)
        assert keeper.receive()["status"] == "ok"
        for w in range(4):
            got = _snapshot(keeper, written[w], w)
            assert torch.equal(got["out"], sets[w][0] * 2) and torch.equal(got["args"][0], sets[w][0])
        assert used == [2] * 4  # each call's output and its argument, by one launch a call
    finally:
        side.close()
        keeper.close()


def test_a_window_job_copies_as_the_judge_says_and_records_it(pkb_invoke, tmp_path, monkeypatch):
    monkeypatch.setenv(COPIES_ENV, "kernels")
    folder = tmp_path / "solutions"
    folder.mkdir()
    shutil.copy(Path(__file__).parent / "fixtures" / "windows" / "1_allreduce_honest.py", folder)
    [record] = window_records(pkb_invoke, folder, tmp_path / "run", "--iters", "12", "--min-iters", "12",
                              "--timeout", "120").values()
    assert record["verdict"] == "pass", record
    assert record["stats"]["modes"]["window"]["harness_copies"] == "kernels"
