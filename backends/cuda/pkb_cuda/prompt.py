"""The CUDA backend's part of generation prompts (``BackendInfo.prompt``).

The instructions are the rules of docs/backends/cuda.md in short, fastest
build first (NVRTC kernels, then a header-light ``.cu``, then torch in the
``.cu`` as PKB's files have it: see ``RULES`` for why), then the
helper API's own reference: the docstring of :mod:`pkb_cuda`, the fields of
:class:`pkb_cuda.Peers` and the device header that ``compile`` prepends
(``BARRIER_CUH``), so the prompt never drifts from the code. The examples are
the backend's samples, read from disk. Imports no torch.
"""
from __future__ import annotations

import inspect
from pathlib import Path

import pkb_cuda
from pkb_core import BackendPrompt, PromptExample

SAMPLES = Path(__file__).parent / "samples"
#: Samples shown as examples, best first (never the one for the problem asked).
EXAMPLE_SAMPLES = ("1_allreduce_nvrtc", "2_allgather_nvrtc", "7_reducescatter_nvrtc", "1_allreduce")

RULES = """
A `cuda` solution is a Python file that defines `solution(...)` with the reference's exact signature and
does its communication in CUDA C++ kernels that read the peers' memory directly over NVLink (no NCCL, no
torch.distributed). Every tensor argument is in the symmetric heap (torch symm_mem), so
`pkb_cuda.peers(tensor)` gives, as ints, a device table of every rank's buffer, a table of signal pads, the
tensor's offset in the buffers and more.

Every candidate is built before it runs, and the build costs what its headers cost: kernels alone compile in
well under a second, torch's C++ headers take 20-80 s per file. So write the fastest form that is still real
CUDA, in this order:

A. Kernels only, compiled with NVRTC (`pkb_cuda.nvrtc`, through CuPy: 0.1-0.3 s, no host C++, no torch
   headers) and launched from Python on torch's current stream. Keep only the kernels in the CUDA string
   (`<cuda_bf16.h>` and `<cuda_fp16.h>` are fine; the `pkb::` helpers are prepended), declare every integer
   parameter `long long`, allocate the output in Python (`torch.empty(...)`, a NEW tensor) and launch:
   `nvrtc.kernel(SOURCE, "name<__nv_bfloat16>")(blocks, threads, out, p.buffer_table, p.signal_table, ...)`
   (tensors pass their address, Python ints 64-bit integers). Use it whenever a few lines of Python can pick
   the grid and launch.
B. When the host side needs C++:
   `ext = pkb_cuda.compile(name, cuda_source, cpp_source, functions=[...], bind="ops")` at import (built once
   per node, cached). Keep the `.cu` header-light: kernels plus a launcher that takes raw pointers, `int64_t`s
   and a `cudaStream_t`, with no `torch::`, `at::` or `c10::` name in it; then pkb adds no torch header to it
   and it compiles in about 2 s. Put the torch side in `cpp_source` after a declaration of the launcher:
   checks, the output (`at::empty_like(...)` from `<ATen/ops/empty_like.h>`, `at::empty` from
   `<ATen/ops/empty.h>`), the dtype, `c10::cuda::getCurrentCUDAStream()` from `<c10/cuda/CUDAStream.h>`, the
   launcher's `cudaError_t` through `C10_CUDA_CHECK` from `<c10/cuda/CUDAException.h>`. With `bind="ops"`
   the functions are registered with torch's dispatcher (`TORCH_LIBRARY`, schema from the C++ types: use
   `at::Tensor`, `int64_t`, `double`, `bool`), so `main.cpp` needs only `<torch/library.h>` and the headers
   you include (about 5 s, in parallel with the `.cu`); without it, `main.cpp` starts with
   `torch/extension.h` and pybind11 (17-23 s, or about 8 s with pkb's precompiled header).
C. Still accepted, but slow (40-80 s a build): torch types in the `.cu` (the host function in the CUDA
   string, as in PKB's files), or PKB's style, `load_inline` / `compile_cuda_extension` with
   `PYBIND11_MODULE` in the `.cu`.

In every form:

1. `solution(...)` returns new tensors, never writes an input, never calls `torch.distributed`; with
   `compile`, bind the host functions and call `ext.fn(tensor, *pkb_cuda.peers(tensor))`, the seven `Peers` ints
   declared as `int64_t buffers, int64_t pads, int64_t offset, int64_t rank, int64_t world, int64_t max_blocks,
   int64_t align`.
2. The pull model: `pkb::barrier_block(pads, rank, world, blockIdx.x)` at the start of the kernel (every peer's
   input is in place), read peers through `pkb::peer_ptr<T>(buffers, p, offset)`, write only this rank's own
   output, and `pkb::barrier_block(...)` again at the end (nobody returns while a peer still reads its input).
3. The same grid on every rank, computed from values all ranks share (the problem size, the SM count,
   `max_blocks`), never from something local such as an output pointer's alignment; grid <= `max_blocks`; all
   blocks co-resident (the samples use 512 threads, `__launch_bounds__(512, 2)`, at most 2 x SMs blocks);
   every rank launches, also ranks with nothing to read.
4. Includes with torch: `<c10/cuda/CUDAStream.h>`, `<c10/cuda/CUDAGuard.h>`, `<c10/cuda/CUDAException.h>`;
   not `<ATen/cuda/CUDAContext.h>` (heavy). torch compiles `.cu` files with `-D__CUDA_NO_BFLOAT16_CONVERSIONS__`:
   convert with `__bfloat162float` / `__float2bfloat16`. Accumulate in fp32; use 16-byte vector loads only when
   `align >= 16`.
5. The push model, for small floating-point messages (the samples use it up to 1 MiB; one one-way trip across
   NVLink, no barrier): start the CUDA source with `pkb_cuda.PUSH_CUH` (below), pass
   `*pkb_cuda.push_scratch(x, slot_bytes, tag=...)`, six ints declared `int64_t table, int64_t offset, int64_t
   slot_bytes, int64_t counters, int64_t rank, int64_t world`, into `pkb::PushScratch::from_fields(...)`; send with
   `scratch.slot(peer, epoch, rank)[i] = pkb::push_clean<T>(v)`, receive with
   `pkb::push_receive<T>(scratch.slot(rank, epoch, peer) + i)`, then `scratch.reset_last<T>(epoch, tid, threads)`
   and `scratch.finish(epoch, vectors)` last in every thread; every send before any receive; a grid of at most
   one block an SM (`pkb::push_blocks(vectors, threads, sms)`).
"""


def backend_prompt() -> BackendPrompt:
    """Instructions (rules + helper API + device header) and the sample pairs."""
    peers_doc = inspect.getsource(pkb_cuda.Peers).strip()
    instructions = "\n\n".join([
        RULES.strip(),
        "The helper API (the docstring of the `pkb_cuda` package):\n\n" + (pkb_cuda.__doc__ or "").strip(),
        f"`pkb_cuda.Peers`:\n\n```python\n{peers_doc}\n```",
        "The device header `compile` puts in front of every CUDA source (`pkb_cuda.BARRIER_CUH`):\n\n"
        f"```cuda\n{pkb_cuda.BARRIER_CUH.strip()}\n```",
        "The push helpers (`pkb_cuda.PUSH_CUH`; a source that uses them starts with this text):\n\n"
        f"```cuda\n{pkb_cuda.PUSH_CUH.strip()}\n```",
    ])
    examples = tuple(PromptExample(problem=stem.removesuffix("_nvrtc"), solution=(SAMPLES / f"{stem}.py").read_text())
                     for stem in EXAMPLE_SAMPLES if (SAMPLES / f"{stem}.py").is_file())
    return BackendPrompt(instructions=instructions, examples=examples)
