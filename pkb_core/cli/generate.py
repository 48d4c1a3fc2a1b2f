"""``pkb generate``: ask a model for solution files through a provider plugin."""
from __future__ import annotations

from pathlib import Path

import click

from pkb_core.cli.numbers import FiniteFloatRange
from pkb_core.errors import PkbError
from pkb_core.cli.config_values import ListOption
from pkb_core.cli.prompt import prompt_options, prompt_request


@click.command()
@click.option("--problem", "problems", cls=ListOption, required=True,
              help="Ids, names, categories, ranges (1-8) or 'all', comma-separated.")
@prompt_options
@click.option("--model", required=True, help="Model name, as the provider knows it.")
@click.option("--provider", default="openai", show_default=True,
              help="Model provider (built in: openai, any chat-completions server; plugins add more).")
@click.option("--samples", type=click.IntRange(min=1), default=1, show_default=True,
              help="Replies per problem (files <id>_<name>_<k>.py when more than one).")
@click.option("--out", default=None, help="Output directory (default generated/<backend>/<model>).")
@click.option("--temperature", type=FiniteFloatRange(min=0), default=None,
              help="Sampling temperature, 0 or more (default: the provider's).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=None,
              help="Reply length limit (default: the provider's).")
@click.option("--force", is_flag=True, help="Ask again for samples that already have a solution file in --out.")
@click.option("--rounds", type=click.IntRange(min=1), default=None,
              help="Refine: check each file and send the model pkb's feedback, up to N rounds per problem "
                   "(files <out>/<id>_<name>/r<k>.py; an interrupted loop resumes from them).")
@click.option("--server", default=None, help="With --rounds: check through the reward service at this URL "
                                              "(default: one pkb run launch per round on this node).")
@click.option("--server-token", envvar="PKB_SERVE_TOKEN", default=None, help="The service's token (env PKB_SERVE_TOKEN).")
@click.option("--measure-perf", is_flag=True, help="With --rounds: time each passing file; the feedback gives the "
                                                   "speedup and the speed-of-light fraction.")
@click.option("--trials", type=click.IntRange(min=1), default=5, show_default=True, help="With --rounds: checked trials.")
@click.option("--timeout", type=FiniteFloatRange(min=1), default=None, help="With --rounds: seconds a job may run.")
@click.option("--stop-when-no-improvement", is_flag=True,
              help="With --rounds: stop a problem after a round that did not beat its best one.")
@click.option("--max-tokens-total", type=click.IntRange(min=1), default=None,
              help="With --rounds: start no round once this many tokens were used (the provider's counts, "
                   "else characters / 4).")
@click.option("--max-wall-time", type=FiniteFloatRange(min=0), default=None,
              help="With --rounds: start no round after this many seconds.")
@click.pass_obj
def generate(pm, problems, backend, device, precision, hardware, size, nproc, template, model, provider, samples,
             out, temperature, max_tokens, force, rounds, server, server_token, measure_perf, trials, timeout,
             stop_when_no_improvement, max_tokens_total, max_wall_time):
    """Ask a model for solution files and write them (with the prompt, the raw reply
    and a JSON record) where `pkb run --solutions DIR` evaluates them; with --rounds,
    refine each file with pkb's feedback until it passes (and is measurably faster)."""
    if rounds is not None:
        if samples != 1:
            raise click.UsageError("--rounds refines one file per problem: leave --samples at 1")
        return _refine(pm, problems, backend, device, precision, hardware, size, nproc, template, model, provider,
                       out, temperature, max_tokens, rounds, server, server_token, measure_perf, trials, timeout,
                       stop_when_no_improvement, max_tokens_total, max_wall_time)
    loop_only = {"--server": server, "--measure-perf": measure_perf, "--stop-when-no-improvement":
                 stop_when_no_improvement, "--max-tokens-total": max_tokens_total, "--max-wall-time": max_wall_time}
    given = [name for name, value in loop_only.items() if value]
    if given:
        raise click.UsageError(f"{', '.join(given)} only apply with --rounds")
    from pkb_core.cli.config import config_of
    from pkb_core.generate.generation import default_out_dir, generate_sample, sample_stem
    from pkb_core.generate.prompt_builder import PromptBuilder, UnsupportedWorldSize
    from pkb_core.generate.provider_registry import make_provider
    from pkb_core.generate.providers import ModelSettings
    from pkb_core.problem.registry import build_registry

    registry = build_registry(pm)
    specs = registry.select(problems)
    builder = PromptBuilder(pm, registry,
                            prompt_request(backend, device, precision, hardware, size, nproc, template))
    warn_crowded(builder.judging)
    client = make_provider(pm, provider, config_of())
    settings = ModelSettings(model=model, temperature=temperature, max_tokens=max_tokens)
    out_dir = Path(out) if out else default_out_dir(backend, model)
    total, done, written, missing = len(specs) * samples, 0, 0, []
    for spec in specs:
        try:
            prompt = builder.build(spec)
        except UnsupportedWorldSize as exc:
            if len(specs) == 1:
                raise
            click.echo(f"skipped: {exc}", err=True)
            total -= samples
            continue
        for k in range(samples):
            done += 1
            result = generate_sample(client, provider, prompt, settings, out_dir,
                                     sample_stem(spec.key, k, samples), k, force=force)
            if result.solution:
                written += 1
                state = "kept (already generated)" if result.skipped else "wrote"
                click.echo(f"[{done}/{total}] {spec.key} sample {k}: {state} {result.solution}", err=True)
            else:
                missing.append(result.stem)
                click.echo(f"[{done}/{total}] {spec.key} sample {k}: {result.error}; reply kept in "
                           f"{out_dir / (result.stem + '.reply.md')}", err=True)
    judging = builder.judging
    where = "" if device == "auto" else f" --device {judging.device}"  # auto: this machine, as pkb run's
    click.echo(f"{written} solution file(s) in {out_dir}; evaluate them as the prompts said with: "
               f"pkb run --backend {backend} --solutions {out_dir} {judging.run_options()}{where}")
    if missing:
        raise PkbError(f"{len(missing)} of {written + len(missing)} replies held no code "
                       f"({', '.join(missing)}): see the .reply.md files in {out_dir}")


def warn_crowded(judging) -> None:
    """The files will be judged in CPU mode here with more ranks than cores: one line saying it will be slow."""
    from pkb_core.machine.device import crowded_cores_warning

    crowded = judging.device == "cpu" and crowded_cores_warning(judging.world_size)
    if crowded:
        click.echo(crowded, err=True)


def _refine(pm, problems, backend, device, precision, hardware, size, nproc, template, model, provider, out,
            temperature, max_tokens, rounds, server, server_token, measure_perf, trials, timeout,
            stop_when_no_improvement, max_tokens_total, max_wall_time):
    """``pkb generate --rounds N`` (:func:`pkb_core.refinement.refine`)."""
    from pkb_core.cli.config import config_of
    from pkb_core.refinement import refine

    echo = lambda line: click.echo(line, err=True)  # noqa: E731 - progress goes to stderr
    result = refine(problems, backend=backend, model=model, rounds=rounds, out=out, provider=provider,
                    server=server, token=server_token, device=device, nproc=nproc, precision=precision,
                    hardware=hardware, size=size, template=template, trials=trials, measure_perf=measure_perf,
                    timeout=timeout, temperature=temperature, max_tokens=max_tokens, max_tokens_total=max_tokens_total,
                    max_wall_s=max_wall_time, stop_when_no_improvement=stop_when_no_improvement, pm=pm,
                    config=config_of(), echo=echo)
    out_dir = result.problems[0].folder.parent if result.problems else Path(out or ".")
    for loop in result.problems:
        click.echo(f"{loop.key}: {len(loop.rounds)} round(s), stopped: {loop.stopped}")
    counted = " (estimated as characters / 4: the provider reported no usage)" if result.tokens_estimated else ""
    click.echo(f"{result.tokens} tokens{counted}" + (f"; loop stopped early: {result.stopped}" if result.stopped else ""))
    click.echo(f"rounds, records and the best file of each problem in {out_dir}; by round: pkb report {out_dir}")
