"""pkb_core.plugin.preload: libraries a backend's workers load before torch."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import attrs

from pkb_core.plugin import preload
from pkb_core.plugin.backend import BackendInfo


def _a_loaded_library() -> Path:
    """A real shared library of this process (libc's), to copy and load."""
    import ctypes
    import ctypes.util  # noqa: F401 - maps libc in where nothing has yet

    ctypes.CDLL(None)
    found = [p for p in preload.mapped_paths("libc.so") if Path(p).is_file()] or \
            [p for p in preload.mapped_paths("libm.so") if Path(p).is_file()]
    assert found, "no libc/libm mapped to copy"
    return Path(found[0])


def test_backends_preload_nothing_by_default():
    assert BackendInfo(name="x").preload() == ()
    assert preload.preload_environment([]) == {}
    assert preload.preload_environment([Path("/a/x.so"), "/b/y.so"]) == {preload.PRELOAD_ENV: f"/a/x.so{os.pathsep}/b/y.so"}


def test_failed_preloads_are_kept_not_raised(tmp_path):
    missing = str(tmp_path / "libnothing.so.1")
    assert preload.load_preloads({preload.PRELOAD_ENV: missing}) == []
    assert missing in preload.preload_errors()
    assert "\n" not in preload.preload_errors()[missing]


def test_wheel_root_is_found_only_in_nvidia_wheel_layout():
    assert preload.wheel_root("/x/site/nvidia/nvshmem/lib/libnvshmem_host.so.3") == "/x/site"
    assert preload.wheel_root("/opt/nvshmem/lib/libnvshmem_host.so.3") is None
    assert preload.wheel_root("libm.so.6") is None


def test_mapped_paths_reads_the_maps_file(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r--p 00000000 08:01 12 /a/nvidia/nvshmem/lib/libnvshmem_host.so.3\n"
                    "7f01-7f02 r-xp 00001000 08:01 12 /a/nvidia/nvshmem/lib/libnvshmem_host.so.3\n"
                    "7f02-7f03 rw-p 00000000 00:00 0 \n"
                    "7f03-7f04 r--p 00000000 08:01 13 /t/torch/lib/libtorch_nvshmem.so\n")
    assert preload.mapped_paths("libnvshmem_host", str(maps)) == ["/a/nvidia/nvshmem/lib/libnvshmem_host.so.3"]
    assert preload.mapped_paths("nvshmem", str(tmp_path / "absent")) == []


def test_a_worker_loads_its_preloads_and_puts_wheel_roots_first_only_while_torch_imports(tmp_path):
    # A wheel-layout copy of a real library: the worker module must map it
    # before torch, and leave sys.path as it found it.
    lib = tmp_path / "root" / "nvidia" / "fake" / "lib" / "libpkbfake.so.1"
    lib.parent.mkdir(parents=True)
    shutil.copy(_a_loaded_library(), lib)
    code = ("import sys; before = list(sys.path); from pkb_core.plugin.preload import import_torch_after_preloads; "
            "import_torch_after_preloads(); "
            "from pkb_core.plugin.preload import mapped_paths, preload_errors; "
            "print(mapped_paths('libpkbfake'), preload_errors(), sys.path == before)")
    env = dict(os.environ, **preload.preload_environment([lib]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{[str(lib)]} {{}} True"


def test_the_launcher_hands_preloads_to_the_candidates_processes_only(tmp_path):
    from types import SimpleNamespace

    from pkb_core.contracts.batch import LaunchSettings
    from pkb_core.launch import launcher as launch

    settings = LaunchSettings(nproc=1, device="cpu", backend="x", run_dir=tmp_path, job_timeout=5,
                              preload=("/opt/lib/liba.so.1",))
    store = SimpleNamespace(address="127.0.0.1:1")

    def env(settings, role):
        ours = launch.Launch(settings)
        return ours.node_env(role, ours._forwarded(store))[0]

    assert env(settings, "candidate")[preload.PRELOAD_ENV] == "/opt/lib/liba.so.1"
    # The judge never loads a backend's libraries: it runs references only.
    assert preload.PRELOAD_ENV not in env(settings, "judge")
    settings = attrs.evolve(settings, preload=())
    assert preload.PRELOAD_ENV not in env(settings, "candidate")


def test_torch_imports_with_the_wheel_roots_first(tmp_path):
    # torch loads NVIDIA wheel libraries from the first sys.path entry that
    # has them: while it imports, the preloaded library's root must be first.
    lib = tmp_path / "root" / "nvidia" / "fake" / "lib" / "libpkbfake.so.1"
    lib.parent.mkdir(parents=True)
    shutil.copy(_a_loaded_library(), lib)
    fake_torch = tmp_path / "fake" / "torch"
    fake_torch.mkdir(parents=True)
    (fake_torch / "__init__.py").write_text("import sys\nFIRST = sys.path[0]\n")
    code = (f"import sys; sys.path.insert(0, {str(tmp_path / 'fake')!r}); "
            "from pkb_core.plugin.preload import import_torch_after_preloads as f; loaded = f(); "
            f"import torch; print(torch.FIRST, loaded, {str(tmp_path / 'root')!r} in sys.path)")
    env = dict(os.environ, **preload.preload_environment([lib]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(tmp_path / "root"), f"['{lib}']", "False"]
