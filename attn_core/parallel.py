"""Attention on more than one device: context, tensor and sequence parallelism on torch.distributed.

Every function here runs on each rank of a process group (gloo on CPU in this book, NCCL on a
cluster: the same code). Notation as in book/notation.md, plus two degrees: t ranks of tensor
(and sequence) parallelism, c ranks of context parallelism.

* :func:`ring_attention` (context parallelism): rank r holds a shard of the sequence; the key and
  value shards travel around the ring of ranks, each rank merges its partial results with the
  logsumexp (online softmax), and the backward pass sends K, V and the dK, dV accumulators around
  the same ring. ``layout="zigzag"`` balances the causal work (each rank holds one early and one
  late chunk).
* :class:`TensorParallelBlock` (tensor parallelism, Megatron style): an attention + FFN block whose
  Q, K, V and first FFN matrices are split by columns and whose output and second FFN matrices
  are split by rows; with ``sequence_parallel=True`` the norms and residuals are split along N
  and all-gather / reduce-scatter replace the all-reduce.
* The per-rank ledger: what each rank saves for backward and sends per layer, as SymPy
  expressions (:func:`tp_ledger_exprs`, :func:`cp_ledger_exprs`, :func:`comm_exprs`,
  :func:`korthikanti_exprs`; SymPy is imported only inside them) and plain functions that
  evaluate them (:func:`tp_ledger`, :func:`cp_ledger`, :func:`comm_bytes`).
* Every byte a rank sends goes through one function, :func:`_exchange`, which counts it
  (:func:`record_comm`). The collectives are written as rings over point-to-point sends, the
  bandwidth-optimal algorithm: an all-gather or reduce-scatter sends (t - 1)/t of the tensor's
  bytes per rank, an all-reduce (one of each) 2 (t - 1)/t.
* :func:`launch` starts a process group of P processes on this machine (spawn, gloo,
  127.0.0.1), runs an importable function on every rank and returns the results; a rank that
  fails or hangs is killed and reported, never waited on forever. The ``worker_*`` functions are
  the experiments of chapter 11 and of ``tests/test_parallel.py``.
"""

from __future__ import annotations

import math
import socket
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from . import _checks
from .attention import causal_mask

__all__ = [
    "LAYOUTS",
    "CommLog",
    "record_comm",
    "shard_sequence",
    "unshard_sequence",
    "chunk_ids",
    "ring_attention",
    "ring_attention_stats",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "ReferenceBlock",
    "TensorParallelBlock",
    "tp_ledger_exprs",
    "cp_ledger_exprs",
    "comm_exprs",
    "korthikanti_exprs",
    "tp_ledger",
    "cp_ledger",
    "comm_bytes",
    "evaluate",
    "tp_weight_exprs",
    "kv_cache_shard_exprs",
    "KORTHIKANTI_LETTERS",
    "to_paper_letters",
    "launch",
    "ring_inputs",
    "worker_ring",
    "worker_tp",
    "worker_errors",
    "worker_fail",
    "worker_suite",
]

#: how a sequence is split over c ranks (see :func:`chunk_ids`)
LAYOUTS: tuple[str, ...] = ("contiguous", "zigzag")


# ------------------------------------------------------------------ counting what is sent
@dataclass
class CommLog:
    """Bytes this rank sent, one entry per send: ``(what, nbytes)``."""

    sends: list[tuple[str, int]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(n for _, n in self.sends)

    def by_op(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for what, n in self.sends:
            out[what] = out.get(what, 0) + n
        return out


_LOGS: list[CommLog] = []  # the active logs (nested record_comm blocks all count)


@contextmanager
def record_comm():
    """``with record_comm() as log:`` counts every byte this rank sends inside the block."""
    log = CommLog()
    _LOGS.append(log)
    try:
        yield log
    finally:
        _LOGS.remove(log)


def _group(group):
    """(rank, size) of ``group`` (None = the default group); ValueError if none is initialized."""
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            "group: no initialized torch.distributed process group; call "
            "torch.distributed.init_process_group first (or attn_core.parallel.launch)"
        )
    return dist.get_rank(group), dist.get_world_size(group)


def _peer(group, rank: int) -> int:
    """The global rank of ``rank`` in ``group`` (isend/irecv address global ranks)."""
    return rank if group is None else dist.get_global_rank(group, rank)


def _exchange(what: str, send: torch.Tensor | None, dst: int, recv: torch.Tensor | None, src: int,
              group, tag: int):
    """Start sending ``send`` to ``dst`` and receiving ``recv`` from ``src``; return the requests.

    The one place bytes leave this rank: each send is recorded in the active :class:`CommLog`.
    """
    reqs = []
    if send is not None:
        send = send.contiguous()
        for log in _LOGS:
            log.sends.append((what, send.numel() * send.element_size()))
        reqs.append(dist.isend(send, _peer(group, dst), group=group, tag=tag))
    if recv is not None:
        reqs.append(dist.irecv(recv, _peer(group, src), group=group, tag=tag))
    return reqs


def _wait(reqs) -> None:
    for req in reqs:
        req.wait()


# ------------------------------------------------------------- ring collectives, counted
def _ring_reduce_scatter(chunks: list[torch.Tensor], group, what: str) -> torch.Tensor:
    """Sum chunk i over all ranks onto rank i, passing partial sums around the ring (t - 1 steps)."""
    r, t = _group(group)
    acc = [c.clone() for c in chunks]
    for s in range(t - 1):
        i_send, i_recv = (r - s - 1) % t, (r - s - 2) % t
        buf = torch.empty_like(acc[i_recv])
        _wait(_exchange(what, acc[i_send], (r + 1) % t, buf, (r - 1) % t, group, tag=s))
        acc[i_recv] += buf
    return acc[r]


def _ring_all_gather(mine: torch.Tensor, shapes: list[torch.Size], group, what: str) -> list[torch.Tensor]:
    """Every rank ends with every rank's chunk; rank r forwards what it last received (t - 1 steps)."""
    r, t = _group(group)
    out = [None] * t
    out[r] = mine
    for s in range(t - 1):
        i_send, i_recv = (r - s) % t, (r - s - 1) % t
        buf = torch.empty(shapes[i_recv], dtype=mine.dtype, device=mine.device)
        _wait(_exchange(what, out[i_send], (r + 1) % t, buf, (r - 1) % t, group, tag=s))
        out[i_recv] = buf
    return out


def all_reduce(x: torch.Tensor, group=None, what: str = "all_reduce") -> torch.Tensor:
    """The sum of ``x`` over all ranks (a new tensor): ring reduce-scatter, then ring all-gather.

    Sends 2 (t - 1)/t of x's bytes per rank when x.numel() is a multiple of t.
    """
    r, t = _group(group)
    if t == 1:
        return x.clone()
    chunks = list(x.reshape(-1).tensor_split(t))  # t flat pieces, sizes differ by at most one
    mine = _ring_reduce_scatter(chunks, group, what)
    parts = _ring_all_gather(mine, [c.shape for c in chunks], group, what)
    return torch.cat(parts).reshape(x.shape)


def all_gather(x: torch.Tensor, dim: int, group=None, what: str = "all_gather") -> torch.Tensor:
    """Concatenate every rank's ``x`` along ``dim`` (all ranks' shapes equal): sends (t - 1)/t."""
    r, t = _group(group)
    parts = _ring_all_gather(x.contiguous(), [x.shape] * t, group, what)
    return torch.cat(parts, dim=dim)


def reduce_scatter(x: torch.Tensor, dim: int, group=None, what: str = "reduce_scatter") -> torch.Tensor:
    """Sum ``x`` over ranks and keep this rank's slice along ``dim`` (size divisible by t)."""
    r, t = _group(group)
    chunks = [c.contiguous() for c in x.chunk(t, dim=dim)]
    return _ring_reduce_scatter(chunks, group, what)


# ----------------------------------------------------------------- sequence layouts
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


# ------------------------------------------------------------------- ring attention
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


def _gather_meta(local: dict, group) -> list[dict]:
    """Every rank's small description of its input (a handful of bytes, not counted as traffic)."""
    _, size = _group(group)
    out = [None] * size
    dist.all_gather_object(out, local, group=group)
    return out


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
    Backward (custom autograd): K, V travel the ring again (c - 1 sends) and the dK, dV
    accumulator of each block follows them (c - 1 sends, the last one bringing it home).
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


# ------------------------------------------------------- tensor and sequence parallelism
class ReferenceBlock(nn.Module):
    """The single-process block that :class:`TensorParallelBlock` splits.

    Pre-norm: x + W_o attention(LN(x)), then x + W_2 gelu(W_1 LN(x)); causal multi-head attention
    written as in :func:`attn_core.attention.mha_forward` (one explicit op per line, no dropout),
    bias-free matrices used as ``x @ w``. forward(x): (B, N, d) -> (B, N, d).
    """

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int | None = None, causal: bool = True,
                 dtype=torch.float64, seed: int = 0):
        super().__init__()
        d = _checks.positive_int("d_model", d_model)
        h = _checks.positive_int("num_heads", num_heads)
        _checks.divisible("d_model", d, "num_heads", h)
        f = 4 * d if ffn_dim is None else _checks.positive_int("ffn_dim", ffn_dim)
        self.d_model, self.num_heads, self.ffn_dim, self.causal = d, h, f, causal
        g = torch.Generator().manual_seed(seed)

        def w(rows, cols):
            return nn.Parameter(torch.randn(rows, cols, generator=g, dtype=dtype) / math.sqrt(rows))

        self.ln1, self.ln2 = nn.LayerNorm(d, dtype=dtype), nn.LayerNorm(d, dtype=dtype)
        with torch.no_grad():  # non-trivial norms, so their gradients are tested too
            for ln in (self.ln1, self.ln2):
                ln.weight.add_(0.1 * torch.randn(d, generator=g, dtype=dtype))
                ln.bias.add_(0.1 * torch.randn(d, generator=g, dtype=dtype))
        self.w_q, self.w_k, self.w_v, self.w_o = w(d, d), w(d, d), w(d, d), w(d, d)
        self.w_1, self.w_2 = w(d, f), w(f, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _block(x, self.ln1, self.ln2, self.w_q, self.w_k, self.w_v, self.w_o, self.w_1, self.w_2,
                      self.num_heads, self.causal, None)


def _attention_heads(q, k, v, causal):
    """Eager causal attention of the heads this rank holds: q, k, v (B, h, N, D) -> (B, N, h D)."""
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, h, N, N) scores
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[-1], s.device), float("-inf"))
    p = torch.softmax(s, dim=-1)  # (B, h, N, N) weights
    return rearrange(p @ v, "B H N D -> B N (H D)")  # (B, N, h D) context


def _block(x, ln1, ln2, w_q, w_k, w_v, w_o, w_1, w_2, heads, causal, tp):
    """One block; ``tp`` None (one process) or (group, sequence_parallel)."""
    if tp is None:
        h = ln1(x)
        q, k, v = h @ w_q, h @ w_k, h @ w_v
    else:
        group, sp = tp
        if sp:  # x is this rank's (B, N/t, d) shard: the norm runs on it, then all-gather along N
            h = ln1(x)
            q, k, v = _GatherLinear.apply(h, group, w_q, w_k, w_v)
        else:  # x is whole on every rank; f: identity forward, all-reduce of dh backward
            h = _CopyToTP.apply(ln1(x), group)
            q, k, v = h @ w_q, h @ w_k, h @ w_v
    split = "B N (H D) -> B H N D"
    ctx = _attention_heads(rearrange(q, split, H=heads), rearrange(k, split, H=heads),
                           rearrange(v, split, H=heads), causal)
    y = ctx @ w_o  # (B, N, d): a partial sum on each rank under TP
    if tp is not None:
        y = _ReduceScatterN.apply(y, group) if sp else _AllReduceTP.apply(y, group)
    x = x + y
    if tp is None:
        u = ln2(x) @ w_1
    elif sp:
        (u,) = _GatherLinear.apply(ln2(x), group, w_1)
    else:
        u = _CopyToTP.apply(ln2(x), group) @ w_1
    y = F.gelu(u) @ w_2
    if tp is not None:
        y = _ReduceScatterN.apply(y, group) if sp else _AllReduceTP.apply(y, group)
    return x + y


class _CopyToTP(torch.autograd.Function):
    """Megatron's f: identity forward; backward all-reduces the input gradient."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return all_reduce(g, ctx.group, "all-reduce (TP, backward)"), None


class _AllReduceTP(torch.autograd.Function):
    """Megatron's g: all-reduce forward (sum the partial outputs); identity backward."""

    @staticmethod
    def forward(ctx, y, group):
        return all_reduce(y, group, "all-reduce (TP, forward)")

    @staticmethod
    def backward(ctx, g):
        return g, None


class _ReduceScatterN(torch.autograd.Function):
    """Sequence parallelism's g-bar: reduce-scatter along N forward, all-gather backward."""

    @staticmethod
    def forward(ctx, y, group):
        ctx.group = group
        return reduce_scatter(y, dim=-2, group=group, what="reduce-scatter (SP, forward)")

    @staticmethod
    def backward(ctx, g):
        return all_gather(g.contiguous(), dim=-2, group=ctx.group, what="all-gather (SP, backward)"), None


class _GatherLinear(torch.autograd.Function):
    """Sequence parallelism's g fused with the column-parallel matmuls that follow it.

    Forward: all-gather the (B, N/t, d) shard along N, multiply by each weight shard. It saves the
    shard, not the gathered (B, N, d) tensor, and gathers again in backward (as Megatron-LM's
    implementation does: memory over communication); the input gradient is reduce-scattered back.
    """

    @staticmethod
    def forward(ctx, h, group, *weights):
        ctx.group = group
        ctx.save_for_backward(h, *weights)
        full = all_gather(h.contiguous(), dim=-2, group=group, what="all-gather (SP, forward)")
        return tuple(full @ w for w in weights)

    @staticmethod
    def backward(ctx, *grads):
        h, *weights = ctx.saved_tensors
        full = all_gather(h.contiguous(), dim=-2, group=ctx.group, what="all-gather (SP, backward re-gather)")
        dfull = sum(g @ w.transpose(0, 1) for g, w in zip(grads, weights))
        dws = [torch.einsum("...nd,...nf->df", full, g) for g in grads]  # (d, cols) per weight
        dh = reduce_scatter(dfull, dim=-2, group=ctx.group, what="reduce-scatter (SP, backward)")
        return (dh, None, *dws)


class TensorParallelBlock(nn.Module):
    """This rank's part of a :class:`ReferenceBlock` split over the t ranks of ``group``.

    Heads r H/t .. (r + 1) H/t - 1 are this rank's: the columns of W_q, W_k, W_v and of W_1
    (F/t of them) and the matching rows of W_o and W_2. The norms are replicated.
    forward(x): without sequence parallelism x is the whole (B, N, d) on every rank and so is
    the output (two all-reduces forward, two backward); with ``sequence_parallel`` x is this
    rank's contiguous (B, N/t, d) shard and so is the output (all-gather before each
    column-parallel matmul, reduce-scatter after each row-parallel one). N must then be
    divisible by t.
    """

    def __init__(self, ref: ReferenceBlock, sequence_parallel: bool = False, group=None):
        super().__init__()
        r, t = _group(group)
        if ref.num_heads % t:
            raise ValueError(f"num_heads ({ref.num_heads}) must be divisible by the tensor-parallel "
                             f"degree t ({t}): each rank holds whole heads")
        if ref.ffn_dim % t:
            raise ValueError(f"ffn_dim ({ref.ffn_dim}) must be divisible by the tensor-parallel "
                             f"degree t ({t})")
        self.group, self.sp, self.causal = group, bool(sequence_parallel), ref.causal
        self.heads = ref.num_heads // t
        cols = slice(r * ref.d_model // t, (r + 1) * ref.d_model // t)
        fcols = slice(r * ref.ffn_dim // t, (r + 1) * ref.ffn_dim // t)

        def col(w, sl):
            return nn.Parameter(w.detach()[:, sl].clone())

        self.ln1 = nn.LayerNorm(ref.d_model, dtype=ref.ln1.weight.dtype)
        self.ln2 = nn.LayerNorm(ref.d_model, dtype=ref.ln2.weight.dtype)
        self.ln1.load_state_dict(ref.ln1.state_dict())
        self.ln2.load_state_dict(ref.ln2.state_dict())
        self.w_q, self.w_k, self.w_v = col(ref.w_q, cols), col(ref.w_k, cols), col(ref.w_v, cols)
        self.w_o = nn.Parameter(ref.w_o.detach()[cols].clone())
        self.w_1 = col(ref.w_1, fcols)
        self.w_2 = nn.Parameter(ref.w_2.detach()[fcols].clone())
        if self.sp:  # each rank's norms see only its tokens: sum their weight gradients over the ranks
            for p in (*self.ln1.parameters(), *self.ln2.parameters()):
                p.register_hook(self._sum_over_ranks)

    def _sum_over_ranks(self, grad):
        return all_reduce(grad, self.group, "all-reduce (norm weights, backward)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r, t = _group(self.group)
        err = None
        try:
            _checks.tensor("x", x, min_dim=3)
            if x.shape[-1] != self.ln1.normalized_shape[0]:
                raise ValueError(f"x must have last dim d_model = {self.ln1.normalized_shape[0]}, "
                                 f"got {tuple(x.shape)}")
        except ValueError as e:
            err = f"rank {r}: {e}"
        metas = _gather_meta(dict(err=err, shape=None if err else tuple(x.shape)), self.group)
        if any(m["err"] for m in metas):
            raise ValueError(next(m["err"] for m in metas if m["err"]))
        shapes = [m["shape"] for m in metas]
        if len(set(shapes)) > 1:
            what = "sequence parallelism needs N divisible by t (equal shards)" if self.sp else \
                "tensor parallelism needs the same whole x on every rank"
            raise ValueError(f"x: mismatched shards: {what}, got shapes {shapes}")
        return _block(x, self.ln1, self.ln2, self.w_q, self.w_k, self.w_v, self.w_o, self.w_1, self.w_2,
                      self.heads, self.causal, (self.group, self.sp))

    def reference_grads(self, ref: ReferenceBlock) -> dict[str, torch.Tensor]:
        """This rank's slices of ``ref``'s gradients, named like this block's parameters."""
        r, t = _group(self.group)
        d, f = ref.d_model, ref.ffn_dim
        cols = slice(r * d // t, (r + 1) * d // t)
        fcols = slice(r * f // t, (r + 1) * f // t)
        return {"ln1.weight": ref.ln1.weight.grad, "ln1.bias": ref.ln1.bias.grad,
                "ln2.weight": ref.ln2.weight.grad, "ln2.bias": ref.ln2.bias.grad,
                "w_q": ref.w_q.grad[:, cols], "w_k": ref.w_k.grad[:, cols], "w_v": ref.w_v.grad[:, cols],
                "w_o": ref.w_o.grad[cols], "w_1": ref.w_1.grad[:, fcols], "w_2": ref.w_2.grad[fcols]}


# ------------------------------------------------------------------ running P processes
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, size, port, fn, args, results, timeout_s):
    """What each spawned process runs: join the group, call fn, report (result or traceback)."""
    import io

    # one thread per rank: this is a process launch() created, and the P ranks share the cores
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=size, timeout=timedelta(seconds=timeout_s))
        out = fn(rank, size, *args)
        buf = io.BytesIO()
        torch.save(out, buf)  # plain bytes: nothing in the queue depends on this process staying alive
        results.put((rank, "ok", buf.getvalue()))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(fn, size: int, *args, timeout: float = 120.0) -> list:
    """Run ``fn(rank, size, *args)`` on ``size`` new processes joined in a gloo process group.

    The processes are spawned (``torch.multiprocessing``, so ``fn`` must be importable, e.g. a
    ``worker_*`` function of this module) and meet at a free TCP port on 127.0.0.1. Returns the
    ranks' results in rank order. If a rank raises, or the whole run takes longer than
    ``timeout`` seconds, every process still alive is killed and RuntimeError says which rank
    failed and how: nothing is left running, nothing waits forever.
    """
    import io
    import queue as queue_mod

    import torch.multiprocessing as mp

    size = _checks.positive_int("size", size)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_entry, args=(r, size, port, fn, args, results, timeout), daemon=True)
             for r in range(size)]
    deadline = time.monotonic() + timeout
    got: dict[int, bytes] = {}
    try:
        for p in procs:
            p.start()
        while len(got) < size:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [r for r in range(size) if r not in got]
                raise RuntimeError(f"ranks {missing} did not finish within {timeout} s; all were killed")
            try:
                rank, status, payload = results.get(timeout=min(left, 0.5))
            except queue_mod.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in got]
                if dead:
                    raise RuntimeError(f"rank {dead[0]} died (exit code {procs[dead[0]].exitcode}) "
                                       "without a result; all were killed") from None
                continue
            if status == "error":
                raise RuntimeError(f"rank {rank} of {size} failed:\n{payload}")
            got[rank] = payload
    finally:
        for p in procs:
            p.join(timeout=0 if len(got) < size else 10)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        results.close()
    return [torch.load(io.BytesIO(got[r]), weights_only=False) for r in range(size)]


# ------------------------------------------------------------ the experiments (workers)
def ring_inputs(spec: dict):
    """The full q, k, v and output gradient of a ring-attention experiment (same on every rank)."""
    g = torch.Generator().manual_seed(spec.get("seed", 0))
    dtype = spec.get("dtype", torch.float64)
    shape_qk = (spec["B"], spec["H"], spec["N"], spec["D"])
    shape_v = (spec["B"], spec["H"], spec["N"], spec.get("D_v", spec["D"]))
    return (torch.randn(shape_qk, generator=g, dtype=dtype), torch.randn(shape_qk, generator=g, dtype=dtype),
            torch.randn(shape_v, generator=g, dtype=dtype), torch.randn(shape_v, generator=g, dtype=dtype))


def worker_ring(rank: int, size: int, spec: dict, group=None) -> dict:
    """Ring attention on this rank's shard: output, gradients, bytes saved and sent, work done.

    spec: B, H, N, D (D_v), causal, layout, dtype, seed; ``measure_saved`` (default True) also
    runs one forward under :func:`attn_core.measure.saved_tensor_bytes`.
    """
    from .measure import saved_tensor_bytes

    causal, layout = spec.get("causal", True), spec.get("layout", "contiguous")
    rank, size = _group(group)
    q, k, v, dout = (shard_sequence(x, size, layout)[rank].clone().requires_grad_(i < 3)
                     for i, x in enumerate(ring_inputs(spec)))
    saved = None
    if spec.get("measure_saved", True):
        saved = saved_tensor_bytes(ring_attention, q, k, v, causal, group, layout=layout)
        saved = sum(t.nbytes for t in saved)  # q, k, v, out, lse of this rank
    with record_comm() as fwd:
        t0 = time.perf_counter()
        out = ring_attention(q, k, v, causal, group, layout=layout)
        t_fwd = time.perf_counter() - t0
    stats = ring_attention_stats()
    with record_comm() as bwd:
        (out * dout).sum().backward()  # (out.backward(dout) would import SymPy on its first call)
    return dict(out=out.detach(), dq=q.grad, dk=k.grad, dv=v.grad, saved=saved, stats=stats,
                sent_fwd=fwd.by_op(), sent_bwd=bwd.by_op(), forward_s=t_fwd)


def worker_tp(rank: int, size: int, spec: dict, group=None) -> dict:
    """A :class:`TensorParallelBlock` against the single-process :class:`ReferenceBlock`.

    spec: B, N, d, H, F (ffn_dim), sequence_parallel, dtype, seed. Returns this rank's output,
    input gradient and parameter gradients beside the reference's slices of them, the saved
    tensors of the rank (bytes by item label) and the bytes it sent, forward and backward.
    """
    from .measure import saved_tensor_bytes

    sp = spec.get("sequence_parallel", False)
    dtype = spec.get("dtype", torch.float64)
    ref = ReferenceBlock(spec["d"], spec["H"], spec.get("F"), dtype=dtype, seed=spec.get("seed", 0))
    rank, size = _group(group)
    block = TensorParallelBlock(ref, sequence_parallel=sp, group=group)
    g = torch.Generator().manual_seed(spec.get("seed", 0) + 1)
    x_full = torch.randn(spec["B"], spec["N"], spec["d"], generator=g, dtype=dtype)
    g_full = torch.randn(spec["B"], spec["N"], spec["d"], generator=g, dtype=dtype)
    pick = (lambda t: t.chunk(size, dim=-2)[rank]) if sp else (lambda t: t)
    x = pick(x_full).clone().requires_grad_(True)

    def run(x):
        return block(x.clone())  # the clone: the block's input is an activation, as in a real model

    saved = saved_tensor_bytes(run, x)
    weights = sum(t.nbytes for t in saved if t.is_leaf)
    with record_comm() as fwd:
        out = run(x)
    with record_comm() as bwd:
        (out * pick(g_full)).sum().backward()
    x_ref = x_full.clone().requires_grad_(True)
    (ref(x_ref) * g_full).sum().backward()
    grads = {name: p.grad for name, p in block.named_parameters()}
    return dict(out=out.detach(), ref_out=pick(ref(x_full).detach()), dx=x.grad, ref_dx=pick(x_ref.grad),
                grads=grads, ref_grads=block.reference_grads(ref), saved=[(t.shape, t.nbytes, t.saved_by)
                                                                        for t in saved if not t.is_leaf],
                saved_activations=saved.activations, weights=weights, sent_fwd=fwd.by_op(),
                sent_bwd=bwd.by_op())


# ------------------------------------------------------------------------ the ledger
# Symbols as in attn_core.formulas (B, N, d, H, F, D, D_v, b), plus the degrees t (tensor and
# sequence parallelism) and c (context parallelism). SymPy is imported inside these functions
# only, so `import attn_core` stays light.
def _sym():
    import sympy as sp

    from . import formulas

    t, c = sp.symbols("t c", positive=True, integer=True)
    return sp, formulas, t, c


def tp_ledger_exprs(sequence_parallel: bool = False) -> dict:
    """What one rank of a :class:`TensorParallelBlock` saves for backward, item by item (bytes).

    SymPy expressions in B, N, d, H, F, b and t, as autograd saves it (checked in
    tests/test_parallel.py with :func:`attn_core.measure.saved_tensor_bytes` on every rank).
    Inside the tensor-parallel region (Q, K, V, P, ctx, the FFN's hidden activations) a rank
    holds its H/t heads or F/t columns: 1/t of each. The rest (the norms' inputs and statistics,
    the inputs of the column-parallel matmuls) is whole on every rank under TP alone and a 1/t
    shard along N under sequence parallelism. The causal mask is a dense (N, N) bool tensor
    (1 byte a value); the norms' mean and 1/std are kept in the activations' dtype (b bytes),
    as PyTorch's CPU kernel does for float32 and float64. Weights are not activations.
    """
    sp, f, t, _ = _sym()
    B, N, d, H, F_, b = f.B, f.N, f.d, f.H, f.F, f.b
    rep = t if sequence_parallel else sp.Integer(1)  # replicated under TP, split along N under SP
    x = B * N * d * b
    return {
        "norm 1 input": x / rep,
        "norm 1 mean, 1/std": 2 * B * N * b / rep,
        "Q, K, V input": x / rep,
        "Q": x / t,
        "K": x / t,
        "V": x / t,
        "P": B * H * N**2 * b / t,
        "causal mask": N**2,
        "ctx": x / t,
        "norm 2 input": x / rep,
        "norm 2 mean, 1/std": 2 * B * N * b / rep,
        "FFN input": x / rep,
        "GeLU input": B * N * F_ * b / t,
        "GeLU output": B * N * F_ * b / t,
    }


def tp_weight_exprs() -> dict:
    """Weights one rank of a :class:`TensorParallelBlock` holds (bytes): 1/t of each matrix, whole norms."""
    _, f, t, _ = _sym()
    d, F_, b = f.d, f.F, f.b
    return {"W_q, W_k, W_v, W_o": 4 * d * d * b / t, "W_1, W_2": 2 * d * F_ * b / t, "norms": 4 * d * b}


def cp_ledger_exprs() -> dict:
    """What one rank saves for the backward of :func:`ring_attention` with c ranks (bytes).

    Its shards of q, k, v and the output, N/c tokens each, and one logsumexp per query row and
    head: no N x N tensor at all. While it runs, a rank also holds the K, V block it is
    receiving (the size of its own K and V): transient, not saved.
    """
    _, f, _, c = _sym()
    B, N, H, D, D_v, b = f.B, f.N, f.H, f.D, f.D_v, f.b
    n = N / c
    return {"q": B * H * n * D * b, "k": B * H * n * D * b, "v": B * H * n * D_v * b,
            "out": B * H * n * D_v * b, "logsumexp": B * H * n * b}


def kv_cache_shard_exprs() -> dict:
    """Bytes of one layer's KV cache a rank holds (MHA): TP keeps H/t heads, CP N/c tokens."""
    _, f, t, c = _sym()
    B, N, H, D, D_v, b = f.B, f.N, f.H, f.D, f.D_v, f.b
    return {"TP": B * N * H * (D + D_v) * b / t, "CP": B * N * H * (D + D_v) * b / c}


def comm_exprs(scheme: str) -> dict:
    """Bytes one rank sends per layer, forward and backward, by collective (ring algorithms).

    scheme "TP": two all-reduces of (B, N, d) forward (after W_o and W_2) and two backward
    (before the Q, K, V and W_1 matmuls), each 2 (t - 1)/t B N d b.
    "TP+SP": all-gather before and reduce-scatter after each of the two column/row pairs
    forward; backward the reduce-scatter's all-gather, the re-gather of the saved shard and the
    reduce-scatter of the input gradient, each (t - 1)/t B N d b; plus the all-reduce of the
    norms' weight gradients, 2 (t - 1)/t 4 d b.
    "CP": the K, V shards pass c - 1 times forward, and twice as many blocks backward (K, V and
    their gradient accumulators), B H (N/c)(D + D_v) b each.
    """
    sp, f, t, c = _sym()
    B, N, d, H, D, D_v, b = f.B, f.N, f.d, f.H, f.D, f.D_v, f.b
    x = B * N * d * b
    if scheme == "TP":
        ar = 2 * (t - 1) * x / t
        return {"all-reduce (TP, forward)": 2 * ar, "all-reduce (TP, backward)": 2 * ar}
    if scheme == "TP+SP":
        one = (t - 1) * x / t
        return {"all-gather (SP, forward)": 2 * one, "reduce-scatter (SP, forward)": 2 * one,
                "all-gather (SP, backward)": 2 * one, "all-gather (SP, backward re-gather)": 2 * one,
                "reduce-scatter (SP, backward)": 2 * one,
                "all-reduce (norm weights, backward)": 2 * (t - 1) * 4 * d * b / t}
    if scheme == "CP":
        block = B * H * (N / c) * (D + D_v) * b
        return {"ring K, V (forward)": (c - 1) * block, "ring K, V (backward)": (c - 1) * block,
                "ring dK, dV (backward)": (c - 1) * block}
    raise ValueError(f"scheme must be 'TP', 'TP+SP' or 'CP', got {scheme!r}")


def korthikanti_exprs(tensor_parallel: bool = True, sequence_parallel: bool = True) -> dict:
    """Korthikanti et al.'s activation count of one transformer layer, per rank, in the book's symbols.

    Their items (section 4 of the paper), with b bytes per value and 1-byte dropout masks
    (their 16-bit case is b = 2): attention: Q, K, V input, Q and K, V, the softmax output P, its
    dropout mask, P after dropout, the output projection's input, the output dropout mask; FFN
    (F = 4d): its input, the GeLU input, the second matrix's input, the dropout mask; two norm
    inputs. Tensor parallelism divides the items inside attention and the FFN by t; sequence
    parallelism divides the rest by t too. At b = 2 the total is N B d (34 + 5 H N / d) without
    parallelism, N B d (10 + 24/t + 5 H N / (d t)) with TP, and N B d (34 + 5 H N / d) / t with both.
    """
    sp, f, t, _ = _sym()
    B, N, d, H, b = f.B, f.N, f.d, f.H, f.b
    x, nn_ = N * B * d, B * H * N**2
    tp = t if tensor_parallel else sp.Integer(1)
    rest = t if sequence_parallel else sp.Integer(1)
    return {
        "Q, K, V input": x * b / rest,
        "Q and K": 2 * x * b / tp,
        "V": x * b / tp,
        "softmax output P": nn_ * b / tp,
        "softmax dropout mask": nn_ / tp,
        "P after dropout": nn_ * b / tp,
        "output projection input": x * b / tp,
        "attention dropout mask": x / rest,
        "FFN input": x * b / rest,
        "GeLU input": 4 * x * b / tp,
        "second FFN matrix input": 4 * x * b / tp,
        "FFN dropout mask": x / rest,
        "two norm inputs": 2 * x * b / rest,
    }


#: Korthikanti et al.'s letters and the book's symbols they stand for (their b is the batch)
KORTHIKANTI_LETTERS: dict[str, str] = {"s": "N", "b": "B", "h": "d", "a": "H", "t": "t"}


def to_paper_letters(expr):
    """An expression in the book's symbols rewritten in the paper's letters, 16-bit (b = 2)."""
    sp, f, t, _ = _sym()
    s_, b_, h_, a_ = sp.symbols("s b h a", positive=True, integer=True)
    return sp.sympify(expr).subs(f.b, 2).subs({f.N: s_, f.B: b_, f.d: h_, f.H: a_})


def evaluate(exprs: dict, env: dict) -> dict:
    """Exact values of ledger expressions, ``env`` mapping symbol names (B, N, d, H, F, D, D_v, b, t, c)
    to integers: ints where integral, Fractions otherwise."""
    from fractions import Fraction

    import sympy as sp

    _, f, t, c = _sym()
    names = {"B": f.B, "N": f.N, "d": f.d, "H": f.H, "F": f.F, "D": f.D, "D_v": f.D_v, "b": f.b,
             "t": t, "c": c}
    subs = {names[k]: sp.Integer(v) for k, v in env.items() if k in names}
    out = {}
    for key, e in exprs.items():
        val = sp.nsimplify(sp.sympify(e).subs(subs))
        if not val.is_Rational:
            raise ValueError(f"{key}: the values given do not fix it ({val})")
        out[key] = int(val) if val.is_Integer else Fraction(int(val.p), int(val.q))
    return out


def tp_ledger(B: int, N: int, d_model: int, H: int, t: int, *, ffn_dim: int | None = None,
              sequence_parallel: bool = False, bytes_per_value: int = 2) -> dict:
    """:func:`tp_ledger_exprs` evaluated: bytes each rank of a t-way TP (or TP+SP) block saves, by item."""
    env = dict(B=_checks.positive_int("B", B), N=_checks.positive_int("N", N),
               d=_checks.positive_int("d_model", d_model), H=_checks.positive_int("H", H),
               t=_checks.positive_int("t", t), b=_checks.positive_int("bytes_per_value", bytes_per_value))
    env["F"] = 4 * env["d"] if ffn_dim is None else _checks.positive_int("ffn_dim", ffn_dim)
    _checks.divisible("H", env["H"], "t", env["t"])
    _checks.divisible("ffn_dim", env["F"], "t", env["t"])
    if sequence_parallel:
        _checks.divisible("N", env["N"], "t", env["t"])
    return evaluate(tp_ledger_exprs(sequence_parallel), env)


def cp_ledger(B: int, N: int, H: int, D: int, c: int, *, D_v: int | None = None,
              bytes_per_value: int = 2) -> dict:
    """:func:`cp_ledger_exprs` evaluated: bytes each of c ring-attention ranks saves (N divisible by c)."""
    env = dict(B=_checks.positive_int("B", B), N=_checks.positive_int("N", N), H=_checks.positive_int("H", H),
               D=_checks.positive_int("D", D), c=_checks.positive_int("c", c),
               b=_checks.positive_int("bytes_per_value", bytes_per_value))
    env["D_v"] = env["D"] if D_v is None else _checks.positive_int("D_v", D_v)
    _checks.divisible("N", env["N"], "c", env["c"])
    return evaluate(cp_ledger_exprs(), env)


def comm_bytes(scheme: str, *, B: int, N: int, degree: int, d_model: int | None = None, H: int | None = None,
               D: int | None = None, D_v: int | None = None, bytes_per_value: int = 2) -> dict:
    """:func:`comm_exprs` evaluated: bytes one rank sends per layer, by collective.

    degree is t for "TP" and "TP+SP" (needs d_model), c for "CP" (needs H and D). Exact when the
    tensors split evenly over the ranks (N divisible by the degree).
    """
    env = dict(B=_checks.positive_int("B", B), N=_checks.positive_int("N", N),
               b=_checks.positive_int("bytes_per_value", bytes_per_value))
    degree = _checks.positive_int("degree", degree)
    if scheme == "CP":
        env.update(H=_checks.positive_int("H", H), D=_checks.positive_int("D", D), c=degree)
        env["D_v"] = env["D"] if D_v is None else _checks.positive_int("D_v", D_v)
    else:
        env.update(d=_checks.positive_int("d_model", d_model), t=degree)
    return evaluate(comm_exprs(scheme), env)


def worker_errors(rank: int, size: int, spec: dict | None = None, group=None) -> dict:
    """Bad input, each case on every rank: the ValueError message each rank got (None: no error).

    Afterwards one correct ring-attention call shows the group still works (no rank is stuck).
    """
    rank, size = _group(group)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 4 * size + 2, 4, generator=g, dtype=torch.float64)  # N = 4 size + 2
    cases = {
        "zigzag, N not divisible by 2 size": lambda: ring_attention(
            *[shard_sequence(x, size)[rank]] * 3, group=group, layout="zigzag"),
        "mismatched shards (head dim)": lambda: ring_attention(
            *[x[..., : 4 - (rank == size - 1)].chunk(size, -2)[0]] * 3, group=group),
        "mismatched shards (batch)": lambda: ring_attention(
            *[torch.cat([x] * (1 + (rank == 0)))[..., :2, :]] * 3, group=group),
        "layout differs across ranks": lambda: ring_attention(
            *[x[..., :4, :]] * 3, group=group, layout="zigzag" if rank == 0 else "contiguous"),
        "q not a tensor on the last rank": lambda: ring_attention(
            x[..., :4, :].tolist() if rank == size - 1 else x[..., :4, :], x[..., :4, :], x[..., :4, :],
            group=group),
        "t does not divide H": lambda: TensorParallelBlock(
            ReferenceBlock(4 * (size + 1), size + 1, dtype=torch.float64), group=group),
        "SP, N not divisible by t": lambda: TensorParallelBlock(
            ReferenceBlock(8, size, dtype=torch.float64), sequence_parallel=True, group=group)(
            torch.randn(1, size + 1, 8, dtype=torch.float64).tensor_split(size, -2)[rank]),
    }
    out = {}
    for name, call in cases.items():
        try:
            call()
            out[name] = None
        except ValueError as e:
            out[name] = str(e)
    y = ring_attention(*[shard_sequence(x, size)[rank]] * 3, group=group)
    out["then a correct call"] = y.shape
    return out


def worker_fail(rank: int, size: int) -> None:
    """The last rank raises while the others wait for it in a ring: launch() must not hang."""
    if rank == size - 1:
        raise RuntimeError("this rank fails on purpose")
    x = torch.zeros(1, 1, 4, 4)
    ring_attention(x, x, x)


def worker_suite(rank: int, size: int, jobs: list) -> dict:
    """Several experiments in one process group (one start-up instead of many).

    jobs: [(name, worker name, spec, ranks)]: ``worker_<name>`` runs on the first ``ranks`` ranks,
    in a subgroup when ranks < size; the other ranks skip it (their entry is None).
    """
    groups, out = {}, {}
    for name, worker, spec, ranks in jobs:
        if ranks not in groups:  # every rank creates every subgroup, in the same order
            groups[ranks] = None if ranks == size else dist.new_group(list(range(ranks)))
        fn = globals()[f"worker_{worker}"]
        out[name] = fn(rank, ranks, spec, group=groups[ranks]) if rank < ranks else None
    return out
