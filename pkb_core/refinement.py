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
           server: str | None = None, token: str | None = None, device: str = "auto", nproc: int | None = None,
           precision: str = "auto", hardware: str = "auto", size: str = "auto", template: str | None = None,
           trials: int = 5, measure_perf: bool = False, timeout: float | None = None,
           temperature: float | None = None, max_tokens: int | None = None, max_tokens_total: int | None = None,
           max_wall_s: float | None = None, stop_when_no_improvement: bool = False, pm=None, config=None,
           echo: Callable[[str], None] = lambda line: None) -> LoopResult:
    """Ask, check and revise, up to ``rounds`` rounds per problem (see :mod:`pkb_core.generate.loop`).

    :param problems: what ``pkb run --problem`` takes (ids, names, categories, ranges, ``all``).
    :param server: the reward service's URL; None: one launch per round on this node.
    :param device, nproc, precision, size: the settings the files are judged under, which the prompts
        state (``auto``: as ``pkb run`` would on this node, or on the service's devices with ``server``;
        :mod:`pkb_core.generate.judging`).
    :param out: the loop's directory (default ``generated/<backend>/<model>-loop``).
    :param pm, config: the plugin manager and the configuration (default: a fresh manager, and
        ``pkb.toml`` of the current directory).
    """
    from pkb_core.config import load_config
    from pkb_core.generate.evaluators import EvalOptions, LocalEvaluator, ServiceEvaluator
    from pkb_core.generate.generation import default_out_dir
    from pkb_core.generate.loop import Refiner, build_prompts
    from pkb_core.generate.prompt_builder import PromptBuilder, PromptRequest
    from pkb_core.generate.provider_registry import make_provider
    from pkb_core.generate.providers import ModelSettings
    from pkb_core.machine.device import crowded_cores_warning
    from pkb_core.plugin.manager import get_plugin_manager
    from pkb_core.problem.registry import build_registry

    pm = pm or get_plugin_manager()
    config = config if config is not None else load_config(None)
    registry = build_registry(pm)
    gpus = None
    if server and device == "auto":  # judged where the service runs, not here
        device, gpus = service_devices(server, token)
    builder = PromptBuilder(pm, registry, PromptRequest(backend=backend, device=device, precision=precision,
                                                        hardware=hardware, size=size, nproc=nproc,
                                                        template=template, gpus=gpus))
    judging = builder.judging
    crowded = not server and judging.device == "cpu" and crowded_cores_warning(judging.world_size)
    if crowded:
        echo(crowded)
    prompts = build_prompts(builder, registry.select(problems), echo)
    out = Path(out) if out is not None else default_out_dir(backend, model).with_name(
        default_out_dir(backend, model).name + "-loop")
    # The settings the prompts stated, resolved once: never "auto" again at the other end.
    options = EvalOptions(backend=backend, world_size=judging.world_size, trials=trials, size=judging.size,
                          dtype=judging.precision, measure_perf=measure_perf, timeout=timeout)
    evaluator = (ServiceEvaluator(server, options, token=token) if server
                 else LocalEvaluator(pm, options, out / "runs", device=judging.device, config=config))
    budget = Budget(rounds=rounds, max_tokens_total=max_tokens_total, max_wall_s=max_wall_s,
                    stop_when_no_improvement=stop_when_no_improvement)
    refiner = Refiner(make_provider(pm, provider, config), provider, builder.template,
                      ModelSettings(model=model, temperature=temperature, max_tokens=max_tokens), evaluator, out,
                      budget, echo=echo)
    try:
        return refiner.run(prompts)
    finally:
        evaluator.close()


def service_devices(url: str, token: str | None) -> tuple[str, int]:
    """``(device, devices)`` of the reward service at ``url`` (its health): where its files are judged."""
    import httpx

    from pkb_core.client.http import Client, ServiceError
    from pkb_core.errors import PkbError

    with Client(url, token=token, timeout=30.0) as client:
        try:
            health = client.health()
        except (ServiceError, httpx.HTTPError) as exc:
            raise PkbError(f"cannot ask the reward service at {url} where it judges: {exc}") from None
    return health["device"], int(health["devices"])
