"""Render the hook reference (docs/plugins/hooks.md) from the hookspec docstrings.

``python -m pkb_core.plugin.hookdocs > docs/plugins/hooks.md`` regenerates it; a test
fails when the committed page and the specs drift apart.
"""
from __future__ import annotations

import inspect

from pkb_core.plugin import hookspecs


def hook_names() -> list[str]:
    return [name for name, obj in vars(hookspecs).items() if name.startswith("pkb_") and callable(obj)]


def render() -> str:
    lines = ["# Hook reference", "",
             "Generated from `pkb_core/plugin/hookspecs.py` by `python -m pkb_core.plugin.hookdocs`; do not edit by hand.", "",
             inspect.cleandoc(hookspecs.__doc__), ""]
    for name in hook_names():
        func = getattr(hookspecs, name)
        opts = getattr(func, "pkb_spec", {}) or {}
        marker = " (firstresult)" if opts.get("firstresult") else ""
        lines += [f"## `{name}{inspect.signature(func)}`{marker}", "", inspect.cleandoc(func.__doc__ or ""), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
