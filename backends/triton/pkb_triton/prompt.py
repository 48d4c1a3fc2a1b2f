"""The Triton backend's part of generation prompts (``BackendInfo.prompt``).

The instructions are the rules of docs/backends/triton.md in short, followed
by the helper API's reference (the docstring of :mod:`pkb_triton`, so the two
never drift apart). The examples are the backend's own samples, read from
disk: files that pass ``pkb run --backend triton``. Imports no torch or triton.
"""
from __future__ import annotations

from pathlib import Path

import pkb_triton
from pkb_core import BackendPrompt, PromptExample

SAMPLES = Path(__file__).parent / "samples"
#: Samples shown as examples, best first (never the one for the problem asked).
EXAMPLE_SAMPLES = ("1_allreduce", "2_allgather", "7_reducescatter")

RULES = """
A `triton` solution is a Python file that defines `solution(...)` with the reference's exact signature and
does its communication in `@triton.jit` kernels that read the peers' inputs directly (no NCCL, no
torch.distributed). Every tensor argument is in the symmetric heap (torch symm_mem on GPUs), so
`pkb_triton.peers(tensor)` gives a table of the addresses of every rank's copy of it, and signal pads for
synchronisation.

How a solution is written:

1. Host side: call `peers(input)`, allocate each output with `torch.empty` (a new tensor, never an input or a
   view of one), pick the grid with `Peers.grid(numel, BLOCK)`, launch, return.
2. Kernel arguments: the output (and other local tensors), plus **ints**: `sym.ptrs`, `sym.pads`, `sym.rank`,
   sizes; the world size as a `tl.constexpr` (`WORLD=sym.world_size`).
3. The pull model: `barrier(pads, rank, WORLD, 0)` first (every peer's input is in place), then read peers'
   inputs through `peer_ptr(ptrs, p, out)`, write only this rank's own output, then `barrier(...)` last (no
   rank returns, letting its input be overwritten, while a peer still reads it).
4. Every rank launches **the same grid**: program i of each rank meets program i of the others at the barrier.
   Derive the grid from a size all ranks share, never from something local (in scatter the root's input is
   larger than the others'). Keep `channels * programs * WORLD <= pad_slots` (`Peers.grid` does).
5. Programs wait only for the same program id on other ranks, never for another program of their own rank.
6. Write grid-stride loops as `while start < n: ...; start += tl.num_programs(0) * BLOCK` (a `for` over a
   runtime bound fails in Triton's interpreter, which pkb uses on CPUs); `tl.static_range` over constexprs is
   fine. Accumulate reductions in fp32 and store in the output's dtype (`out.dtype.element_ty`).
7. Use `tl.cast(rank, tl.int64)`, not `rank.to(...)`: an int argument equal to 1 is specialised to a constexpr.
8. Scratch memory that peers must read from you (e.g. a two-shot all-reduce) comes from
   `pkb_triton.workspace(numel, dtype, tag)`: allocating is collective, so every rank asks for the same sizes in
   the same order; guard reuse with the barrier. Import the helpers with
   `from pkb_triton import barrier, peer_ptr, peers` (and `workspace`, `max_programs`, the `push_*` as needed).
9. Small messages can be pushed instead (the samples push floating point up to 1 MiB): `push_workspace(like,
   slot, tag)` on the host; in the kernel every send first (`tl.store(push_slot(...) + offs, push_bits(...))`),
   then `push_receive`, and every program ends with `push_reset_last` and `push_finish(..., CREDITS)`.
   `CREDITS=False` where every rank receives from every rank each call (all-reduce, all-gather,
   reduce-scatter, all-to-all); `CREDITS=True`, with `push_wait_credit` before sending, where a rank only
   sends (reduce, gather). Every rank takes the push path or not alike (decide on shared sizes and dtype).
10. Keep each name one type in a kernel: a `tl.static_range` loop variable (a constexpr) that a later `while`
   loop reassigns to a tensor (`p = (rank + i) % WORLD`) is refused by Triton's compiler on GPUs, though the
   interpreter runs it (pkb's CPU mode puts every kernel through the compiler's front end at its first launch).

The helper API (the docstring of the `pkb_triton` package):
"""


def backend_prompt() -> BackendPrompt:
    """Instructions (rules + helper API) and the sample pairs."""
    instructions = RULES.strip() + "\n\n" + (pkb_triton.__doc__ or "").strip()
    examples = tuple(PromptExample(problem=stem, solution=(SAMPLES / f"{stem}.py").read_text())
                     for stem in EXAMPLE_SAMPLES if (SAMPLES / f"{stem}.py").is_file())
    return BackendPrompt(instructions=instructions, examples=examples)
