"""Assembling the prompt that asks a model for one solution file.

pkb knows the problem (docstring, reference source, input shapes built at the
chosen size and world size), the machine and the rules a solution is judged
by; the backend adds its instructions and examples through
``BackendInfo.prompt``; a template (:mod:`pkb_core.generate.prompt_template`) decides
the wording. :func:`build_prompt` puts them together.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from pkb_core.plugin.backend_prompt import BackendPrompt
from pkb_core.errors import PkbError
from pkb_core.machine.hardware import resolve_hardware
from pkb_core.contracts.dtypes import PRECISIONS
from pkb_core.problem.describe import describe_inputs
from pkb_core.plugin.manager import get_backend_info
from pkb_core.generate.judging import Judging, resolve_judging
from pkb_core.generate.prompt_template import PromptTemplate, load_template


class UnsupportedWorldSize(PkbError):
    """The problem does not run with the requested number of ranks."""


@dataclass(frozen=True)
class PromptRequest:
    """The options of ``pkb prompt`` (and the prompt part of ``pkb generate``)."""

    backend: str
    #: ``auto`` (with ``size``, ``nproc``): as ``pkb run`` on ``device`` (pkb_core/generate/judging.py).
    precision: str = "auto"
    hardware: str = "auto"
    size: str = "auto"
    nproc: int | None = None
    template: str | None = None
    #: Where the file will be judged: ``auto`` (this machine), ``cuda`` or ``cpu``.
    device: str = "auto"
    #: The GPUs where it is judged when that is not this machine (a reward service's); None: this machine's.
    gpus: int | None = None


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: ``system`` (may be empty) and ``user`` messages, and
    ``settings``, what it was written for (recorded next to generated files)."""

    system: str
    user: str
    settings: dict = field(default_factory=dict)

    def messages(self) -> list[dict]:
        """Chat messages: the system message (when there is one), then the user's."""
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + [{"role": "user", "content": self.user}]


class PromptBuilder:
    """Builds prompts for one backend and one set of options, problem by problem
    (the template, the machine and the backend's part are looked up once)."""

    def __init__(self, pm, registry, request: PromptRequest):
        if request.precision not in ("auto", *PRECISIONS):
            raise PkbError(f"unknown precision {request.precision!r} "
                           f"(choose one of: auto, {', '.join(PRECISIONS)})")
        self.registry = registry
        self.request = request
        self.info = get_backend_info(pm, request.backend)
        self.template: PromptTemplate = load_template(request.template)
        self.hardware = resolve_hardware(request.hardware)
        #: The settings the files are judged under: what the prompt states, what the check uses.
        self.judging: Judging = resolve_judging(self.hardware, device=request.device, nproc=request.nproc,
                                                precision=request.precision, size=request.size, gpus=request.gpus)
        self.world_size = self.judging.world_size
        if self.world_size > self.hardware.gpus:
            raise PkbError(f"--nproc {self.world_size} but the {self.hardware.key} machine has "
                           f"{self.hardware.gpus} GPU(s)")
        part = self.info.prompt() if self.info.prompt is not None else None
        if part is None:
            part = BackendPrompt(instructions=f"{self.info.description or 'No description.'}\n\n(Backend "
                                 f"`{request.backend}` contributes no further instructions: write `solution` "
                                 f"as a Python file that this backend loads.)")
        if not isinstance(part, BackendPrompt):
            raise PkbError(f"backend {request.backend!r}: BackendInfo.prompt() returned {type(part).__name__}, "
                           f"not a BackendPrompt")
        self.part = part

    def build(self, spec) -> Prompt:
        """The prompt for problem ``spec`` (a :class:`pkb_core.problem.contract.ProblemSpec`)."""
        request, world_size, judging = self.request, self.world_size, self.judging
        params = spec.params(judging.size)
        problem = spec.load()
        why = problem.world_size_error(world_size, params)
        if why:
            raise UnsupportedWorldSize(f"problem {spec.key} does not run with {world_size} ranks: {why} "
                                       "(choose --nproc)")
        inputs = describe_inputs(problem, size=judging.size, world_size=world_size, precision=judging.precision)
        values = {
            "problem_key": spec.key, "problem_id": str(spec.id), "problem_name": spec.name,
            "category": spec.category, "problem_doc": spec.doc.strip(), "problem_file": spec.path.name,
            "reference_source": spec.path.read_text().rstrip(), "world_size_rule": spec.world_size_rule,
            "signature": str(inspect.signature(problem.reference)), "solution_file": f"{spec.key}.py",
            "backend": request.backend, "backend_description": self.info.description,
            "backend_instructions": self.part.instructions.strip(),
            "size": judging.size, "size_params": _params_text(params), "world_size": str(world_size),
            "precision": judging.precision, "dtype": PRECISIONS[judging.precision],
            "inputs": inputs.text, "hardware": self.hardware.describe(world_size),
            "judging": judging.sentence(),
            "tolerance": tolerance_text(spec, judging.precision),
            "inputs_unchanged": inputs_unchanged_text(problem),
            "communication_rule": self.template.text(
                "custom_kernels_rule" if self.info.custom_kernels else "library_rule"),
        }
        values["rules"] = self.template.render("rules", values)
        values["examples"] = self._examples(spec, values)
        settings = {"problem": spec.key, "backend": request.backend, "precision": judging.precision,
                    "size": judging.size, "world_size": world_size, "device": judging.device,
                    "hardware": self.hardware.key,
                    "template": self.template.source, "inputs_built": inputs.built}
        return Prompt(system=self.template.render("system", values), user=self.template.render("user", values),
                      settings=settings)

    def _examples(self, spec, values) -> str:
        """The rendered in-context examples, none of them for ``spec`` itself."""
        shown = []
        for example in self.part.examples:
            if len(shown) >= self.template.parts["max_examples"]:
                break
            try:
                other = self.registry.get(example.problem)
            except PkbError:
                other = None
            if other is not None and other.id == spec.id:
                continue
            if other is None and not example.reference:
                continue  # a problem this machine does not have, and no reference given
            reference = example.reference or other.path.read_text()
            shown.append(self.template.render("example", {
                **values,
                "example_problem": other.key if other else str(example.problem),
                "example_file": other.path.name if other else f"{example.problem}.py",
                "example_reference": reference.rstrip(), "example_solution": example.solution.rstrip(),
                "example_notes": example.notes.strip()}))
        return "\n\n".join(shown)


def build_prompt(pm, registry, problem: str, request: PromptRequest) -> Prompt:
    """The prompt for one problem (id, name or key)."""
    return PromptBuilder(pm, registry, request).build(registry.get(problem))


def tolerance_text(spec, precision: str) -> str:
    """How floating outputs are compared, with this problem's numbers."""
    import torch

    from pkb_core.judge.check import tolerance_for

    rows = []
    for name in ("bf16", "fp16", "fp32"):
        dtype = getattr(torch, PRECISIONS[name])
        rtol, atol = tolerance_for(dtype, spec.tolerance)
        mark = " (the working dtype)" if name == precision else ""
        rows.append(f"{PRECISIONS[name]}{mark}: rtol={rtol:g}, atol={atol:g}")
    own = (f" This problem sets TOLERANCE = {spec.tolerance}, which replaces the defaults." if spec.tolerance
           else "")
    return ("Floating-point output tensors pass when |out - ref| <= atol * max|ref| + rtol * |ref| for every "
            "element, where max|ref| is the largest magnitude in that output of the reference; by the output's "
            f"dtype: {'; '.join(rows)}.{own} Integer and boolean outputs must be equal; NaN and Inf must be "
            "exactly where the reference has them.")


def inputs_unchanged_text(problem) -> str:
    """The rule on modifying inputs, naming the arguments the reference updates in place
    (``MUTATES``: compared like outputs and allowed to be returned, see :mod:`pkb_core.job`)
    and those a rank may return unchanged (``RETURNS_INPUTS``)."""
    names = list(inspect.signature(problem.reference).parameters)
    returned = ", ".join(f"`{names[i]}`" if i < len(names) else f"argument {i}" for i in problem.returns_inputs)
    may_return = (f" An exception to returning new tensors: returning {returned} itself, unchanged, is allowed "
                  "(the reference does so on the ranks where it has nothing to compute)." if returned else "")
    base = "Never write into an input: after every call each input is compared bit for bit with a copy taken before it."
    if not problem.mutates:
        return base + may_return
    mutated = ", ".join(f"`{names[i]}`" if i < len(names) else f"argument {i}" for i in problem.mutates)
    return (f"Never write into an input, except {mutated}, which the reference updates in place: update it the "
            "same way (each call gets a fresh copy); after the call its new value is compared with the reference's "
            "like an output, and returning it is allowed. Every other input is compared bit for bit with a copy "
            "taken before the call." + may_return)


def _params_text(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())
