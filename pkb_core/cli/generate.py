"""``pkb generate``: ask a model for solution files through a provider plugin."""
from __future__ import annotations

from pathlib import Path

import click

from pkb_core.errors import PkbError
from pkb_core.cli.prompt import prompt_options, prompt_request


@click.command()
@click.option("--problem", "problems", required=True,
              help="Ids, names, categories, ranges (1-8) or 'all', comma-separated.")
@prompt_options
@click.option("--model", required=True, help="Model name, as the provider knows it.")
@click.option("--provider", default="openai", show_default=True,
              help="Model provider (built in: openai, any chat-completions server; plugins add more).")
@click.option("--samples", type=click.IntRange(min=1), default=1, show_default=True,
              help="Replies per problem (files <id>_<name>_<k>.py when more than one).")
@click.option("--out", default=None, help="Output directory (default generated/<backend>/<model>).")
@click.option("--temperature", type=click.FloatRange(min=0), default=None,
              help="Sampling temperature, 0 or more (default: the provider's).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=None,
              help="Reply length limit (default: the provider's).")
@click.option("--force", is_flag=True, help="Ask again for samples that already have a solution file in --out.")
@click.pass_obj
def generate(pm, problems, backend, precision, hardware, size, nproc, template, model, provider, samples, out,
             temperature, max_tokens, force):
    """Ask a model for solution files and write them (with the prompt, the raw reply
    and a JSON record) where `pkb run --solutions DIR` evaluates them."""
    from pkb_core.generate.generation import default_out_dir, generate_sample, sample_stem
    from pkb_core.generate.prompt_builder import PromptBuilder, UnsupportedWorldSize
    from pkb_core.generate.provider_registry import make_provider
    from pkb_core.generate.providers import ModelSettings
    from pkb_core.problem.registry import build_registry

    registry = build_registry(pm)
    specs = registry.select(problems)
    builder = PromptBuilder(pm, registry, prompt_request(backend, precision, hardware, size, nproc, template))
    client = make_provider(pm, provider, getattr(pm, "pkb_config", {}))
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
    click.echo(f"{written} solution file(s) in {out_dir}; evaluate them with: "
               f"pkb run --backend {backend} --solutions {out_dir} --nproc {builder.world_size}")
    if missing:
        raise PkbError(f"{len(missing)} of {written + len(missing)} replies held no code "
                       f"({', '.join(missing)}): see the .reply.md files in {out_dir}")
