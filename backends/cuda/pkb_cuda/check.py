"""Compile-only checks: what load_inline would compile, without a GPU.

:func:`check_spec` writes the same ``cuda.cu`` and ``main.cpp`` that pkb has
``load_inline`` compile (:mod:`pkb_cuda.sources`: only the headers they use;
a ``.cu`` that fails without torch's header is tried again with it, as the
build does), compiles them to objects with nvcc and the host
compiler using torch's flags (no link step: that needs ``-lcuda`` and a CUDA
build of torch), then checks that every bound function is defined by the
CUDA object with the signature the bindings call. Used through
:func:`pkb_cuda.compile_only` by ``backends/cuda/tools/compile_check.py``.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pkb_core import CompileError

from pkb_cuda import toolchain
from pkb_cuda.spec import BuildSpec, trim_compiler_output

# torch.utils.cpp_extension.COMMON_NVCC_FLAGS (copied so a torch without it still works).
_TORCH_NVCC_FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                     "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                     "--expt-relaxed-constexpr"]
#: C++ standard used when the flags name none (torch 2.11, on the GPU machine, uses c++17).
DEFAULT_STD = os.environ.get("PKB_CUDA_CHECK_STD", "c++17")


@dataclass
class KernelInfo:
    """ptxas's resource line for one kernel."""

    kernel: str
    registers: int
    spill_stores: int = 0
    spill_loads: int = 0


@dataclass
class CheckResult:
    """A successful compile-only check of one :func:`pkb_cuda.compile` call."""

    name: str
    module: str
    seconds: float
    workdir: str
    kernels: list = field(default_factory=list)


def _run(cmd, cwd) -> tuple[int, str]:
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.returncode, proc.stdout


def _shim_dir(work: Path) -> Path | None:
    """A CPU build of torch ships c10/cuda headers without the generated
    ``c10/cuda/impl/cuda_cmake_macros.h``; supply it so they compile."""
    from torch.utils.cpp_extension import include_paths

    name = Path("c10") / "cuda" / "impl" / "cuda_cmake_macros.h"
    if any((Path(p) / name).is_file() for p in include_paths()):
        return None
    shim = work / "shim"
    (shim / name).parent.mkdir(parents=True, exist_ok=True)
    (shim / name).write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    return shim


def _common_flags(spec: BuildSpec, cuda_home: Path, work: Path) -> list[str]:
    from torch.utils.cpp_extension import include_paths

    flags = [f"-DTORCH_EXTENSION_NAME={spec.module_name}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    flags += [f"-I{p}" for p in spec.extra_include_paths]
    system = list(include_paths()) + [str(cuda_home / "include")]
    shim = _shim_dir(work)
    if shim is not None:
        system.append(str(shim))
    python_include = sysconfig.get_path("include", scheme="posix_prefix")
    if python_include:
        system.append(python_include)
    for path in system:
        flags += ["-isystem", path]
    return flags


def nvcc_command(spec: BuildSpec, source: str, obj: str, cuda_home: Path, work: Path, ptxas_info: bool) -> list[str]:
    """The nvcc command line load_inline's ninja file would run for ``cuda.cu``."""
    extra = list(spec.extra_cuda_cflags)
    cmd = [str(cuda_home / "bin" / "nvcc"), "-c", source, "-o", obj] + _common_flags(spec, cuda_home, work)
    cmd += _TORCH_NVCC_FLAGS
    if not any("arch" in flag for flag in extra):
        archs = toolchain.arch_list()
        if not archs:
            raise CompileError("no GPU to take the architecture from: set TORCH_CUDA_ARCH_LIST (e.g. 9.0a)")
        cmd += toolchain.arch_flags(archs)
    cmd += ["--compiler-options", "-fPIC"] + extra
    if not any(flag.startswith("-std=") for flag in extra):
        cmd.append(f"-std={DEFAULT_STD}")
    if toolchain.host_compiler():
        cmd = cmd[:1] + ["-ccbin", toolchain.host_compiler()] + cmd[1:]
    if ptxas_info:
        cmd += ["-Xptxas", "-v"]
    return cmd


def cxx_command(spec: BuildSpec, source: str, obj: str, cuda_home: Path, work: Path) -> list[str]:
    """The host compiler command for load_inline's ``main.cpp``."""
    extra = list(spec.extra_cflags)
    cmd = [os.environ.get("CXX", "c++"), "-c", source, "-o", obj] + _common_flags(spec, cuda_home, work) + ["-fPIC"]
    if not any(flag.startswith("-std=") for flag in extra):
        cmd.append(f"-std={DEFAULT_STD}")
    return cmd + extra


def generated_sources(spec: BuildSpec, how=None) -> tuple[str, str]:
    """``(main.cpp, cuda.cu)`` as pkb has load_inline compile them (``how``:
    a :class:`pkb_cuda.sources.Plan`, default the build's own)."""
    from pkb_cuda import sources

    how = how or sources.plan(spec)
    return "\n".join([sources.main_cpp(spec, how)] + sources.bindings(spec)), sources.cuda_cu(spec, how)


_PTXAS_FUNC = re.compile(r"Compiling entry function '(\w+)'|Function properties for (\w+)")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas(log: str) -> list[KernelInfo]:
    """Registers and spills per kernel from ``-Xptxas -v`` output."""
    kernels: dict[str, KernelInfo] = {}
    current = None
    for line in log.splitlines():
        match = _PTXAS_FUNC.search(line)
        if match:
            current = match.group(1) or match.group(2)
            kernels.setdefault(current, KernelInfo(_demangle(current), 0))
            continue
        if current is None:
            continue
        spill = _PTXAS_SPILL.search(line)
        if spill:
            kernels[current].spill_stores, kernels[current].spill_loads = int(spill.group(1)), int(spill.group(2))
        regs = _PTXAS_REGS.search(line)
        if regs:
            kernels[current].registers = int(regs.group(1))
    return [k for k in kernels.values() if k.registers]


def _demangle(symbol: str) -> str:
    try:
        out = subprocess.run(["c++filt", symbol], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return symbol
    return out or symbol


def _symbols(obj: str, defined: bool) -> set[str]:
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(["nm", flag, obj], capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def check_bindings(spec: BuildSpec, main_obj: str, cuda_obj: str) -> None:
    """Every bound function that ``main.o`` calls, and every other function at
    global scope it calls (a launcher ``cpp_source`` declares for the ``.cu``
    to define), must be defined with the same mangled name (so the same
    signature) by ``cuda.o`` or ``main.o``. torch's and pybind11's functions
    are in namespaces (``_ZN...``), C functions are not mangled: neither is asked."""
    needed = _symbols(main_obj, defined=False)
    have = _symbols(cuda_obj, defined=True) | _symbols(main_obj, defined=True)
    global_calls = {m.group(2)[:int(m.group(1))] for m in map(re.compile(r"^_Z(\d+)(\w+)").match, needed) if m}
    for function in dict.fromkeys([*spec.functions, *sorted(global_calls)]):
        pattern = re.compile(rf"^_Z{len(function)}{function}")  # length-prefixed: exact name
        wanted = [s for s in needed if pattern.match(s)]
        missing = [s for s in wanted if s not in have]
        if missing:
            defined = [_demangle(s) for s in have if pattern.match(s)]
            raise CompileError(
                f"building the CUDA extension {spec.name!r}: {_demangle(missing[0])} is declared in cpp_source "
                f"but cuda_source defines {', '.join(defined) or 'no such function'}")


def check_spec(spec: BuildSpec, workdir=None, bindings: bool = True, ptxas_info: bool = True) -> CheckResult:
    """Compile ``spec`` to object files as load_inline would; raise
    :class:`CompileError` with the compiler's message on failure."""
    cuda_home = toolchain.find_cuda_home()
    if cuda_home is None:
        raise CompileError("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    started = time.time()
    work = Path(workdir or tempfile.mkdtemp(prefix="pkb-cuda-check-")) / spec.module_name
    work.mkdir(parents=True, exist_ok=True)
    from pkb_cuda.sources import PLAIN, plan

    how = plan(spec)
    main_src, cuda_src = generated_sources(spec, how)
    (work / "main.cpp").write_text(main_src)
    (work / "cuda.cu").write_text(cuda_src)
    cmd = nvcc_command(spec, "cuda.cu", "cuda.cuda.o", cuda_home, work, ptxas_info)
    (work / "nvcc.cmd").write_text(shlex.join(cmd) + "\n")
    code, log = _run(cmd, work)
    if code and not how.torch_headers:  # as the build does: the verdict is that of load_inline's headers
        (work / "cuda.cu").write_text(generated_sources(spec, PLAIN)[1])
        code, log = _run(cmd, work)
    (work / "nvcc.log").write_text(log)
    if code:
        raise CompileError(f"building the CUDA extension {spec.name!r} failed:\n{trim_compiler_output(log)}")
    kernels = parse_ptxas(log) if ptxas_info else []
    if bindings:
        cmd = cxx_command(spec, "main.cpp", "main.o", cuda_home, work)
        (work / "cxx.cmd").write_text(shlex.join(cmd) + "\n")
        code, log = _run(cmd, work)
        (work / "cxx.log").write_text(log)
        if code:
            raise CompileError(f"building the CUDA extension {spec.name!r} failed:\n{trim_compiler_output(log)}")
        check_bindings(spec, str(work / "main.o"), str(work / "cuda.cuda.o"))
    return CheckResult(spec.name, spec.module_name, round(time.time() - started, 1), str(work), kernels)


def nvcc_object(source: str, obj: str, flags=(), name: str = "check") -> None:
    """Compile one self-contained ``.cu`` file (no torch headers) with nvcc;
    raise :class:`CompileError` with the trimmed message on failure. Fast:
    used by the tests to exercise the error path."""
    nvcc = toolchain.find_nvcc()
    if nvcc is None:
        raise CompileError("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    code, log = _run([nvcc, "-c", source, "-o", obj, *flags], cwd=os.path.dirname(os.path.abspath(source)))
    if code:
        raise CompileError(f"building the CUDA extension {name!r} failed:\n{trim_compiler_output(log)}")


def check_files(files, *, build: bool = False, bindings: bool = True, workdir=None, label: str = "pkb_cuda",
                detail: str = "") -> int:
    """Import each solution file and report its builds, one line each; return the failure count.

    Default mode imports a file inside :func:`pkb_cuda.compile_only` (every
    ``compile`` call it makes is compiled to objects and checked, with ptxas's
    registers and spills per kernel); ``build=True`` imports it normally, so
    its extensions are built with load_inline into the cache and loaded. The
    compile-check tools of the cuda and parallelkittens backends run this.

    :param label: the package whose ``compile`` a file is expected to call
        (named when a file makes no call; also the module-name prefix).
    :param detail: words after "compiled" (e.g. ``" for 2 ranks"``).
    """
    import importlib.util
    import traceback

    import pkb_cuda

    def load(path):
        spec = importlib.util.spec_from_file_location(f"{label}_check_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    failures = 0
    for path in files:
        started = time.time()
        try:
            if build:
                load(path)
                print(f"ok    {path.name}: built/loaded in {time.time() - started:.1f} s", flush=True)
                continue
            with pkb_cuda.compile_only(workdir=workdir, bindings=bindings) as results:
                load(path)
            if not results:
                print(f"??    {path.name}: made no {label}.compile call", flush=True)
                failures += 1
                continue
            for result in results:
                print(f"ok    {path.name}: {result.name} compiled{detail} in {result.seconds:.1f} s "
                      f"({result.workdir})", flush=True)
                for k in result.kernels:
                    spills = f", spills {k.spill_stores}/{k.spill_loads} B st/ld" if (k.spill_stores or k.spill_loads) else ""
                    print(f"        {k.kernel}: {k.registers} registers{spills}", flush=True)
        except BaseException as exc:  # noqa: BLE001 - report and go on (a file may even call sys.exit)
            if isinstance(exc, KeyboardInterrupt):
                raise
            failures += 1
            text = str(exc) if isinstance(exc, CompileError) else \
                "".join(traceback.format_exception_only(type(exc), exc)).strip()
            print(f"FAIL  {path.name} ({time.time() - started:.1f} s):\n{text}", flush=True)
    return failures
