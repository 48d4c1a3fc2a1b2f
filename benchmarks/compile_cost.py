"""What one CUDA candidate's build costs, piece by piece (issue 33's numbers).

    python benchmarks/compile_cost.py [--repeat 1] [--json OUT] [--nvrtc]

Each line is one compile, run as pkb runs it, timed from outside (wall
seconds, the best of ``--repeat``); everything goes to a scratch folder and a
scratch pkb cache, nothing to the user's:

- ``pch``: building pkb's precompiled ``torch/extension.h`` (once per machine
  and flags), with the flags torch gives ``main.cpp`` (:mod:`pkb_cuda.torch_pch`);
- ``main.cpp plain`` / ``main.cpp pch``: the bindings file of the all-reduce
  sample (its declarations and pybind11 module) without and with that PCH;
- ``main.cpp empty``: what a PKB file's ``main.cpp`` is now (it binds in its ``.cu``);
- ``.cu torch-free`` / ``.cu +torch/types.h``: the same kernels (the NVRTC
  all-reduce sample's, with pkb's device header) through nvcc, without and
  with the header load_inline used to put in front;
- ``nvrtc`` (``--nvrtc``, needs a GPU and CuPy): from source to a loaded
  kernel through :func:`pkb_cuda.nvrtc.kernel`, in a fresh process with an
  empty CuPy cache, without and with importing torch and CuPy.

On a CPU-only torch the main.cpp flags are those of a host-only extension
(``include_paths("cpu")``: no CUDA include folder), the rest is the same.
"""
from __future__ import annotations

import argparse
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


def _sample(stem: str) -> dict:
    namespace: dict = {}
    text = (SAMPLES / f"{stem}.py").read_text()
    code = text.split("\n_ext = ", 1)[0].split("\n@functools", 1)[0]  # sources only, no build, no GPU
    exec(compile(code, f"{stem}.py", "exec"), namespace)  # noqa: S102 - the repository's own sample
    return namespace


def measure(work: Path, repeat: int, nvrtc: bool) -> dict:
    import torch

    from pkb_core.build import pch
    from pkb_cuda import check, sources, torch_pch
    from pkb_cuda.spec import BuildSpec

    os.environ["PKB_CACHE_DIR"] = str(work / "cache")
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    results: dict = {"machine": f"{os.cpu_count()} cores, torch {torch.__version__}",
                     "cuda": torch.version.cuda or "none (CPU build)"}
    with_cuda = bool(torch.version.cuda)

    allreduce = _sample("1_allreduce")
    native = BuildSpec.make("allreduce", allreduce["CUDA_SOURCE"], allreduce["CPP_SOURCE"], ["allreduce"])
    compiler, flags = torch_pch.main_cpp_flags(native.extra_cflags, (), with_cuda)
    main = work / "main.cpp"
    main.write_text("\n".join([sources.main_cpp(native, sources.PLAIN)] + sources.bindings(native)))
    define = [f"-DTORCH_EXTENSION_NAME={native.module_name}"]
    results["main.cpp plain"] = _timed([*compiler, *define, *flags, "-c", str(main), "-o", str(work / "a.o")], repeat)

    header = torch_pch.extension_header(native.extra_cflags, (), with_cuda)
    started = time.perf_counter()
    path = pch.ensure(header)
    results["pch"] = round(time.perf_counter() - started, 2)
    results["pch MB"] = round(path.with_suffix(".h.gch").stat().st_size / 1e6)
    results["main.cpp pch"] = _timed([*compiler, *define, *flags, *pch.use_flags(path), "-c", str(main),
                                      "-o", str(work / "b.o")], repeat)
    results["main.o identical"] = (work / "a.o").read_bytes() == (work / "b.o").read_bytes()

    pkb_file = BuildSpec.make("pkbfile", "#include <torch/extension.h>\n", "", (), prelude=False)
    empty = work / "empty.cpp"
    empty.write_text(sources.main_cpp(pkb_file, sources.plan(pkb_file)))
    results["main.cpp empty"] = _timed([*compiler, *define, *flags, "-c", str(empty), "-o", str(work / "c.o")],
                                       repeat)

    kernels = BuildSpec.make("kernels", _sample("1_allreduce_nvrtc")["SOURCE"])
    cuda_home = check.toolchain.find_cuda_home()
    for label, how in ((".cu torch-free", sources.plan(kernels)), (".cu +torch/types.h", sources.PLAIN)):
        cu = work / f"{'light' if how.torch_headers is False else 'plain'}.cu"
        cu.write_text(sources.cuda_cu(kernels, how))
        cmd = check.nvcc_command(kernels, str(cu), str(cu.with_suffix(".o")), cuda_home, work, ptxas_info=False)
        results[label] = _timed(cmd, repeat)
    if nvrtc:
        results.update(_nvrtc(work))
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pkb-compile-cost-") as scratch:
        results = measure(Path(scratch), args.repeat, args.nvrtc)
    for name, value in results.items():
        print(f"{name:32s} {value}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
