"""Causal linear attention in its three forms, plain and gated.

Drop the softmax and the product becomes associative, (Q K^T) V = Q (K^T V),
and causal attention becomes a recurrence on a fixed-size state:

    M_t = gamma_t * M_{t-1} + k_t v_t^T      (state: D_k x D_v)
    y_t = M_t^T q_t

gamma_t = 1 is plain linear attention; a constant gamma < 1 is RetNet's
decay; a gamma_t computed from the token is the data-dependent gate of
Mamba-2 / gated linear attention. Each is written three ways, as in fla's
``naive.py`` files, and the tests check the three agree:

* parallel: Y = ((Q K^T) * D) V with D[t, s] = prod_{r=s+1..t} gamma_r, O(N^2)
* recurrent: the loop above, one token at a time, O(N D_k D_v)
* chunked: parallel inside chunks of C tokens, recurrent across chunks,
  O(N C D + N D_k D_v), how these models are trained.

Shapes: q, k (..., N, D_k); v (..., N, D_v); gamma (..., N) in (0, 1], or a vector gate
(..., N, D_k) with as many dims as q (gated linear attention: M_t = diag(gamma_t) M_{t-1} + k_t v_t^T);
outputs (..., N, D_v). Any leading batch dims, any N (not only multiples of C).

The tuned CPU path: without autograd and with more tokens than one block (BLOCK_TOKENS), the plain
and scalar-gated chunked forms run the same maths block by block, in :mod:`attn_core.blocked`
(:func:`attn_core.blocked.runs_blocked` says whether a call does; a vector gate never does). The
library changes no process-wide setting (allocator, threads, default dtype).

The delta rule and the gated delta rule live in :mod:`attn_core.delta` and are re-exported here.

Decays are handled in log space, log D[t, s] = sum_{r=s+1..t} log gamma_r,
summed without subtracting two large prefix sums, so gamma as small as 1e-30
neither underflows early nor loses precision. The one exception is the no-grad blocked path of a
scalar gate: when every chunk's total decay is within :func:`attn_core.blocked.factor_bound` and
the queries are small enough that the scaled ones stay finite (checked once per call), it factors
the decay inside a chunk onto the queries and keys, and the scores become one plain matrix
product; otherwise it too uses the segment sums.
"""

from __future__ import annotations

import torch

from . import _checks, blocked
from ._chunking import (
    _check_chunk,
    _check_gamma,
    _chunk_states,
    _decay_matrix,
    _is_vector_gate,
    _log_gamma,
    _to_chunks,
    segment_sum,
)
from .blocked import BLOCK_TOKENS, factor_bound, runs_blocked  # noqa: F401 - re-exported

# the delta rule is a topic of its own (attn_core/delta.py), re-exported here: attn_core.linear.delta_rule_*
from .delta import (
    DEFAULT_DELTA_CHUNK,
    delta_rule_chunked,
    delta_rule_parallel,
    delta_rule_recurrent,
    gated_delta_rule_chunked,
    gated_delta_rule_parallel,
    gated_delta_rule_recurrent,
)

__all__ = [
    "causal_linear_attention_parallel",
    "causal_linear_attention_recurrent",
    "causal_linear_attention_chunked",
    "causal_linear_attention_chunked_loop",
    "gated_linear_attention_parallel",
    "gated_linear_attention_recurrent",
    "gated_linear_attention_chunked",
    "gated_linear_attention_chunked_loop",
    "linear_attention_step",
    "segment_sum",
    "factor_bound",
    "runs_blocked",
    "DEFAULT_CHUNK",
    "DEFAULT_GATED_CHUNK",
    "DEFAULT_VECTOR_GATED_CHUNK",
    "delta_rule_parallel",
    "delta_rule_recurrent",
    "delta_rule_chunked",
    "gated_delta_rule_parallel",
    "gated_delta_rule_recurrent",
    "gated_delta_rule_chunked",
    "DEFAULT_DELTA_CHUNK",
]

# Default chunk sizes C: the fastest by measurement (how they were chosen: bench/README.md). A vector
# gate builds a (C, C, D_k) decay tensor per chunk, whose work grows with C: it takes a smaller C.
DEFAULT_CHUNK = 64
DEFAULT_GATED_CHUNK = 64
DEFAULT_VECTOR_GATED_CHUNK = 16


# --------------------------------------------------------------------------- chunk sizes
def _gated_chunk(chunk, gamma: torch.Tensor, q: torch.Tensor) -> int:
    """The chunk size of a gated form: the one given, or the default for a scalar or a vector gate."""
    if chunk is None:
        return DEFAULT_VECTOR_GATED_CHUNK if _is_vector_gate(gamma, q) else DEFAULT_GATED_CHUNK
    return _check_chunk(chunk)



# --------------------------------------------------------------------------- plain
def causal_linear_attention_parallel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Parallel form: Y = ((Q K^T) * T) V with T (chapter 2's calligraphic T) the lower-triangular 0/1 mask.

    q, k: (..., N, D_k); v: (..., N, D_v) -> (..., N, D_v). O(N^2 D) like
    softmax attention, in two matmuls: the form to write down first (training uses the
    chunked form).
    """
    n, _, _ = _checks.qkv(q, k, v)
    mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()  # (N, N)
    scores = (q @ k.transpose(-2, -1)).masked_fill(~mask, 0.0)  # (..., N, N)
    return scores @ v  # (..., N, D_v)


def causal_linear_attention_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Recurrent form: M_t = M_{t-1} + k_t v_t^T, y_t = M_t^T q_t.

    q, k: (..., N, D_k); v: (..., N, D_v) -> (..., N, D_v). The state M is a
    D_k x D_v matrix whatever N is: the inference form. A Python loop over
    tokens, written for clarity, not speed.
    """
    return gated_linear_attention_recurrent(q, k, v, None)


def causal_linear_attention_chunked_loop(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int = DEFAULT_CHUNK
) -> torch.Tensor:
    """Chunked form, readable version with a loop over chunks (the algorithm as usually first written).

    For chunk c of C tokens: y_c = tril(Q_c K_c^T) V_c + Q_c M_{c-1}, then
    M_c = M_{c-1} + K_c^T V_c. The last chunk may be shorter.
    q, k: (..., N, D_k); v: (..., N, D_v) -> (..., N, D_v).
    """
    n, d_k, d_v = _checks.qkv(q, k, v)
    chunk = _check_chunk(chunk)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    state = q.new_zeros(*lead, d_k, d_v)  # (..., D_k, D_v)
    outs = []
    for s in range(0, n, chunk):
        qc, kc, vc = q[..., s:s + chunk, :], k[..., s:s + chunk, :], v[..., s:s + chunk, :]
        intra = causal_linear_attention_parallel(qc, kc, vc)  # (..., C, D_v)
        outs.append(intra + qc @ state)
        state = state + kc.transpose(-2, -1) @ vc
    return torch.cat(outs, dim=-2)


def causal_linear_attention_chunked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int = DEFAULT_CHUNK
) -> torch.Tensor:
    """Chunked form, vectorized over chunks (no Python loop over chunks).

    Without autograd and with more than BLOCK_TOKENS tokens in all it runs the same maths block
    by block instead (:mod:`attn_core.blocked`: a loop over sequences and blocks, bounded buffers).
    The same algorithm as :func:`causal_linear_attention_chunked_loop`: every chunk's
    K_c^T V_c comes from one batched matmul, and the state chunk c reads,
    M_{c-1} = sum_{c' < c} K_{c'}^T V_{c'}, is their exclusive prefix sum over the chunk
    axis. Then y_c = tril(Q_c K_c^T) V_c + Q_c M_{c-1}, the second product added in place.
    Its matmuls are the algorithm's 2 N C (D_k + D_v) + 4 N D_k D_v FLOPs (N a multiple of C),
    nothing more: the prefix sum is additions only.
    q, k: (..., N, D_k); v: (..., N, D_v) -> (..., N, D_v).
    """
    n, d_k, d_v = _checks.qkv(q, k, v)
    chunk = _check_chunk(chunk)
    c = min(chunk, n)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if blocked.use_blocks(lead, n, q, k, v):
        views = [x.expand(*lead, *x.shape[-2:]) for x in (q, k, v)]  # (..., N, D), no copy
        return blocked.blocked_chunked(*views, None, c, blocked.BLOCK_TOKENS)
    qc, kc, vc = (_to_chunks(x, lead, c) for x in (q, k, v))  # (B', N/C, C, D_k or D_v)
    nb, t = qc.shape[:2]  # sequences B', chunks N/C
    qc, kc, vc = qc.flatten(0, 1), kc.flatten(0, 1), vc.flatten(0, 1)  # (B' N/C, C, D): one batch dim
    y = (qc @ kc.mT).tril_() @ vc  # (B' N/C, C, D_v): tril(Q_c K_c^T) V_c, inside each chunk
    kv = kc.mT @ vc  # (B' N/C, D_k, D_v): each chunk's contribution K_c^T V_c
    # Exclusive prefix sum over chunks: shift the rows down by one (row c holds chunk c - 1's
    # K^T V), zero each sequence's first row, cumsum down the chunk axis in place. The rows get
    # 16 spare columns: a cumsum reading down a column 2^k bytes apart (16 KiB for D = 64)
    # thrashes the cache and is several times slower.
    rows = kv.new_empty(nb * t + 1, d_k * d_v + 16)  # (B' N/C + 1, D_k D_v + 16); spare columns unused
    rows[1:, : d_k * d_v] = kv.flatten(-2)  # row r holds chunk r - 1's K^T V
    rows[::t] = 0.0  # rows 0, N/C, 2 N/C, ...: the first chunk of each sequence reads M = 0
    states = rows[:-1, : d_k * d_v]  # (B' N/C, D_k D_v)
    states.view(nb, t, d_k * d_v).cumsum_(1)  # (B', N/C, D_k D_v): M_{c-1}, in place
    y.baddbmm_(qc, states.view(nb * t, d_k, d_v))  # y += Q_c M_{c-1}, in place
    return y.view(*lead, t * c, d_v)[..., :n, :]  # (..., N, D_v)


# --------------------------------------------------------------------------- gated
def gated_linear_attention_parallel(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gamma: torch.Tensor
) -> torch.Tensor:
    """Parallel gated form: Y = ((Q K^T) * D) V, D[t, s] = prod_{r=s+1..t} gamma_r.

    Unrolling M_t = gamma_t M_{t-1} + k_t v_t^T gives
    y_t = sum_{s<=t} D[t, s] (q_t . k_s) v_s. D is built in log space by
    :func:`segment_sum`. A vector gate (..., N, D_k) decays each key dimension i on its own,
    M_t = diag(gamma_t) M_{t-1} + k_t v_t^T, so y_t = sum_{s<=t} sum_i q_ti k_si D_i[t, s] v_s:
    one decay matrix per key dimension, (..., D_k, N, N) of memory.
    q, k: (..., N, D_k); v: (..., N, D_v); gamma: (..., N) or (..., N, D_k) -> (..., N, D_v).
    """
    _checks.qkv(q, k, v)
    gamma = _check_gamma(gamma, q, vector_ok=True)
    if _is_vector_gate(gamma, q):
        decay = torch.exp(segment_sum(_log_gamma(gamma, q.dtype).mT)).to(q.dtype)  # (..., D_k, N, N)
        scores = torch.einsum("...ti,...si,...its->...ts", q, k, decay)  # (..., N, N)
        return scores @ v  # (..., N, D_v)
    decay = torch.exp(segment_sum(_log_gamma(gamma, q.dtype)))  # (..., N, N), 0 above diagonal
    scores = (q @ k.transpose(-2, -1)) * decay.to(q.dtype)  # (..., N, N)
    return scores @ v  # (..., N, D_v)


def gated_linear_attention_recurrent(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gamma: torch.Tensor | None
) -> torch.Tensor:
    """Recurrent gated form: M_t = gamma_t M_{t-1} + k_t v_t^T, y_t = M_t^T q_t.

    q, k: (..., N, D_k); v: (..., N, D_v); gamma: (..., N), (..., N, D_k) (a vector gate:
    M_t = diag(gamma_t) M_{t-1} + k_t v_t^T) or None (= 1) -> (..., N, D_v). One token at a
    time, through :func:`linear_attention_step` for a scalar gate.
    """
    n, d_k, d_v = _checks.qkv(q, k, v)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    vector = False
    if gamma is not None:
        gamma = _check_gamma(gamma, q, vector_ok=True)
        vector = _is_vector_gate(gamma, q)
        lead = torch.broadcast_shapes(lead, gamma.shape[:-2] if vector else gamma.shape[:-1])
    state = q.new_zeros(*lead, d_k, d_v)  # (..., D_k, D_v)
    ys = []
    for t in range(n):
        if vector:  # row i of the state decays by gamma_t[i]
            state = gamma[..., t, :, None].to(q.dtype) * state + k[..., t, :, None] * v[..., t, None, :]
            ys.append((q[..., t, None, :] @ state)[..., 0, :])  # (..., D_v)
            continue
        g = 1.0 if gamma is None else gamma[..., t]
        y, state = linear_attention_step(state, q[..., t, :], k[..., t, :], v[..., t, :], g)
        ys.append(y)
    return torch.stack(ys, dim=-2)  # (..., N, D_v)


def _vector_gate_chunk(qc, kc, vc, log_g):
    """One chunk (or a batch of chunks) under a vector gate, everything in log space.

    qc, kc: (..., C, D_k); vc: (..., C, D_v); log_g: (..., C, D_k), log gamma per key dimension.
    With l_i = sum of log gamma from the chunk start to token i (a D_k vector):
        intra_i = sum_{j<=i} sum_d q_id k_jd exp(l_id - l_jd) v_j,   (..., C, D_v)
        q_in_i  = q_i * exp(l_i)          (reads the state entering the chunk)
        k_out_j = k_j * exp(l_C - l_j) (writes into the state leaving it)
    Every exponent is a sum of logs of gates <= 1, so it is <= 0: nothing overflows. (The factored
    form (q_i * exp(l_i)) . (k_j * exp(-l_j)) needs exp(-l_j), which overflows once the gates since
    the chunk start multiply below 1 / float32's largest value, 2.9e-39.) The exact decays cost a
    (C, C, D_k) tensor.
    Returns (intra, q_in, k_out, log decay of the whole chunk (..., D_k)).
    """
    dt = qc.dtype
    ell = log_g.cumsum(-2)  # (..., C, D_k): l_i, log decay from the chunk start
    decay = _decay_matrix(log_g.mT).to(dt)  # (..., D_k, C, C): exp(l_i - l_j) per key dimension
    scores = torch.einsum("...id,...jd,...dij->...ij", qc, kc, decay)  # (..., C, C), 0 above diagonal
    q_in = qc * torch.exp(ell).to(dt)  # (..., C, D_k)
    k_out = kc * torch.exp(ell[..., -1:, :] - ell).to(dt)  # (..., C, D_k)
    return scores @ vc, q_in, k_out, ell[..., -1, :]


def gated_linear_attention_chunked_loop(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gamma: torch.Tensor, chunk: int | None = None
) -> torch.Tensor:
    """Chunked gated form, readable version with a loop over chunks.

    Inside chunk c, l_i = sum of log gamma from the chunk start to token i:
        y_i = sum_{j<=i in c} exp(l_i - l_j) (q_i . k_j) v_j + exp(l_i) M_{c-1}^T q_i
        M_c = exp(l_C) M_{c-1} + sum_j exp(l_C - l_j) k_j v_j^T
    All exponents are <= 0, so nothing overflows. A vector gate (..., N, D_k) does the same per
    key dimension (see :func:`_vector_gate_chunk`).
    q, k: (..., N, D_k); v: (..., N, D_v); gamma: (..., N) or (..., N, D_k) -> (..., N, D_v).
    """
    n, d_k, d_v = _checks.qkv(q, k, v)
    gamma = _check_gamma(gamma, q, vector_ok=True)
    chunk = _gated_chunk(chunk, gamma, q)
    vector = _is_vector_gate(gamma, q)
    log_g = _log_gamma(gamma, q.dtype)  # (..., N) or (..., N, D_k)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2],
                                  gamma.shape[:-2] if vector else gamma.shape[:-1])
    state = q.new_zeros(*lead, d_k, d_v)  # (..., D_k, D_v)
    outs = []
    for s in range(0, n, chunk):
        qc, kc, vc = q[..., s:s + chunk, :], k[..., s:s + chunk, :], v[..., s:s + chunk, :]
        if vector:
            intra, q_in, k_out, l_C = _vector_gate_chunk(qc, kc, vc, log_g[..., s:s + chunk, :])
            outs.append(intra + q_in @ state)
            state = torch.exp(l_C).to(q.dtype)[..., :, None] * state + k_out.mT @ vc
            continue
        g = log_g[..., s:s + chunk]  # (..., C)
        ell = torch.cumsum(g, dim=-1)  # (..., C): log decay from chunk start to i
        decay = torch.exp(segment_sum(g)).to(q.dtype)  # (..., C, C)
        intra = ((qc @ kc.transpose(-2, -1)) * decay) @ vc  # (..., C, D_v)
        inter = torch.exp(ell).to(q.dtype)[..., None] * (qc @ state)  # (..., C, D_v)
        outs.append(intra + inter)
        to_end = torch.exp(ell[..., -1:] - ell).to(q.dtype)  # (..., C): decay from j to chunk end
        state = torch.exp(ell[..., -1]).to(q.dtype)[..., None, None] * state + (
            kc * to_end[..., None]
        ).transpose(-2, -1) @ vc
    return torch.cat(outs, dim=-2)


def _vector_chunk_states(log_a: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """:func:`_chunk_states` for a vector decay: M_c = diag(a_c) M_{c-1} + U_c, row by row.

    log_a: (B', T, D_k); u: (B', T, D_k, D_v) -> (B', T, D_k, D_v), the state entering each chunk.
    Each key dimension is an independent scalar recurrence on one row of the state.
    """
    rows = u.permute(0, 2, 1, 3)[..., None, :]  # (B', D_k, T, 1, D_v): row d of every chunk's U
    out = _chunk_states(log_a.mT, rows)  # (B', D_k, T, 1, D_v)
    return out[..., 0, :].permute(0, 2, 1, 3)  # (B', T, D_k, D_v)


def gated_linear_attention_chunked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gamma: torch.Tensor, chunk: int | None = None
) -> torch.Tensor:
    """Chunked gated form, vectorized over chunks (no Python loop over chunks).

    Same maths as :func:`gated_linear_attention_chunked_loop`. The states passed between chunks
    obey M_c = a_c M_{c-1} + U_c with a_c the chunk's total decay; their solution is a weighted
    sum over earlier chunks with weights exp(segment_sum(log a)), computed by
    :func:`_chunk_states` as small matmuls over the chunk axis (Mamba-2's SSD), in blocks so the
    cost stays linear in N. A vector gate (..., N, D_k) runs the same per key dimension, its
    decays inside a chunk exact in log space (a (C, C, D_k) tensor per chunk). For a scalar gate
    without autograd and with more than BLOCK_TOKENS tokens in all, the same maths runs block by
    block instead (:mod:`attn_core.blocked`, which carries the state from chunk to chunk in a loop).
    q, k: (..., N, D_k); v: (..., N, D_v); gamma: (..., N) or (..., N, D_k) -> (..., N, D_v);
    chunk None: DEFAULT_GATED_CHUNK for a scalar gate, DEFAULT_VECTOR_GATED_CHUNK for a vector one.
    """
    n, _, d_v = _checks.qkv(q, k, v)
    gamma = _check_gamma(gamma, q, vector_ok=True)
    chunk = _gated_chunk(chunk, gamma, q)
    c = min(chunk, n)
    dt = q.dtype
    if _is_vector_gate(gamma, q):
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], gamma.shape[:-2])
        qc, kc, vc = (_to_chunks(x, lead, c) for x in (q, k, v))  # (B', N/C, C, D_k or D_v)
        log_g = _to_chunks(_log_gamma(gamma, dt), lead, c)  # (B', N/C, C, D_k); padding: gamma = 1
        t = qc.shape[1]
        intra, q_in, k_out, log_a = _vector_gate_chunk(qc, kc, vc, log_g)
        states = _vector_chunk_states(log_a, k_out.mT @ vc)  # (B', N/C, D_k, D_v)
        y = intra + q_in @ states  # (B', N/C, C, D_v)
        return y.reshape(*lead, t * c, d_v)[..., :n, :]  # (..., N, D_v)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], gamma.shape[:-1])
    if blocked.use_blocks(lead, n, q, k, v, gamma):
        views = [x.expand(*lead, *x.shape[-2:]) for x in (q, k, v)]  # (..., N, D), no copy
        log_g = _log_gamma(gamma, dt).expand(*lead, n)  # (..., N)
        return blocked.blocked_chunked(*views, log_g, c, blocked.BLOCK_TOKENS)
    qc, kc, vc = (_to_chunks(x, lead, c) for x in (q, k, v))  # (B', N/C, C, D_k or D_v)
    # pad with gamma = 1 (log 0) and zero q, k, v: padded tokens change nothing
    log_g = _to_chunks(_log_gamma(gamma, dt)[..., None], lead, c)[..., 0]  # (B', N/C, C)
    t = qc.shape[1]

    ell = torch.cumsum(log_g, dim=-1)  # (B', N/C, C): log decay from chunk start to i
    to_end = torch.exp(ell[..., -1:] - ell).to(dt)  # (B', N/C, C): decay from j to chunk end
    u = (kc * to_end[..., None]).mT @ vc  # (B', N/C, D_k, D_v): U_c
    # state entering chunk c: sum_{c' < c} exp(log a_{c'+1} + ... + log a_{c-1}) U_{c'}
    states = _chunk_states(ell[..., -1], u)  # (B', N/C, D_k, D_v), 0 for c = 0
    inter = (qc @ states).mul_(torch.exp(ell).to(dt)[..., None])  # (B', N/C, C, D_v): exp(l_i) M_{c-1}^T q_i
    scores = (qc @ kc.mT).mul_(_decay_matrix(log_g).to(dt))  # (B', N/C, C, C)
    inter.flatten(0, 1).baddbmm_(scores.flatten(0, 1), vc.flatten(0, 1))  # y = inter + scores @ vc, in place
    return inter.view(*lead, t * c, d_v)[..., :n, :]  # (..., N, D_v)


# --------------------------------------------------------------------------- decode
def linear_attention_step(state: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          gamma=1.0):
    """One decode step: M' = gamma M + k v^T, y = M'^T q. Returns (y, M').

    state: (..., D_k, D_v); q, k: (..., D_k); v: (..., D_v);
    gamma: a number or a tensor of the leading shape (...), in (0, 1].
    Cost O(D_k D_v) per token, whatever the number of tokens already seen.
    """
    _checks.tensor("state", state, min_dim=2)
    for name, t in (("q", q), ("k", k), ("v", v)):
        _checks.tensor(name, t, min_dim=1)
    d_k, d_v = state.shape[-2:]
    if q.shape[-1] != d_k or k.shape[-1] != d_k:
        raise ValueError(
            f"q and k must have last dim D_k = {d_k} (state {tuple(state.shape)}), "
            f"got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    if v.shape[-1] != d_v:
        raise ValueError(
            f"v must have last dim D_v = {d_v} (state {tuple(state.shape)}), got {tuple(v.shape)}"
        )
    if isinstance(gamma, torch.Tensor):
        if gamma.device.type != "meta" and not bool(((gamma > 0) & (gamma <= 1)).all()):
            raise ValueError(f"gamma must lie in (0, 1], got {gamma}")
        gamma = gamma.to(state.dtype)[..., None, None]  # (..., 1, 1), in the state's dtype
    elif not 0 < gamma <= 1:
        raise ValueError(f"gamma must lie in (0, 1], got {gamma!r}")
    state = gamma * state + k[..., :, None] * v[..., None, :]  # (..., D_k, D_v)
    y = (q[..., None, :] @ state)[..., 0, :]  # (..., D_v)
    return y, state
