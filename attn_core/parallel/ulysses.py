"""All-to-all context parallelism (DeepSpeed-Ulysses): trade the sequence split for a head split.

Each of c ranks holds a contiguous slice of the sequence with every head. An all-to-all gives each
rank the whole sequence for H/c of the query heads (and H_kv/c of the key/value heads), the rank
computes ordinary attention on them, and a second all-to-all returns its slice of the sequence
with every head. The backward pass is the same two all-to-alls in reverse (the all-to-all's
gradient is the all-to-all the other way), around attention's own backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .comm import _all_to_all, _group
from .ring import _shard_metas


class _AllToAll(torch.autograd.Function):
    """:func:`attn_core.parallel.comm._all_to_all` with its gradient: the all-to-all back."""

    @staticmethod
    def forward(ctx, x, scatter_dim, scatter_sizes, gather_dim, gather_sizes, group, what, what_back):
        ctx.args = (scatter_dim, scatter_sizes, gather_dim, gather_sizes, group, what_back)
        return _all_to_all(x, scatter_dim, scatter_sizes, gather_dim, gather_sizes, group, what)

    @staticmethod
    def backward(ctx, grad):
        scatter_dim, scatter_sizes, gather_dim, gather_sizes, group, what_back = ctx.args
        dx = _all_to_all(grad.contiguous(), gather_dim, gather_sizes, scatter_dim, scatter_sizes, group,
                         what_back)
        return dx, None, None, None, None, None, None, None


def _heads_to_sequence(x, lens, group, what, what_back):
    """(..., h, n_r, D), this rank's tokens of every head -> (..., h / c, N, D), every token of its heads."""
    _, c = _group(group)
    return _AllToAll.apply(x, -3, [x.shape[-3] // c] * c, -2, lens, group, what, what_back)


def _sequence_to_heads(x, lens, group, what, what_back):
    """The inverse: (..., h / c, N, D) -> (..., h, n_r, D)."""
    _, c = _group(group)
    return _AllToAll.apply(x, -2, lens, -3, [x.shape[-3]] * c, group, what, what_back)


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                      group=None) -> torch.Tensor:
    """All-to-all context parallelism (DeepSpeed-Ulysses, Jacobs et al. 2023).

    Call it on every rank of ``group`` (None = the default process group) of c ranks. Rank r holds
    a contiguous slice of the sequence, in rank order, for every head: q (..., H, n_r, D), k
    (..., H_kv, n_r, D), v (..., H_kv, n_r, D_v) -> (..., H, n_r, D_v), this rank's slice of
    softmax(Q K^T / sqrt(D) [causal]) V over the whole sequence. H_kv < H is grouped-query
    attention (query head h uses key/value head h // (H / H_kv)). The slices may differ in length
    (N need not be divisible by c); the heads must split evenly: c must divide H and H_kv.

    Forward: three all-to-alls (q, k, v) give each rank every token of H/c query heads and H_kv/c
    key/value heads; attention on them (PyTorch's ``scaled_dot_product_attention``); one
    all-to-all of the output back. Backward: the same all-to-alls in reverse (custom autograd), so
    each rank sends (c - 1)/c of each of these tensors twice per layer. Bytes are counted where
    they leave (:func:`attn_core.parallel.record_comm`). Unlike the ring, nothing overlaps here:
    attention needs the whole sequence before it starts. Bad input on any rank raises the same
    ValueError on every rank.
    """
    r, c = _group(group)

    def heads_split():
        if q.dim() < 3 or k.dim() < 3:
            raise ValueError(f"q, k, v: need a head axis (..., H, n, D), got q {tuple(q.shape)}")
        h, h_kv = q.shape[-3], k.shape[-3]
        if h % c or h_kv % c:
            raise ValueError(f"q, k: the ranks c = {c} must divide the query heads H = {h} and the key/value "
                             f"heads H_kv = {h_kv}: each rank computes whole heads")

    def check():
        from .. import _checks

        _checks.qkv(q, k, v)
        heads_split()

    ms = _shard_metas(q, k, v, causal, group, check=check)
    lens = [m["n"] for m in ms]
    g = ms[0]["g"]
    fwd, bwd = "all-to-all q, k, v (forward)", "all-to-all dq, dk, dv (backward)"
    qh, kh, vh = (_heads_to_sequence(x, lens, group, fwd, bwd) for x in (q, k, v))  # (..., h/c, N, D)
    out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, enable_gqa=g > 1)  # (..., H/c, N, D_v)
    return _sequence_to_heads(out, lens, group, "all-to-all out (forward)", "all-to-all dout (backward)")
