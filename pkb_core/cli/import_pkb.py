"""``pkb import-pkb``: a ParallelKernelBench solutions folder in pkb's naming (:mod:`pkb_core.problem.pkb_import`)."""
from __future__ import annotations

import click


@click.command("import-pkb")
@click.argument("src", type=click.Path(path_type=str))
@click.option("--out", "dst", required=True, type=click.Path(path_type=str),
              help="Folder to write <id>_<name>.py files into (made if missing).")
@click.option("--force", is_flag=True, help="Overwrite files that already exist in --out.")
@click.option("--dry-run", is_flag=True, help="Only print what would be copied.")
@click.option("-v", "--verbose", is_flag=True, help="Print every file's mapping and every file skipped.")
@click.pass_obj
def import_pkb(pm, src, dst, force, dry_run, verbose):
    """Copy PKB solution files (<id>_<name>_<backend>.py, today's or the early
    88-problem numbering, nested folders kept) into pkb's <id>_<name>.py naming,
    for `pkb run --solutions DST`. Prints what it could not map and why."""
    from pathlib import Path

    from pkb_core.errors import PkbError
    from pkb_core.problem.pkb_import import plan_import, problems_from_specs, report_lines, write_import
    from pkb_core.problem.registry import build_registry

    problems = problems_from_specs(build_registry(pm))
    plan = plan_import(Path(src), problems, exclude=[dst])
    if not plan.folders:
        raise PkbError(f"no solution files (<id>_<name>_<backend>.py) under {src}")
    written = None if dry_run else write_import(plan, Path(dst), force=force)
    for line in report_lines(plan, Path(dst), verbose=verbose, written=written):
        click.echo(line)
