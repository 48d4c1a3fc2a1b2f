"""Parameter all-gather through an FP8 (e4m3) round trip with delayed scaling.

Each rank r holds ``flat_param_shard`` (N,) in the working dtype and
``amax_history`` (16,) bf16, its own delayed-scaling history (the amax is per rank,
not reduced).

On each rank: cur = max |flat_param_shard| (fp32); new_history = history rolled
left by one (entry 0 dropped, entries 1..15 move to 0..14) with entry 15 = cur cast
to bf16; scale = fp32(max(new_history) clamped to >= 1e-12) / 448 (fp32 division);
recon = ((shard.float() / scale) cast to float8_e4m3fn, back to fp32, times scale)
cast to the working dtype, where x / scale is an IEEE fp32 division and the fp8
cast rounds to nearest even. Then all-gather: the (W*N,) concatenation of every
rank's recon in rank order.

Return (gathered (W*N,) working dtype, identical on every rank; this rank's
new_history (16,) bf16); the inputs are unchanged. Every output element is
deterministic, so the comparison is tight.

Inputs: the original's constant history (1e-8 everywhere) made the scale depend
on the current amax alone. pkb draws each rank's history around its current amax
(entries in [0.3, 1.05) x amax, so the history or the current amax sets the scale
on different trials) and puts a larger value (1.5x to 3x amax) in entry 0, which
the roll must drop before the max.
"""
import torch
import torch.distributed as dist

ID = 53
NAME = "fp8_allgather_params"
CATEGORY = "fsdp"
ORIGIN = "FP8 FSDP all-gather"
WORLD_SIZE = "any W >= 2"
# Each output element is one deterministic rounding chain: allow one bf16 ulp.
# The bf16 default would let a gather without the fp8 round trip pass on many
# elements.
TOLERANCE = {"rtol": 8e-3, "atol": 1e-4}
SIZES = {
    "tiny": {"n": 64},
    "default": {"n": 4096},
    "large": {"n": 134217728},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("flat_param_shard", "amax_history"),
    "args": ("bf16[4096]", "bf16[16]"),
    "out": ("bf16[8192]", "bf16[16]"),
}

FP8_E4M3_MAX = 448.0


def _history(ctx, amax):
    f32 = torch.float32
    hist = ctx.rand(16, dtype=f32, low=0.3, high=1.05) * amax
    hist[0] = ctx.rand(1, dtype=f32, low=1.5, high=3.0).squeeze(0) * amax
    return hist.to(torch.bfloat16)


def inputs(ctx):
    shard = ctx.randn(ctx.params["n"])
    return (shard, _history(ctx, shard.abs().max().float()))


def _fp8_round_trip(x, amax_history):
    cur = x.abs().max().to(torch.float32)
    history = torch.roll(amax_history, shifts=-1, dims=0)
    history[-1] = cur.to(history.dtype)
    scale = history.max().clamp(min=1e-12).to(torch.float32) / FP8_E4M3_MAX
    q = (x.float() / scale).to(torch.float8_e4m3fn)
    return (q.float() * scale).to(x.dtype), history


@torch.no_grad()
def reference(flat_param_shard, amax_history):
    world_size = dist.get_world_size()
    recon, history = _fp8_round_trip(flat_param_shard, amax_history)
    out = torch.empty(world_size * recon.numel(), dtype=recon.dtype, device=recon.device)
    dist.all_gather_into_tensor(out, recon.contiguous())
    return out, history


def traffic(params, world_size, itemsize):
    """The reference gathers the working dtype ((W-1) shards of N sent); an fp8
    wire format would send 1/itemsize of that. HBM: read the shard twice, write
    recon, write the W*N output. FLOPs: ~5 per element."""
    n, W = params["n"], world_size
    return {
        "link_bytes": (W - 1) * n * itemsize,
        "hbm_bytes": (3 * n + W * n) * itemsize,
        "flops": 5 * n,
    }
