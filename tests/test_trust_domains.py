"""The trust domains hold over transitive imports (docs/trust.md, "Who runs what"): what runs in
a side's process reaches no code of the judge, the launcher or the records; the timekeeper,
whose clock times every window, loads nothing but the standard library and the gate layout;
and the launcher's reading of window mode reaches no code a side runs.

Imports are followed at any depth (a function-level import counts: it runs in whichever
process calls the function), from the modules' text, without importing anything."""
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "pkb_core"


def _modules() -> dict[str, Path]:
    found = {}
    for path in CORE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imports(path: Path, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name in MODULES or not name.startswith("pkb_core")}


def closure(start: str, *, top_level_only: bool = False) -> set[str]:
    """Every module ``start`` reaches through imports (and the packages they sit in)."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in MODULES:
            todo.extend(_imports(MODULES[name], top_level_only))
            parts = name.split(".")
            todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
    return seen


def _inside(names: set[str], packages: tuple[str, ...]) -> set[str]:
    return {n for n in names if any(n == p or n.startswith(p + ".") for p in packages)}


TRUSTED = tuple(f"pkb_core.{p}" for p in ("judge", "conduct", "launch", "results", "serve", "cli", "client",
                                            "generate", "ray"))


def test_a_sides_process_reaches_no_trusted_code():
    side = closure("pkb_core.candidate.worker")
    assert _inside(side, TRUSTED) == set()


def test_the_timekeeper_loads_only_the_standard_library_the_gate_layout_and_numa():
    loaded = closure("pkb_core.judge.timekeeper", top_level_only=True)
    # (and where on a NUMA machine it runs: pkb_core.machine.numa, the standard library's too; the
    # gate layout's engine setting is read by pkb_core.env_settings, and its words' futexes are
    # pkb_core.harness.host_wake, both the standard library's too; the board its meetings are on; on
    # CPU, the cores it runs on, pkb_core.machine.placement, the standard library's too)
    assert {n for n in loaded if n.startswith("pkb_core")} == {
        "pkb_core", "pkb_core.judge", "pkb_core.judge.timekeeper", "pkb_core.harness", "pkb_core.harness.gates",
        "pkb_core.harness.board", "pkb_core.machine.placement",
        "pkb_core.harness.host_wake", "pkb_core.machine", "pkb_core.machine.numa", "pkb_core.env_settings"}
    outside = {n.split(".")[0] for n in loaded if not n.startswith("pkb_core")}
    assert outside <= set(sys.stdlib_module_names) | {"__future__"}, outside - set(sys.stdlib_module_names)
    # At any depth it reaches no problem, no solution loader and no side's code.
    anywhere = closure("pkb_core.judge.timekeeper")
    assert _inside(anywhere, ("pkb_core.candidate", "pkb_core.problem", "pkb_core.harness.windows")) == set()


def test_window_modes_numbers_come_from_the_clock_not_from_a_sides_code():
    reading = closure("pkb_core.conduct.window_rounds")
    assert _inside(reading, ("pkb_core.candidate", "pkb_core.harness.windows", "pkb_core.harness.timing")) == set()


def test_the_closure_follows_imports_at_any_depth():
    # The walk itself: a module known to import the side's window loop inside a function.
    assert "pkb_core.harness.windows" in closure("pkb_core.judge.rank")
    assert "pkb_core.harness.windows" not in closure("pkb_core.judge.rank", top_level_only=True)
