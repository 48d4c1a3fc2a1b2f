"""What one CUDA candidate's build costs, piece by piece (issue 33's numbers).

    python benchmarks/compile_cost.py [--repeat 1] [--json OUT] [--nvrtc | --nvrtc-only]

Each line is one compile, run as pkb runs it, timed from outside (wall
seconds, the best of ``--repeat``); everything goes to a scratch folder and a
scratch pkb cache, nothing to the user's:

- ``pch``: building pkb's precompiled ``torch/extension.h`` (once per machine
  and flags), with the flags torch gives ``main.cpp`` (:mod:`pkb_cuda.torch_pch`);
- ``main.cpp plain`` / ``main.cpp pch``: the bindings file of the all-reduce
  sample (its torch side and a pybind11 module) without and with that PCH;
- ``main.cpp ops``: the same file as the sample has it built, ``bind="ops"``
  (``torch/library.h`` and ``TORCH_LIBRARY`` instead of pybind11);
- ``main.cpp empty``: what a PKB file's ``main.cpp`` is now (it binds in its ``.cu``);
- ``.cu torch-free`` / ``.cu +torch/types.h``: the all-reduce sample's CUDA
  source (kernel and raw-pointer launcher, with pkb's device header) through
  nvcc, without and with the header load_inline used to put in front;
- ``nvrtc`` (``--nvrtc``, needs a GPU and CuPy): from source to a loaded
  kernel through :func:`pkb_cuda.nvrtc.kernel`, in a fresh process with an
  empty CuPy cache, without and with importing torch and CuPy.

On a CPU-only torch the main.cpp flags are those of a host-only extension
(``include_paths("cpu")``) plus the toolkit's include folder and the stub
``c10/cuda/impl/cuda_cmake_macros.h`` the CPU wheel lacks (as the compile-only
check adds them), the rest is the same.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "backends" / "cuda" / "pkb_cuda" / "samples"


def _timed(cmd, repeat: int, env=None) -> float:
    best = None
    for _ in range(repeat):
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        seconds = time.perf_counter() - started
        if proc.returncode:
            raise SystemExit(f"failed: {' '.join(map(str, cmd))[:300]}\n{(proc.stdout + proc.stderr)[-3000:]}")
        best = seconds if best is None else min(best, seconds)
    return round(best, 2)


class _Shown(dict):
    """Results printed as they come (a long run cut short has shown what it measured)."""

    def __setitem__(self, name, value):
        super().__setitem__(name, value)
        print(f"{name:32s} {value}", flush=True)


def _sample(stem: str) -> dict:
    namespace: dict = {}
    text = (SAMPLES / f"{stem}.py").read_text()
    code = text.split("\n_ext = ", 1)[0].split("\n@functools", 1)[0]  # sources only, no build, no GPU
    exec(compile(code, f"{stem}.py", "exec"), namespace)  # noqa: S102 - the repository's own sample
    return namespace


def measure(work: Path, repeat: int, nvrtc: bool, host: bool = True) -> dict:
    import torch

    from pkb_core.compile import pch
    from pkb_cuda import check, sources, torch_pch
    from pkb_cuda.spec import BuildSpec

    os.environ["PKB_CACHE_DIR"] = str(work / "cache")
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    results = _Shown()
    results["machine"] = f"{os.cpu_count()} cores, torch {torch.__version__}"
    results["cuda"] = torch.version.cuda or "none (CPU build)"
    with_cuda = bool(torch.version.cuda)
    if not host:
        for name, value in _nvrtc(work).items():
            results[name] = value
        return results

    allreduce = _sample("1_allreduce")
    native = BuildSpec.make("allreduce", allreduce["CUDA_SOURCE"], allreduce["CPP_SOURCE"], ["allreduce"])
    kernels = BuildSpec.make("kernels", allreduce["CUDA_SOURCE"])
    cuda_home = check.toolchain.find_cuda_home()
    for label, how in ((".cu torch-free", sources.plan(kernels)), (".cu +torch/types.h", sources.PLAIN)):
        cu = work / f"{'light' if how.torch_headers is False else 'plain'}.cu"
        cu.write_text(sources.cuda_cu(kernels, how))
        cmd = check.nvcc_command(kernels, str(cu), str(cu.with_suffix(".o")), cuda_home, work, ptxas_info=False)
        results[label] = _timed(cmd, repeat)
    compiler, flags = torch_pch.main_cpp_flags(native.extra_cflags, (), with_cuda)
    if not with_cuda:  # the CPU wheel: add the toolkit's headers and the c10/cuda stub that torch's CUDA build has
        shim = check._shim_dir(work)
        flags = (*flags, "-isystem", str(cuda_home / "include"), *(("-isystem", str(shim)) if shim else ()))
    main = work / "main.cpp"
    main.write_text("\n".join([sources.main_cpp(native, sources.PLAIN)] + sources.bindings(native)))
    define = [f"-DTORCH_EXTENSION_NAME={native.module_name}"]
    results["main.cpp plain"] = _timed([*compiler, *define, *flags, "-c", str(main), "-o", str(work / "a.o")], repeat)

    header = dataclasses.replace(torch_pch.extension_header(native.extra_cflags, (), with_cuda), flags=flags)
    started = time.perf_counter()
    path = pch.ensure(header)
    results["pch"] = round(time.perf_counter() - started, 2)
    results["pch MB"] = round(path.with_suffix(".h.gch").stat().st_size / 1e6)
    results["main.cpp pch"] = _timed([*compiler, *define, *flags, *pch.use_flags(path), "-c", str(main),
                                      "-o", str(work / "b.o")], repeat)
    results["main.o identical"] = (work / "a.o").read_bytes() == (work / "b.o").read_bytes()

    ops = BuildSpec.make("allreduce", allreduce["CUDA_SOURCE"], allreduce["CPP_SOURCE"], ["allreduce"], bind="ops")
    ops_main = work / "ops.cpp"
    ops_main.write_text("\n".join([sources.main_cpp(ops, sources.plan(ops))] + sources.bindings(ops)))
    results["main.cpp ops"] = _timed([*compiler, *define, *flags, "-c", str(ops_main), "-o", str(work / "d.o")],
                                     repeat)

    pkb_file = BuildSpec.make("pkbfile", "#include <torch/extension.h>\n", "", (), prelude=False)
    empty = work / "empty.cpp"
    empty.write_text(sources.main_cpp(pkb_file, sources.plan(pkb_file)))
    results["main.cpp empty"] = _timed([*compiler, *define, *flags, "-c", str(empty), "-o", str(work / "c.o")],
                                       repeat)

    if nvrtc:
        for name, value in _nvrtc(work).items():
            results[name] = value
    return results


NVRTC_PROBE = """
import sys, time
started = time.perf_counter()
import torch, cupy
sys.path.insert(0, {samples!r})
imported = time.perf_counter()
from pkb_cuda import nvrtc
ns = {{}}
exec(open({sample!r}).read().split("\\n@functools", 1)[0], ns)
torch.cuda.init()
begin = time.perf_counter()
kernel = nvrtc.kernel(ns["SOURCE"], "allreduce<float>")
torch.cuda.synchronize()
done = time.perf_counter()
print(round(done - begin, 3), round(done - started, 3))
"""


def _nvrtc(work: Path) -> dict:
    code = NVRTC_PROBE.format(samples=str(SAMPLES), sample=str(SAMPLES / "1_allreduce_nvrtc.py"))
    env = dict(os.environ, CUPY_CACHE_DIR=str(work / "cupy"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    kernel, total = out.split()
    return {"nvrtc source->kernel": float(kernel), "nvrtc with torch+cupy import": float(total)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--nvrtc", action="store_true", help="also time NVRTC (GPU and CuPy needed)")
    parser.add_argument("--nvrtc-only", action="store_true", help="time only NVRTC")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pkb-compile-cost-") as scratch:
        results = measure(Path(scratch), args.repeat, args.nvrtc or args.nvrtc_only, host=not args.nvrtc_only)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
