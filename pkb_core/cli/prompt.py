"""``pkb prompt``: print the prompt that asks a model for one solution file."""
from __future__ import annotations

import json

import click

from pkb_core.machine.hardware import hardware_choices
from pkb_core.contracts.dtypes import PRECISIONS


def prompt_options(command):
    """The options that shape a prompt, shared by ``pkb prompt`` and ``pkb generate``."""
    options = [
        click.option("--backend", required=True, help="Backend the solution is for (see `pkb backends`)."),
        click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
                     help="Where the file will be judged (auto: this machine: its GPUs, else CPU mode); the "
                          "prompt says so, and it sets the defaults below as pkb run's."),
        click.option("--precision", type=click.Choice(["auto", *PRECISIONS]), default="auto", show_default=True,
                     help="Working dtype of the inputs (auto: bf16 on GPU, fp32 in CPU mode, as pkb run --dtype)."),
        click.option("--hardware", type=click.Choice(hardware_choices()), default="auto", show_default=True,
                     help="Machine to describe: this one's GPUs (auto; a preset when it has none) or a preset."),
        click.option("--size", type=click.Choice(["auto", "tiny", "default", "large"]), default="auto",
                     show_default=True, help="Size preset whose input shapes the prompt states (auto: default on "
                                             "GPU, tiny in CPU mode, as pkb run --size)."),
        click.option("--nproc", type=click.IntRange(min=1), default=None,
                     help="World size (default: every GPU where it is judged, at most the described machine's; "
                          "2 in CPU mode)."),
        click.option("--template", default=None,
                     help="TOML file overriding keys of the default prompt template (pkb_core/generate/default_prompt.toml)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def prompt_request(backend, device, precision, hardware, size, nproc, template):
    from pkb_core.generate.prompt_builder import PromptRequest

    return PromptRequest(backend=backend, device=device, precision=precision, hardware=hardware, size=size,
                         nproc=nproc, template=template)


@click.command()
@click.option("--problem", required=True, help="One problem: id, name or <id>_<name>.")
@prompt_options
@click.option("--json", "json_", is_flag=True, help="Print the chat messages and the settings as JSON.")
@click.pass_obj
def prompt(pm, problem, backend, device, precision, hardware, size, nproc, template, json_):
    """Print the prompt that asks a model for a solution file (the user message;
    --json adds the system message and the settings)."""
    from pkb_core.generate.prompt_builder import build_prompt
    from pkb_core.problem.registry import build_registry

    built = build_prompt(pm, build_registry(pm), problem,
                         prompt_request(backend, device, precision, hardware, size, nproc, template))
    if json_:
        click.echo(json.dumps({"messages": built.messages(), "settings": built.settings}, indent=2))
    else:
        click.echo(built.user)
