#!/usr/bin/env python3
"""GPU smoke test of the cuda samples on awkward shapes, offsets and roots.

Run on a GPU node, one process per GPU::

    torchrun --nproc-per-node 2 backends/cuda/tools/gpu_smoke.py [--dtypes bf16,fp32] [--repeat 3]

``pkb run --backend cuda`` checks the samples at the presets (all 16-byte
aligned). This adds what the presets miss: sizes that leave a scalar tail,
inputs placed at a misaligned offset inside their symmetric buffer, a
non-zero root for broadcast/reduce/scatter/gather, and back-to-back calls
without a host sync (the barrier's slots are reused). Each case compares
every rank's output bit for bit with the problem's torch.distributed
reference and checks the input was left alone. Exit status 1 on any failure.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}
SHAPES = [(1, 1), (3, 5), (8, 16), (7, 1001), (1024, 1024)]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inputs(problem: str, m: int, n: int, rank: int, world: int, dtype, device, gen, root: int):
    """This rank's arguments: small integers (exact sums), rank-distinct."""
    def rnd(*shape):
        return torch.randint(-16, 17, shape, generator=gen, device="cpu").to(dtype).to(device)

    if problem in ("allreduce", "allgather"):
        return (rnd(m, n),)
    if problem in ("broadcast", "reduce", "gather"):
        return (rnd(m, n), root)
    if problem == "scatter":
        if rank == root:
            return (rnd(world, m, n), root)
        return (torch.full((m, n), float("nan"), dtype=dtype, device=device), root)
    if problem == "reducescatter":
        return (rnd(world * m, n),)
    if problem == "alltoall":
        return (rnd(world, m, n),)
    raise KeyError(problem)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", default="bf16,fp32")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)

    import pkb_cuda
    from pkb_core import TorchSymmetricHeap
    from pkb_cuda.plugin import SAMPLES

    problems_dir = Path(importlib.util.find_spec("pkb_problems").origin).parent / "collective"
    heap = TorchSymmetricHeap(device)
    failures = []
    checked = 0
    for sample in sorted(SAMPLES.glob("[0-9]*_*.py"), key=lambda p: int(p.name.split("_")[0])):
        name = sample.stem.split("_", 1)[1]
        solution = _load(sample, f"smoke_{name}").solution
        reference = _load(problems_dir / sample.name, f"smoke_ref_{name}").reference
        for dtype_name in args.dtypes.split(","):
            dtype = DTYPES[dtype_name]
            itemsize = torch.empty((), dtype=dtype).element_size()
            for m, n in SHAPES:
                for shift in (0, itemsize):  # 0: aligned; itemsize: misaligned from 16 bytes
                    for root in ((0, world - 1) if name in ("broadcast", "reduce", "scatter", "gather") else (0,)):
                        gen = torch.Generator().manual_seed(1000 * rank + 7 * m + n + shift + root)
                        args_ = _inputs(name, m, n, rank, world, dtype, device, gen, root)
                        x = args_[0]
                        nbytes = world * m * n * itemsize + shift  # the largest any rank needs
                        buf = heap.empty((nbytes,), torch.uint8)
                        placed = buf[shift:shift + x.numel() * itemsize].view(dtype).view(x.shape)
                        placed.copy_(x)
                        cand = (placed,) + args_[1:]
                        ref_in = (x.clone(),) + args_[1:]
                        try:
                            out = None
                            for _ in range(args.repeat):  # back to back, no host sync
                                out = solution(*cand)
                            torch.cuda.synchronize()
                            expected = reference(*ref_in)
                            torch.cuda.synchronize()
                            ok = out.shape == expected.shape and out.dtype == expected.dtype and bool(
                                torch.equal(torch.nan_to_num(out), torch.nan_to_num(expected)))
                            untouched = bool(torch.equal(torch.nan_to_num(placed), torch.nan_to_num(x)))
                            problem = None if ok and untouched else (
                                "input modified" if ok else f"wrong output (max diff "
                                f"{(out.float() - expected.float()).abs().max().item() if out.shape == expected.shape else 'shape'})")
                        except Exception as exc:  # noqa: BLE001
                            problem = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                        checked += 1
                        if problem:
                            failures.append(f"rank {rank} {name} {dtype_name} {m}x{n} shift={shift} root={root}: {problem}")
    peers_note = pkb_cuda.peers(buf)
    gathered = [None] * world
    dist.all_gather_object(gathered, failures)
    if rank == 0:
        all_failures = [f for fs in gathered for f in fs]
        print(f"gpu_smoke: world {world}, {checked} cases per rank, max_blocks {peers_note.max_blocks}, "
              f"{len(all_failures)} failures")
        for line in all_failures[:40]:
            print("  FAIL", line)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if any(gathered) else 0


if __name__ == "__main__":
    sys.exit(main())
