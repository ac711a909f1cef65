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


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Where the ring accumulates: float32 for 16-bit inputs, the inputs' own dtype when wider."""
    return dtype if torch.finfo(dtype).bits >= 32 else torch.float32


def _fold(x, g: int):
    """(..., H_kv g, n, D) -> (..., H_kv, g n, D): the g query heads of one key/value head stacked
    along the rows (row i of a group is token i mod n), so one K, V block serves all of them."""
    if g == 1:
        return x
    *lead, h, n, dim = x.shape
    return x.reshape(*lead, h // g, g * n, dim)  # (..., H_kv, g n, D)


def _unfold(x, g: int):
    """The inverse of :func:`_fold`: (..., H_kv, g n, D) -> (..., H_kv g, n, D)."""
    if g == 1:
        return x
    *lead, h, gn, dim = x.shape
    return x.reshape(*lead, h * g, gn // g, dim)  # (..., H, n, D)


def _diag_mask(n_rows: int, m: int, device):
    """The causal mask of a diagonal block whose rows are g stacked copies of the same m tokens."""
    mask = causal_mask(m, device)  # (m, m)
    return mask if n_rows == m else mask.repeat(n_rows // m, 1)  # (g m, m)


def _block_forward(q, k, v, scale, diagonal: bool):
    """Attention of one query chunk on one key chunk, with each row's logsumexp.

    q: (..., n, D); k: (..., m, D); v: (..., m, D_v) -> out (..., n, D_v), lse (..., n).
    diagonal: the two chunks are the same tokens, so the causal mask applies (n = g m).
    """
    s = (q @ k.transpose(-2, -1)) * scale  # (..., n, m) scores of this block
    if diagonal:
        s = s.masked_fill(~_diag_mask(s.shape[-2], s.shape[-1], s.device), float("-inf"))
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
        s = s.masked_fill(~_diag_mask(s.shape[-2], s.shape[-1], s.device), float("-inf"))
    p = torch.exp(s - lse[..., None])  # (..., n, m) this block's share of the weights
    dv = p.transpose(-2, -1) @ dout  # (..., m, D_v)
    dp = dout @ v.transpose(-2, -1)  # (..., n, m)
    delta = (dout * out).sum(-1, keepdim=True)  # (..., n, 1)
    ds = p * (dp - delta) * scale  # (..., n, m)
    return ds @ k, ds.transpose(-2, -1) @ q, dv


def _split_kv(kv, d_k: int, n_chunks: int, dtype):
    """[(k, v) of each chunk], in ``dtype``, of a block stored as cat([k, v], -1)."""
    kv = kv.to(dtype)
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
    """What the last :func:`ring_attention` call on this rank did, forward and backward.

    ``scores``: query-key pairs per head it evaluated in the forward pass (its share of the work);
    ``compute_s`` and ``wait_s``: per forward step, seconds spent computing and then waiting for
    the next K, V block (0 when the compute hid the transfer). After a backward pass also
    ``backward``: per step ``compute_s``, ``wait_kv_s`` (the next K, V block) and ``wait_dkv_s``
    (the dK, dV accumulator that was sent during this step's compute; None where none arrives),
    and ``final_wait_s``, the wait for the rank's own accumulator coming home after the last step
    (no compute left to hide it).
    """
    return dict(_STATS)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, group, layout, lens):
        r, c = _group(group)
        scale = 1.0 / math.sqrt(q.shape[-1])
        g = q.shape[-3] // k.shape[-3] if q.dim() >= 3 else 1  # query heads per key/value head
        acc = _acc_dtype(q.dtype)
        n_chunks = len(chunk_ids(0, c, layout))
        qs = [_fold(x, g).to(acc) for x in (q.chunk(n_chunks, dim=-2) if n_chunks > 1 else (q,))]
        qids = chunk_ids(r, c, layout)
        outs, lses = [None] * n_chunks, [None] * n_chunks
        kv = torch.cat([k, v], dim=-1)  # (..., H_kv, n_r, D + D_v) in the inputs' dtype: one message
        scores, compute_s, wait_s = 0, [], []
        for s in range(c):
            src = (r - s) % c
            reqs, nxt = [], None
            if s < c - 1:  # start passing the block on before computing with it
                nxt = kv.new_empty(*kv.shape[:-2], lens[(src - 1) % c], kv.shape[-1])
                reqs = _exchange("ring K, V (forward)", kv, (r + 1) % c, nxt, (r - 1) % c, group, tag=s)
            t0 = time.perf_counter()
            kchunks = _split_kv(kv, k.shape[-1], n_chunks, acc)
            for i, j, diag in _pairs(qids, chunk_ids(src, c, layout), causal):
                o_b, l_b = _block_forward(qs[i], *kchunks[j], scale, diag)
                outs[i], lses[i] = _merge(outs[i], lses[i], o_b, l_b)  # float32 (or wider) accumulators
                scores += qs[i].shape[-2] // g * kchunks[j][0].shape[-2]
            t1 = time.perf_counter()
            _wait(reqs)
            compute_s.append(t1 - t0)
            wait_s.append(time.perf_counter() - t1)
            if nxt is not None:
                kv = nxt
        out = torch.cat([_unfold(o, g) for o in outs], dim=-2).to(q.dtype)  # (..., H, n_r, D_v)
        lse = torch.cat([_unfold(x[..., None], g)[..., 0] for x in lses], dim=-1)  # (..., H, n_r), acc
        _STATS.clear()
        _STATS.update(scores=scores, compute_s=compute_s, wait_s=wait_s)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.meta = (causal, group, layout, lens, scale, g)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        causal, group, layout, lens, scale, g = ctx.meta
        r, c = _group(group)
        acc = _acc_dtype(q.dtype)
        n_chunks = len(chunk_ids(0, c, layout))

        def split(x, dim=-2):
            return x.chunk(n_chunks, dim=dim) if n_chunks > 1 else (x,)

        qs, outs, douts = ([_fold(x, g).to(acc) for x in split(t)] for t in (q, out, dout.contiguous()))
        lses = [_fold(x[..., None], g)[..., 0] for x in split(lse, -1)]
        qids = chunk_ids(r, c, layout)
        dk_dim = k.shape[-1]
        dq = [torch.zeros_like(x) for x in qs]
        kv = torch.cat([k, v], dim=-1)  # travels in the inputs' dtype
        dkv_own, pending = None, None  # pending: (requests, buffer) of the accumulator on its way here
        steps = []
        for s in range(c):
            src = (r - s) % c
            reqs, nxt = [], None
            if s < c - 1:
                nxt = kv.new_empty(*kv.shape[:-2], lens[(src - 1) % c], kv.shape[-1])
                reqs = _exchange("ring K, V (backward)", kv, (r + 1) % c, nxt, (r - 1) % c, group, tag=2 * s)
            t0 = time.perf_counter()
            blk = kv.new_zeros(kv.shape, dtype=acc)  # this rank's share of dK, dV of the visiting block
            kchunks = _split_kv(kv, dk_dim, n_chunks, acc)
            dks, dvs = split(blk[..., :dk_dim]), split(blk[..., dk_dim:])
            for i, j, diag in _pairs(qids, chunk_ids(src, c, layout), causal):
                dq_b, dk_b, dv_b = _block_backward(qs[i], *kchunks[j], outs[i], lses[i], douts[i], scale,
                                                   diag)
                dq[i] += dq_b
                dks[j].add_(dk_b)  # views into blk
                dvs[j].add_(dv_b)
            t1 = time.perf_counter()
            wait_dkv = None
            if s == 0:  # the rank's own block: its share stays home
                dkv_own = blk
            else:
                if pending is not None:  # the accumulator of this block, sent while we computed
                    _wait(pending[0])
                    blk += pending[1]
                    wait_dkv = time.perf_counter() - t1
                # pass it on (after the last step it reaches its home rank); wait only at the next step
                incoming = kv.new_empty(*kv.shape[:-2], lens[(src - 1) % c], kv.shape[-1], dtype=acc)
                pending = (_exchange("ring dK, dV (backward)", blk, (r + 1) % c, incoming, (r - 1) % c,
                                     group, tag=2 * s + 1), incoming)
            t2 = time.perf_counter()
            _wait(reqs)
            steps.append(dict(compute_s=t1 - t0, wait_dkv_s=wait_dkv, wait_kv_s=time.perf_counter() - t2))
            if nxt is not None:
                kv = nxt
        t0 = time.perf_counter()
        if pending is not None:  # this rank's own accumulator, started at the next rank, home with all shares
            _wait(pending[0])
            dkv_own += pending[1]
        _STATS["backward"] = dict(steps=steps, final_wait_s=time.perf_counter() - t0)
        dq = torch.cat([_unfold(x, g) for x in dq], dim=-2).to(q.dtype)
        return (dq, dkv_own[..., :dk_dim].to(k.dtype), dkv_own[..., dk_dim:].to(v.dtype),
                None, None, None, None)


def _check_heads(q, k, v) -> int:
    """q (..., H, n, D), k (..., H_kv, n, D), v (..., H_kv, n, D_v): the group size g = H / H_kv.

    With equal leading dims every head has its own K and V (g = 1, any leading dims); otherwise dim
    -3 is the head axis, the dims before it must agree and H must be a multiple of H_kv (GQA).
    """
    n, d_k, d_v = _checks.qkv(q, k, v)
    if k.shape[:-2] != v.shape[:-2]:
        raise ValueError(f"k and v must have the same leading dims, got k {tuple(k.shape)} and "
                         f"v {tuple(v.shape)}")
    if q.shape[:-2] == k.shape[:-2]:
        return 1
    if q.dim() < 3 or k.dim() != q.dim() or q.shape[:-3] != k.shape[:-3] or q.shape[-3] % k.shape[-3]:
        raise ValueError(f"q, k: the query heads H (dim -3 of q) must be a multiple of the key/value heads "
                         f"H_kv (dim -3 of k), with the same dims before them, got q {tuple(q.shape)} and "
                         f"k {tuple(k.shape)}")
    return q.shape[-3] // k.shape[-3]


def _shard_metas(q, k, v, causal, group, check=None, **extra) -> list[dict]:
    """Every rank's description of its shard, checked alike on every rank.

    Bad input on any rank (or shards that do not fit together) raises the same ValueError on every
    rank. ``check``: a function run first that may raise ValueError; ``extra``: other arguments that
    must be equal on every rank (checked by name).
    """
    r, c = _group(group)
    err = None
    try:
        if check is not None:
            check()
        if not isinstance(causal, bool):
            raise ValueError(f"causal must be True or False, got {causal!r}")
        g = _check_heads(q, k, v)
        meta = dict(lead=tuple(q.shape[:-2]), kv_lead=(tuple(k.shape[:-2]), tuple(v.shape[:-2])),
                    n=q.shape[-2], d_k=q.shape[-1], d_v=v.shape[-1], dtype=str(q.dtype), g=g,
                    kv_dtype=(str(k.dtype), str(v.dtype)), causal=causal, **extra)
    except ValueError as e:
        err, meta = f"rank {r}: {e}", None
    metas = _gather_meta(dict(err=err, meta=meta), group)
    errors = [m["err"] for m in metas]
    if any(errors):
        raise ValueError(next(e for e in errors if e))
    ms = [m["meta"] for m in metas]
    first = ms[0]
    for rank, m in enumerate(ms):
        for key in ("causal", *extra):
            if m[key] != first[key]:
                raise ValueError(f"{key} must be the same on every rank, got {first[key]!r} on rank 0 "
                                 f"and {m[key]!r} on rank {rank}")
        if m["lead"] != first["lead"] or m["kv_lead"] != first["kv_lead"]:
            raise ValueError(f"q, k, v: mismatched shards: leading dims must be equal on every rank, got "
                             f"{[x['lead'] for x in ms]} (q) and {[x['kv_lead'] for x in ms]} (k, v)")
        if (m["d_k"], m["d_v"]) != (first["d_k"], first["d_v"]):
            raise ValueError(f"q, k, v: mismatched shards: head dims must be equal on every rank, got "
                             f"{[(x['d_k'], x['d_v']) for x in ms]}")
        if (m["dtype"], *m["kv_dtype"]) != (first["dtype"],) * 3:
            raise ValueError(f"q, k, v: mismatched shards: dtypes must be equal on every rank, got "
                             f"{[(x['dtype'], *x['kv_dtype']) for x in ms]}")
    return ms


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True, group=None,
                   *, layout: str = "contiguous") -> torch.Tensor:
    """Ring attention (context parallelism): softmax attention over a sequence split across ranks.

    Call it on every rank of ``group`` (None = the default process group) of c ranks.
    q: (..., H, n_r, D); k: (..., H_kv, n_r, D); v: (..., H_kv, n_r, D_v), this rank's shard of the
    sequence -> (..., H, n_r, D_v), this rank's shard of softmax(Q K^T / sqrt(D) [causal]) V over
    the whole sequence. H_kv = H (or any leading dims equal in q, k, v) is multi-head attention;
    H a multiple of H_kv is grouped-query attention: query head h uses key/value head h // (H/H_kv),
    and only the H_kv heads travel.

    layout "contiguous": rank r holds tokens offset_r .. offset_r + n_r - 1, in rank order; the
    shard lengths may differ (N need not be divisible by c; :func:`shard_sequence` splits as
    torch.tensor_split does). layout "zigzag": the sequence is cut into 2c equal chunks and rank r
    holds chunks r and 2c - 1 - r (:func:`chunk_ids`); every shard has the same even length.

    Forward: c - 1 steps pass the K, V shards around the ring, each send and receive posted
    together (``torch.distributed.batch_isend_irecv``) before the rank computes with the block it
    holds; the partial outputs are merged with their logsumexp. Backward (custom autograd): K, V
    travel the ring again, and behind them the dK, dV accumulator of each block: a rank adds its
    share of the block it holds, posts the accumulator to the next rank, and waits for the
    incoming one only after computing its next block (c - 2 of the c - 1 accumulator transfers
    overlap a step's compute; the last one brings each rank its own accumulator home, with no
    compute left to hide it; the price is one more accumulator-sized buffer in flight). The
    weights are recomputed from the saved logsumexp, so nothing N x N is saved for backward; each
    step still builds (n_r x n_r) score and weight blocks, the transient peak a fused per-block
    kernel would avoid.
    Precision: K, V travel in the inputs' dtype; the output and logsumexp accumulators, the saved
    logsumexp and the dK, dV accumulators (which travel too) are float32 for 16-bit inputs and the
    inputs' dtype otherwise (as ring-flash-attention keeps them); blocks are computed in that dtype.
    With gloo the tensors are on the CPU; the same calls serve NCCL and GPU tensors (not run in
    this book). Bad input on any rank raises the same ValueError on every rank.
    """
    r, c = _group(group)
    ms = _shard_metas(q, k, v, causal, group, check=lambda: chunk_ids(0, 1, layout), layout=layout)
    lens = [m["n"] for m in ms]
    if layout == "zigzag" and (len(set(lens)) > 1 or lens[0] % 2):
        raise ValueError(f"q: the zigzag layout needs N divisible by 2 x {c} = {2 * c} (equal shards of "
                         f"two chunks each), got shard lengths {lens} (N = {sum(lens)})")
    return _RingAttention.apply(q, k, v, causal, group, layout, lens)
