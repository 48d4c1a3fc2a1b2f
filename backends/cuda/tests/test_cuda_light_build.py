"""What a CUDA build costs: only the headers a file uses (pkb_cuda.sources), pkb's
precompiled torch/extension.h for main.cpp (pkb_cuda.torch_pch), and the
fallback to load_inline's own files when the lighter build fails.

Real compiles here are small: a torch-free .cu through nvcc (seconds), the
flags torch would give main.cpp. The full torch/extension.h PCH (30 s and
800 MB on a 2-core box) is built only with PKB_CUDA_COMPILE_CHECK=1.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pkb_cuda = pytest.importorskip("pkb_cuda")

from pkb_cuda import build, sources  # noqa: E402
from pkb_cuda.spec import BuildSpec  # noqa: E402

TOOLCHAIN = {"torch": "test"}
KERNEL_ONLY = r"""
__global__ void scale(float* out, const float* x, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.f * x[i];
}
void launch_scale(float* out, const float* x, long long n, cudaStream_t s) {
  scale<<<(n + 255) / 256, 256, 0, s>>>(out, x, n);
}
"""


def spec(cuda, cpp="", functions=(), prelude=True):
    return BuildSpec.make("light", cuda, cpp, functions, prelude=prelude, toolchain_info=TOOLCHAIN)


def test_a_torch_free_cu_gets_no_torch_header_but_the_cuda_ones():
    light = spec(KERNEL_ONLY, "void launch_scale(float*, const float*, long long, cudaStream_t);", ["launch_scale"])
    how = sources.plan(light)
    assert not how.torch_headers and how.main_header and how.pch
    cu = sources.cuda_cu(light, how)
    assert "torch/types.h" not in cu and "#include <cuda.h>" in cu and "namespace pkb" in cu


@pytest.mark.parametrize("mention", ["torch::Tensor", "at::kFloat", "c10::cuda::getCurrentCUDAStream()",
                                     "TORCH_CHECK(x)", "C10_CUDA_KERNEL_LAUNCH_CHECK()",
                                     "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}"])
def test_a_cu_that_names_torch_keeps_load_inlines_header(mention):
    how = sources.plan(spec(KERNEL_ONLY + mention))
    assert how.torch_headers
    assert sources.cuda_cu(spec(KERNEL_ONLY + mention), how).startswith("#include <torch/types.h>\n#include <cuda.h>")


def test_pkb_style_files_bind_in_their_cu_so_main_cpp_is_empty():
    from pkb_cuda.pkb_helpers import compile_cuda_extension  # noqa: F401 - the path PKB files take

    pkb_file = spec("#include <torch/extension.h>\n" + KERNEL_ONLY + "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}",
                    prelude=False)
    how = sources.plan(pkb_file)
    assert not how.main_header and not how.pch
    assert "#include" not in sources.main_cpp(pkb_file, how) and not sources.bindings(pkb_file)


def test_plain_is_what_load_inline_writes():
    s = spec(KERNEL_ONLY, "int f();", ["f"])
    assert sources.main_cpp(s, sources.PLAIN).startswith("#include <torch/extension.h>\n#line 1")
    assert sources.cuda_cu(s, sources.PLAIN).startswith(
        "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n#line 1")


def _fake_builds(monkeypatch, fail_when):
    tried = []

    def fake(spec, build_dir, verbose, how):
        tried.append(how)
        if fail_when(how):
            raise RuntimeError("Error building extension 'x': light.cu(3): error: identifier \"__half\" is undefined")
        return "module"

    monkeypatch.setattr(build, "_load_inline_as", fake)
    monkeypatch.setattr(build, "_takes_no_implicit_headers", lambda: True)
    return tried


def test_a_light_cu_that_fails_is_rebuilt_as_load_inline_would_with_a_notice(monkeypatch, tmp_path, capfd):
    tried = _fake_builds(monkeypatch, fail_when=lambda how: not how.torch_headers)
    assert build._load_inline(spec(KERNEL_ONLY), tmp_path, False) == "module"
    assert [how.plain for how in tried] == [False, True]
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "built only as load_inline writes it" in err[0] and "__half" in err[0]


def test_a_real_error_in_a_torch_cu_is_not_built_twice(monkeypatch, tmp_path):
    tried = _fake_builds(monkeypatch, fail_when=lambda how: True)
    with pytest.raises(RuntimeError):
        build._load_inline(spec(KERNEL_ONLY + "torch::Tensor t;"), tmp_path, False)
    assert len(tried) == 1


def test_plain_build_on_request(monkeypatch, tmp_path):
    tried = _fake_builds(monkeypatch, fail_when=lambda how: False)
    monkeypatch.setenv("PKB_CUDA_PLAIN_BUILD", "1")
    build._load_inline(spec(KERNEL_ONLY), tmp_path, False)
    assert [how.plain for how in tried] == [True]


def test_the_prompt_leads_with_the_fastest_real_cuda_and_still_accepts_pkb_style():
    from pkb_cuda.prompt import backend_prompt

    prompt = backend_prompt()
    text = prompt.instructions
    assert text.index("A. Kernels only, compiled with NVRTC") < text.index("B. When the host side needs C++") \
        < text.index("C. Still accepted")
    assert "torch's C++ headers take 20-80 s per file" in text  # why
    assert "`load_inline` / `compile_cuda_extension`" in text
    assert "nvrtc.kernel(" in prompt.examples[0].solution


def test_main_cpp_flags_are_torchs_own_less_the_module_name():
    from pkb_cuda.torch_pch import main_cpp_flags

    compiler, flags = main_cpp_flags(("-O3",), (), False)  # with_cuda needs a CUDA torch: the CPU wheel here
    assert compiler and "-DTORCH_API_INCLUDE_EXTENSION_H" in flags and "-fPIC" in flags
    assert flags[-1] == "-O3" and any(f.startswith("-std=") for f in flags)
    assert not any("TORCH_EXTENSION_NAME" in f for f in flags)
    assert "-isystem" in flags


needs_nvcc = pytest.mark.skipif(pkb_cuda.find_nvcc() is None, reason="nvcc not installed")


@needs_nvcc
def test_a_torch_free_cu_compiles_without_torch_headers(tmp_path, monkeypatch):
    from pkb_cuda.check import check_spec

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    light = spec(KERNEL_ONLY, "void launch_scale(float*, const float*, long long, cudaStream_t);", ["launch_scale"])
    result = check_spec(light, workdir=tmp_path, bindings=False, ptxas_info=True)
    cu = (Path(result.workdir) / "cuda.cu").read_text()
    assert "torch/types.h" not in cu
    assert [k.kernel for k in result.kernels] == ["scale(float*, float const*, long long)"]


@pytest.mark.skipif(os.environ.get("PKB_CUDA_COMPILE_CHECK", "") in ("", "0"),
                    reason="slow (builds the torch/extension.h PCH): set PKB_CUDA_COMPILE_CHECK=1")
def test_main_cpp_with_the_pch_is_the_same_object_and_loads(tmp_path, monkeypatch):
    """A real load_inline build (host-only: the CPU wheel has no CUDA libraries) with pkb's
    PCH loads and works, and its main.o is byte for byte the one the same compile
    without the PCH makes."""
    import shlex
    import subprocess

    from torch.utils.cpp_extension import load_inline

    from pkb_cuda.torch_pch import pch_cflags

    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    extra = pch_cflags(("-O3",), (), with_cuda=False)
    assert extra[:1] == ["-include"]
    folder = tmp_path / "build"
    folder.mkdir()
    module = load_inline("pkb_pch_same", ["int64_t add(int64_t a, int64_t b) { return a + b; }"], functions=["add"],
                         extra_cflags=["-O3", *extra], build_directory=str(folder))
    assert module.add(2, 3) == 5
    ninja = (folder / "build.ninja").read_text()
    compiler = shlex.split(ninja.split("\ncxx = ", 1)[1].splitlines()[0])
    cflags = shlex.split(ninja.split("\ncflags = ", 1)[1].splitlines()[0])
    assert cflags[-len(extra):] == extra
    with_pch = (folder / "main.o").read_bytes()
    subprocess.run([*compiler, *cflags[:-len(extra)], "-c", str(folder / "main.cpp"), "-o", str(folder / "main.o")],
                   check=True)
    assert (folder / "main.o").read_bytes() == with_pch


@pytest.mark.skipif(__import__("shutil").which("c++") is None, reason="no host compiler")
def test_a_launcher_declared_in_cpp_source_must_match_the_cu(tmp_path):
    """The compile-only check catches a launcher whose declaration in cpp_source and
    definition in the .cu differ (the link would fail only on the GPU machine)."""
    import subprocess

    from pkb_core.errors import CompileError
    from pkb_cuda.check import check_bindings

    def obj(name, text):
        (tmp_path / f"{name}.cpp").write_text(text)
        subprocess.run(["c++", "-c", str(tmp_path / f"{name}.cpp"), "-o", str(tmp_path / f"{name}.o")], check=True)
        return str(tmp_path / f"{name}.o")

    main = obj("main", "long scale_launch(long n, void* out);\nlong run(long n) { return scale_launch(n, nullptr); }\n")
    s = spec(KERNEL_ONLY, "", ["run"])
    check_bindings(s, main, obj("good", "long scale_launch(long n, void*) { return n; }\n"))
    with pytest.raises(CompileError, match=r"scale_launch\(long, void\*\) is declared in cpp_source"):
        check_bindings(s, main, obj("bad", "long scale_launch(int n, void*) { return n; }\n"))


# ---------------------------------------------------------------------------
# bind="ops": TORCH_LIBRARY instead of pybind11
# ---------------------------------------------------------------------------

OPS_CPP = """
#include <ATen/ops/empty_like.h>
int64_t launch_scale(float* out, const float* x, int64_t n);
at::Tensor scale(at::Tensor x, int64_t n) { auto out = at::empty_like(x); return out; }
"""


def test_ops_binding_writes_torch_library_and_no_pybind():
    ops = BuildSpec.make("light", KERNEL_ONLY, OPS_CPP, ["scale"], bind="ops", toolchain_info=TOOLCHAIN)
    how = sources.plan(ops)
    assert how.main_header and not how.pch  # torch/library.h needs no PCH
    assert sources.main_cpp(ops, how).startswith("#include <torch/library.h>\n")
    assert sources.bindings(ops) == [f"TORCH_LIBRARY({ops.module_name}, m) {{", '  m.def("scale", &scale);', "}"]
    pybind = BuildSpec.make("light", KERNEL_ONLY, OPS_CPP, ["scale"], toolchain_info=TOOLCHAIN)
    assert ops.key != pybind.key
    with pytest.raises(ValueError, match="bind="):
        BuildSpec.make("light", KERNEL_ONLY, bind="ctypes", toolchain_info=TOOLCHAIN)


def test_ops_extension_loads_and_calls_through_the_dispatcher(tmp_path):
    """A real TORCH_LIBRARY build as pkb writes it (host-only here: the CPU wheel has no
    CUDA libraries), loaded by pkb_cuda.ops and called with a tensor and Python ints."""
    import torch
    from torch.utils.cpp_extension import load_inline

    from pkb_cuda import ops

    cpp = ("#include <ATen/ops/add.h>\n#include <ATen/ops/mul.h>\n"
           "at::Tensor shift(at::Tensor x, int64_t by, double scale) { return at::mul(at::add(x, by), scale); }\n")
    s = BuildSpec.make("shift", "", cpp, ["shift"], bind="ops", toolchain_info=TOOLCHAIN)
    main = "\n".join([sources.main_cpp(s, sources.plan(s)), *sources.bindings(s)])
    path = load_inline(s.module_name, [main], build_directory=str(tmp_path), is_python_module=False,
                       no_implicit_headers=True)
    ext = ops.load(s.module_name, s.functions, path)
    assert torch.equal(ext.shift(torch.arange(3.0), 2, 0.5), torch.tensor([1.0, 1.5, 2.0]))
    assert ext.shift is getattr(torch.ops, s.module_name).shift
