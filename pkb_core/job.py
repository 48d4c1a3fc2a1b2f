"""One (problem, solution) job on one rank: compile, trials, checks, timing.

Every rank runs the same steps; wherever the outcome could differ between
ranks the ranks agree over the harness's gloo control group, so all of them
take the same branch and the collectives of the candidate and the reference
stay matched.
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from pkb_core.check import compare, leaves
from pkb_core.errors import CompileError
from pkb_core.problem import Problem, RunContext
from pkb_core.timing import summarize, time_iterations


@dataclass
class Outcome:
    """What a job concluded, before it becomes a record."""

    verdict: str
    reason: str = ""
    timing: dict = field(default_factory=dict)
    trials: int = 0


class JobRunner:
    """Runs jobs for one rank of a worker launch (see :mod:`pkb_core.worker`)."""

    def __init__(self, *, pm, state, rank, world_size, device, control, secret, run_dir: Path, status):
        self.pm = pm
        self.state = state
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.control = control
        self.secret = secret
        self.run_dir = run_dir
        self.status = status
        self.groups = {}  # process groups built by problems, cached for the launch
        self.slots = SymmetricSlots(self)

    # -- agreement -----------------------------------------------------------
    def agree(self, local: str | None) -> str | None:
        """Gather each rank's problem (``None`` = fine); return the first, naming its rank."""
        gathered = [None] * self.world_size
        dist.all_gather_object(gathered, local, group=self.control)
        for rank, problem in enumerate(gathered):
            if problem:
                return f"rank {rank}: {problem}"
        return None

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- the job -------------------------------------------------------------
    def run(self, job: dict, problem: Problem) -> Outcome:
        hook = self.pm.hook
        local = None
        program = None
        try:
            program = hook.pkb_backend_compile(state=self.state, problem=problem, solution=job["solution"])
            if program is None:
                local = "the backend returned None from pkb_backend_compile"
        except CompileError as exc:
            local = str(exc)
        except Exception as exc:  # noqa: BLE001 - a backend bug is still this job's verdict
            local = f"compiling raised {_describe(exc)}"
        problem_text = self.agree(local)
        if problem_text:
            return Outcome("compile-error", problem_text)

        dtype = _DTYPES[job["dtype"]]
        params = problem.spec.params(job["size"])
        outcome = Outcome("pass")
        for trial in range(job["trials"]):
            ctx = RunContext(rank=self.rank, world_size=self.world_size, device=self.device, dtype=dtype,
                             size=job["size"], params=params, trial=trial, secret=self.secret,
                             problem_key=problem.spec.key, groups=self.groups)
            verdict, reason, bound = self.run_trial(job, problem, program, ctx)
            outcome.trials = trial + 1
            if verdict != "pass":
                return Outcome(verdict, f"trial {trial}: {reason}", trials=trial + 1)
        if job["mode"] == "eval" and job.get("measure_perf"):
            outcome.timing = self.measure(job, problem, bound)
        return outcome

    def run_trial(self, job, problem, program, ctx):
        args = problem.inputs(ctx)
        pristine = _clone(args)
        ref_args = _clone(args)
        cand_args = self.slots.place(args)
        self.status.write(job["key"], "candidate")
        local, out = None, None
        try:
            fn = self.pm.hook.pkb_backend_launch(state=self.state, program=program, inputs=cand_args)
            out = fn()
            self.sync()
        except Exception as exc:  # noqa: BLE001 - the candidate's failure is a verdict
            local = f"solution raised {_describe(exc)}"
            self.status.write(job["key"], "candidate", error=local)
        if local is None:
            local = _input_problems(cand_args, pristine, out, problem.mutates)
        failure = self.agree(local)
        if failure:
            return ("error" if "raised" in failure else "fail"), failure, None
        if job["mode"] == "dryrun":
            self.save(job, ctx.trial, {"candidate": out})
            return "pass", "", (fn, cand_args, pristine)
        self.status.write(job["key"], "reference")
        try:
            ref_out = problem.reference(*ref_args)
            self.sync()
            local = compare(out, ref_out, problem.spec.tolerance)
        except Exception as exc:  # noqa: BLE001
            local = f"the reference raised {_describe(exc)}"
            return "error", self.agree(local) or local, None
        failure = self.agree(local)
        if job.get("save_outputs") and (failure or ctx.trial == job["trials"] - 1):
            self.save(job, ctx.trial, {"candidate": out, "reference": ref_out, "inputs": pristine})
        if failure:
            return "fail", failure, None
        return "pass", "", (fn, cand_args, pristine)

    # -- timing --------------------------------------------------------------
    def measure(self, job, problem, bound) -> dict:
        fn, cand_args, pristine = bound
        ref_args = _clone(pristine)
        self.status.write(job["key"], "timing")

        def refresher(target):
            if not problem.mutates:
                return None
            return lambda: _restore(target, pristine, problem.mutates)

        common = dict(device=self.device, group=self.control, warmup=job["warmup"], iters=job["iters"])
        reference = summarize(time_iterations(lambda: problem.reference(*ref_args), refresh=refresher(ref_args), **common))
        candidate = summarize(time_iterations(fn, refresh=refresher(cand_args), **common))
        return {"reference": reference, "candidate": candidate}

    def save(self, job, trial, payload):
        folder = self.run_dir / "outputs" / job["slug"]
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(_to_cpu(payload), folder / f"rank{self.rank}.pt")


class SymmetricSlots:
    """Symmetric buffers for a job's tensor inputs, allocated once and reused.

    Allocation is collective, so ranks first agree on how many tensor leaves
    there are and the largest byte size of each (ranks may hold different
    shapes); a slot is reallocated only when some rank needs more room.
    """

    def __init__(self, runner: JobRunner):
        self.runner = runner
        self.buffers: list[torch.Tensor] = []

    def place(self, args):
        tensors = [leaf for _, leaf in leaves(args) if isinstance(leaf, torch.Tensor)]
        count = torch.tensor([len(tensors)], dtype=torch.int64)
        dist.all_reduce(count, op=dist.ReduceOp.MAX, group=self.runner.control)
        needed = torch.zeros(int(count), dtype=torch.int64)
        for i, t in enumerate(tensors):
            needed[i] = t.numel() * t.element_size()
        dist.all_reduce(needed, op=dist.ReduceOp.MAX, group=self.runner.control)
        for i, nbytes in enumerate(needed.tolist()):
            if i >= len(self.buffers) or self.buffers[i].numel() < nbytes:
                buffer = self.runner.pm.hook.pkb_backend_allocate(
                    state=self.runner.state, shape=(max(nbytes, 1),), dtype=torch.uint8)
                if i < len(self.buffers):
                    self.buffers[i] = buffer
                else:
                    self.buffers.append(buffer)
        placed = iter(range(len(tensors)))

        def to_slot(value):
            if isinstance(value, torch.Tensor):
                i = next(placed)
                nbytes = value.numel() * value.element_size()
                view = self.buffers[i][:nbytes].view(value.dtype).view(value.shape) if value.dim() else \
                    self.buffers[i][:nbytes].view(value.dtype).view(())
                view.copy_(value)
                return view
            if isinstance(value, (list, tuple)):
                return type(value)(to_slot(v) for v in value) if not hasattr(value, "_fields") else \
                    type(value)(*(to_slot(v) for v in value))
            if isinstance(value, dict):
                return {k: to_slot(v) for k, v in value.items()}
            return value

        return to_slot(args)


_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64}


def _describe(exc: BaseException) -> str:
    """``Type: message (file:line)`` of the innermost frame, one line."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {message}{where}"


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        items = [_clone(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, torch.nn.Module):
        import copy

        return copy.deepcopy(value)
    return value


def _restore(target, pristine, indices):
    for i in indices:
        for (_, dst), (_, src) in zip(leaves(target[i]), leaves(pristine[i])):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return [_to_cpu(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    return value


def _input_problems(cand_args, pristine, out, mutates) -> str | None:
    """The candidate must leave its inputs alone and return fresh tensors."""
    input_ptrs = set()
    for i, (now, before) in enumerate(zip(cand_args, pristine)):
        for (path, a), (_, b) in zip(leaves(now, f"argument {i}"), leaves(before, f"argument {i}")):
            if not isinstance(a, torch.Tensor):
                continue
            if a.numel():
                input_ptrs.add(a.data_ptr())
            if i not in mutates and not _identical(a, b):
                return f"the solution modified its input ({path})"
    for path, leaf in leaves(out):
        if isinstance(leaf, torch.Tensor) and leaf.numel() and leaf.data_ptr() in input_ptrs:
            return f"{path} aliases an input tensor; return a new tensor"
    return None


def _identical(a, b) -> bool:
    if a.shape != b.shape:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)) and
                    torch.equal(torch.isnan(a), torch.isnan(b)))
    return bool(torch.equal(a, b))
