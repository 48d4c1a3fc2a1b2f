"""The configuration as the command line meets it: click defaults, environment names, errors.

Precedence, highest first: command-line flag, environment (``PKB_<COMMAND>_<OPTION>``,
e.g. ``PKB_RUN_BACKEND``, ``PKB_RUN_TIMEOUT``), the file (read by :mod:`pkb_core.config`),
the built-in default. The tables are :mod:`pkb_core.config`'s.

An unknown table or key is an error naming the file and the key (with the
closest valid one), so a typo never goes unnoticed, and so is a value of a TOML
type the option does not take (:mod:`pkb_core.cli.config_values`); the names under
``[backends.*]`` and ``[providers.*]`` are plugins' and are not checked (a
plugin may be installed on one machine and not another).
"""
from __future__ import annotations

import difflib
import os

import click

from pkb_core.cli.config_values import toml_default
from pkb_core.config import PLUGIN_TABLES, Config

#: Where the group keeps the run's configuration on the click context (``ctx.meta``: shared by
#: every nested context), so commands read it from there and the plugin manager carries none.
CONFIG_META = "pkb.config"


def config_of(ctx: click.Context | None = None) -> Config:
    """The configuration the ``pkb`` group was prepared with (empty outside one)."""
    ctx = ctx or click.get_current_context(silent=True)
    found = ctx.meta.get(CONFIG_META) if ctx is not None else None
    return found if found is not None else Config()


def option_keys(command: click.Command) -> dict:
    """``{key: parameter name}``: the keys a table of ``command`` accepts, each option's
    long name with ``_`` (``problem``, ``timeout``) and its parameter name (``problems``)."""
    keys = {}
    for param in command.params:
        if not isinstance(param, click.Option) or not param.name or param.name == "help":
            continue
        keys.setdefault(param.name, param.name)
        for opt in param.opts:
            if opt.startswith("--"):
                keys.setdefault(opt[2:].replace("-", "_"), param.name)
    keys.pop("version", None)
    return keys


def spelled_keys(command: click.Command) -> list[str]:
    """The keys to show for ``command``: each option's long name with ``_``."""
    keys = []
    for param in command.params:
        if isinstance(param, click.Option) and param.name not in ("help", "version"):
            longs = [opt[2:].replace("-", "_") for opt in param.opts if opt.startswith("--")]
            keys.append(longs[0] if longs else param.name)
    return sorted(set(keys))


def _hint(word: str, choices, shown, what: str) -> str:
    """``(did you mean 'backend'?)``, or the valid names when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if close:
        return f" (did you mean {what.format(close[0])}?)"
    return f" (valid: {', '.join(shown)})"


def command_defaults(config: Config, cli: click.Group) -> tuple[dict, dict]:
    """Check ``config`` against the commands of ``cli`` and turn it into click's ``default_map``.

    Returns ``(default_map, written)``: the defaults of each command by parameter
    name, and ``{(command, parameter): key as written}`` (for error messages).
    Raises :class:`click.UsageError` naming the file and the key for an unknown
    table or key, a table that is not one, or a value of a TOML type the option does not
    take (:func:`pkb_core.cli.config_values.toml_default`)."""
    origin = config.origin or "pkb configuration"
    commands = {name: cmd for name, cmd in cli.commands.items() if option_keys(cmd)}
    tables = sorted(set(commands) | set(PLUGIN_TABLES))
    per_command, written = {}, {}
    for section, body in config.items():
        if section in PLUGIN_TABLES:
            if not isinstance(body, dict) or not all(isinstance(v, dict) for v in body.values()):
                raise click.UsageError(f"{origin}: {config.table(section)} holds one table per plugin, "
                                       f"{config.table(section + '.<name>')}")
            continue
        if section not in commands and not isinstance(body, dict):
            where = f"in [{config.prefix[:-1]}]" if config.prefix else "at the top"
            raise click.UsageError(f"{origin}: unknown key {section!r} {where} (it holds tables: "
                                   f"{', '.join(config.table(t) for t in tables)})")
        if section not in commands:
            raise click.UsageError(f"{origin}: unknown table {config.table(section)}"
                                   + _hint(section, tables, [config.table(t) for t in tables], config.prefix and
                                           "[" + config.prefix + "{}]" or "[{}]"))
        if not isinstance(body, dict):
            raise click.UsageError(f"{origin}: {section} must be a table {config.table(section)}")
        keys = option_keys(commands[section])
        values = {}
        for key, value in body.items():
            name = keys.get(key)
            if name is None:
                raise click.UsageError(f"{origin}: unknown key {key!r} in {config.table(section)}"
                                       + _hint(key, keys, spelled_keys(commands[section]), "{!r}"))
            if name in values:
                raise click.UsageError(f"{origin}: {config.table(section)} sets {name!r} twice "
                                       f"({written[(section, name)]!r} and {key!r})")
            param = next(p for p in commands[section].params if p.name == name)
            try:
                values[name] = toml_default(param, value)
            except ValueError as exc:
                raise click.UsageError(f"Invalid value for {key!r} in {config.table(section)} of "
                                       f"{config.origin or 'the pkb configuration'}: {exc}") from None
            written[(section, name)] = key
        per_command[section] = values
    prompt = per_command.get("prompt", {})
    if prompt and "generate" in commands:  # [prompt] also gives `pkb generate` its prompt options
        shared = option_keys(commands["generate"]).values()
        inherited = {k: v for k, v in prompt.items() if k in shared}
        per_command["generate"] = {**inherited, **per_command.get("generate", {})}
        for name in inherited:
            written.setdefault(("generate", name), written[("prompt", name)])
    return per_command, written


def default_map(config: dict) -> dict:
    """click's ``default_map`` without the commands at hand: ``[run]``, ``[prompt]`` and
    ``[generate]`` as written (:func:`command_defaults` checks and translates them)."""
    prompt = dict(config.get("prompt", {}))
    return {"run": dict(config.get("run", {})), "prompt": prompt,
            "generate": {**prompt, **config.get("generate", {})}}


def environment_names(ctx: click.Context, param: click.Parameter) -> list[str]:
    """The environment variables that may set ``param`` of ``ctx``'s command, in the order click reads them."""
    names = []
    if param.envvar:
        names += [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
    if getattr(param, "allow_from_autoenv", False) and ctx.auto_envvar_prefix and param.name:
        names.append(f"{ctx.auto_envvar_prefix}_{param.name.upper()}")
    return names


def add_option_envvars(cli: click.Group, prefix: str = "PKB") -> None:
    """Let ``PKB_<COMMAND>_<OPTION>`` name an option by its flag (``PKB_RUN_TIMEOUT`` for
    ``--timeout``) as well as by its parameter (``PKB_RUN_JOB_TIMEOUT``, click's own)."""
    for command_name, command in cli.commands.items():
        for param in command.params:
            if not isinstance(param, click.Option) or param.envvar or not param.name:
                continue
            names = [f"{prefix}_{command_name}_{opt[2:]}".upper().replace("-", "_")
                     for opt in param.opts if opt.startswith("--")]
            own = f"{prefix}_{command_name}_{param.name}".upper().replace("-", "_")
            extra = [n for n in names if n != own]
            if extra:
                param.envvar = extra + [own]


def value_origin(ctx: click.Context, param: click.Parameter, config: Config | None, written: dict,
                 argv=()) -> str | None:
    """Where ``param``'s value came from when the user did not type it: ``PKB_RUN_NPROC
    (environment)`` or ``'nproc' in [run] of pkb.toml``; ``None`` for the command line.

    :param argv: the command line, for click versions that record a value's source
        only once the value has been accepted (8.4): then the source is worked out
        here (typed, else the environment, else the configuration)."""
    from click.core import ParameterSource

    if not param.name:
        return None
    section = _command_path(ctx)[0]
    source = ctx.get_parameter_source(param.name)
    if source is None:
        typed = any(arg == opt or arg.startswith(opt + "=") for arg in argv for opt in param.opts)
        if typed:
            return None
        if any(os.environ.get(n) for n in environment_names(ctx, param)):
            source = ParameterSource.ENVIRONMENT
        elif (section, param.name) in written:
            source = ParameterSource.DEFAULT_MAP
        else:  # nowhere: a required option nobody gave ("Missing option")
            return None
    if source == ParameterSource.ENVIRONMENT:
        for name in environment_names(ctx, param):
            if os.environ.get(name):
                return f"{name} (environment)"
        return "the environment"
    if source == ParameterSource.DEFAULT_MAP:
        key = written.get((section, param.name), param.name)
        table = config.table(section) if config is not None else f"[{section}]"
        if section == "generate" and (section, param.name) in written and config is not None \
                and key not in config.get("generate", {}):
            table = config.table("prompt")
        origin = config.origin if config is not None and config.origin else "the pkb configuration"
        return f"{key!r} in {table} of {origin}"
    return None


def _command_path(ctx: click.Context) -> list[str]:
    """The command's names below the ``pkb`` group (``["problems", "show"]``); the
    first is the configuration's table."""
    path = []
    walk = ctx
    while walk is not None and walk.parent is not None:
        path.insert(0, walk.info_name)
        walk = walk.parent
    return path or [ctx.info_name]
