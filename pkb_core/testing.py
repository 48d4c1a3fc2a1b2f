"""Opt-in pytest helpers for people who write pkb backends and problem packs.

Enable in a ``conftest.py``::

    pytest_plugins = ["pkb_core.testing"]

Fixtures:

``pkb_pm``
    A fresh plugin manager (entry points loaded anew) for each test.
``pkb_invoke``
    ``pkb_invoke(*args)`` runs the ``pkb`` command in-process through click's
    CliRunner with a fresh manager and returns the result (``exit_code``,
    ``output``, ``stdout``, ``stderr``).

And :class:`BackendContract`, a suite every backend runs against itself::

    from pkb_core.testing import BackendContract

    class TestMyBackend(BackendContract):
        backend = "mybackend"

It checks that the backend is installed through the ``pkb.backends`` entry
point, describes itself, reports its availability in one line, and, where it
can run in CPU mode, that its sample solutions pass at world sizes 2 and 3
(on a machine without a GPU: gloo, the shared-memory heap, the Triton
interpreter, size ``tiny``). A backend that needs a GPU must instead refuse
``pkb run`` in CPU mode with one line naming what is missing.
"""
from __future__ import annotations

import json

import pytest


@pytest.fixture
def pkb_pm():
    from pkb_core.plugin.manager import get_plugin_manager

    return get_plugin_manager()


@pytest.fixture
def pkb_invoke(tmp_path):
    from click.testing import CliRunner

    from pkb_core.cli.main import context_settings, prepare
    from pkb_core.config import load_config
    from pkb_core.plugin.manager import get_plugin_manager

    def invoke(*args, pm=None):
        pm = pm or get_plugin_manager()
        config = load_config()
        cli = prepare(pm, config)
        return CliRunner().invoke(cli, [str(a) for a in args], obj=pm, catch_exceptions=False,
                                  **context_settings(config, cli))

    return invoke


class BackendContract:
    """Subclass and set ``backend`` (and ``sample_problems`` to narrow the run)."""

    backend: str = ""
    #: ``--problem`` value for the sample run (default: every sample).
    sample_problems: str | None = None
    world_sizes = (2, 3)

    def _info(self, pkb_pm):
        from pkb_core.plugin.manager import backend_infos

        infos = backend_infos(pkb_pm)
        assert self.backend in infos, f"backend {self.backend!r} not installed (have {sorted(infos)})"
        return infos[self.backend]

    def test_registered_through_entry_point(self, pkb_pm):
        keys = [r.key for r in pkb_pm.records if not r.error]
        assert f"pkb.backends:{self.backend}" in keys

    def test_describes_itself(self, pkb_pm):
        info = self._info(pkb_pm)
        assert info.name == self.backend
        assert info.devices and set(info.devices) <= {"cuda", "cpu"}
        for device in ("cuda", "cpu"):
            reason = info.unavailable_reason(device)
            assert reason is None or (isinstance(reason, str) and "\n" not in reason and reason)

    def test_listed_by_pkb_backends(self, pkb_invoke):
        result = pkb_invoke("backends", "--json", "--device", "cpu")
        assert result.exit_code == 0, result.output
        rows = {row["name"]: row for row in json.loads(result.stdout)["backends"]}
        assert self.backend in rows
        assert rows[self.backend]["available"] == (rows[self.backend]["reason"] == "")

    def test_cpu_mode(self, pkb_pm, pkb_invoke, tmp_path):
        info = self._info(pkb_pm)
        reason = info.unavailable_reason("cpu")
        args = ["run", "--backend", self.backend, "--device", "cpu", "--json", "--trials", "2"]
        if self.sample_problems:
            args += ["--problem", self.sample_problems]
        if reason:
            result = pkb_invoke(*args, "--out", tmp_path / "refused")
            assert result.exit_code == 1
            assert result.output.strip().startswith("Error: ") and len(result.output.strip().splitlines()) == 1
            return
        for world_size in self.world_sizes:
            result = pkb_invoke(*args, "--nproc", world_size, "--out", tmp_path / f"w{world_size}")
            records = json.loads(result.stdout)["results"]
            assert records, result.output
            bad = [(r["problem"], r["verdict"], r["reason"]) for r in records if r["verdict"] != "pass"]
            assert not bad, bad
