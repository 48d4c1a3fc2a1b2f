"""Gated DeltaNet forward under Ulysses-style context parallelism (sequence shards <-> head shards).

Rank r holds tokens [r·Lloc, (r+1)·Lloc) of a sequence of T = W·Lloc tokens,
for all H heads; H = ``heads`` rounded up to a multiple of W, Hl = H/W.

Arguments on rank r:

- ``q``, ``k``: (B, Lloc, H, Dk); ``v``: (B, Lloc, H, Dv); ``gate``: (B, Lloc, H);
  ``beta``: (B, Lloc, H), already in (0, 1). Working dtype.
- ``a_log``, ``dt_bias``: (Hl,) working dtype: this rank's slice
  [r·Hl, (r+1)·Hl) of per-head vectors that are identical on every rank.
- ``group``: None (WORLD).

Computation, in fp32, per batch b and head h over all T tokens:

    alpha_t = exp(-exp(a_log[h]) · softplus(gate_t + dt_bias[h]))        (a scalar per token and head)
    q_t     = q_t / max(||q_t||, 1e-6) / sqrt(Dk);   k_t = k_t / max(||k_t||, 1e-6)
    S_0     = 0 (Dk x Dv)
    S_t     = alpha_t S_{t-1};   S_t += k_t (beta_t (v_t - S_tᵀ k_t))ᵀ;   o_t = S_tᵀ q_t

(the projection S_tᵀ k_t uses the already-decayed state). The reference
re-shards by all-to-all (rank r gets heads [r·Hl, (r+1)·Hl) of all T tokens,
one all-to-all each for q, k, v, gate, beta), runs the recurrence, casts o to
the working dtype and re-shards back (a sixth all-to-all). Return a new
(B, Lloc, H, Dv) tensor in the working dtype: this rank's tokens, all heads.

The original steps through the tokens in Python; this reference uses an
equivalent chunked (WY-form) evaluation (chunks of 64 tokens, decays applied
as exp of log-decay differences), which agrees with the step loop to fp32
rounding.

Sizes (B, Lloc, heads, Dk, Dv): tiny (1, 4, 2, 8, 16), default
(1, 64, 6, 256, 512) as in the original, large (1, 1024, 16, 256, 512); heads
round up to a multiple of W (default: 6 heads at W = 2, 3, 6; 8 at W = 4, 8).

Fix in pkb: the original's a_log and dt_bias were constant linspaces; pkb draws
the global per-head vectors from a shared seed (a_log uniform in [-3, 0],
dt_bias uniform in [-2, 0], so decays range from fast-forgetting to long
memory and the state carried across rank boundaries matters).
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 75
NAME = "fla_gated_deltanet_cp"
CATEGORY = "context-parallel"
ORIGIN = "flash-linear-attention Gated DeltaNet, Ulysses context parallelism"
WORLD_SIZE = "any W >= 2 (heads round up to a multiple of W)"
SIZES = {
    "tiny": {"batch": 1, "local_seq": 4, "heads": 2, "key_dim": 8, "value_dim": 16},
    "default": {"batch": 1, "local_seq": 64, "heads": 6, "key_dim": 256, "value_dim": 512},
    "large": {"batch": 1, "local_seq": 1024, "heads": 16, "key_dim": 256, "value_dim": 512},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("q", "k", "v", "gate", "beta", "a_log", "dt_bias", "group"),
    "args": (
        "bf16[1, 64, 6, 256]", "bf16[1, 64, 6, 256]", "bf16[1, 64, 6, 512]", "bf16[1, 64, 6]",
        "bf16[1, 64, 6]", "bf16[3]", "bf16[3]", "None",
    ),
    "out": "bf16[1, 64, 6, 512]",
}

_CHUNK = 64


def _heads(params, world_size):
    return -(-params["heads"] // world_size) * world_size


def inputs(ctx):
    p = ctx.params
    w, r = ctx.world_size, ctx.rank
    b, lloc, dk, dv = p["batch"], p["local_seq"], p["key_dim"], p["value_dim"]
    h = _heads(p, w)
    hl = h // w
    q = ctx.randn(b, lloc, h, dk)
    k = ctx.randn(b, lloc, h, dk)
    v = ctx.randn(b, lloc, h, dv)
    gate = ctx.randn(b, lloc, h)
    beta = torch.sigmoid(ctx.randn(b, lloc, h, dtype=torch.float32)).to(ctx.dtype)
    a_log = ctx.rand(h, shared=True, low=-3.0, high=0.0)[r * hl:(r + 1) * hl].contiguous()
    dt_bias = ctx.rand(h, shared=True, low=-2.0, high=0.0)[r * hl:(r + 1) * hl].contiguous()
    return (q, k, v, gate, beta, a_log, dt_bias, None)


def _sequence_to_heads(x, group):
    """(B, Lloc, H, D) -> (B, W·Lloc, H/W, D): all tokens, this rank's heads."""
    w = dist.get_world_size(group)
    b, lloc, h, d = x.shape
    send = x.reshape(b, lloc, w, h // w, d).permute(2, 0, 1, 3, 4).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # recv[s]: rank s's tokens
    return recv.transpose(0, 1).reshape(b, w * lloc, h // w, d)


def _heads_to_sequence(x, group):
    """(B, W·Lloc, H/W, D) -> (B, Lloc, H, D): this rank's tokens, all heads."""
    w = dist.get_world_size(group)
    b, length, hl, d = x.shape
    send = x.reshape(b, w, length // w, hl, d).transpose(0, 1).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # recv[s]: heads of rank s
    return recv.permute(1, 2, 0, 3, 4).reshape(b, length // w, w * hl, d)


def _delta_rule_chunked(q, k, v, log_decay, beta, chunk):
    """Gated delta rule with a scalar decay per token, chunked.

    q, k: (N, T, Dk); v: (N, T, Dv); log_decay, beta: (N, T); fp32. Within a
    chunk, with L_i the inclusive cumulative log-decay and R_ij = exp(L_i - L_j)
    (j <= i): (I + A) U = beta (V - exp(L) K S0) with A_ij = beta_i (k_i·k_j) R_ij
    (j < i); O = exp(L) Q S0 + (Q Kᵀ ⊙ R) U; S1 = exp(L_C) S0 + (exp(L_C - L) K)ᵀ U.
    """
    n_seq, length, dk = k.shape
    dv = v.shape[-1]
    c = min(chunk, length)
    pad = (-length) % c
    if pad:  # zero tokens at the end change nothing before them
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        log_decay, beta = (F.pad(t, (0, pad)) for t in (log_decay, beta))
    n = (length + pad) // c
    q, k, v = (t.reshape(n_seq, n, c, -1) for t in (q, k, v))
    log_decay, beta = (t.reshape(n_seq, n, c) for t in (log_decay, beta))

    cum = log_decay.cumsum(dim=-1)
    lower = torch.ones(c, c, dtype=torch.bool, device=k.device).tril()
    ratio = (cum.unsqueeze(-1) - cum.unsqueeze(-2)).masked_fill(~lower, float("-inf")).exp()
    a = ((k @ k.transpose(-1, -2)) * ratio).tril(-1) * beta.unsqueeze(-1)
    m = (q @ k.transpose(-1, -2)) * ratio
    system = a + torch.eye(c, dtype=k.dtype, device=k.device)
    decay = cum.exp().unsqueeze(-1)
    u0 = torch.linalg.solve_triangular(system, beta.unsqueeze(-1) * v, upper=False, unitriangular=True)
    wk = torch.linalg.solve_triangular(system, beta.unsqueeze(-1) * decay * k, upper=False, unitriangular=True)
    q_decayed = q * decay
    k_to_end = k * (cum[..., -1:] - cum).exp().unsqueeze(-1)
    end_decay = cum[..., -1].exp()  # (N, n)

    state = torch.zeros(n_seq, dk, dv, dtype=k.dtype, device=k.device)
    out = torch.empty(n_seq, n, c, dv, dtype=k.dtype, device=k.device)
    for i in range(n):
        u = u0[:, i] - wk[:, i] @ state
        out[:, i] = q_decayed[:, i] @ state + m[:, i] @ u
        state = end_decay[:, i, None, None] * state + k_to_end[:, i].transpose(1, 2) @ u
    return out.reshape(n_seq, n * c, dv)[:, :length]


def _gated_delta(q, k, v, gate, beta, a_log, dt_bias):
    b, length, hq, dk = q.shape
    h, dv = v.shape[2], v.shape[3]
    qn = F.normalize(q.float(), p=2, dim=-1, eps=1e-6).repeat_interleave(h // hq, dim=2) * dk ** -0.5
    kn = F.normalize(k.float(), p=2, dim=-1, eps=1e-6).repeat_interleave(h // hq, dim=2)
    log_decay = -torch.exp(a_log.float()) * F.softplus(gate.float() + dt_bias.float())

    def heads_first(t):
        return t.transpose(1, 2).reshape(b * h, length, *t.shape[3:])

    o = _delta_rule_chunked(heads_first(qn), heads_first(kn), heads_first(v.float()), heads_first(log_decay),
                            heads_first(beta.float()), _CHUNK)
    return o.reshape(b, h, length, dv).transpose(1, 2).to(q.dtype)


def reference(q, k, v, gate, beta, a_log, dt_bias, group=None):
    q, k, v = (_sequence_to_heads(t, group) for t in (q, k, v))
    gate, beta = (_sequence_to_heads(t.unsqueeze(-1), group).squeeze(-1) for t in (gate, beta))
    return _heads_to_sequence(_gated_delta(q, k, v, gate, beta, a_log, dt_bias), group)


def traffic(params, world_size, itemsize):
    """Six all-to-alls (q, k, v, gate, beta in; o out), each sending (W-1)/W
    of its tensor. HBM: inputs and output read/written once per all-to-all
    and once in compute. FLOPs: about 7·Dk·Dv per token and head."""
    b, lloc, dk, dv = params["batch"], params["local_seq"], params["key_dim"], params["value_dim"]
    h = _heads(params, world_size)
    moved = b * lloc * h * (2 * dk + 2 * dv + 2)
    return {
        "link_bytes": (world_size - 1) / world_size * moved * itemsize,
        "hbm_bytes": 4 * moved * itemsize,
        "flops": 7 * b * lloc * h * dk * dv,
    }
