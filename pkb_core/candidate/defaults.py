"""Core defaults of the lifecycle hooks, registered ``trylast`` in every worker.

A backend overrides any of them by implementing the hook; what it leaves out
falls back to these.
"""
from __future__ import annotations

from pkb_core.plugin.hookspecs import hookimpl
from pkb_core.problem.contract import Problem
from pkb_core.candidate.solution import load_solution


class CoreDefaults:
    """The fallbacks; ``heap`` is set by the worker before jobs run."""

    def __init__(self):
        self.heap = None

    @hookimpl(trylast=True)
    def pkb_backend_init(self, ctx):
        return ctx

    @hookimpl(trylast=True)
    def pkb_backend_allocate(self, state, shape, dtype):
        return self.heap.empty(shape, dtype)

    @hookimpl(trylast=True)
    def pkb_backend_compile(self, state, problem: Problem, solution):
        return problem.reference if solution is None else load_solution(solution)

    @hookimpl(trylast=True)
    def pkb_backend_launch(self, state, program, inputs):
        return lambda: program(*inputs)
