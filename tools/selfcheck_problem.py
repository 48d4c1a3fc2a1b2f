"""Developer tool: run a problem file's reference twice on CPU/gloo and compare.

    python tools/selfcheck_problem.py PATH/TO/<id>_<name>.py [--world-size 2] [--size tiny] [--trials 2]

Checks: inputs build, the reference runs, two runs on separate copies agree
bit for bit, the reference leaves its inputs untouched, outputs differ between
trials, and reports the time per call. Superseded by `pkb run --backend
reference` for users; kept as a quick loop for problem authors.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pkb_core.problem import RunContext, read_spec


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _leaves(x, prefix="out"):
    if isinstance(x, torch.Tensor):
        yield prefix, x
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _leaves(v, f"{prefix}[{i}]")
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, f"{prefix}[{k!r}]")
    else:
        yield prefix, x


def _same(a, b):
    if isinstance(a, torch.Tensor) and a.is_floating_point() and a.element_size() == 1:  # fp8 codes
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b) if not a.is_floating_point() else (a.shape == b.shape and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)))
    return a == b


def _worker(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=args.world_size)
    torch.set_num_threads(1)
    spec = read_spec(args.path)
    problem = spec.load()
    err = problem.world_size_error(args.world_size, spec.params(args.size))
    if err:
        if rank == 0:
            print(f"world size {args.world_size} rejected: {err}")
        return
    groups = {}
    previous = None
    for trial in range(args.trials):
        ctx = RunContext(rank=rank, world_size=args.world_size, device="cpu", dtype=torch.float32,
                         size=args.size, params=spec.params(args.size), trial=trial, secret="dev",
                         problem_key=spec.key, groups=groups)
        args_in = problem.inputs(ctx)
        pristine = _clone(args_in)
        t0 = time.perf_counter()
        out1 = problem.reference(*_clone(args_in))
        dt = time.perf_counter() - t0
        out2 = problem.reference(*args_in)
        for i, (a_in, p_in) in enumerate(zip(args_in, pristine)):
            if i in problem.mutates:
                continue  # declared as mutated (MUTATES); the harness clones it per call
            for (name, a), (_, b) in zip(_leaves(a_in, f"arg{i}"), _leaves(p_in, f"arg{i}")):
                assert _same(a, b), f"rank {rank}: reference mutated {name} (declare it in MUTATES?)"
        for (name, a), (_, b) in zip(_leaves(out1), _leaves(out2)):
            assert _same(a, b), f"rank {rank}: two reference runs differ at {name}"
        shapes = [(n, tuple(t.shape), str(t.dtype).replace('torch.', '')) if isinstance(t, torch.Tensor) else (n, type(t).__name__) for n, t in _leaves(out1)]
        if previous is not None:
            assert any(isinstance(a, torch.Tensor) and not _same(a, b) for (_, a), (_, b) in zip(_leaves(out1), _leaves(previous))), \
                f"rank {rank}: outputs identical across trials (inputs not fresh?)"
        previous = out1
        if rank == 0:
            print(f"trial {trial}: ok, {dt * 1e3:.1f} ms/call, outputs {shapes}")
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--trials", type=int, default=2)
    args = parser.parse_args()
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_worker, args=(args, port), nprocs=args.world_size, start_method="spawn")


if __name__ == "__main__":
    sys.exit(main())
