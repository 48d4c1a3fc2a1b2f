"""The Triton backend (pkb-triton): it loads and describes itself, its samples
pass under the Triton interpreter (the BackendContract suite: one ``pkb run``
per world size, W=2 and W=3, with the 8 collective samples; the two fused GEMM
samples, problems 12 and 13, in one run at W=2; the two exchange samples,
problems 28 and 65, in one run at W=2), and its device-side barrier really
waits (a rank that arrives late is waited for)."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pkb_core.testing import BackendContract

pytest.importorskip("pkb_triton")
pytest.importorskip("triton")


class TestTritonBackend(BackendContract):
    backend = "triton"
    # The collective samples (1-8) admit W=2 and W=3; problem 12 rejects W=3
    # at size tiny (K=16), so the GEMM samples have a test of their own.
    sample_problems = "collective"


def test_fused_gemm_samples_pass_at_two_ranks(pkb_invoke, tmp_path):
    """Samples 12 (all-gather + GEMM reading the peers' A slices in the K
    loop) and 13 (GEMM + all-reduce through a symmetric workspace) at W=2."""
    result = pkb_invoke("run", "--backend", "triton", "--device", "cpu", "--problem", "12,13", "--nproc", 2,
                        "--trials", 2, "--json", "--out", tmp_path / "gemm")
    records = json.loads(result.stdout)["results"]
    assert sorted(r["problem"] for r in records) == ["12_allgather_gemm", "13_gemm_allreduce"], result.output
    bad = [(r["problem"], r["verdict"], r["reason"]) for r in records if r["verdict"] != "pass"]
    assert not bad, bad


def test_exchange_samples_pass_at_two_ranks(pkb_invoke, tmp_path):
    """Samples 28 (MoE dispatch: routing kernel, then rows pulled through the
    peers' permutations) and 65 (GNN feature exchange: chunk starts published
    in a workspace) at W=2."""
    result = pkb_invoke("run", "--backend", "triton", "--device", "cpu", "--problem", "28,65", "--nproc", 2,
                        "--trials", 2, "--json", "--out", tmp_path / "exchange")
    records = json.loads(result.stdout)["results"]
    assert sorted(r["problem"] for r in records) == ["28_moe_pre_all2all", "65_gnn_feature_exchange_all2all"], \
        result.output
    bad = [(r["problem"], r["verdict"], r["reason"]) for r in records if r["verdict"] != "pass"]
    assert not bad, bad


SAMPLES = Path(__file__).resolve().parents[1] / "pkb_triton" / "samples"


@pytest.mark.parametrize("world_size", [2, 3])
def test_the_pushing_samples_pass_call_after_call(pkb_invoke, tmp_path, world_size):
    """The all-reduce, all-gather, reduce, gather and reduce-scatter samples push small floating-point
    messages (one way, the data its own flag, three epochs of slots; credits for the rooted two) at
    W=2 and W=3: five trials are more calls than the three epochs, so each epoch's slots are reset
    and used again."""
    result = pkb_invoke("run", "--backend", "triton", "--device", "cpu", "--problem", "1,2,4,6,7", "--nproc", world_size,
                        "--trials", 5, "--json", "--out", tmp_path / "push")
    records = json.loads(result.stdout)["results"]
    assert sorted((r["problem"], r["verdict"]) for r in records) == [
        ("1_allreduce", "pass"), ("2_allgather", "pass"), ("4_reduce", "pass"), ("6_gather", "pass"),
        ("7_reducescatter", "pass")], result.output


# The all-reduce sample's pull, with a name that is a loop's constexpr first and a tensor after:
# the interpreter runs it right; Triton's compiler refuses it.
_REFUSED_ON_GPU = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    from pkb_triton import barrier, peer_ptr, peers


    @triton.jit
    def _allreduce(out, ptrs, pads, rank, n, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        for p in tl.static_range(WORLD):
            barrier(pads, rank, WORLD, p % 1)
        start = tl.program_id(0) * BLOCK
        while start < n:
            offs = start + tl.arange(0, BLOCK)
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for i in tl.static_range(WORLD):
                p = (rank + i) % WORLD
                acc += tl.load(peer_ptr(ptrs, p, out) + offs, mask=offs < n).to(tl.float32)
            tl.store(out + offs, acc.to(out.dtype.element_ty), mask=offs < n)
            start += tl.num_programs(0) * BLOCK
        barrier(pads, rank, WORLD, 0)


    def solution(tensor):
        sym = peers(tensor)
        out = torch.empty_like(tensor)
        _allreduce[(sym.grid(tensor.numel(), 1024),)](out, sym.ptrs, sym.pads, sym.rank, tensor.numel(),
                                                     WORLD=sym.world_size, BLOCK=1024)
        return out
''')


def _one_record(pkb_invoke, tmp_path, source: str, *options) -> dict:
    """The record of ``source`` run as problem 1's solution on the triton backend in CPU mode, at W=2."""
    solution = tmp_path / "1_allreduce.py"
    solution.write_text(source)
    result = pkb_invoke("run", "--backend", "triton", "--device", "cpu", "--solution", solution, "--nproc", 2,
                        *options, "--json", "--out", tmp_path / "run")
    (record,) = json.loads(result.stdout)["results"]
    return record


def test_a_kernel_the_gpu_compiler_refuses_fails_on_the_cpu_too(pkb_invoke, tmp_path):
    """A kernel that Triton's interpreter runs and its compiler refuses (a name that is a
    ``tl.static_range`` constexpr in one loop and a tensor in the next: it failed every GPU job of
    two push kernels whose CPU tests all passed) is the solution's error in CPU mode, in one line
    naming the kernel, the file's line and what the compiler said."""
    record = _one_record(pkb_invoke, tmp_path, _REFUSED_ON_GPU)
    assert record["verdict"] == "error", record
    line = _REFUSED_ON_GPU.splitlines().index("    while start < n:") + 1
    assert ("Triton's compiler refuses kernel `_allreduce` for the GPU (sm_90) "
            f"(1_allreduce.py:{line}): AssertionError(\"Loop carried variable p changed type") in record["reason"], \
        record["reason"]




_RUNTIME_RANGE = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _fill(x, n, BLOCK: tl.constexpr):
        for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            tl.store(x + offs, 1.0, mask=offs < n)

    def solution(tensor):
        out = torch.empty_like(tensor)
        _fill[(2,)](out, out.numel(), BLOCK=64)
        return out
''')


def test_a_loop_over_a_runtime_range_says_what_the_interpreter_cannot_do(pkb_invoke, tmp_path):
    """Compiled for a GPU it runs; the interpreter failed converting the bound, in words that did
    not point at the loop (a new user's grid-stride loop, 2026-12-02)."""
    record = _one_record(pkb_invoke, tmp_path, _RUNTIME_RANGE, "--trials", 1)
    assert record["verdict"] == "error", record
    assert "cannot loop over a range whose bounds are tensors" in record["reason"], record["reason"]
    assert "write that loop as a while loop" in record["reason"], record["reason"]

# A pull all-reduce (every rank reads every rank's input) with the barriers it needs left out:
# the one before its reads (the harness's own barrier puts every input in place, so this one
# is not needed here), the one after them, or both.
_PULL_WITHOUT_BARRIERS = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    from pkb_triton import barrier, peer_ptr, peers

    BEFORE, AFTER = {before}, {after}


    @triton.jit
    def _allreduce(out, ptrs, pads, rank, n, WORLD: tl.constexpr, BLOCK: tl.constexpr, BEFORE: tl.constexpr,
                   AFTER: tl.constexpr):
        if BEFORE:
            barrier(pads, rank, WORLD, 0)
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for i in tl.static_range(WORLD):
            acc += tl.load(peer_ptr(ptrs, (rank + i) % WORLD, out) + offs, mask=offs < n).to(tl.float32)
        tl.store(out + offs, acc.to(out.dtype.element_ty), mask=offs < n)
        if AFTER:
            barrier(pads, rank, WORLD, 0)


    def solution(tensor):
        sym = peers(tensor)
        out = torch.empty_like(tensor)
        n = tensor.numel()
        _allreduce[(triton.cdiv(n, 1024),)](out, sym.ptrs, sym.pads, sym.rank, n, WORLD=sym.world_size, BLOCK=1024,
                                            BEFORE=BEFORE, AFTER=AFTER)
        return out
''')


def test_a_rank_that_reads_a_peer_after_it_returned_fails_a_staggered_trial(pkb_invoke, tmp_path):
    """From the second trial on one rank starts late and the others overwrite their inputs once they
    return (pkb_core.conduct.staggered_trials): a pull all-reduce without its barriers, which
    passes whenever the ranks run in step (the first trial, the CPU's usual case), fails in a
    staggered trial with a reason that names the stagger; with them it passes all five. Without
    the closing barrier alone it meets the late rank at its opening one, and fails because the
    interpreter holds the late rank's reads, once it has synchronised, until the other rank has
    returned and overwritten its input (pkb_core.candidate.late_reads): it passed 6 runs of 7
    before."""
    folder = tmp_path / "solutions"
    folder.mkdir()
    for name, before, after in (("none", False, False), ("before", True, False), ("both", True, True)):
        (folder / f"1_allreduce_{name}.py").write_text(_PULL_WITHOUT_BARRIERS.format(before=before, after=after))
    result = pkb_invoke("run", "--backend", "triton", "--device", "cpu", "--solutions", folder, "--nproc", 2,
                        "--trials", 5, "--json", "--out", tmp_path / "run")
    by_name = {Path(r["solution"]).stem: r for r in json.loads(result.stdout)["results"]}
    for name in ("1_allreduce_none", "1_allreduce_before"):
        record = by_name[name]
        assert record["verdict"] == "fail" and record["trials"] >= 1, (name, record)
        assert "started this trial's call late" in record["reason"] and "(got nan" in record["reason"], \
            record["reason"]
    assert by_name["1_allreduce_before"]["reason"].startswith("trial 1: rank 1: out:"), by_name["1_allreduce_before"]
    assert by_name["1_allreduce_both"]["verdict"] == "pass", by_name["1_allreduce_both"]

# An all-reduce whose grid is one program wider than the barrier's signal pad holds.
_WIDER_THAN_THE_PAD = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    from pkb_triton import barrier, peer_ptr, peers


    @triton.jit
    def _allreduce(out, ptrs, pads, rank, n, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        barrier(pads, rank, WORLD, 0)
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for i in tl.static_range(WORLD):
            acc += tl.load(peer_ptr(ptrs, (rank + i) % WORLD, out) + offs, mask=offs < n).to(tl.float32)
        tl.store(out + offs, acc.to(out.dtype.element_ty), mask=offs < n)
        barrier(pads, rank, WORLD, 0)


    def solution(tensor):
        sym = peers(tensor)
        out = torch.empty_like(tensor)
        grid = sym.pad_slots // sym.world_size + 1
        _allreduce[(grid,)](out, sym.ptrs, sym.pads, sym.rank, tensor.numel(), WORLD=sym.world_size, BLOCK=16)
        return out
''')


def test_a_grid_wider_than_the_signal_pad_is_refused_in_words(pkb_invoke, tmp_path):
    """A launch with more programs than the barrier's pad has slots for (the solution picks its grid
    without ``Peers.grid``) is the solution's error, in one line naming the grid and the pad, not a
    crash or a hang from the barrier's slots past the pad (a SIGSEGV in CPU mode before)."""
    record = _one_record(pkb_invoke, tmp_path, _WIDER_THAN_THE_PAD, "--timeout", 60)
    assert record["verdict"] == "error", record
    assert ("GridTooWide: a grid of 513 programs is wider than the barrier's signal pad: at world size 2 it "
            "needs 1026 slots and the pad has 1024, room for at most 512 programs a channel") in record["reason"], \
        record["reason"]


# One rank, a pad table that declares 4 slots (8-11) of a 16-slot buffer whose words just before
# and past them are not zero (memory beside a pad that nobody clears): a barrier of 2 programs on
# channel 2 needs slots 12-13, on channel -1 slots 6-7; rank 1 of a world of one has no pad (its
# table entry is the slot count). Each must fault at once without touching a word outside the pad,
# not spin there (or write there) as a handshake would.
_OUTSIDE_THE_PAD = textwrap.dedent('''
    import sys
    import torch, triton, triton.language as tl
    from pkb_triton import barrier

    @triton.jit
    def _k(pads, RANK: tl.constexpr, CHANNEL: tl.constexpr):
        barrier(pads, RANK, 1, CHANNEL)

    buffer = torch.from_file(sys.argv[1], shared=True, size=16, dtype=torch.int32)
    table = torch.tensor([buffer[8:].data_ptr(), 4], dtype=torch.int64)
    _k[(2,)](table.data_ptr(), RANK=0, CHANNEL=0)  # slots 8-9: within the pad
    print("channel 0 done", flush=True)
    _k[(2,)](table.data_ptr(), RANK=int(sys.argv[2]), CHANNEL=int(sys.argv[3]))
    print("outside done", flush=True)
''')


def test_a_grid_of_more_than_one_axis_is_refused_for_a_kernel_handed_the_pad(monkeypatch):
    """The barrier's slots follow axis 0 alone: programs along another axis would share them."""
    from pkb_triton import host

    monkeypatch.setitem(host._PAD_TABLES, 4096, (1024, 2))  # a pad table at address 4096: 1024 slots, W = 2
    host.check_grid(512, [4096], other_axes=(1,))
    host.check_grid(8, [7, "x"], other_axes=(2,))  # no pad table handed: not the barrier's business
    with pytest.raises(host.GridTooWide, match=r"a grid of \(8, 2\) programs .* one-dimensional grid"):
        host.check_grid(8, [4096], other_axes=(2,))
    with pytest.raises(host.GridTooWide, match="a grid of 513 programs is wider than the barrier's signal pad"):
        host.check_grid(513, [4096])


@pytest.mark.parametrize("rank, channel", [(0, 2), (0, -1), (1, 0)])
def test_the_barrier_never_reaches_outside_its_pad(tmp_path, rank, channel):
    import signal

    import torch

    pad_file = tmp_path / "pad"
    buffer = torch.from_file(str(pad_file), shared=True, size=16, dtype=torch.int32)
    buffer[6], buffer[7], buffer[12], buffer[13] = 7, 7, 7, 7
    script = tmp_path / "outside.py"
    script.write_text(_OUTSIDE_THE_PAD)
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(script), str(pad_file), str(rank), str(channel)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.splitlines() == ["channel 0 done"], (proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == -signal.SIGSEGV, (proc.returncode, proc.stderr[-2000:])
    assert buffer.tolist() == [0] * 6 + [7, 7] + [0] * 4 + [7, 7, 0, 0]


def test_the_check_binds_a_launch_as_a_gpu_launch_does_and_names_the_line_that_fails(tmp_path):
    """An int argument equal to 1 is a constexpr in a GPU launch, so ``rank.to(...)`` compiles
    for rank 0 and not for rank 1: the check refuses the launch with rank 1 alone, as the GPU would,
    and says why. An error inside a called ``@triton.jit`` function is named at its own line and
    with the compiler's words (the outer error's last line is only a caret under the call)."""
    (tmp_path / "kernel.py").write_text(textwrap.dedent('''
        import triton
        import triton.language as tl


        @triton.jit
        def _k(out, rank, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK) + rank.to(tl.int64) * 0
            tl.store(out + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


        @triton.jit
        def _helper(x):
            return x + tl.sum(tl.arange(0, 12), axis=0)


        @triton.jit
        def _calls_it(out, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(out + offs, _helper(tl.zeros([BLOCK], dtype=tl.float32)), mask=offs < n)
    '''))
    (tmp_path / "launch.py").write_text(textwrap.dedent('''
        import runpy, sys
        import torch
        from pkb_triton import gpu_check

        gpu_check.install()
        kernels = runpy.run_path(sys.argv[1])
        for rank in (0, 1):
            try:
                kernels["_k"][(1,)](torch.zeros(64), rank, 64, BLOCK=64)
                print(rank, "ran")
            except gpu_check.RefusedOnGpu as refused:
                print(rank, refused)
        try:
            kernels["_calls_it"][(1,)](torch.zeros(64), 64, BLOCK=64)
        except gpu_check.RefusedOnGpu as refused:
            print(refused)
    '''))
    proc = subprocess.run([sys.executable, str(tmp_path / "launch.py"), str(tmp_path / "kernel.py")],
                          env=dict(os.environ, TRITON_INTERPRET="1"), capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines() == [
        "0 ran",
        "1 Triton's compiler refuses kernel `_k` for the GPU (sm_90) (kernel.py:8): "
        "AttributeError(\"'int' object has no attribute 'to'\"); a GPU launch makes an int argument equal to 1 a "
        "constexpr (`rank` here): `tl.cast(x, tl.int64)` takes both",
        "Triton's compiler refuses kernel `_calls_it` for the GPU (sm_90) (kernel.py:14, "
        "in `_helper`): arange's range must be a power of 2"], proc.stdout + proc.stderr


# A sample called directly on two ranks under the interpreter, on the CPU heap. A test
# gives ``calls(rank, world, heap, solution)``: it makes the calls and returns the sizes whose
# output was wrong; each rank writes that list, and the test reads both.
_TWO_RANKS = textwrap.dedent('''
    import os, runpy, sys, time
    import torch, torch.distributed as dist, torch.multiprocessing as mp

    def run(rank, world, port, result_dir, sample):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        from types import SimpleNamespace
        from pkb_core.symmetric.shm import SharedMemoryHeap
        from pkb_triton import _runtime
        state = _runtime.start(SimpleNamespace(device=torch.device("cpu"), rank=rank, world_size=world,
                                               barrier=lambda: dist.barrier()), f"tritonpush{port}")
        heap = SharedMemoryHeap(rank, world, lambda: dist.barrier(), f"tritonpushin{port}")
        wrong = calls(rank, world, heap, runpy.run_path(sample)["solution"])
        with open(os.path.join(result_dir, f"rank{rank}.txt"), "w") as f:
            f.write(f"wrong={wrong}\\n")
        dist.barrier()
        _runtime.stop(state)
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(run, args=(2, int(sys.argv[1]), sys.argv[2], sys.argv[3]), nprocs=2)
''')


def _wrong_on_two_ranks(tmp_path, calls: str, sample: str) -> list[str]:
    """Run ``calls`` (the source of a ``calls`` function) with ``sample`` on two ranks; each
    rank's ``wrong=[...]`` line."""
    script = tmp_path / "two_ranks.py"
    script.write_text(textwrap.dedent(calls) + _TWO_RANKS)
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(script), str(_free_port()), str(tmp_path),
                           str(SAMPLES / sample)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [(tmp_path / f"rank{r}.txt").read_text().strip() for r in (0, 1)]


def test_the_push_all_reduce_is_right_as_sizes_change_and_ranks_come_late(tmp_path):
    """Messages of changing sizes one after another (a smaller call after a larger one must still
    find its slots empty, so the reset follows what the last call wrote), a rank that comes late to
    some calls (the other waits for its data rather than read a stale slot), and inputs holding
    -0.0 (the sentinel's bits)."""
    calls = '''
        def calls(rank, world, heap, solution):
            wrong = []
            for call, n in enumerate([2048, 64, 4096, 8, 1000, 4096, 16, 3]):
                inputs = [torch.Generator().manual_seed(1000 * call + r) for r in range(world)]
                values = [torch.randint(-8, 8, (n,), generator=g).to(torch.bfloat16) for g in inputs]
                for v in values:
                    v[::5] = -0.0
                x = heap.empty((n,), torch.bfloat16)
                x.copy_(values[rank])
                if call % 3 == rank:
                    time.sleep(0.5)
                out = solution(x)
                if not torch.equal(out, sum(v.float() for v in values).to(torch.bfloat16)):
                    wrong.append(n)
            return wrong
    '''
    assert _wrong_on_two_ranks(tmp_path, calls, "1_allreduce.py") == ["wrong=[]", "wrong=[]"]


def test_the_push_reduce_holds_a_sender_back_until_dst_has_read(tmp_path):
    """dst (rank 0) comes late to every call while rank 1, which only sends, is free to run calls
    ahead; its credit from dst must hold it back, or it would write a later call's data into slots
    dst has not read (or reset) yet."""
    calls = '''
        def calls(rank, world, heap, solution):
            inputs = []
            for call, n in enumerate([2048, 2048, 64, 2048, 16, 2048, 2048, 1000]):
                # every input allocated first: allocation is collective
                values = [torch.randint(-8, 8, (n,), generator=torch.Generator().manual_seed(100 * call + r))
                          .to(torch.bfloat16) for r in range(world)]
                x = heap.empty((n,), torch.bfloat16)
                x.copy_(values[rank])
                inputs.append((x, values))
            wrong = []
            for x, values in inputs:
                if rank == 0:
                    time.sleep(0.3)
                out = solution(x, 0)
                expected = sum(v.float() for v in values).to(torch.bfloat16) if rank == 0 else values[rank]
                if not torch.equal(out, expected):
                    wrong.append(x.numel())
            return wrong
    '''
    assert _wrong_on_two_ranks(tmp_path, calls, "4_reduce.py") == ["wrong=[]", "wrong=[]"]


# What each pushing sample returns on ``rank`` for the ranks' inputs ``values`` (dst 0).
_EXPECTED = {
    "1_allreduce.py": "sum(v.double() for v in values).to(values[0].dtype)",
    "2_allgather.py": "torch.stack(values)",
    "4_reduce.py": "sum(v.double() for v in values).to(values[0].dtype) if rank == 0 else values[rank]",
    "6_gather.py": "torch.stack(values) if rank == 0 else values[rank]",
    "7_reducescatter.py": "sum(v.view(world, -1)[rank].double() for v in values).to(values[0].dtype)",
}


@pytest.mark.parametrize("sample", sorted(_EXPECTED))
def test_the_pushing_samples_pull_what_the_push_does_not_take(tmp_path, sample):
    """Above 1 MiB a message (a row block, for the reduce-scatter), and integers at any size, go by
    the pull, which pkb's CPU runs (tiny sizes, floating point) no longer reach: a push call between
    them, so the paths follow each other."""
    calls = f'''
        def calls(rank, world, heap, solution):
            wrong = []
            for n, dtype in [(2 * 640 * 1024, torch.bfloat16), (4096, torch.int32), (2048, torch.bfloat16),
                             (2 * 640 * 1024, torch.bfloat16)]:
                values = [torch.randint(-8, 8, (n,), generator=torch.Generator().manual_seed(7 * n + r)).to(dtype)
                          for r in range(world)]
                x = heap.empty((n,), dtype)
                x.copy_(values[rank])
                args = (x, 0) if "dst" in solution.__code__.co_varnames[:solution.__code__.co_argcount] else (x,)
                if not torch.equal(solution(*args), {_EXPECTED[sample]}):
                    wrong.append((n, str(dtype)))
            return wrong
    '''
    assert _wrong_on_two_ranks(tmp_path, calls, sample) == ["wrong=[]", "wrong=[]"]


# The push kernels' arguments by name, as their launchers pass them for a bf16 input.
_PUSH_SIGNATURE = {"x": "*bf16", "out": "*bf16", "slots": "*i16", "ptrs": "i64", "counters": "*i32",
                   "progress": "*i32", "progress_ptrs": "i64", "rank": "i32", "dst": "i32", "n": "i32"}
_PUSH_CONSTANTS = {"SLOT": 512 * 1024, "SIZE": 2, "EMPTY": -(1 << 15)}


@pytest.mark.parametrize("sample", ["1_allreduce.py", "2_allgather.py", "4_reduce.py", "6_gather.py",
                                    "7_reducescatter.py"])
@pytest.mark.parametrize("world_size", [2, 3])
def test_the_push_kernels_compile_for_hopper(sample, world_size):
    """Each pushing sample's push kernel through Triton's whole compiler for sm_90 (no GPU needed), in
    both of ``push_launch``'s shapes: the interpreter runs what the compiler refuses (a name that is
    a constexpr in one loop and a tensor in the next passed every CPU test, and failed every GPU job
    of two candidates on 2xH200, 2026-11-30)."""
    import runpy

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from pkb_triton.push import LARGE_SHAPE, SMALL_SHAPE

    found = runpy.run_path(str(SAMPLES / sample))
    (kernel,) = [v for k, v in found.items() if k.startswith("_push_") and isinstance(v, triton.JITFunction)]
    for (block, warps), root in [(SMALL_SHAPE, True), (LARGE_SHAPE, True), (SMALL_SHAPE, False)]:
        if not root and "ROOT" not in kernel.arg_names:
            continue
        constants = dict(_PUSH_CONSTANTS, WORLD=world_size, ROOT=root, BLOCK=block)
        signature = {name: _PUSH_SIGNATURE.get(name, "constexpr") for name in kernel.arg_names}
        constexprs = {(kernel.arg_names.index(name),): constants[name]
                      for name, kind in signature.items() if kind == "constexpr"}
        compiled = triton.compile(ASTSource(kernel, signature, constexprs=constexprs),
                                  target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
        assert "ld.volatile.global" in compiled.asm["ptx"]


def test_push_launch_takes_the_small_shape_while_one_pass_of_the_grid_covers_the_message():
    import torch

    from pkb_triton.host import CPU_MAX_PROGRAMS, Peers
    from pkb_triton.push import LARGE_SHAPE, SMALL_SHAPE, push_launch

    sym = Peers(ptrs=0, pads=0, rank=0, world_size=2, pad_slots=1024, device=torch.device("cpu"))
    small, large = SMALL_SHAPE[0], LARGE_SHAPE[0]  # 512 and 1024 elements
    assert push_launch(1, sym) == (1, *SMALL_SHAPE)
    assert push_launch(small + 1, sym) == (2, *SMALL_SHAPE)
    assert push_launch(CPU_MAX_PROGRAMS * small, sym) == (CPU_MAX_PROGRAMS, *SMALL_SHAPE)
    assert push_launch(CPU_MAX_PROGRAMS * small + 1, sym) == (5, *LARGE_SHAPE)  # 4097 elements: 5 of 1024
    assert push_launch(100 * large, sym) == (CPU_MAX_PROGRAMS, *LARGE_SHAPE)


@pytest.mark.parametrize("dtype, slot, words", [
    ("int16", 64, "torch.int16 has no sentinel"),
    ("float32", 0, "slot 0 holds no element"),
])
def test_push_workspace_refuses_what_the_protocol_cannot_carry_before_allocating(dtype, slot, words):
    import torch

    from pkb_triton import push_workspace

    with pytest.raises(ValueError, match=words):
        push_workspace(torch.zeros(4, dtype=getattr(torch, dtype)), slot)


def test_plugin_and_package_import_light():
    code = ("import sys, pkb_triton, pkb_triton.plugin\n"
            "pkb_triton.plugin.pkb_backend_info()\n"
            "heavy = [m for m in ('torch', 'triton') if m in sys.modules]\n"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_requirements_name_what_is_missing():
    import torch

    from pkb_triton.plugin import pkb_backend_info

    info = pkb_backend_info()
    assert info.name == "triton" and set(info.devices) == {"cuda", "cpu"}
    assert sorted((p.name for p in info.samples.glob("*.py")), key=lambda name: int(name.split("_")[0])) == [
        "1_allreduce.py", "2_allgather.py", "3_broadcast.py", "4_reduce.py", "5_scatter.py", "6_gather.py",
        "7_reducescatter.py", "8_alltoall.py", "12_allgather_gemm.py", "13_gemm_allreduce.py",
        "28_moe_pre_all2all.py", "65_gnn_feature_exchange_all2all.py"]
    assert info.requirements("cpu") is None
    if not torch.cuda.is_available():
        reason = info.requirements("cuda")
        assert "torch.cuda" in reason and "\n" not in reason


def test_grid_respects_the_signal_pad():
    import torch

    from pkb_triton.host import CPU_MAX_PROGRAMS, Peers, max_programs

    assert max_programs(2) == 512 and max_programs(3) == 341 and max_programs(8, channels=2) == 64
    peers = Peers(ptrs=0, pads=0, rank=0, world_size=3, pad_slots=1024, device=torch.device("cpu"))
    assert peers.grid(128, 4096) == 1
    assert peers.grid(10**9, 1024) == CPU_MAX_PROGRAMS
    assert peers.grid(10**9, 1024, max_programs=3) == 3
    tight = Peers(ptrs=0, pads=0, rank=0, world_size=8, pad_slots=32, device=torch.device("cpu"))
    assert tight.grid(10**9, 1024) == 4 and tight.grid(10**9, 1024, channels=2) == 2
    with pytest.raises(ValueError):
        tight.grid(10**9, 1024, channels=5)


def test_peers_refuses_a_tensor_outside_the_heap():
    import torch

    from pkb_triton import peers

    with pytest.raises(LookupError):
        peers(torch.zeros(4))


# Two ranks under the interpreter, on the CPU heap. Round 1: rank 1 sleeps
# before it writes its buffer and launches; rank 0 must wait for it and read
# the value written after the sleep. Round 2 swaps the roles, on channel 1, with
# a grid of 3 programs. Afterwards every pad slot is back to 0. Then a
# workspace: allocated collectively, reachable through peers().
_PROBE = textwrap.dedent('''
    import os, sys, time
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    import triton, triton.language as tl

    from pkb_triton import barrier, peer_ptr, peers, workspace

    @triton.jit
    def probe(out, ptrs, pads, rank, channel, WORLD: tl.constexpr):
        barrier(pads, rank, WORLD, channel)
        offs = tl.program_id(0) * 16 + tl.arange(0, 16)
        src = peer_ptr(ptrs, (rank + 1) % WORLD, out)
        tl.store(out + offs, tl.load(src + offs))
        barrier(pads, rank, WORLD, channel)

    def run(rank, world, port, result_dir):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        from types import SimpleNamespace
        from pkb_core.symmetric.shm import SharedMemoryHeap
        from pkb_triton import _runtime
        heap = SharedMemoryHeap(rank, world, lambda: dist.barrier(), f"tritontest{port}")
        buf = heap.empty((48,), torch.float32)
        sym = peers(buf)
        lines = []
        for rnd, (late, channel, grid) in enumerate([(1, 0, 1), (0, 1, 3)]):
            if rank == late:
                time.sleep(1.5)
            buf.fill_(100 * (rnd + 1) + rank)
            out = torch.zeros(48)
            started = time.time()
            probe[(grid,)](out, sym.ptrs, sym.pads, sym.rank, channel, WORLD=world)
            lines.append(f"round{rnd} rank{rank} waited={time.time() - started:.2f} "
                         f"got={out[:16 * grid].unique().tolist()}")
        pads = heap.handles[0].get_signal_pad(rank)
        lines.append(f"rank{rank} pads_nonzero={int((pads != 0).sum())}")
        state = _runtime.start(SimpleNamespace(device=torch.device("cpu"), rank=rank, world_size=world,
                                               barrier=lambda: dist.barrier()), f"tritonws{port}")
        ws = workspace(32, torch.float32, "probe")
        assert workspace(32, torch.float32, "probe") is ws
        ws.fill_(7 + rank)
        out = torch.zeros(48)
        wsym = peers(ws)
        probe[(1,)](out, wsym.ptrs, wsym.pads, wsym.rank, 0, WORLD=world)
        lines.append(f"rank{rank} workspace_got={out[:16].unique().tolist()}")
        with open(os.path.join(result_dir, f"rank{rank}.txt"), "w") as f:
            f.write("\\n".join(lines) + "\\n")
        dist.barrier()
        _runtime.stop(state)
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(run, args=(2, int(sys.argv[1]), sys.argv[2]), nprocs=2)
''')


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_barrier_waits_for_a_late_rank(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(_PROBE)
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(script), str(_free_port()), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for rank in (0, 1) for line in (tmp_path / f"rank{rank}.txt").read_text().splitlines()]
    text = "\n".join(lines)

    def line(prefix):
        return next(item for item in lines if item.startswith(prefix))

    def waited(prefix):
        return float(line(prefix).split("waited=")[1].split()[0])

    # Round 1: rank 0 waited for the late rank 1 and read what it wrote after its sleep.
    assert line("round0 rank0").endswith("got=[101.0]") and waited("round0 rank0") > 1.0, text
    assert line("round0 rank1").endswith("got=[100.0]"), text
    # Round 2 (channel 1, 3 programs): rank 1 waited for rank 0.
    assert line("round1 rank1").endswith("got=[200.0]") and waited("round1 rank1") > 1.0, text
    assert line("round1 rank0").endswith("got=[201.0]"), text
    assert line("rank0 pads") == "rank0 pads_nonzero=0" and line("rank1 pads") == "rank1 pads_nonzero=0", text
    assert line("rank0 workspace") == "rank0 workspace_got=[8.0]", text
    assert line("rank1 workspace") == "rank1 workspace_got=[7.0]", text
