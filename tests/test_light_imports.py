"""The CLI module, the hookspecs, problem packs and the service's client must not import torch."""
import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["pkb_core.cli.main", "pkb_core.plugin.hookspecs", "pkb_problems", "pkb_core.problem.registry",
                                    "pkb_core.client"])
def test_module_does_not_import_torch(module):
    code = (f"import sys, {module}\n"
            "heavy = [m for m in ('torch', 'triton', 'cupy', 'nvshmem') if m in sys.modules]\n"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_listing_problems_does_not_import_torch():
    code = ("import sys\nfrom pkb_core.plugin.manager import get_plugin_manager\n"
            "from pkb_core.problem.registry import build_registry\n"
            "assert len(build_registry(get_plugin_manager())) >= 8\n"
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_service_without_ray_never_imports_ray(tmp_path):
    """Ray is an optional extra: `pkb serve` without --ray (its command, the service, the scheduler
    placing lanes on this node) imports nothing of it."""
    code = ("import sys\nfrom pathlib import Path\nimport pkb_core.cli.main, pkb_core.cli.serve, pkb_core.serve.app\n"
            "from pkb_core.serve.service import Service, ServiceConfig\n"
            "from pkb_core.plugin.manager import get_plugin_manager\n"
            f"service = Service(ServiceConfig(data_dir=Path({str(tmp_path)!r}), device='cpu', devices=2), "
            "get_plugin_manager())\n"
            "service.stop()\n"
            "assert type(service.scheduler.placement).__name__ == 'LocalDevices'\n"
            "assert 'ray' not in sys.modules, 'ray was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("args, status, line", [
    (["--timing-mode", "foo"], 4,
     "Error: Invalid value for '--timing-mode': unknown timing mode 'foo' (choose from window, latency, back-to-back, graph)"),
    (["--solution", "missing.py"], 1, "Error: solution file missing.py does not exist"),
    (["--solutions", "missing"], 1, "Error: solutions directory missing does not exist"),
    (["--backend", "nosuch"], 1, "Error: unknown backend 'nosuch'"),
])
def test_run_refuses_bad_options_before_importing_torch(tmp_path, args, status, line):
    """A typo is refused at once (torch alone costs seconds to import, 10 s and more on a busy machine):
    `pkb run` checks what it can without torch first. `-X importtime` lists every module the command
    imported; PKB_DEVICE is unset so that choosing the device would have to import torch."""
    env = {name: value for name, value in os.environ.items() if name != "PKB_DEVICE"}
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "pkb_core", "run", *args],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    said = [text for text in result.stderr.splitlines() if not text.startswith("import time:")]
    imported = {text.rsplit("|", 1)[1].strip() for text in result.stderr.splitlines()
                if text.startswith("import time:")}
    assert result.returncode == status, result.stderr
    assert len(said) == 1 and said[0].startswith(line), said
    assert "pkb_core.cli.main" in imported  # the listing works
    assert "torch" not in imported
