"""The reference backend: NCCL on GPU, gloo on CPU.

With ``--solution FILE`` it runs a candidate written in plain PyTorch (which
may call torch.distributed or ``torch.ops.symm_mem``); with no solution it runs
the problem's own reference as the candidate, a self-check that must pass with
zero difference. Its lifecycle is the core defaults; it only describes itself
and contributes its part of generation prompts.
"""
from pathlib import Path

from pkb_core.plugin.backend import BackendInfo
from pkb_core.plugin.backend_prompt import BackendPrompt, PromptExample
from pkb_core.plugin.hookspecs import hookimpl

#: Example solutions shown in prompts (they pass `pkb run --backend reference`).
PROMPT_EXAMPLES = Path(__file__).parent / "reference_examples"

PROMPT_INSTRUCTIONS = """
A solution for the `reference` backend is a Python file whose `solution(...)` uses plain PyTorch. It may call
torch.distributed (NCCL on GPUs, gloo on CPUs): the no-NCCL guard does not apply to this backend. Its room to
win is in library calls: a better-suited collective, fused or overlapped work around it, or torch's
symmetric-memory operators, which move data over NVLink without NCCL.

What a solution can use:

- `torch.distributed`: the default process group spans all ranks and is initialised. Process-group arguments
  of `solution` are real groups (`None` means the default group).
- `pkb_core.symmetric.handle_of(tensor)`: every tensor argument lives in the symmetric heap; this returns its
  allocation's handle, with the attribute names of torch's `_SymmetricMemory`: `rank`, `world_size`,
  `buffer_ptrs` (ints, one per rank), `get_buffer(rank, sizes, dtype, storage_offset=0)` (a tensor view of
  rank p's buffer, usable locally; `storage_offset` in elements, counted from `buffer_ptrs[rank]`: use
  `(tensor.data_ptr() - handle.buffer_ptrs[handle.rank]) // tensor.element_size()`), `get_signal_pad(rank)`,
  and `barrier()` (waits for every rank of the allocation; call it before reading peers' inputs and again
  before returning). It raises `LookupError` for a tensor you allocated yourself.
- `torch.ops.symm_mem` operators (GPU only) on harness-placed inputs, with the group name
  `torch.distributed.group.WORLD.group_name`: e.g. `torch.ops.symm_mem.one_shot_all_reduce(tensor, "sum",
  group_name)`. An operator that needs a symmetric buffer of its own gets one from
  `torch.distributed._symmetric_memory.empty(...)` followed by `rendezvous(buffer, group_name)`: allocate it
  once, in the same order on every rank, and reuse it. Do not rely on NVLink multicast (the `multimem_*`
  operators): it may be switched off.
"""


#: The built-in backend's name: what ``pkb run`` uses by default and what
#: baselines (torch's own kernels) run under.
NAME = "reference"


def _examples():
    return tuple(PromptExample(problem=path.stem, solution=path.read_text())
                 for path in sorted(PROMPT_EXAMPLES.glob("*.py")))


@hookimpl
def pkb_backend_info():
    return BackendInfo(
        name=NAME,
        devices=("cuda", "cpu"),
        custom_kernels=False,
        description="PyTorch + torch.distributed (NCCL on GPU, gloo on CPU); no solution = self-check",
        prompt=_prompt,
    )


def _prompt():
    return BackendPrompt(instructions=PROMPT_INSTRUCTIONS, examples=_examples())
