"""Tensor parallelism (Megatron style), with and without sequence parallelism.

Q, K, V and the first FFN matrix are split by columns, the output projection and the second FFN
matrix by rows; with sequence parallelism the norms and the residual stream are split along N and
all-gather / reduce-scatter take the place of the all-reduce.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .. import _checks
from ..attention import causal_mask
from .comm import _gather_meta, _group, all_gather, all_reduce, reduce_scatter


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
