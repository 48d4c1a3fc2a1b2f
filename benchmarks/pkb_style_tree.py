"""Write a tree of distinct PKB-style CUDA solutions, for measuring evaluation throughput.

    python3 benchmarks/pkb_style_tree.py OUT_DIR [--count 80] [--helper]

Each file is written the way ParallelKernelBench's generated CUDA solutions are:
torch's ``load_inline`` with ``<torch/extension.h>`` and a pybind module of its
own, built lazily on the first call, a buffer of its own from torch symm_mem
with ``rendezvous`` on the world group, ``dist.get_rank()``/``get_world_size()``,
and a kernel that reads the peers through the handle's pointers. The files
cycle through problems 1 (all-reduce), 2 (all-gather), 3 (broadcast) and
7 (reduce-scatter); each has its own threads-per-block and loop unrolling, so
every file is a distinct build (the worst case for a compile cache). Every one
passes its problem.

With ``--helper`` the files build as PKB's published files do, through
``from utils.cuda_helpers import compile_cuda_extension`` (which pkb serves:
its cache, its lock, its light ``main.cpp``) instead of calling torch's
``load_inline`` themselves; same sources otherwise.

Used by docs/benchmarks/2026-11-23-h200x2.md (issue 19's tree target).
"""
from __future__ import annotations

import argparse
from pathlib import Path

HEADER = '''"""PKB-style {what} (generated variant {index}: {threads} threads, unroll {unroll})."""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_bf16.h>

__device__ inline float to_f(float x) {{ return x; }}
__device__ inline float to_f(__nv_bfloat16 x) {{ return __bfloat162float(x); }}
__device__ inline void store_f(float* o, float v) {{ *o = v; }}
__device__ inline void store_f(__nv_bfloat16* o, float v) {{ *o = __float2bfloat16(v); }}

{kernel}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def("run", &run, "{what}"); }}
"""

_ext = None


def _get_ext():
    global _ext
    if _ext is None:
        _ext = load_inline(name="pkbgen_{tag}_{index}", cpp_sources="", cuda_sources=CUDA_SRC,
                           extra_cuda_cflags=["-O3"], verbose=False)
    return _ext


_state = {{}}


def _symmetric(n, dtype, device):
    key = (n, dtype)
    if key not in _state:
        buf = symm_mem.empty(n, dtype=dtype, device=device)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        ptrs = torch.tensor(hdl.buffer_ptrs, dtype=torch.int64, device=device)
        _state[key] = (buf, hdl, ptrs)
    return _state[key]
'''

# One kernel per problem: T is the element type, `ptrs` the peers' buffers.
KERNELS = {
    "allreduce": ("all-reduce (sum)", '''
template <typename T>
__global__ void sum_peers(const long long* ptrs, T* out, long long n, int world) {{
  long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * {unroll};
  for (int u = 0; u < {unroll}; ++u, ++i) {{
    if (i >= n) return;
    float acc = 0.f;
    for (int p = 0; p < world; ++p) acc += to_f(reinterpret_cast<const T*>(ptrs[p])[i]);
    store_f(out + i, acc);
  }}
}}

torch::Tensor run(torch::Tensor out, torch::Tensor ptrs, int64_t n, int64_t world) {{
  const int threads = {threads};
  const long long blocks = (n + (long long)threads * {unroll} - 1) / ((long long)threads * {unroll});
  auto stream = at::cuda::getCurrentCUDAStream();
  if (out.scalar_type() == at::kBFloat16)
    sum_peers<__nv_bfloat16><<<blocks, threads, 0, stream>>>((const long long*)ptrs.data_ptr(),
        (__nv_bfloat16*)out.data_ptr(), n, (int)world);
  else
    sum_peers<float><<<blocks, threads, 0, stream>>>((const long long*)ptrs.data_ptr(), out.data_ptr<float>(),
        n, (int)world);
  return out;
}}''', '''
def solution(tensor):
    n = tensor.numel()
    buf, hdl, ptrs = _symmetric(n, tensor.dtype, tensor.device)
    buf.copy_(tensor.reshape(-1))
    hdl.barrier(channel=0)
    out = torch.empty_like(tensor)
    _get_ext().run(out.view(-1), ptrs, n, dist.get_world_size())
    hdl.barrier(channel=0)
    return out
'''),
    "allgather": ("all-gather", '''
__global__ void gather_peers(const long long* ptrs, unsigned char* out, long long chunk, int world) {{
  long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * {unroll};
  for (int u = 0; u < {unroll}; ++u, ++i) {{
    if (i >= chunk) return;
    for (int p = 0; p < world; ++p) out[p * chunk + i] = reinterpret_cast<const unsigned char*>(ptrs[p])[i];
  }}
}}

torch::Tensor run(torch::Tensor out, torch::Tensor ptrs, int64_t chunk, int64_t world) {{
  const int threads = {threads};
  const long long blocks = (chunk + (long long)threads * {unroll} - 1) / ((long long)threads * {unroll});
  gather_peers<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>((const long long*)ptrs.data_ptr(),
      (unsigned char*)out.data_ptr(), chunk, (int)world);
  return out;
}}''', '''
def solution(tensor):
    world = dist.get_world_size()
    buf, hdl, ptrs = _symmetric(tensor.numel(), tensor.dtype, tensor.device)
    buf.copy_(tensor.reshape(-1))
    hdl.barrier(channel=0)
    out = torch.empty((world, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    _get_ext().run(out, ptrs, tensor.numel() * tensor.element_size(), world)
    hdl.barrier(channel=0)
    return out
'''),
    "broadcast": ("broadcast", '''
__global__ void copy_root(const long long* ptrs, unsigned char* out, long long bytes, int root) {{
  long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * {unroll};
  for (int u = 0; u < {unroll}; ++u, ++i) {{
    if (i >= bytes) return;
    out[i] = reinterpret_cast<const unsigned char*>(ptrs[root])[i];
  }}
}}

torch::Tensor run(torch::Tensor out, torch::Tensor ptrs, int64_t bytes, int64_t root) {{
  const int threads = {threads};
  const long long blocks = (bytes + (long long)threads * {unroll} - 1) / ((long long)threads * {unroll});
  copy_root<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>((const long long*)ptrs.data_ptr(),
      (unsigned char*)out.data_ptr(), bytes, (int)root);
  return out;
}}''', '''
def solution(tensor, src=0):
    buf, hdl, ptrs = _symmetric(tensor.numel(), tensor.dtype, tensor.device)
    buf.copy_(tensor.reshape(-1))
    hdl.barrier(channel=0)
    out = torch.empty_like(tensor)
    _get_ext().run(out, ptrs, tensor.numel() * tensor.element_size(), src)
    hdl.barrier(channel=0)
    return out
'''),
    "reducescatter": ("reduce-scatter (sum)", '''
template <typename T>
__global__ void sum_block(const long long* ptrs, T* out, long long n, long long start, int world) {{
  long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * {unroll};
  for (int u = 0; u < {unroll}; ++u, ++i) {{
    if (i >= n) return;
    float acc = 0.f;
    for (int p = 0; p < world; ++p) acc += to_f(reinterpret_cast<const T*>(ptrs[p])[start + i]);
    store_f(out + i, acc);
  }}
}}

torch::Tensor run(torch::Tensor out, torch::Tensor ptrs, int64_t n, int64_t start, int64_t world) {{
  const int threads = {threads};
  const long long blocks = (n + (long long)threads * {unroll} - 1) / ((long long)threads * {unroll});
  auto stream = at::cuda::getCurrentCUDAStream();
  if (out.scalar_type() == at::kBFloat16)
    sum_block<__nv_bfloat16><<<blocks, threads, 0, stream>>>((const long long*)ptrs.data_ptr(),
        (__nv_bfloat16*)out.data_ptr(), n, start, (int)world);
  else
    sum_block<float><<<blocks, threads, 0, stream>>>((const long long*)ptrs.data_ptr(), out.data_ptr<float>(),
        n, start, (int)world);
  return out;
}}''', '''
def solution(tensor):
    world, rank = dist.get_world_size(), dist.get_rank()
    buf, hdl, ptrs = _symmetric(tensor.numel(), tensor.dtype, tensor.device)
    buf.copy_(tensor.reshape(-1))
    hdl.barrier(channel=0)
    out = torch.empty((tensor.shape[0] // world, *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    _get_ext().run(out.view(-1), ptrs, out.numel(), rank * out.numel(), world)
    hdl.barrier(channel=0)
    return out
'''),
}
PROBLEMS = [("1_allreduce", "allreduce"), ("2_allgather", "allgather"), ("3_broadcast", "broadcast"),
            ("7_reducescatter", "reducescatter")]
THREADS = (128, 256, 512, 1024)
UNROLLS = (1, 2, 3, 4, 5)


#: What --helper puts in place of the direct load_inline (PKB's helper adds -O3 itself).
HELPER_IMPORT = ("from torch.utils.cpp_extension import load_inline",
                 "from utils.cuda_helpers import compile_cuda_extension")
HELPER_CALL = ("load_inline(name=\"pkbgen_{tag}_{index}\", cpp_sources=\"\", cuda_sources=CUDA_SRC,\n"
               "                           extra_cuda_cflags=[\"-O3\"], verbose=False)",
               "compile_cuda_extension(\"pkbgen_{tag}_{index}\", CUDA_SRC)")


def write_tree(out: Path, count: int, helper: bool = False) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for index in range(count):
        key, tag = PROBLEMS[index % len(PROBLEMS)]
        variant = index // len(PROBLEMS)
        threads, unroll = THREADS[variant % len(THREADS)], UNROLLS[(variant // len(THREADS)) % len(UNROLLS)]
        what, kernel, solution = KERNELS[tag]
        header = HEADER
        if helper:
            for old, new in (HELPER_IMPORT, HELPER_CALL):
                assert old in header, old
                header = header.replace(old, new)
        text = header.format(what=what, index=index, threads=threads, unroll=unroll, tag=tag,
                             kernel=kernel.format(threads=threads, unroll=unroll).strip())
        path = out / f"{key}_gen{index:03d}.py"
        path.write_text(text + solution)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--count", type=int, default=80)
    parser.add_argument("--helper", action="store_true", help="build through utils.cuda_helpers, as PKB's files do")
    args = parser.parse_args()
    print(f"{len(write_tree(args.out, args.count, args.helper))} files in {args.out}")


if __name__ == "__main__":
    main()
