"""Ring attention (context parallelism): each rank holds a slice of the sequence, K and V travel.

Layouts: "contiguous" (rank r holds tokens r N/c ... (r + 1) N/c - 1, any N) and "zigzag" (2c
chunks, rank r holds chunks r and 2c - 1 - r: the same causal work on every rank).
"""

from __future__ import annotations

import math
import time

import torch

from .. import _checks
from ..attention import causal_mask
from .comm import _exchange, _gather_meta, _group, _wait

#: how a sequence is split over c ranks (see :func:`chunk_ids`)
LAYOUTS: tuple[str, ...] = ("contiguous", "zigzag")


def chunk_ids(rank: int, size: int, layout: str = "contiguous") -> tuple[int, ...]:
    """Which chunks of the sequence rank ``rank`` of ``size`` holds, in order.

    contiguous: the sequence is cut into ``size`` chunks and rank r holds chunk r.
    zigzag: it is cut into 2 size chunks and rank r holds chunks r and 2 size - 1 - r, one early
    and one late, so every rank does the same causal work (the layout of Llama 3's context
    parallelism).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")
    return (rank,) if layout == "contiguous" else (rank, 2 * size - 1 - rank)


def shard_sequence(x: torch.Tensor, size: int, layout: str = "contiguous",
                   dim: int = -2) -> list[torch.Tensor]:
    """Split ``x`` along ``dim`` (the token axis) into the ``size`` shards of a layout.

    contiguous: torch.tensor_split (shard lengths differ by at most one, any N);
    zigzag: N must be divisible by 2 size.
    """
    size = _checks.positive_int("size", size)
    n = x.shape[dim]
    if layout == "zigzag":
        if n % (2 * size):
            raise ValueError(f"x: the zigzag layout needs N divisible by 2 x {size} = {2 * size}, "
                             f"got N = {n}")
        chunks = x.chunk(2 * size, dim=dim)
        return [torch.cat([chunks[i] for i in chunk_ids(r, size, layout)], dim=dim) for r in range(size)]
    chunk_ids(0, size, layout)  # validates the name
    return list(x.tensor_split(size, dim=dim))


def unshard_sequence(shards: list[torch.Tensor], layout: str = "contiguous", dim: int = -2) -> torch.Tensor:
    """The inverse of :func:`shard_sequence`: the full sequence from every rank's shard."""
    size = len(shards)
    if layout == "contiguous":
        return torch.cat(shards, dim=dim)
    chunks = [None] * (2 * size)
    for r, s in enumerate(shards):
        for i, piece in zip(chunk_ids(r, size, layout), s.chunk(2, dim=dim)):
            chunks[i] = piece
    return torch.cat(chunks, dim=dim)


def _block_forward(q, k, v, scale, diagonal: bool):
    """Attention of one query chunk on one key chunk, with each row's logsumexp.

    q: (..., n, D); k: (..., m, D); v: (..., m, D_v) -> out (..., n, D_v), lse (..., n).
    diagonal: the two chunks are the same tokens, so the causal mask applies (n = m).
    """
    s = (q @ k.transpose(-2, -1)) * scale  # (..., n, m) scores of this block
    if diagonal:
        s = s.masked_fill(~causal_mask(s.shape[-1], s.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # (..., n); every row has >= 1 visible key
    return torch.exp(s - lse[..., None]) @ v, lse


def _merge(out, lse, out_blk, lse_blk):
    """Combine two partial softmax results over disjoint key sets (the online softmax)."""
    if out is None:
        return out_blk, lse_blk
    new = torch.logaddexp(lse, lse_blk)  # (..., n)
    return out * torch.exp(lse - new)[..., None] + out_blk * torch.exp(lse_blk - new)[..., None], new


def _block_backward(q, k, v, out, lse, dout, scale, diagonal: bool):
    """Gradients of one block, recomputing its weights from the saved logsumexp.

    Returns (dq, dk, dv) of this block; delta = rowsum(dout * out) is the softmax's correction.
    """
    s = (q @ k.transpose(-2, -1)) * scale  # (..., n, m)
    if diagonal:
        s = s.masked_fill(~causal_mask(s.shape[-1], s.device), float("-inf"))
    p = torch.exp(s - lse[..., None])  # (..., n, m) this block's share of the weights
    dv = p.transpose(-2, -1) @ dout  # (..., m, D_v)
    dp = dout @ v.transpose(-2, -1)  # (..., n, m)
    delta = (dout * out).sum(-1, keepdim=True)  # (..., n, 1)
    ds = p * (dp - delta) * scale  # (..., n, m)
    return ds @ k, ds.transpose(-2, -1) @ q, dv


def _split_kv(kv, d_k: int, n_chunks: int):
    """[(k, v) of each chunk] of a block stored as cat([k, v], -1)."""
    ks, vs = kv[..., :d_k], kv[..., d_k:]
    return list(zip(ks.chunk(n_chunks, -2), vs.chunk(n_chunks, -2))) if n_chunks > 1 else [(ks, vs)]


def _pairs(qids, kids, causal):
    """(i, j, diagonal) for query chunk i and key chunk j that must be computed."""
    out = []
    for i, a in enumerate(qids):
        for j, c in enumerate(kids):
            if not causal or a > c:
                out.append((i, j, False))
            elif a == c:
                out.append((i, j, True))
    return out


_STATS: dict = {}


def ring_attention_stats() -> dict:
    """What the last :func:`ring_attention` call on this rank did.

    ``scores``: query-key pairs it evaluated in the forward pass (its share of the work);
    ``compute_s`` and ``wait_s``: seconds spent computing and waiting for the next K, V block
    after computing (0 when the transfer was hidden behind the compute), per ring step.
    """
    return dict(_STATS)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, group, layout, lens):
        r, c = _group(group)
        scale = 1.0 / math.sqrt(q.shape[-1])
        n_chunks = len(chunk_ids(0, c, layout))
        qs = q.chunk(n_chunks, dim=-2) if n_chunks > 1 else (q,)
        qids = chunk_ids(r, c, layout)
        outs, lses = [None] * n_chunks, [None] * n_chunks
        kv = torch.cat([k, v], dim=-1)  # (..., n_r, D + D_v): one message per step
        scores, compute_s, wait_s = 0, [], []
        for s in range(c):
            src = (r - s) % c
            reqs, nxt = [], None
            if s < c - 1:  # start passing the block on before computing with it
                nxt = kv.new_empty(*kv.shape[:-2], lens[(src - 1) % c], kv.shape[-1])
                reqs = _exchange("ring K, V (forward)", kv, (r + 1) % c, nxt, (r - 1) % c, group, tag=s)
            t0 = time.perf_counter()
            kchunks = _split_kv(kv, k.shape[-1], n_chunks)
            for i, j, diag in _pairs(qids, chunk_ids(src, c, layout), causal):
                o_b, l_b = _block_forward(qs[i], *kchunks[j], scale, diag)
                outs[i], lses[i] = _merge(outs[i], lses[i], o_b, l_b)
                scores += qs[i].shape[-2] * kchunks[j][0].shape[-2]
            t1 = time.perf_counter()
            _wait(reqs)
            compute_s.append(t1 - t0)
            wait_s.append(time.perf_counter() - t1)
            if nxt is not None:
                kv = nxt
        out, lse = torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
        _STATS.clear()
        _STATS.update(scores=scores, compute_s=compute_s, wait_s=wait_s)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.meta = (causal, group, layout, lens, scale)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        causal, group, layout, lens, scale = ctx.meta
        r, c = _group(group)
        n_chunks = len(chunk_ids(0, c, layout))
        split = (lambda x, dim=-2: x.chunk(n_chunks, dim=dim)) if n_chunks > 1 else (lambda x, dim=-2: (x,))
        qs, outs, douts, lses = split(q), split(out), split(dout.contiguous()), split(lse, -1)
        qids = chunk_ids(r, c, layout)
        dk_dim = k.shape[-1]
        dq = [torch.zeros_like(x) for x in qs]
        kv = torch.cat([k, v], dim=-1)
        dkv_own = torch.zeros_like(kv)
        dkv = None  # the accumulator of the visiting block, created at its first stop after home
        for s in range(c):
            src = (r - s) % c
            reqs, nxt = [], None
            if s < c - 1:
                nxt = kv.new_empty(*kv.shape[:-2], lens[(src - 1) % c], kv.shape[-1])
                reqs = _exchange("ring K, V (backward)", kv, (r + 1) % c, nxt, (r - 1) % c, group, tag=2 * s)
            acc = dkv_own if s == 0 else (dkv if dkv is not None else torch.zeros_like(kv))
            kchunks = _split_kv(kv, dk_dim, n_chunks)
            dks, dvs = split(acc[..., :dk_dim]), split(acc[..., dk_dim:])
            for i, j, diag in _pairs(qids, chunk_ids(src, c, layout), causal):
                dq_b, dk_b, dv_b = _block_backward(qs[i], *kchunks[j], outs[i], lses[i], douts[i], scale,
                                                   diag)
                dq[i] += dq_b
                dks[j].add_(dk_b)  # views into acc
                dvs[j].add_(dv_b)
            _wait(reqs)
            if s >= 1:  # pass the accumulator on; after the last step it arrives home
                incoming = None
                if s < c - 1:
                    incoming = kv.new_empty(*kv.shape[:-2], lens[(src - 1) % c], kv.shape[-1])
                else:
                    incoming = torch.empty_like(dkv_own)
                _wait(_exchange("ring dK, dV (backward)", acc, (r + 1) % c, incoming, (r - 1) % c,
                                group, tag=2 * s + 1))
                dkv = incoming
            if nxt is not None:
                kv = nxt
        if c > 1:  # the accumulator that left after step 0 is home again, with every rank's share
            dkv_own += dkv
        dq = torch.cat(dq, dim=-2)
        return dq, dkv_own[..., :dk_dim], dkv_own[..., dk_dim:], None, None, None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True, group=None,
                   *, layout: str = "contiguous") -> torch.Tensor:
    """Ring attention (context parallelism): softmax attention over a sequence split across ranks.

    Call it on every rank of ``group`` (None = the default process group) of c ranks.
    q, k: (..., n_r, D); v: (..., n_r, D_v), this rank's shard of the sequence -> (..., n_r, D_v),
    this rank's shard of softmax(Q K^T / sqrt(D) [causal]) V over the whole sequence.

    layout "contiguous": rank r holds tokens offset_r .. offset_r + n_r - 1, in rank order; the
    shard lengths may differ (N need not be divisible by c; :func:`shard_sequence` splits as
    torch.tensor_split does). layout "zigzag": the sequence is cut into 2c equal chunks and rank r
    holds chunks r and 2c - 1 - r (:func:`chunk_ids`); every shard has the same even length.

    Forward: c - 1 steps pass the K, V shards around the ring, each send started before the
    rank computes with the block it holds; the partial outputs are merged with their logsumexp.
    Backward (custom autograd): K, V travel the ring again (c - 1 sends, overlapping compute) and
    the dK, dV accumulator of each block follows them (c - 1 sends, the last one bringing it home;
    each is sent after the step's compute, not overlapped with it). Weights are recomputed from
    the saved logsumexp: no rank stores an N x N tensor.
    Computes in the inputs' dtype (use float32 or float64: the logsumexp is kept in it too).
    With gloo the tensors are on the CPU; the sends are torch.distributed.isend/irecv, which NCCL
    also provides for GPU tensors (not run in this book).
    Bad input on any rank raises the same ValueError on every rank.
    """
    r, c = _group(group)
    err = None
    try:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")
        if not isinstance(causal, bool):
            raise ValueError(f"causal must be True or False, got {causal!r}")
        n, d_k, d_v = _checks.qkv(q, k, v)
        meta = dict(lead=tuple(q.shape[:-2]), kv_lead=(tuple(k.shape[:-2]), tuple(v.shape[:-2])),
                    n=n, d_k=d_k, d_v=d_v, dtype=str(q.dtype), kv_dtype=(str(k.dtype), str(v.dtype)),
                    causal=causal, layout=layout)
    except ValueError as e:
        err, meta = f"rank {r}: {e}", None
    metas = _gather_meta(dict(err=err, meta=meta), group)
    errors = [m["err"] for m in metas]
    if any(errors):
        raise ValueError(next(e for e in errors if e))
    ms = [m["meta"] for m in metas]
    first = ms[0]
    for rank, m in enumerate(ms):
        for key, arg in (("layout", "layout"), ("causal", "causal")):
            if m[key] != first[key]:
                raise ValueError(f"{arg} must be the same on every rank, got {first[key]!r} on rank 0 "
                                 f"and {m[key]!r} on rank {rank}")
        if m["lead"] != first["lead"] or m["kv_lead"] != first["kv_lead"] or m["kv_lead"] != (m["lead"],) * 2:
            raise ValueError(f"q, k, v: mismatched shards: leading dims must be equal on every rank, got "
                             f"{[x['lead'] for x in ms]} (q) and {[x['kv_lead'] for x in ms]} (k, v)")
        if (m["d_k"], m["d_v"]) != (first["d_k"], first["d_v"]):
            raise ValueError(f"q, k, v: mismatched shards: head dims must be equal on every rank, got "
                             f"{[(x['d_k'], x['d_v']) for x in ms]}")
        if (m["dtype"], *m["kv_dtype"]) != (first["dtype"],) * 3:
            raise ValueError(f"q, k, v: mismatched shards: dtypes must be equal on every rank, got "
                             f"{[(x['dtype'], *x['kv_dtype']) for x in ms]}")
    lens = [m["n"] for m in ms]
    if layout == "zigzag" and (len(set(lens)) > 1 or lens[0] % 2):
        raise ValueError(f"q: the zigzag layout needs N divisible by 2 x {c} = {2 * c} (equal shards of "
                         f"two chunks each), got shard lengths {lens} (N = {sum(lens)})")
    return _RingAttention.apply(q, k, v, causal, group, layout, lens)
