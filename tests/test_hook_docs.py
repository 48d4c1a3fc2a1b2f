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


def test_every_pkb_type_a_hook_names_is_public_api():
    """The types in the hooks' annotations that pkb defines are importable from ``pkb_core``
    (plugins import only the public API), and each resolves to the class the hook gets."""
    import typing

    import pkb_core

    hints = {}
    namespace = {**vars(pkb_core.plugin.hookspecs), **{name: getattr(pkb_core, name) for name in pkb_core.__all__
                                                         if name != "__version__"}}
    import click
    import torch
    from pathlib import Path

    namespace.update(click=click, torch=torch, Path=Path)
    for name in hookdocs.hook_names():
        hints[name] = typing.get_type_hints(getattr(hookspecs, name), globalns=namespace)
    named = {t for h in hints.values() for hint in h.values() for t in _classes(hint)
             if t.__module__.startswith("pkb_core")}
    assert {t.__name__ for t in named} >= {"WorkerContext", "BuildContext", "Problem", "BackendInfo"}
    for cls in named:
        assert getattr(pkb_core, cls.__name__) is cls, f"{cls.__name__} is not exported by pkb_core"


def _classes(hint):
    import typing

    if isinstance(hint, type):
        yield hint
    for arg in typing.get_args(hint):
        yield from _classes(arg)
