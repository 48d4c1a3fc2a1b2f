"""The hook reference is generated from the specs and must not drift."""
from pathlib import Path

from pkb_core.plugin import hookdocs, hookspecs

DOC = Path(__file__).parents[1] / "docs" / "plugins" / "hooks.md"


def test_every_hook_has_a_docstring():
    for name in hookdocs.hook_names():
        assert (getattr(hookspecs, name).__doc__ or "").strip(), name


def test_committed_reference_matches_the_specs():
    assert DOC.read_text() == hookdocs.render(), "run: python -m pkb_core.plugin.hookdocs > docs/plugins/hooks.md"


def test_every_hook_is_tested_somewhere():
    tests = "".join(p.read_text() for p in Path(__file__).parent.rglob("test_*.py")) + \
        (Path(__file__).parents[1] / "pkb_core" / "testing.py").read_text()
    for name in hookdocs.hook_names():
        assert name in tests, f"no test mentions {name}"
