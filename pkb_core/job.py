"""One (problem, solution) job on one rank: compile, trials, checks, timing.

Every rank runs the same steps; wherever the outcome could differ between
ranks the ranks agree over the harness's gloo control group, so all of them
take the same branch and the collectives of the candidate and the reference
stay matched.
"""
from __future__ import annotations

import contextlib
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from pkb_core.check import compare, leaves
from pkb_core.errors import CompileError
from pkb_core.guards import harness_call, static_scan
from pkb_core.problem import Problem, RunContext


@dataclass
class Outcome:
    """What a job concluded, before it becomes a record."""

    verdict: str
    reason: str = ""
    timing: dict = field(default_factory=dict)
    trials: int = 0


class JobRunner:
    """Runs jobs for one rank of a worker launch (see :mod:`pkb_core.worker`)."""

    def __init__(self, *, pm, state, rank, world_size, device, control, secret, run_dir: Path, status,
                 guard=None, tamper=None, calibration=None):
        self.pm = pm
        self.state = state
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.control = control
        self.secret = secret
        self.run_dir = run_dir
        self.status = status
        #: CollectiveGuard for custom-kernel backends (None for the reference).
        self.guard = guard
        self.tamper = tamper
        self.calibration = calibration
        self.groups = {}  # process groups built by problems, cached for the launch
        self.slots = SymmetricSlots(self)

    # -- agreement -----------------------------------------------------------
    def agree(self, local):
        """Gather each rank's ``(verdict, reason)`` or ``None``; return the first
        one found (lowest rank), its reason prefixed with the rank, else ``None``."""
        gathered = [None] * self.world_size
        with harness_call():
            dist.all_gather_object(gathered, local, group=self.control)
        for rank, found in enumerate(gathered):
            if found:
                verdict, reason = found
                return verdict, f"rank {rank}: {reason}"
        return None

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- the job -------------------------------------------------------------
    def run(self, job: dict, problem: Problem) -> Outcome:
        local = None
        program = None
        try:
            program = self.pm.hook.pkb_backend_compile(state=self.state, problem=problem, solution=job["solution"])
            if program is None:
                local = ("compile-error", "the backend returned None from pkb_backend_compile")
        except CompileError as exc:
            local = ("compile-error", str(exc))
        except Exception as exc:  # noqa: BLE001 - a backend bug is still this job's verdict
            local = ("compile-error", f"compiling raised {_describe(exc)}")
        found = self.agree(local)
        if found:
            return Outcome(*found)
        hint = static_scan(job["solution"]) if self.guard else None
        outcome = Outcome("pass")
        bound = None
        for trial in range(job["trials"]):
            found, bound = self.run_trial(job, problem, program, self.context(job, problem, trial))
            outcome.trials = trial + 1
            if found:
                verdict, reason = found
                if hint and verdict in ("flagged", "fail"):
                    reason = f"{reason} [hint: {hint}]"
                return Outcome(verdict, f"trial {trial}: {reason}", trials=trial + 1)
        if job["mode"] == "eval" and job.get("measure_perf"):
            from pkb_core.perf import measure

            outcome.timing, found = measure(self, job, problem, program, bound)
            if found:
                outcome.verdict, outcome.reason = found
        return outcome

    def context(self, job, problem, trial) -> RunContext:
        return RunContext(rank=self.rank, world_size=self.world_size, device=self.device,
                          dtype=_DTYPES[job["dtype"]], size=job["size"], params=job["params"],
                          trial=trial, secret=self.secret, problem_key=problem.spec.key, groups=self.groups)

    def call_candidate(self, job, program, cand_args, pristine, mutates):
        """Launch and call the candidate once, under the guards.

        Returns ``(fn, out, local)`` where ``local`` is ``None`` or this rank's
        ``(verdict, reason)``.
        """
        self.status.write(job["key"], "candidate")
        _poison_free_memory(self.device, cand_args)
        fn, out = None, None
        try:
            fn = self.pm.hook.pkb_backend_launch(state=self.state, program=program, inputs=cand_args)
            with self.guard.watching() if self.guard else contextlib.nullcontext():
                out = fn()
                self.sync()
        except Exception as exc:  # noqa: BLE001 - the candidate's failure is a verdict
            local = ("error", f"solution raised {_describe(exc)}")
            self.status.write(job["key"], "candidate", error=local[1])
            return fn, out, local
        called = self.guard.take() if self.guard else None
        if called:
            return fn, out, ("flagged", called)
        problem = _input_problems(cand_args, pristine, out, mutates)
        return fn, out, ("fail", problem) if problem else None

    def run_trial(self, job, problem, program, ctx):
        """One trial; returns ``(found, bound)``: the agreed ``(verdict, reason)``
        or ``None``, and what timing needs (callable, inputs) when it passed."""
        args = problem.inputs(ctx)
        pristine = _clone(args)
        ref_args = _clone(args)
        cand_args = self.slots.place(args)
        fn, out, local = self.call_candidate(job, program, cand_args, pristine, problem.mutates)
        found = self.agree(local)
        if found:
            return found, None
        if job["mode"] == "dryrun":
            self.save(job, {"candidate": out})
            return None, (fn, cand_args, pristine)
        self.status.write(job["key"], "reference")
        try:
            ref_out = problem.reference(*ref_args)
            self.sync()
            problem_text = compare(out, ref_out, problem.spec.tolerance) or _compare_updates(
                cand_args, ref_args, problem.mutates, problem.spec.tolerance)
            local = ("fail", problem_text) if problem_text else None
        except Exception as exc:  # noqa: BLE001
            local = ("error", f"the reference raised {_describe(exc)}")
        tampered = self.tamper.changed()
        if tampered:
            local = ("flagged", tampered)
        found = self.agree(local)
        if job.get("save_outputs") and (found or ctx.trial == job["trials"] - 1):
            self.save(job, {"candidate": out, "reference": ref_out if local is None or local[0] == "fail" else None,
                            "inputs": pristine})
        return found, (None if found else (fn, cand_args, pristine))

    def save(self, job, payload):
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


def _compare_updates(cand_args, ref_args, mutates, tolerance) -> str | None:
    """Arguments updated in place (``MUTATES``) are outputs too: compare them."""
    for i in mutates:
        problem = compare(cand_args[i], ref_args[i], tolerance)
        if problem:
            return f"argument {i} (updated in place): {problem.replace('out', 'value', 1)}"
    return None


def _poison_free_memory(device, args):
    """Fill soon-to-be-reused allocator memory with 0xFF (NaN for floats), so an
    output the candidate never writes cannot inherit an earlier answer."""
    nbytes = sum(t.numel() * t.element_size() for _, t in leaves(args) if isinstance(t, torch.Tensor))
    poison = torch.full((max(2 * nbytes, 1 << 16),), 255, dtype=torch.uint8, device=device)
    del poison


def _input_problems(cand_args, pristine, out, mutates) -> str | None:
    """The candidate must leave its inputs alone and return fresh tensors.

    Arguments the problem declares in ``MUTATES`` are updated in place by
    contract, and returning them (as in-place optimizer steps do) is allowed.
    """
    input_ptrs = set()
    for i, (now, before) in enumerate(zip(cand_args, pristine)):
        if i in mutates:
            continue
        for (path, a), (_, b) in zip(leaves(now, f"argument {i}"), leaves(before, f"argument {i}")):
            if not isinstance(a, torch.Tensor):
                continue
            if a.numel():
                input_ptrs.add(a.data_ptr())
            if not _identical(a, b):
                return f"the solution modified its input ({path})"
    for path, leaf in leaves(out):
        if isinstance(leaf, torch.Tensor) and leaf.numel() and leaf.data_ptr() in input_ptrs:
            return f"{path} aliases an input tensor; return a new tensor"
    return None


def _identical(a, b) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.element_size() == 1 and a.is_floating_point():  # fp8: compare the codes
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    if a.is_floating_point() or a.is_complex():
        return bool(torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)) and
                    torch.equal(torch.isnan(a), torch.isnan(b)))
    return bool(torch.equal(a, b))
