"""``pkb import-pkb``: a ParallelKernelBench solutions folder in pkb's naming (:mod:`pkb_core.problem.pkb_import`)."""
from __future__ import annotations

from pathlib import Path

import click

from pkb_core.problem.pkb_import import REFERENCE_FOLDERS, ImportPlan


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
    from pkb_core.errors import PkbError
    from pkb_core.problem.pkb_import import plan_import, problems_from_specs, write_import
    from pkb_core.problem.registry import build_registry

    problems = problems_from_specs(build_registry(pm))
    plan = plan_import(Path(src), problems, exclude=[dst])
    if not plan.folders:
        raise PkbError(f"no solution files (<id>_<name>_<backend>.py) under {src}")
    written = None if dry_run else write_import(plan, Path(dst), force=force)
    for line in report_lines(plan, Path(dst), verbose=verbose, written=written):
        click.echo(line)


NUMBERING_WORDS = {
    "today": "today's numbering",
    "early": "early 88-problem numbering",
    "mixed": "mixed numbering (file by file)",
    "either": "ids 1-32 only (same in both numberings)",
}


def report_lines(plan: ImportPlan, dst, *, verbose: bool = False, written=None) -> list[str]:
    """What ``pkb import-pkb`` prints: a line per folder, one per file not
    mapped (and per file placed by its signature), and a summary."""
    dst = Path(dst)
    lines = []
    for folder in plan.folders:
        where = folder.path.as_posix()
        lines.append(f"{where}: {NUMBERING_WORDS[folder.numbering]}; {len(folder.placed)} mapped, "
                     f"{len(folder.unplaced)} not mapped")
        for placed in folder.placed:
            if verbose or placed.rank >= 2:
                lines.append(f"  {placed.source.as_posix()} -> {(dst / placed.dest).as_posix()} ({placed.how})")
        for unplaced in folder.unplaced:
            lines.append(f"  not mapped: {unplaced.source.as_posix()}: {unplaced.reason}")
    for skipped in plan.skipped:
        if verbose or skipped.source.name in REFERENCE_FOLDERS:
            lines.append(f"skipped: {skipped.source.as_posix()}: {skipped.reason}")
    count = len(plan.placed) if written is None else len(written)
    verb = "copied" if written is not None else "would copy"
    other = sum(1 for s in plan.skipped if s.source.name not in REFERENCE_FOLDERS)
    tail = f"; {other} other .py file{'s' * (other != 1)} skipped" if other else ""
    lines.append(f"{verb} {count} file{'s' * (count != 1)} into {dst} from {len(plan.folders)} "
                 f"folder{'s' * (len(plan.folders) != 1)}; {len(plan.unplaced)} not mapped{tail}")
    return lines
