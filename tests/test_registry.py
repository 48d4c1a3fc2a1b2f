"""The registry: problem files read with ast, looked up by id, name, category, range."""
from pathlib import Path

import pytest

from pkb_core.errors import PkbError
from pkb_core.plugin.manager import get_plugin_manager
from pkb_core.problem.contract import ProblemFileError, read_spec
from pkb_core.problem.registry import Registry, build_registry

GOOD = '''"""A test problem.

Second line of the spec."""
ID = {id}
NAME = "{name}"
CATEGORY = "other"
ORIGIN = "test"
WORLD_SIZE = "any"
SIZES = {{"tiny": {{"n": 4}}, "default": {{"n": 8}}, "large": {{"n": 16}}}}
def inputs(ctx): return ()
def reference(): return 0
def traffic(params, world_size, itemsize): return {{}}
'''


@pytest.fixture(scope="module")
def registry():
    return build_registry(get_plugin_manager())


def test_lookup_by_id_name_and_stem(registry):
    assert registry.get("1").name == "allreduce"
    assert registry.get("allreduce").id == 1
    assert registry.get("1_allreduce").id == 1


def _builtin(specs):
    """The specs of the built-in pack (other packs may be installed, and add problems anywhere)."""
    import pkb_problems

    root = Path(pkb_problems.__file__).parent
    return [s.id for s in specs if s.path.is_relative_to(root)]


def test_select_category_alias_range_and_all(registry):
    assert _builtin(registry.select("collective")) == list(range(1, 9))
    assert _builtin(registry.select("coll")) == list(range(1, 9))
    assert {s.category for s in registry.select("collective")} == {"collective"}
    assert [s.id for s in registry.select("3-5,1,allreduce")] == [1, 3, 4, 5]
    assert len(registry.select("all")) == len(registry)


def test_unknown_problem_is_one_line(registry):
    with pytest.raises(PkbError, match="unknown problem 'nope'"):
        registry.select("nope")


def test_spec_fields_come_from_literals(registry):
    spec = registry.get("7")
    assert spec.category == "collective"
    assert set(spec.sizes) == {"tiny", "default", "large"}
    assert spec.summary.startswith("Reduce-scatter")


def test_duplicate_ids_are_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "900_dup.py").write_text(GOOD.format(id=900, name="dup"))
    (tmp_path / "b" / "900_dup.py").write_text(GOOD.format(id=900, name="dup"))
    registry = Registry()
    with pytest.raises(PkbError, match="defined twice"):
        registry.register(tmp_path)


@pytest.mark.parametrize("mutation, message", [
    (lambda s: s.replace('CATEGORY = "other"', 'CATEGORY = "weird"'), "unknown CATEGORY"),
    (lambda s: s.replace("def traffic", "def traffik"), "missing traffic()"),
    (lambda s: s.replace('"large": {"n": 16}', '"huge": {"n": 16}'), "SIZES lacks large"),
    (lambda s: s.replace('NAME = "ok"', 'NAME = "other"'), "do not match the file name"),
    (lambda s: s + "def broken(:\n", "syntax error"),
])
def test_contract_violations_are_named(tmp_path, mutation, message):
    path = tmp_path / "901_ok.py"
    path.write_text(mutation(GOOD.format(id=901, name="ok")))
    with pytest.raises(ProblemFileError, match=message):
        read_spec(path)


def test_a_broken_file_is_skipped_not_fatal(tmp_path):
    (tmp_path / "902_good.py").write_text(GOOD.format(id=902, name="good"))
    (tmp_path / "903_bad.py").write_text("ID = 903\n")
    registry = Registry()
    registry.register(tmp_path)
    assert [s.id for s in registry] == [902]
    assert "903_bad.py" in registry.errors[0]
