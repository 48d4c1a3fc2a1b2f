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
from pkb_core.cli.config import default_map, load_config
from pkb_core.errors import PkbError
from pkb_core.plugin.manager import backend_infos, get_plugin_manager
from pkb_core.problem.registry import build_registry
from pkb_core.cli.table import render_table


#: Commands that live in modules of their own ("module:attribute"), imported
#: when the CLI is built; each module keeps torch imports inside its function.
BUILTIN_COMMANDS = [
    "pkb_core.cli.run:run",
    "pkb_core.cli.build:build",
    "pkb_core.cli.bench:bench",
    "pkb_core.cli.report:report",
    "pkb_core.cli.report:plot",
    "pkb_core.cli.compare:compare",
    "pkb_core.cli.inspect:inspect",
    "pkb_core.cli.prompt:prompt",
    "pkb_core.cli.generate:generate",
]


class _Group(click.Group):
    """Turns :class:`PkbError` into one line and exit status 1."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PkbError as exc:
            raise click.ClickException(str(exc)) from None


def build_cli(pm) -> click.Group:
    """The ``pkb`` group bound to plugin manager ``pm``."""

    @click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, prog_name="pkb")
    @click.pass_context
    def cli(ctx):
        """pkb: is a multi-GPU kernel correct on every rank, how much faster is it than
        PyTorch + NCCL, and how close is it to the hardware's limit?"""
        ctx.obj = pm

    @cli.group(invoke_without_command=True)
    @click.option("--json", "json_", is_flag=True, help="Print JSON.")
    @click.option("--category", default=None, help="Only this category.")
    @click.pass_context
    def problems(ctx, json_, category):
        """List the registered problems (`pkb problems show ID` for one)."""
        if ctx.invoked_subcommand:
            return
        specs = list(build_registry(pm))
        if category:
            specs = build_registry(pm).select(category)
        if json_:
            click.echo(json.dumps([_spec_json(s) for s in specs], indent=2))
            return
        rows = [[s.id, s.name, s.category, s.world_size_rule, s.summary[:60]] for s in specs]
        click.echo(render_table(["id", "name", "category", "world size", "task"], rows))

    @problems.command("show")
    @click.argument("problem")
    @click.option("--json", "json_", is_flag=True, help="Print JSON.")
    def problems_show(problem, json_):
        """Spec, sizes, world-size rule and reference source of one problem."""
        spec = build_registry(pm).get(problem)
        if json_:
            click.echo(json.dumps(dict(_spec_json(spec), source=spec.path.read_text()), indent=2))
            return
        click.echo(f"{spec.key}  [{spec.category}]  origin: {spec.origin}\n")
        click.echo(spec.doc.strip() + "\n")
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
                                [[r["name"], ",".join(r["devices"]), "yes" if r["available"] else f"no: {r['reason']}",
                                  f"{r['distribution']} {r['version']}", r["description"]] for r in rows]))

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
    @click.option("--noise-problems", default="1,2,7", show_default=True,
                  help="Problems (ids) timed against themselves for the noise floor.")
    @click.option("--noise-iters", type=int, default=None,
                  help="At most this many timed calls per side and mode for the noise floor (default: pkb run's, "
                       "and at least 60: six rounds, the fewest with an interval).")
    @click.option("--nproc", type=int, default=None, help="Ranks for the noise floor (default: every GPU; 2 on CPU).")
    @click.option("--json", "json_", is_flag=True, help="Print JSON.")
    def calibrate(device, force, noise, noise_problems, noise_iters, nproc, json_):
        """Measure this machine's link, memory and matmul rates and its timing noise floor (cached per machine)."""
        from pkb_core.machine.calibrate import cache_dir, cache_path, calibrate as measure, machine_key, \
            save_calibration
        from pkb_core.machine.device import detect_device
        from pkb_core.machine.noise import describe, measure_noise_floor

        device = detect_device(device)
        result = measure(device, force=force)
        if noise and (force or not result.get("noise_floor")):
            problems = tuple(p.strip() for p in noise_problems.split(",") if p.strip())
            result["noise_floor"] = measure_noise_floor(
                device, problems=problems, nproc=nproc, iters=noise_iters,
                run_dir=cache_dir() / "calibration" / f"{machine_key(device)}-noise")
            save_calibration(device, result)
        if json_:
            click.echo(json.dumps(result, indent=2))
            return
        rows = [["link (per direction, best pair)", f"{result['link_gbps']:.1f} GB/s"],
                ["memory (read + write)", f"{result['hbm_gbps']:.1f} GB/s"],
                [f"matmul ({result['matmul_dtype']})", f"{result['matmul_tflops']:.3g} TFLOP/s"]]
        rows += [[f"  GPU{l['src']} -> GPU{l['dst']} ({l['issued_by']})", f"{l['gbps']:.1f} GB/s"]
                 for l in result["links"]]
        click.echo(render_table(["ceiling", "measured"], rows))
        click.echo(f"\n{result['method']}")
        floor = result.get("noise_floor")
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
    rows = []
    for mode, m in floor["modes"].items():
        for e in m["entries"]:
            interval = "" if e["low"] is None else f"[{e['low']:.3f}, {e['high']:.3f}]"
            rows.append([mode, e["problem"], e["reference_ms"], _pct(e["reference_ci_rel"]), e["copy_ms"],
                         _pct(e["copy_ci_rel"]), e["ratio"], interval, e["difference"], e["samples"], e["stopped"]])
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


def context_settings(config: dict) -> dict:
    """Keyword arguments for ``cli.main``: environment prefix and file defaults."""
    return {"auto_envvar_prefix": "PKB", "default_map": default_map(config)}


def prepare(pm, config: dict) -> click.Group:
    """The full ``pkb`` group: built-ins plus commands from plugins."""
    pm.pkb_config = config  # backend options reach `pkb run` through the manager
    cli = build_cli(pm)
    pm.hook.pkb_register_commands(cli=cli)
    return cli


def main(argv=None) -> None:
    """Entry point of the ``pkb`` command and ``python -m pkb_core``."""
    try:
        pm = get_plugin_manager()
        config = load_config()
    except PkbError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    for record in pm.load_errors:
        click.echo(f"warning: plugin {record.key} from {record.distribution} failed to load: {record.error}",
                   err=True)
    prepare(pm, config).main(args=argv, prog_name="pkb", obj=pm, **context_settings(config))
