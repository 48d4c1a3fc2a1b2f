"""The CUDA backend's part of generation prompts (``BackendInfo.prompt``).

The instructions are the rules of docs/backends/cuda.md in short, then the
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
EXAMPLE_SAMPLES = ("1_allreduce", "2_allgather_nvrtc", "7_reducescatter", "1_allreduce_nvrtc")

RULES = """
A `cuda` solution is a Python file that defines `solution(...)` with the reference's exact signature and
does its communication in CUDA C++ kernels that read the peers' memory directly over NVLink (no NCCL, no
torch.distributed). Every tensor argument is in the symmetric heap (torch symm_mem), so
`pkb_cuda.peers(tensor)` gives, as ints, a device table of every rank's buffer, a table of signal pads, the
tensor's offset in the buffers and more.

How a solution is written:

1. A string of CUDA C++ with the kernels and a host function that allocates the output (a NEW tensor:
   `torch::empty_like(...)`), picks the grid, dispatches on the dtype and launches on
   `c10::cuda::getCurrentCUDAStream()`, followed by `C10_CUDA_KERNEL_LAUNCH_CHECK()`.
2. A string of C++ declarations of the host functions to bind, and at import:
   `ext = pkb_cuda.compile(name, cuda_source, cpp_source, functions=[...])` (built once per node, cached).
3. `solution(...)`: `return ext.fn(tensor, *pkb_cuda.peers(tensor))`, the seven `Peers` ints declared as
   `int64_t buffers, int64_t pads, int64_t offset, int64_t rank, int64_t world, int64_t max_blocks,
   int64_t align`.
4. The pull model: `pkb::barrier_block(pads, rank, world, blockIdx.x)` at the start of the kernel (every peer's
   input is in place), read peers through `pkb::peer_ptr<T>(buffers, p, offset)`, write only this rank's own
   output, and `pkb::barrier_block(...)` again at the end (nobody returns while a peer still reads its input).
5. The same grid on every rank, computed from values all ranks share (the problem size, the SM count,
   `max_blocks`), never from something local such as an output pointer's alignment; grid <= `max_blocks`; all
   blocks co-resident (the samples use 512 threads, `__launch_bounds__(512, 2)`, at most 2 x SMs blocks);
   every rank launches, also ranks with nothing to read.
6. Includes: `<c10/cuda/CUDAStream.h>`, `<c10/cuda/CUDAGuard.h>`, `<c10/cuda/CUDAException.h>`,
   `<cuda_bf16.h>`, `<cuda_fp16.h>`; not `<ATen/cuda/CUDAContext.h>`. torch compiles with
   `-D__CUDA_NO_BFLOAT16_CONVERSIONS__`: convert with `__bfloat162float` / `__float2bfloat16`. Accumulate in
   fp32; use 16-byte vector loads only when `align >= 16`.

Kernels only, without host C++ (`pkb_cuda.nvrtc`, NVRTC through CuPy: about a second to build instead of
tens): keep only the kernels in the CUDA string (no torch headers; `<cuda_bf16.h>` and `<cuda_fp16.h>` are
fine; the `pkb::` helpers are prepended as with `compile`), declare every integer parameter `long long`, and
launch from Python on torch's current stream:
`nvrtc.kernel(SOURCE, "name<__nv_bfloat16>")(blocks, threads, out, p.buffer_table, p.signal_table, ...)`
(tensors pass their address, Python ints 64-bit integers). The output is allocated in Python
(`torch.empty(...)`). Prefer it when a few lines of Python can pick the grid and launch; use `compile` when
the host side needs C++.
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
    ])
    examples = tuple(PromptExample(problem=stem.removesuffix("_nvrtc"), solution=(SAMPLES / f"{stem}.py").read_text())
                     for stem in EXAMPLE_SAMPLES if (SAMPLES / f"{stem}.py").is_file())
    return BackendPrompt(instructions=instructions, examples=examples)
