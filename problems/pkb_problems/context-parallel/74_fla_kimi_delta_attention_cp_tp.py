"""Kimi Delta Attention (KDA) forward under context parallelism, with an optional tensor-parallel sum.

Process groups (built by ``inputs``): for even W >= 4, TP groups of 2
contiguous ranks {2i, 2i+1} and CP groups of the ranks with the same TP index
{t, t+2, t+4, ...} (Megatron "tp-cp" order), c = W/2; otherwise CP = WORLD
(the WORLD group object is passed, as in the original), no TP (None), c = W.

Arguments on rank r (shapes per rank; Lloc tokens of a sequence of T = c·Lloc
tokens, this rank being number i of its CP group and holding tokens
[i·Lloc, (i+1)·Lloc)):

- ``q``, ``k``, ``g``: (B, Lloc, H, Dk); ``v``: (B, Lloc, H, Dv); ``beta``:
  (B, Lloc, H). Working dtype, drawn independently on every rank (TP peers hold
  different data, whose outputs are summed).
- ``a_log``: (H,), ``dt_bias``: (H·Dk,), working dtype, identical on every rank.
- ``cp_group``, ``tp_group``: as above.

Computation, in fp32, per batch b and head h over the T tokens of the CP group
(gathered in CP-rank order):

    alpha_t = exp(-5 · sigmoid(exp(a_log[h]) · (g_t + dt_bias[h·Dk:(h+1)·Dk])))   (per key channel, Dk)
    b_t     = sigmoid(beta_t)
    q_t     = q_t / max(||q_t||, 1e-12) / sqrt(Dk);   k_t = k_t / max(||k_t||, 1e-12)
    S_0     = 0 (Dk x Dv)
    S_t     = diag(alpha_t) S_{t-1};   S_t += k_t (b_t (v_t - S_tᵀ k_t))ᵀ;   o_t = S_tᵀ q_t

(the projection S_tᵀ k_t uses the already-decayed state). o is cast to the
working dtype; with TP it is summed over the TP group (all-reduce in the
working dtype). Return this rank's own Lloc tokens of it: a new
(B, Lloc, H, Dv) tensor in the working dtype. TP peers return the same values.

The original steps through the tokens in Python; this reference uses an
equivalent chunked (WY-form) evaluation of the same recurrence (chunks of 16
tokens, per-channel decays applied as exp of log-decay differences), which
agrees with the step loop to fp32 rounding.

Sizes (B, Lloc, H, Dk = Dv): tiny (1, 4, 2, 8), default (1, 64, 16, 128) as in
the original, large (1, 1024, 16, 128). At W = 2 or odd W only CP runs (its
five all-gathers still communicate); the TP sum needs even W >= 4.

Fix in pkb: the original's a_log and dt_bias were constant linspaces; pkb draws
them from a shared seed (a_log uniform in [-0.5, 0.5], dt_bias uniform in
[-4, 0], which mixes long-memory and fast-forgetting key channels, so the state
carried across CP shards matters).
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

ID = 74
NAME = "fla_kimi_delta_attention_cp_tp"
CATEGORY = "context-parallel"
ORIGIN = "flash-linear-attention Kimi Delta Attention (KDA), CP + TP"
WORLD_SIZE = "any W >= 2 (TP x CP layout for even W >= 4)"
SIZES = {
    "tiny": {"batch": 1, "local_seq": 4, "heads": 2, "key_dim": 8, "value_dim": 8},
    "default": {"batch": 1, "local_seq": 64, "heads": 16, "key_dim": 128, "value_dim": 128},
    "large": {"batch": 1, "local_seq": 1024, "heads": 16, "key_dim": 128, "value_dim": 128},
}
# The original PKB's arguments and outputs at its default size (facts; docs/pkb-parity.md).
PKB = {
    "params": ("q", "k", "v", "g", "beta", "a_log", "dt_bias", "cp_group", "tp_group"),
    "args": (
        "bf16[1, 64, 16, 128]", "bf16[1, 64, 16, 128]", "bf16[1, 64, 16, 128]", "bf16[1, 64, 16, 128]",
        "bf16[1, 64, 16]", "bf16[16]", "bf16[2048]", "group(all)", "None",
    ),
    "out": "bf16[1, 64, 16, 128]",
}

_TP = 2
_CHUNK = 16
_LOWER_BOUND = -5.0


def _layout(world_size):
    """(tp size, cp size)."""
    return (_TP, world_size // _TP) if world_size >= 4 and world_size % 2 == 0 else (1, world_size)


def inputs(ctx):
    p = ctx.params
    w = ctx.world_size
    tp, cp = _layout(w)
    if tp > 1:
        tp_group = ctx.groups([list(range(i * tp, (i + 1) * tp)) for i in range(cp)])
        cp_group = ctx.groups([list(range(t, w, tp)) for t in range(tp)])
    else:
        # As the original: the WORLD group object for CP, None for the absent TP.
        tp_group, cp_group = None, dist.group.WORLD
    b, lloc, h, dk, dv = p["batch"], p["local_seq"], p["heads"], p["key_dim"], p["value_dim"]
    q = ctx.randn(b, lloc, h, dk)
    k = ctx.randn(b, lloc, h, dk)
    v = ctx.randn(b, lloc, h, dv)
    g = ctx.randn(b, lloc, h, dk)
    beta = ctx.randn(b, lloc, h)
    a_log = ctx.rand(h, shared=True, low=-0.5, high=0.5)
    dt_bias = ctx.rand(h * dk, shared=True, low=-4.0, high=0.0)
    return (q, k, v, g, beta, a_log, dt_bias, cp_group, tp_group)


def _gather_sequence(x, group):
    """All-gather along dim 1 (tokens), in group-rank order."""
    size = dist.get_world_size(group)
    send = x.transpose(0, 1).contiguous()
    recv = torch.empty((size * send.shape[0], *send.shape[1:]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(recv, send, group=group)
    return recv.transpose(0, 1)


def _delta_rule_chunked(q, k, v, log_decay, beta, chunk):
    """Gated delta rule with per-key-channel decay, chunked.

    q, k: (N, T, Dk); v: (N, T, Dv); log_decay: (N, T, Dk) (<= 0); beta: (N, T).
    Returns o (N, T, Dv), all fp32. Within a chunk, with L_i the inclusive
    cumulative log-decay and R_ij = exp(L_i - L_j) (j <= i), the chunk's
    updates u solve (I + A) U = beta (V - (K ⊙ exp L) S0) with
    A_ij = beta_i Σ_d k_i k_j R_ij (j < i); then O = (Q ⊙ exp L) S0 + M U with
    M_ij = Σ_d q_i k_j R_ij (j <= i), and S1 = exp(L_C) ⊙ S0 + (K ⊙ exp(L_C - L))ᵀ U.
    """
    n_seq, length, dk = k.shape
    dv = v.shape[-1]
    c = min(chunk, length)
    pad = (-length) % c
    if pad:  # zero tokens at the end change nothing before them
        q, k, v, log_decay, beta = (F.pad(t, (0, 0, 0, pad)) if t.dim() == 3 else F.pad(t, (0, pad))
                                    for t in (q, k, v, log_decay, beta))
    n = (length + pad) // c
    q, k, v, log_decay = (t.reshape(n_seq, n, c, -1) for t in (q, k, v, log_decay))
    beta = beta.reshape(n_seq, n, c)

    cum = log_decay.cumsum(dim=2)
    lower = torch.ones(c, c, dtype=torch.bool, device=k.device).tril()
    diff = (cum.unsqueeze(3) - cum.unsqueeze(2)).masked_fill(~lower[:, :, None], float("-inf"))
    ratio = diff.exp()  # (N, n, C, C, Dk), zero above the diagonal
    a = torch.einsum("xnid,xnjd,xnijd->xnij", k, k, ratio).tril(-1) * beta.unsqueeze(-1)
    m = torch.einsum("xnid,xnjd,xnijd->xnij", q, k, ratio)
    eye = torch.eye(c, dtype=k.dtype, device=k.device)
    system = a + eye
    u0 = torch.linalg.solve_triangular(system, beta.unsqueeze(-1) * v, upper=False, unitriangular=True)
    wk = torch.linalg.solve_triangular(system, beta.unsqueeze(-1) * k * cum.exp(), upper=False,
                                       unitriangular=True)
    q_decayed = q * cum.exp()
    k_to_end = k * (cum[:, :, -1:] - cum).exp()
    end_decay = cum[:, :, -1].exp()  # (N, n, Dk)

    state = torch.zeros(n_seq, dk, dv, dtype=k.dtype, device=k.device)
    out = torch.empty(n_seq, n, c, dv, dtype=k.dtype, device=k.device)
    for i in range(n):
        u = u0[:, i] - wk[:, i] @ state
        out[:, i] = q_decayed[:, i] @ state + m[:, i] @ u
        state = end_decay[:, i].unsqueeze(-1) * state + k_to_end[:, i].transpose(1, 2) @ u
    return out.reshape(n_seq, n * c, dv)[:, :length]


def _kda(q, k, v, g, beta, a_log, dt_bias):
    b, length, h, dk = q.shape
    dv = v.shape[-1]
    gate = torch.exp(a_log.float()).view(1, 1, h, 1) * (g.float() + dt_bias.float().view(h, dk))
    log_decay = _LOWER_BOUND * torch.sigmoid(gate)
    qn = F.normalize(q.float(), p=2, dim=-1) * dk ** -0.5
    kn = F.normalize(k.float(), p=2, dim=-1)

    def heads_first(t):
        return t.transpose(1, 2).reshape(b * h, length, t.shape[-1])

    o = _delta_rule_chunked(heads_first(qn), heads_first(kn), heads_first(v.float()), heads_first(log_decay),
                            torch.sigmoid(beta.float()).transpose(1, 2).reshape(b * h, length), _CHUNK)
    return o.reshape(b, h, length, dv).transpose(1, 2).to(q.dtype)


def reference(q, k, v, g, beta, a_log, dt_bias, cp_group=None, tp_group=None):
    cp_size = dist.get_world_size(cp_group)
    cp_rank = dist.get_rank(cp_group)
    if cp_size > 1:
        q, k, v, g, beta = (_gather_sequence(t, cp_group) for t in (q, k, v, g, beta))
    lloc = q.shape[1] // cp_size
    out = _kda(q, k, v, g, beta, a_log, dt_bias)[:, cp_rank * lloc:(cp_rank + 1) * lloc].contiguous()
    if tp_group is not None and dist.get_world_size(tp_group) > 1:
        dist.all_reduce(out, group=tp_group)
    return out


def traffic(params, world_size, itemsize):
    """CP all-gathers of q, k, v, g, beta: each rank's shard reaches c-1 peers;
    TP all-reduce of this rank's output slice (ring, 2(t-1)/t). HBM: the
    gathered inputs written and read, the output written. FLOPs: about
    7·Dk·Dv per token and head over the whole CP sequence (decay, projection,
    update, readout), computed redundantly by every CP rank."""
    tp, cp = _layout(world_size)
    b, lloc, h, dk, dv = (params[n] for n in ("batch", "local_seq", "heads", "key_dim", "value_dim"))
    shard = b * lloc * h * (3 * dk + dv + 1)
    out = b * lloc * h * dv
    return {
        "link_bytes": ((cp - 1) * shard + 2 * (tp - 1) / tp * out) * itemsize,
        "hbm_bytes": (2 * cp * shard + out) * itemsize,
        "flops": 7 * b * h * cp * lloc * dk * dv,
    }
