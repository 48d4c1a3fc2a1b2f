"""The package tree is the architecture: every module is documented, there are no
import cycles, and distributions import only pkb's public API."""
import ast
import re
from pathlib import Path

import pytest

import pkb_core

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "pkb_core"


def _modules(package: Path) -> dict[str, Path]:
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(path: Path) -> set[str]:
    """Every module name an import statement in ``path`` names (at any depth)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_architecture_doc_lists_every_module():
    """Every module file and package folder of pkb_core is named in docs/architecture.md's tree."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    tree = doc.split("```")[1]
    named = set(re.findall(r"[\w]+\.py", tree)) | set(re.findall(r"([\w]+)/", tree))
    missing = []
    for path in CORE.rglob("*.py"):
        rel = path.relative_to(CORE)
        if rel.parts[0] == "baselines" or "reference_examples" in rel.parts:
            continue  # data: solution files (torch's own kernels, the reference backend's prompt examples)
        if path.name == "__init__.py":
            if rel.parent != Path(".") and rel.parent.name not in named:
                missing.append(f"{rel.parent}/")
        elif path.name not in named:
            missing.append(str(rel))
    assert not missing, f"docs/architecture.md does not list: {missing}"


@pytest.mark.parametrize("package", [CORE, *sorted(p.parent for p in ROOT.glob("backends/*/pkb_*/__init__.py"))],
                         ids=lambda p: p.name)
def test_no_import_cycles(package):
    """No module imports, through others, one that imports it: in pkb_core and in every backend.
    A backend's package module is left out: it re-exports its modules as the backend's public
    face, which its samples and helpers import by the package's name (pkb_core's imports nothing)."""
    modules = _modules(package)
    if package != CORE:
        modules.pop(package.name)
    graph = {name: {other for other in _imports(path) if other in modules and other != name}
             for name, path in modules.items()}
    assert _cycles(graph) == []


def _package(module: str) -> str | None:
    """The subpackage of pkb_core a module belongs to, or the top-level module itself
    (``evaluation``, ``config``: a layer of its own, so a cycle through one is caught);
    None for the package module (its public names are resolved by string, on first use)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _package_graph() -> dict[str, set[str]]:
    modules = _modules(CORE)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        source = _package(name)
        if source is None:
            continue
        targets = {_package(other) for other in _imports(path) if other in modules}
        graph.setdefault(source, set()).update(t for t in targets if t not in (None, source))
    for targets in list(graph.values()):
        for target in targets:
            graph.setdefault(target, set())
    return graph


def test_no_import_cycles_between_subpackages():
    """The subpackages form layers (imports inside functions count too): a package that imports
    another is never imported by it, directly or through others."""
    assert _cycles(_package_graph()) == []


def test_the_process_boundaries_show_in_the_imports():
    """docs/trust.md's processes in the tree: the candidate's code imports nothing of the judge
    (and the judge nothing of the candidate); what both sides run lives in harness/, which
    imports neither; the launcher's conduct of a job imports neither side's rank; the confinement
    every process applies to itself lies below them all, and the keeper below both sides."""
    graph = _package_graph()
    assert "judge" not in graph["candidate"] and "candidate" not in graph["judge"]
    assert not graph["harness"] & {"judge", "candidate", "conduct", "launch"}
    assert not graph["conduct"] & {"judge", "candidate", "launch"}
    assert not graph["confine"] & {"judge", "candidate", "keeper", "harness", "compile", "launch", "serve"}
    assert not graph["keeper"] & {"judge", "candidate", "harness", "launch"}


def test_the_command_table_names_every_handler_and_nothing_else():
    """One op table (pkb_core/contracts/commands.py) sends and dispatches every command: each
    ``on_<op>`` of the judge's and the candidate's rank is in it for its role, with a request
    class whose ``OP`` is that op, and the table names no handler a rank lacks."""
    from pkb_core.candidate.rank import CandidateRank
    from pkb_core.contracts.commands import CANDIDATE, COMMANDS, JUDGE
    from pkb_core.contracts.messages import Answer, Request
    from pkb_core.judge.rank import JudgeRank

    for role, rank in ((JUDGE, JudgeRank), (CANDIDATE, CandidateRank)):
        handlers = {name.removeprefix("on_") for name in dir(rank) if name.startswith("on_")}
        table = [c.op for c in COMMANDS if c.role == role]
        assert sorted(table) == sorted(handlers), role
        assert len(set(table)) == len(table), role
    for command in COMMANDS:
        assert issubclass(command.request, Request) and issubclass(command.answer, Answer), command
    assert {c.role for c in COMMANDS} == {JUDGE, CANDIDATE}


def test_distributions_import_only_the_public_api():
    private = []
    for folder in ("backends", "problems"):
        for path in (ROOT / folder).rglob("*.py"):
            if "samples" in path.parts or "tests" in path.parts:
                continue  # solutions are users: they may reach pkb_core.symmetric like any solution
            for name in _imports(path):
                if name.startswith("pkb_core.") and name.split(".")[1] not in pkb_core.__all__:
                    private.append(f"{path.relative_to(ROOT)}: {name}")
    assert not private, private


def test_every_public_name_resolves():
    for name in pkb_core.__all__:
        assert getattr(pkb_core, name) is not None, name


def test_core_names_no_backend_but_its_own():
    """Core behaviour never depends on a plugin's name: no string literal in pkb_core is the
    name of a backend that a separate distribution provides ("cuda" is exempt: it is also a
    device type)."""
    plugins = {path.name.removeprefix("pkb_") for path in (ROOT / "backends").glob("*/pkb_*")}
    plugins |= {"nvshmem4py"}
    plugins.discard("cuda")  # also the name of a device type, which core does tell apart
    named = []
    for path in CORE.rglob("*.py"):
        if path.name == "pkb_import.py":
            continue  # PKB's file-name suffixes: another harness's format, read as data
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in plugins:
                named.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not named, named


@pytest.mark.parametrize("shape, module, name", [
    ("Placement", "serve/placement.py", "LocalDevices"), ("Placement", "ray/placement.py", "RayPlacement"),
    ("Lane", "serve/local_lane.py", "LocalLane"), ("Lane", "ray/ray_lane.py", "RayLane"),
    ("BuildPool", "serve/builds.py", "LocalBuilds"), ("BuildPool", "ray/builds.py", "RayBuilds"),
], ids=["LocalDevices", "RayPlacement", "LocalLane", "RayLane", "LocalBuilds", "RayBuilds"])
def test_the_service_implementations_have_its_shapes(shape, module, name):
    """Each placement, lane and build pool the scheduler may hold (this node's, a Ray cluster's)
    has every method of its Protocol in pkb_core/serve/protocols.py, with the same parameters,
    and sets every field it names (read from the source: the Ray modules import Ray)."""
    def classes(path):
        return {node.name: node for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef)}

    def params(func):
        return [a.arg for a in func.args.args + func.args.kwonlyargs]

    protocol, impl = classes(CORE / "serve" / "protocols.py")[shape], classes(CORE / module)[name]
    methods = {node.name: node for node in impl.body if isinstance(node, ast.FunctionDef)}
    fields = {target.attr for node in ast.walk(methods["__init__"]) if isinstance(node, (ast.Assign, ast.AnnAssign))
              for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
              if isinstance(target, ast.Attribute)}
    for member in protocol.body:
        if isinstance(member, ast.FunctionDef):
            assert member.name in methods, f"{name} lacks {member.name}"
            assert params(methods[member.name]) == params(member), f"{name}.{member.name}"
        elif isinstance(member, ast.AnnAssign):
            assert member.target.id in fields, f"{name} sets no {member.target.id}"
