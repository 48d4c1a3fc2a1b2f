"""``pkb_core.refine``: the refinement loop from Python, as ``pkb generate --rounds N`` runs it.

::

    from pkb_core import refine

    result = refine("1-8", backend="triton", model="my-model", rounds=10, nproc=2,
                    server="http://127.0.0.1:8765", measure_perf=True, out="loops/triton")
    for loop in result.problems:
        print(loop.key, len(loop.rounds), loop.stopped)

The provider is built as ``pkb generate`` builds it (``[providers.<name>]`` of pkb.toml,
``PKB_OPENAI_*``); :class:`~pkb_core.generate.loop.LoopResult` says what happened, and
the files are those of :mod:`pkb_core.generate.loop_state`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from pkb_core.generate.loop import Budget, LoopResult


def refine(problems: str, *, backend: str, model: str, rounds: int = 3, out=None, provider: str = "openai",
           server: str | None = None, token: str | None = None, nproc: int | None = None,
           precision: str = "bf16", hardware: str = "auto", size: str = "default", template: str | None = None,
           trials: int = 5, eval_size: str = "auto", measure_perf: bool = False, timeout: float | None = None,
           temperature: float | None = None, max_tokens: int | None = None, max_tokens_total: int | None = None,
           max_wall_s: float | None = None, stop_when_no_improvement: bool = False, pm=None,
           echo: Callable[[str], None] = lambda line: None) -> LoopResult:
    """Ask, check and revise, up to ``rounds`` rounds per problem (see :mod:`pkb_core.generate.loop`).

    :param problems: what ``pkb run --problem`` takes (ids, names, categories, ranges, ``all``).
    :param server: the reward service's URL; None: one launch per round on this node.
    :param size: the size the prompt describes; ``eval_size`` the size the files are checked at
        (``auto``: the device's default, ``tiny`` on CPU).
    :param out: the loop's directory (default ``generated/<backend>/<model>-loop``).
    """
    from pkb_core.cli.config import load_config
    from pkb_core.generate.evaluators import EvalOptions, LocalEvaluator, ServiceEvaluator
    from pkb_core.generate.generation import default_out_dir
    from pkb_core.generate.loop import Refiner, build_prompts
    from pkb_core.generate.prompt_builder import PromptBuilder, PromptRequest
    from pkb_core.generate.provider_registry import make_provider
    from pkb_core.generate.providers import ModelSettings
    from pkb_core.plugin.manager import get_plugin_manager
    from pkb_core.problem.registry import build_registry

    if pm is None:
        pm = get_plugin_manager()
        pm.pkb_config = load_config(None)
    registry = build_registry(pm)
    builder = PromptBuilder(pm, registry, PromptRequest(backend=backend, precision=precision, hardware=hardware,
                                                        size=size, nproc=nproc, template=template))
    prompts = build_prompts(builder, registry.select(problems), echo)
    out = Path(out) if out is not None else default_out_dir(backend, model).with_name(
        default_out_dir(backend, model).name + "-loop")
    options = EvalOptions(backend=backend, world_size=builder.world_size, trials=trials, size=eval_size,
                          measure_perf=measure_perf, timeout=timeout)
    evaluator = ServiceEvaluator(server, options, token=token) if server else LocalEvaluator(pm, options, out / "runs")
    budget = Budget(rounds=rounds, max_tokens_total=max_tokens_total, max_wall_s=max_wall_s,
                    stop_when_no_improvement=stop_when_no_improvement)
    refiner = Refiner(make_provider(pm, provider, getattr(pm, "pkb_config", {})), provider, builder.template,
                      ModelSettings(model=model, temperature=temperature, max_tokens=max_tokens), evaluator, out,
                      budget, echo=echo)
    try:
        return refiner.run(prompts)
    finally:
        evaluator.close()
