"""Find the step after which the Triton all-gather sample hangs on a GPU.

Run on the GPU machine, one process per GPU::

    torchrun --nproc-per-node 2 benchmarks/diag_triton_allgather.py

The 2026-11-22 sweep hung in the *second* all-gather job of a launch (1 MiB
after 4 KiB, 256 MiB after 64 MiB), never the first. This replays what such a
launch does to one symmetric buffer -- eager calls at one size, a CUDA-graph
capture and replays, NCCL's own all-gather (eager and graphed), then eager
calls at another size -- and prints a line after each step. A step that hangs
is cut off by faulthandler after STEP_LIMIT seconds, which prints every
thread's stack and ends the process, so the last "ok" line names the culprit.
"""
from __future__ import annotations

import faulthandler
import importlib.util
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

STEP_LIMIT = 20
SAMPLE = Path(__file__).resolve().parents[1] / "backends/triton/pkb_triton/samples/2_allgather.py"


def _load_sample():
    spec = importlib.util.spec_from_file_location("diag_allgather", SAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    from pkb_core.symmetric.torch_heap import TorchSymmetricHeap

    heap = TorchSymmetricHeap(torch.device("cuda", torch.cuda.current_device()))
    buffer = heap.empty((256 << 20,), torch.uint8)
    sample = _load_sample()

    def view(nbytes):
        t = buffer[:nbytes].view(torch.bfloat16)
        t.copy_(torch.full_like(t, rank + 1))
        return t

    def eager(nbytes, calls=3):
        x = view(nbytes)
        for _ in range(calls):
            out = sample.solution(x)
        torch.cuda.synchronize()
        expected = torch.arange(1, dist.get_world_size() + 1, device=x.device, dtype=x.dtype)
        assert torch.equal(out.view(dist.get_world_size(), -1)[:, 0], expected), out.view(-1)[:8]

    def graphed(nbytes, calls=10, replays=3):
        x = view(nbytes)
        sample.solution(x)
        torch.cuda.synchronize()
        dist.barrier()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                sample.solution(x)
        dist.barrier()
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()

    def nccl(nbytes, graph_it):
        x = view(nbytes)
        out = torch.empty(dist.get_world_size() * x.numel(), dtype=x.dtype, device=x.device)
        dist.all_gather_into_tensor(out, x)
        torch.cuda.synchronize()
        if graph_it:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(10):
                    dist.all_gather_into_tensor(out, x)
            graph.replay()
            torch.cuda.synchronize()

    steps = [
        ("eager 4K", lambda: eager(4096)),
        ("eager 1M", lambda: eager(1 << 20)),
        ("eager 4K again", lambda: eager(4096)),
        ("graph 4K", lambda: graphed(4096)),
        ("eager 1M after graph 4K", lambda: eager(1 << 20)),
        ("nccl eager 4K", lambda: nccl(4096, False)),
        ("eager 1M after nccl", lambda: eager(1 << 20)),
        ("nccl graph 4K", lambda: nccl(4096, True)),
        ("eager 1M after nccl graph", lambda: eager(1 << 20)),
        ("eager 64M", lambda: eager(64 << 20)),
        ("graph 64M", lambda: graphed(64 << 20, calls=4)),
        ("eager 256M", lambda: eager(256 << 20)),
    ]
    for name, step in steps:
        dist.barrier()
        faulthandler.dump_traceback_later(STEP_LIMIT, exit=True)
        started = time.perf_counter()
        step()
        faulthandler.cancel_dump_traceback_later()
        print(f"rank {rank}: ok {name} ({time.perf_counter() - started:.2f} s)", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
