"""Fixtures of the core's tests (the root conftest.py loads pkb's pytest plugin)."""
import os
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures():
    return FIXTURES


@pytest.fixture
def clock(tmp_path):
    """A judge's CPU timekeeper (a real process, the host engine) with its files in ``tmp_path``."""
    import torch

    from pkb_core.judge.clock import Timekeeper

    made = Timekeeper(torch.device("cpu"), str(tmp_path), 0, "host")
    yield made
    made.close()


@pytest.fixture
def fake_dist(tmp_path, monkeypatch):
    """Install a throwaway distribution with entry points, visible to this
    process and to the worker processes that ``pkb run`` starts."""

    def install(name, entry_points: dict, modules: dict):
        site = tmp_path / f"site-{name}"
        site.mkdir()
        for module, source in modules.items():
            (site / f"{module}.py").write_text(source)
        info = site / f"{name}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
        lines = []
        for group, items in entry_points.items():
            lines.append(f"[{group}]")
            lines += [f"{key} = {value}" for key, value in items.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
        return site

    yield install
    for name in [m for m in sys.modules if m.startswith("pkbtest_")]:
        del sys.modules[name]
