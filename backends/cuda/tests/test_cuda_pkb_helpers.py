"""PKB solution files on the cuda backend, without a shim (issue 21, item 4).

Every PKB CUDA file does ``from utils.cuda_helpers import compile_cuda_extension``.
The backend serves that name to solution code only (pkb_core.candidate.solution_modules),
as pkb's own helper (pkb_cuda.pkb_helpers) that builds through pkb_cuda.compile:
its cache, its compile errors, and the compile phase's ahead-of-time builds.
There is no nvcc here: torch's ``load_inline`` is replaced by a recorder, so these
tests check loading, naming and the helper's arguments, not a real build.
"""
from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

pytest.importorskip("pkb_cuda")

from pkb_core.candidate import solution_modules  # noqa: E402
from pkb_core import BuildContext  # noqa: E402
from pkb_core.errors import CompileError, SolutionUnsupported  # noqa: E402
from pkb_core.candidate.solution import load_module  # noqa: E402

import pkb_cuda  # noqa: E402
from pkb_cuda import build, pkb_helpers, plugin  # noqa: E402

# A PKB-style CUDA solution (written for these tests): one source with its own
# PYBIND11_MODULE, built at import through PKB's helper, with flags, include
# paths and linker flags.
EAGER = '''
import torch
from utils.cuda_helpers import compile_cuda_extension

CUDA_SRC = r"""
#include <torch/extension.h>
__global__ void copy_kernel(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
torch::Tensor copy(torch::Tensor x) { auto y = torch::empty_like(x); return y; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("copy", &copy, "copy"); }
"""

_ext = compile_cuda_extension(
    "pkbstyle_copy_ext",
    CUDA_SRC,
    extra_cuda_cflags=["--use_fast_math", "-lineinfo"],
    extra_include_paths=["{include}"],
    extra_ldflags=["-lcuda"],
)


def solution(tensor):
    return _ext.copy(tensor)
'''

# The lazy pattern PKB's models favour: the helper imported and called inside
# the function that builds on the first call, under an alias.
LAZY = '''
import torch

CUDA_SRC = r"""
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x) { return x * 2; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice); }
"""
_ext = None


def _get_ext():
    global _ext
    if _ext is None:
        from utils.cuda_helpers import compile_cuda_extension as build_ext
        _ext = build_ext("pkbstyle_lazy_ext", CUDA_SRC, extra_cuda_cflags=["-DPKB_LAZY=1"])
    return _ext


def solution(tensor):
    return _get_ext().twice(tensor)
'''

PK_RUNTIME = '''
import torch
from utils.cuda_helpers import compile_cuda_extension
from utils.parallelkittens_runtime import get_or_create_parallel_tensor

CUDA_SRC = "BIND_TK_PARALLEL_TENSOR(m); // TKParallelTensor"


def solution(tensor):
    return tensor
'''

PK_RUNTIME_LATE = '''
def solution(tensor):
    import utils.parallelkittens_runtime as runtime
    return runtime.create_parallel_tensor(None, tensor.shape)
'''


@pytest.fixture
def served():
    """This process as a cuda worker sees it: the backend's declarations made."""
    solution_modules.withdraw()
    solution_modules.provide(pkb_helpers.SOLUTION_MODULES, pkb_helpers.UNSUPPORTED_MODULES)
    yield
    solution_modules.withdraw()


@pytest.fixture
def torch_load_inline(monkeypatch, tmp_path):
    """torch's load_inline, recorded (no nvcc here); pkb's cache in tmp_path."""
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    calls = []

    def record(**kwargs):
        calls.append(kwargs)
        return types.SimpleNamespace(name=kwargs["name"], copy=lambda x: ("copied", x), twice=lambda x: x * 2)

    import torch.utils.cpp_extension as cpp_extension

    monkeypatch.setattr(cpp_extension, "load_inline", record)
    monkeypatch.setattr(build, "_LOADED", {})
    return calls


def _write(tmp_path, name, source):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def test_cuda_and_parallelkittens_backends_declare_pkbs_modules(pkb_pm):
    from pkb_core.plugin.manager import get_backend_info

    for backend in ("cuda", "parallelkittens"):
        info = get_backend_info(pkb_pm, backend)
        assert info.solution_modules == {"utils.cuda_helpers": "pkb_cuda.pkb_helpers"}
        assert set(info.unsupported_modules) == {"utils.parallelkittens_runtime"}


def test_helper_has_pkbs_signature():
    parameters = inspect.signature(pkb_helpers.compile_cuda_extension).parameters
    assert [(p.name, p.default) for p in parameters.values()] == [
        ("name", inspect.Parameter.empty), ("cuda_src", inspect.Parameter.empty),
        ("extra_cuda_cflags", None), ("extra_include_paths", None), ("extra_ldflags", None)]


def test_pkb_style_file_loads_and_builds_through_pkbs_cache(served, torch_load_inline, tmp_path):
    include = tmp_path / "include"
    include.mkdir()
    path = _write(tmp_path, "2_allgather_cuda.py", EAGER.replace("{include}", str(include)))
    module = load_module(path)
    assert module.compile_cuda_extension is pkb_helpers.compile_cuda_extension
    (call,) = torch_load_inline
    # PKB's load_inline call: one CUDA source with its own bindings, -O3 first.
    assert call["functions"] is None
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in call["cuda_sources"][0]
    assert pkb_cuda.BARRIER_CUH not in call["cuda_sources"][0]  # no pkb prelude
    assert "torch::Tensor copy" not in call["cpp_sources"][0]  # no declarations, no generated bindings
    assert call["extra_cuda_cflags"] == ["-O3", "--use_fast_math", "-lineinfo"]
    assert call["extra_include_paths"] == [str(include)]
    assert call["extra_ldflags"] == ["-lcuda"]
    assert call["extra_cflags"] == [] and call["with_cuda"] is True
    # pkb's cache: keyed by content, module named after the file's name plus the key.
    key = build.BuildSpec.make(
        "pkbstyle_copy_ext", module.CUDA_SRC, "", (), extra_cuda_cflags=["-O3", "--use_fast_math", "-lineinfo"],
        extra_cflags=[], extra_ldflags=["-lcuda"], extra_include_paths=[str(include)], prelude=False).key
    assert call["build_directory"] == str(tmp_path / "cache" / "cuda" / key)
    assert call["name"] == f"pkb_pkbstyle_copy_ext_{key[:12]}"
    assert (tmp_path / "cache" / "cuda" / key / "pkb-ok.json").is_file()
    assert module.solution("x") == ("copied", "x")


def test_helper_failures_are_compile_errors(served, monkeypatch, tmp_path):
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    monkeypatch.setattr(build, "_LOADED", {})
    monkeypatch.setattr(build, "_load_inline", lambda spec, d, v: (_ for _ in ()).throw(
        RuntimeError("Error building extension 'x': kernel.cu(3): error: identifier \"nope\" is undefined")))
    with pytest.raises(CompileError, match='identifier "nope" is undefined'):
        load_module(_write(tmp_path, "1_allreduce_cuda.py", EAGER.replace("{include}", str(tmp_path))))


def test_lazy_build_is_made_ahead_of_time_and_loaded_in_the_job(served, torch_load_inline, monkeypatch, tmp_path):
    path = _write(tmp_path, "1_allreduce_cuda.py", LAZY)
    # The compile phase: the builder process imports the file and makes the lazy build.
    program = plugin.pkb_backend_compile(state=BuildContext(device="cuda"), problem=None, solution=str(path))
    assert callable(program)
    (call,) = torch_load_inline
    assert call["extra_cuda_cflags"] == ["-O3", "-DPKB_LAZY=1"] and call["name"].startswith("pkb_pkbstyle_lazy_ext_")
    # The job: a fresh process (no memo) loads the finished build and builds nothing.
    monkeypatch.setattr(build, "_LOADED", {})
    loaded = []
    monkeypatch.setattr(build, "import_extension",
                        lambda name, so: loaded.append(name) or types.SimpleNamespace(twice=lambda x: x * 2))
    (Path(call["build_directory"]) / f"{call['name']}.so").write_text("")  # what nvcc would have left
    job_program = plugin.pkb_backend_compile(state=object(), problem=None, solution=str(path))
    assert job_program(21) == 42
    assert loaded == [call["name"]] and len(torch_load_inline) == 1


def test_a_build_call_the_helper_rejects_names_the_files_own_line(served, torch_load_inline, tmp_path):
    """Issue 43: Gemini 24's ``compile_cuda_extension() got an unexpected keyword argument
    'extra_compile_args'`` is the file's own error; the compile phase made the call for it, and
    the message named pkb's ahead.py instead of the file's line."""
    bad = LAZY.replace('extra_cuda_cflags=["-DPKB_LAZY=1"]', 'extra_compile_args=["-O3"]')
    path = _write(tmp_path, "24_load_balancing_loss_fn_cuda.py", bad)
    line = 1 + next(i for i, text in enumerate(bad.splitlines()) if "extra_compile_args" in text)
    with pytest.raises(CompileError) as failed:
        plugin.pkb_backend_compile(state=BuildContext(device="cuda"), problem=None, solution=str(path))
    assert str(failed.value) == (f"{path}: building its CUDA extension raised TypeError: compile_cuda_extension() "
                                 f"got an unexpected keyword argument 'extra_compile_args' "
                                 f"(24_load_balancing_loss_fn_cuda.py:{line})")
    assert not torch_load_inline


def test_import_inside_solution_calls_is_served(served, tmp_path):
    path = _write(tmp_path, "3_broadcast_cuda.py", '''
        def solution(tensor, src):
            from utils.cuda_helpers import compile_cuda_extension
            import utils.cuda_helpers
            return compile_cuda_extension, utils.cuda_helpers.compile_cuda_extension
    ''')
    helper, again = load_module(path).solution(None, 0)
    assert helper is again is pkb_helpers.compile_cuda_extension


def test_utils_is_not_importable_outside_solutions(served, tmp_path):
    load_module(_write(tmp_path, "2_allgather_cuda.py", "import utils.cuda_helpers\ndef solution(t):\n    return t\n"))
    assert not [name for name in sys.modules if name == "utils" or name.startswith("utils.")]
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("utils.cuda_helpers")
    with pytest.raises(ModuleNotFoundError):
        import utils  # noqa: F401
    assert importlib.util.find_spec("utils") is None


def test_utils_is_not_installed_in_site_packages():
    code = ("import importlib.util, sys\n"
            "import pkb_cuda, pkb_cuda.plugin, pkb_core.candidate.solution\n"
            "assert importlib.util.find_spec('utils') is None, importlib.util.find_spec('utils')\n"
            "try:\n    import utils.cuda_helpers\nexcept ModuleNotFoundError:\n    pass\n"
            "else:\n    sys.exit('utils.cuda_helpers importable outside a solution')\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_pkb_harness_modules_other_than_the_helper_are_named_in_the_error(served, tmp_path):
    path = _write(tmp_path, "1_allreduce_triton.py", "from utils.triton_utils import get_tid\ndef solution(t):\n"
                                                     "    return t\n")
    with pytest.raises(CompileError, match=r"No module named 'utils.triton_utils': pkb serves utils.cuda_helpers"):
        load_module(path)


@pytest.mark.parametrize("source", [PK_RUNTIME, PK_RUNTIME_LATE])
def test_parallelkittens_runtime_is_unsupported_with_one_line(served, tmp_path, source):
    path = _write(tmp_path, "2_allgather_parallelkittens.py", source)
    for compile_hook in (lambda: load_module(path),
                         lambda: plugin.pkb_backend_compile(state=BuildContext(device="cuda"), problem=None,
                                                            solution=str(path))):
        with pytest.raises(SolutionUnsupported) as refused:
            compile_hook()
        message = str(refused.value)
        assert "\n" not in message
        assert message.startswith("imports utils.parallelkittens_runtime: PKB's ParallelKittens runtime")
        assert "multicast" in message


def test_parallelkittens_files_are_unsupported_before_the_multicast_rule(tmp_path):
    """The core's builder (a process of its own, locked down) answers `unsupported` for PKB's
    multicast runtime, not the multicast rule's compile error the same file also breaks."""
    import json

    from pkb_core.plugin.manager import get_plugin_manager
    from pkb_core.problem.registry import build_registry

    path = _write(tmp_path, "2_allgather_parallelkittens.py", PK_RUNTIME)  # also names TKParallelTensor
    problem = build_registry(get_plugin_manager()).get("2")
    scratch = tmp_path / "scratch"  # the compile phase makes a build's temporary folder; here the test does
    scratch.mkdir(mode=0o700)
    request = {"backend": "parallelkittens", "problem_path": str(problem.path), "solution": str(path),
               "device": "cuda", "run_dir": str(tmp_path), "scratch": str(scratch)}
    code = ("import json, sys\nfrom pkb_core.compile.builder import build\n"
            "from pkb_core.contracts.build import BuildRequest\n"
            f"print(json.dumps(build(BuildRequest.from_json(json.loads({json.dumps(json.dumps(request))}))).to_json()))")
    answer = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                       text=True).stdout.strip().splitlines()[-1])
    assert answer["ok"] is False and answer["verdict"] == "unsupported", answer
    assert "imports utils.parallelkittens_runtime" in answer["message"]


def test_worker_plugin_manager_declares_the_backends_modules():
    code = ("from pkb_core.candidate.defaults import CoreDefaults\n"
            "from pkb_core.candidate.plugin_manager import worker_plugin_manager\n"
            "from pkb_core.candidate import solution_modules\n"
            "worker_plugin_manager('cuda', CoreDefaults())\n"
            "assert solution_modules.provided() == {'utils.cuda_helpers': 'pkb_cuda.pkb_helpers'}\n")
    subprocess.run([sys.executable, "-c", code], check=True)
