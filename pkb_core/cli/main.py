"""The ``pkb`` command: a click group built from a fresh plugin manager.

Nothing registers at import time: :func:`main` builds the plugin manager, the
group, lets plugins add commands (``pkb_register_commands``) and invokes it.
Tests call :func:`build_cli` with their own manager. This module imports no
torch; commands that need it import it inside.
"""
from __future__ import annotations

import importlib
import json
import sys

import click

from pkb_core import __version__
from pkb_core.cli.config import (CONFIG_META, add_option_envvars, command_defaults, config_of, default_map,
                                 value_origin)
from pkb_core.cli.config_values import ListOption
from pkb_core.config import Config, load_config
from pkb_core.errors import PkbError, Terminated
from pkb_core.plugin.manager import backend_infos, get_plugin_manager
from pkb_core.problem.registry import build_registry
from pkb_core.results.table import render_table


#: Commands that live in modules of their own ("module:attribute"), imported
#: when the CLI is built; each module keeps torch imports inside its function.
BUILTIN_COMMANDS = [
    "pkb_core.cli.run:run",
    "pkb_core.cli.build:build",
    "pkb_core.cli.bench:bench",
    "pkb_core.cli.report:report",
    "pkb_core.cli.report:plot",
    "pkb_core.cli.compare:compare",
    "pkb_core.cli.leaderboard:leaderboard",
    "pkb_core.cli.inspect:inspect",
    "pkb_core.cli.prompt:prompt",
    "pkb_core.cli.generate:generate",
    "pkb_core.cli.import_pkb:import_pkb",
    "pkb_core.cli.serve:serve",
    "pkb_core.cli.serve:submit",
    "pkb_core.cli.serve:jobs",
    "pkb_core.cli.serve:cancel",
]


class _Group(click.Group):
    """The ``pkb`` group: one line per error, and pytest's exit statuses (docs/cli.md).

    0: every job passed (or was unsupported here); 1: a job failed, or an error
    explained in one line (``Error: ...``); 2: interrupted (Ctrl-C); 3: a bug
    (pkb's or a plugin's: its traceback); 4: usage error (an option, an environment
    variable or a pkb.toml value refused before anything ran); 5: nothing selected.
    """

    #: The configuration the defaults came from, its problem (an error message) and
    #: ``{(command, parameter): key as written}``; set by :func:`prepare`.
    pkb_config = None
    pkb_config_error = None
    pkb_config_keys: dict = {}

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            _refuse_repeated_options(command, rest)
        return name, command, rest

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PkbError as exc:
            raise _Failure(f"{exc}; the value came from {exc.origin}" if exc.origin else str(exc),
                           exc.exit_code) from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            self.pkb_argv = list(sys.argv[1:] if args is None else args)
            asks_help = any(a in ("-h", "--help", "--version") for a in self.pkb_argv)
            if self.pkb_config_error and not asks_help:  # help stays readable while the file is being fixed
                raise click.UsageError(self.pkb_config_error)
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:  # Ctrl-C (click turns KeyboardInterrupt into Abort)
            click.echo("\nInterrupted (Ctrl-C)", err=True)
            code = INTERRUPTED
        except click.UsageError as exc:
            click.echo(f"Error: {self._usage_message(exc)}", err=True)
            code = USAGE_ERROR
        except click.ClickException as exc:
            click.echo(f"Error: {one_line(exc.format_message())}", err=True)
            code = exc.exit_code
        except PkbError as exc:  # raised while parsing (a callback)
            click.echo(f"Error: {one_line(str(exc))}", err=True)
            code = exc.exit_code
        else:
            code = result if isinstance(result, int) else 0
        if not standalone_mode:
            return code
        sys.exit(code)

    def _usage_message(self, exc: click.UsageError) -> str:
        """The message, naming where a bad value came from when the user did not type it."""
        param = getattr(exc, "param", None)
        if isinstance(exc, click.BadParameter) and param is not None and exc.ctx is not None:
            origin = value_origin(exc.ctx, param, self.pkb_config, self.pkb_config_keys,
                                  argv=getattr(self, "pkb_argv", ()))
            if origin:
                exc.param_hint = origin
        return one_line(exc.format_message())


def _refuse_repeated_options(command: click.Command, args) -> None:
    """A usage error where an option that takes one value is given twice: click keeps the last,
    so ``--problem 2 --problem 7`` ran problem 7 alone and ``--solution a.py --solution b.py``
    only ``b.py``, without a word (a new user, 2026-12-02)."""
    single = {}
    for param in command.params:
        if isinstance(param, click.Option) and not (param.multiple or param.count or param.is_flag):
            single.update({opt: param for opt in param.opts if opt.startswith("--")})
    seen: dict = {}
    for arg in args:
        if arg == "--":
            break
        param = single.get(arg.split("=", 1)[0])
        if param is None:
            continue
        if param.name in seen:
            flag = max(param.opts, key=len)
            takes = f"one list ({flag} 2,7)" if isinstance(param, ListOption) else "one value"
            raise click.UsageError(f"{flag} is given more than once: it takes {takes}")
        seen[param.name] = arg


def one_line(message: str) -> str:
    """``message`` on one line (docs/cli.md: every error is one ``Error:`` line), whatever
    the exception's text held: a compiler's or a plugin's message may span several."""
    return " ".join(message.split())


class _Failure(click.ClickException):
    """A :class:`PkbError` on its way out, with its exit status."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


#: Exit statuses that are not 0 or 1 (pytest's numbers).
INTERRUPTED, INTERNAL_ERROR, USAGE_ERROR, NOTHING_SELECTED = 2, 3, 4, 5


def _check_environment() -> None:
    """Settings pkb reads from the environment, checked before any job starts (a wrong value
    would otherwise surface as every window-mode job's ``error``)."""
    from pkb_core.conduct.group_offsets import group_offsets_choice
    from pkb_core.conduct.second_reference import second_reference_choice
    from pkb_core.harness.call_events import call_events_choice
    from pkb_core.harness.copies import copies_choice
    from pkb_core.harness.gates import engine_choice, mask_choice
    from pkb_core.process.ipcns import ipc_choice

    try:
        engine_choice()
        copies_choice()
        call_events_choice()
        group_offsets_choice()
        second_reference_choice()
        mask_choice()
        ipc_choice()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def build_cli(pm) -> click.Group:
    """The ``pkb`` group bound to plugin manager ``pm``."""

    @click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, prog_name="pkb")
    @click.pass_context
    def cli(ctx):
        """pkb: is a multi-GPU kernel correct on every rank, how much faster is it than
        PyTorch + NCCL, and how close is it to the hardware's limit?"""
        ctx.obj = pm
        _check_environment()
        # The configuration travels with the context (commands: pkb_core.cli.config.config_of), not the manager.
        ctx.meta[CONFIG_META] = ctx.command.pkb_config if ctx.command.pkb_config is not None else Config()

    @cli.group(invoke_without_command=True)
    @click.option("--json", "json_", is_flag=True, help="Print JSON.")
    @click.option("--category", default=None, help="Only this category (or its alias: tp, sp, ...).")
    @click.pass_context
    def problems(ctx, json_, category):
        """List the registered problems (`pkb problems show ID` for one)."""
        from pkb_core.problem.contract import CATEGORIES
        from pkb_core.problem.registry import category_key, require_problems

        if ctx.invoked_subcommand:
            return
        registry = require_problems(build_registry(pm))
        specs = list(registry)
        if category:
            key = category_key(category)
            if key is None:
                raise PkbError(f"unknown category {category!r} (categories: "
                               + ", ".join(f"{k} ({', '.join(a)})" if a else k for k, a in CATEGORIES.items())
                               + ")")
            specs = [s for s in specs if s.category == key]
        if json_:
            click.echo(json.dumps([_spec_json(s) for s in specs], indent=2))
            return
        rows = [[s.id, s.name, s.category, s.world_size_rule, s.summary] for s in specs]
        click.echo(render_table(["id", "name", "category", "world size", "task"], rows))
        if category and not specs:
            click.echo(f"(no problem of category {category_key(category)} is registered)", err=True)

    @problems.command("show")
    @click.argument("problem")
    @click.option("--json", "json_", is_flag=True, help="Print JSON.")
    def problems_show(problem, json_):
        """Spec, sizes, world-size rule and reference source of one problem."""
        from pkb_core.problem.registry import require_problems

        spec = require_problems(build_registry(pm)).get(problem)
        if json_:
            click.echo(json.dumps(dict(_spec_json(spec), source=spec.path.read_text()), indent=2))
            return
        click.echo(f"{spec.key}  [{spec.category}]  origin: {spec.origin}\n")
        click.echo(spec.doc.strip() + "\n")
        if spec.exact:
            # The docstrings describe the integer trials; the others are checked too (trust.md).
            click.echo("The integer inputs above are compared bit for bit; every second trial (a run's only "
                       "trial, where it has one) and every second timed call draw the same range with every "
                       "mantissa bit used, compared within the dtype's rounding (a lossy wire format fails "
                       "there).\n")
        click.echo(f"world size: {spec.world_size_rule}")
        for size, params in spec.sizes.items():
            click.echo(f"size {size}: {params}")
        click.echo(f"\n# {spec.path}\n" + spec.path.read_text())

    @cli.command()
    @click.option("--json", "json_", is_flag=True, help="Print JSON.")
    @click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto",
                  help="Check availability for this device type.")
    def backends(json_, device):
        """List the backends, with whether each can run here and why not."""
        from pkb_core.machine.device import detect_device

        device = detect_device(device)
        dists = {r.key.split(":", 1)[1]: r for r in pm.records if r.key.startswith("pkb.backends:") and not r.error}
        rows = []
        for name, info in sorted(backend_infos(pm).items()):
            reason = info.unavailable_reason(device)
            dist = dists.get(name)
            rows.append({"name": name, "devices": list(info.devices), "available": reason is None,
                         "reason": reason or "", "distribution": dist.distribution if dist else "",
                         "version": dist.version if dist else "", "description": info.description})
        if json_:
            click.echo(json.dumps({"device": device, "backends": rows}, indent=2))
            return
        click.echo(render_table(["backend", "devices", f"on {device}", "distribution", "description"],
                                [[r["name"], ",".join(r["devices"]), "yes" if r["available"] else "no (see below)",
                                  f"{r['distribution']} {r['version']}", r["description"]] for r in rows]))
        unavailable = [[r["name"], r["reason"]] for r in rows if not r["available"]]
        if unavailable:
            click.echo(f"\nwhy not on {device}:")
            click.echo(render_table(["backend", "reason"], unavailable))

    @cli.command()
    @click.option("--json", "json_", is_flag=True, help="Print JSON.")
    def plugins(json_):
        """List loaded plugins (group:name, distribution, version) and load errors."""
        rows = [{"name": r.key, "distribution": r.distribution, "version": r.version, "error": r.error}
                for r in pm.records]
        if json_:
            click.echo(json.dumps(rows, indent=2))
            return
        click.echo(render_table(["plugin", "distribution", "version", "status"],
                                [[r["name"], r["distribution"], r["version"], r["error"] or "ok"] for r in rows]))

    @cli.command()
    @click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto")
    @click.option("--force", is_flag=True, help="Measure again even if cached (the noise floor too).")
    @click.option("--noise/--no-noise", default=True, show_default=True,
                  help="Measure the noise floor (the reference against itself) when it is not cached.")
    @click.option("--noise-problems", cls=ListOption, default="1,2,7", show_default=True,
                  help="Problems (ids) timed against themselves for the noise floor.")
    @click.option("--noise-iters", type=click.IntRange(min=1), default=None,
                  help="At most this many timed calls per side and mode for the noise floor (default: pkb run's, "
                       "and at least 60: six rounds, the fewest with an interval).")
    @click.option("--nproc", type=click.IntRange(min=1), default=None, help="Ranks for the noise floor (default: every GPU; 2 on CPU).")
    @click.option("--json", "json_", is_flag=True, help="Print JSON.")
    @click.pass_context
    def calibrate(ctx, device, force, noise, noise_problems, noise_iters, nproc, json_):
        """Measure this machine's link, memory and matmul rates and its timing noise floor (cached per machine)."""
        import attrs

        from pkb_core.cache import calibration_dir
        from pkb_core.machine.calibrate import cache_path, calibrate as measure, machine_key, save_calibration
        from pkb_core.machine.device import detect_device, require_device
        from pkb_core.launch.noise import describe, measure_noise_floor

        device = require_device(detect_device(device))
        result = measure(device, force=force)
        if noise and (force or not result.noise_floor):
            problems = tuple(p.strip() for p in noise_problems.split(",") if p.strip())
            result = attrs.evolve(result, noise_floor=measure_noise_floor(
                device, problems=problems, nproc=nproc, iters=noise_iters, pm=pm, config=config_of(ctx),
                run_dir=calibration_dir() / f"{machine_key(device)}-noise"))
            save_calibration(device, result)
        if json_:
            click.echo(json.dumps(result.to_json(), indent=2))
            return
        rows = [["link (per direction, best pair)", f"{result.link_gbps:.1f} GB/s"],
                ["memory (read + write)", f"{result.hbm_gbps:.1f} GB/s"],
                [f"matmul ({result.matmul_dtype})", f"{result.matmul_tflops:.3g} TFLOP/s"]]
        rows += [[f"  GPU{link.src} -> GPU{link.dst} ({link.issued_by})", f"{link.gbps:.1f} GB/s"]
                 for link in result.links]
        click.echo(render_table(["ceiling", "measured"], rows))
        click.echo(f"\n{result.method}")
        floor = result.noise_floor
        if floor:
            click.echo(f"\nNoise floor: the reference against itself ({floor['nproc']} ranks, size {floor['size']}, "
                       f"{floor['datetime']})")
            click.echo(render_table(*_noise_table(floor)))
            for line in describe(floor):
                click.echo(line)
            if device == "cpu":
                click.echo("CPU mode: host timings (the host's clock), not GPU kernel times.")
        click.echo(f"cached in {cache_path(device)}")

    for spec in BUILTIN_COMMANDS:
        module_name, _, attr = spec.partition(":")
        cli.add_command(getattr(importlib.import_module(module_name), attr))
    return cli


def _noise_table(floor: dict) -> tuple[list, list]:
    """Headers and rows of the noise floor: one row per mode and problem."""
    from pkb_core.launch.noise import noise_reading

    rows = []
    for mode, m in floor["modes"].items():
        for e in m["entries"]:
            interval = "" if e["low"] is None else f"[{e['low']:.3f}, {e['high']:.3f}]"
            rows.append([mode, e["problem"], e["reference_ms"], _pct(e["reference_ci_rel"]), e["copy_ms"],
                         _pct(e["copy_ci_rel"]), e["ratio"], interval, noise_reading(e["difference"]),
                         e["samples"], e["stopped"]])
        for x in m["missing"]:
            rows.append([mode, x["problem"], None, "", None, "", None, "", x["why"], None, ""])
    return (["mode", "problem", "ref ms", "±%", "ref again ms", "±%", "ratio", "95% interval", "reading",
             "samples", "stopped"], rows)


def _pct(fraction):
    return "" if fraction is None else f"{100 * fraction:.1f}"


def _spec_json(spec) -> dict:
    return {"id": spec.id, "name": spec.name, "key": spec.key, "category": spec.category,
            "origin": spec.origin, "world_size": spec.world_size_rule, "sizes": spec.sizes,
            "summary": spec.summary, "path": str(spec.path)}


def context_settings(config: dict, cli: click.Group | None = None) -> dict:
    """Keyword arguments for ``cli.main``: environment prefix and file defaults (checked
    against the commands of ``cli`` when given, see :func:`pkb_core.cli.config.command_defaults`)."""
    if cli is not None and isinstance(cli, _Group) and cli.pkb_config is config:
        return {"auto_envvar_prefix": "PKB", "default_map": cli.pkb_default_map}
    return {"auto_envvar_prefix": "PKB", "default_map": default_map(config)}


def prepare(pm, config: dict) -> click.Group:
    """The full ``pkb`` group: built-ins plus commands from plugins, with the
    configuration checked against them (an unknown table or key stops any command)."""
    cli = build_cli(pm)
    pm.hook.pkb_register_commands(cli=cli)
    add_option_envvars(cli)
    cli.pkb_config = config
    try:
        cli.pkb_default_map, cli.pkb_config_keys = command_defaults(config, cli)
    except click.UsageError as exc:
        cli.pkb_default_map, cli.pkb_config_error = {}, exc.format_message()
    _name_sources(cli)
    return cli


def _name_sources(group: click.Group) -> None:
    """Have each command's :class:`PkbError` about one of its values (``about``: an unknown
    backend or problem, found while the command runs) name where that value came from when it
    was not typed, as a value click refuses itself does (docs/cli.md)."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            _name_sources(command)
        if getattr(command, "pkb_names_sources", False):
            continue

        def invoke(ctx, _original=command.invoke):
            try:
                return _original(ctx)
            except PkbError as exc:
                if exc.about and exc.origin is None:
                    exc.origin = _origin_of(ctx, exc.about)
                raise

        command.invoke, command.pkb_names_sources = invoke, True


def _origin_of(ctx: click.Context, names: tuple) -> str | None:
    """Where the first of ``names`` (``ctx``'s command's parameters) that the command has got its
    value, or None where it was typed (:func:`pkb_core.cli.config.value_origin`)."""
    root = ctx.find_root().command
    for param in ctx.command.params:
        if param.name in names:
            return value_origin(ctx, param, getattr(root, "pkb_config", None), getattr(root, "pkb_config_keys", {}),
                                argv=getattr(root, "pkb_argv", ()))
    return None


def main(argv=None) -> None:
    """Entry point of the ``pkb`` command and ``python -m pkb_core``."""
    try:
        pm = get_plugin_manager()
        config = load_config()
    except PkbError as exc:
        click.echo(f"Error: {one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    for record in pm.load_errors:
        click.echo(f"warning: plugin {record.key} from {record.distribution} failed to load: {record.error}",
                   err=True)
    cli = prepare(pm, config)
    _exit_on_termination()
    try:
        cli.main(args=argv, prog_name="pkb", obj=pm, **context_settings(config, cli))
    except (SystemExit, KeyboardInterrupt):
        raise
    except Exception:  # a bug in pkb or a plugin: its traceback, and pytest's "internal error"
        import traceback

        traceback.print_exc()
        click.echo("pkb: internal error (the traceback above is a bug in pkb or a plugin)", err=True)
        sys.exit(INTERNAL_ERROR)


def _exit_on_termination() -> None:
    """SIGTERM and SIGHUP end ``pkb`` as an exit does (:class:`Terminated`, status 128 + the signal),
    so every ``finally`` runs: a launch stops its groups and zygotes and removes its
    shared-memory folders, a compile phase kills its builders. Python's default would end
    the process on the spot and leave them to the warden (:mod:`pkb_core.process.warden`).
    A handler someone else installed (an embedding program's) is left as it is."""
    import signal

    def leave(signum, _frame):
        raise Terminated(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, leave)
