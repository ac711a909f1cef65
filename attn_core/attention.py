"""Softmax attention from scratch: softmax, SDPA, masks, RoPE, MHA and GQA.

Notation (book/notation.md): B batch, N tokens, d = d_model, H query heads,
H_kv key/value heads, D = d/H head dim.

Everything here is written to be read: one function per idea, shapes in the
docstrings and a shape comment on every reshape. ``mha_forward`` is the
explicit eager layer that the memory ledger (chapter 5) is checked against.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch import nn

from . import _checks

__all__ = [
    "softmax",
    "scaled_dot_product_attention",
    "causal_mask",
    "sliding_window_mask",
    "RotaryPositionalEmbedding",
    "MultiHeadSelfAttention",
    "GroupedQueryAttention",
    "mha_forward",
    "TransformerLayer",
    "flash_attention",
]


def softmax(x: torch.Tensor, dim: int = -1, safe: bool = False) -> torch.Tensor:
    """Numerically stable softmax along ``dim``.

    Subtracting the row maximum first keeps every exponent <= 0, so
    ``exp`` cannot overflow; the result is unchanged because numerator and
    denominator are scaled by the same factor.

    A row that is entirely ``-inf`` (every position masked) has maximum
    ``-inf`` and ``(-inf) - (-inf)`` is NaN. With ``safe=True`` such rows give
    all zeros instead (and a zero gradient), the convention PyTorch's own
    ``scaled_dot_product_attention`` follows since PyTorch 2.5 (it gave NaN before).

    x: any shape; returns the same shape.
    """
    _checks.tensor("x", x)
    m = x.amax(dim=dim, keepdim=True)
    if safe:
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    if safe:
        # an all-masked row has e == 0 everywhere; divide by 1 instead of 0
        s = torch.where(s > 0, s, torch.ones_like(s))
    return e / s


def _check_mask(mask, n: int, m: int) -> None:
    _checks.tensor("mask", mask, min_dim=1)
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
    if mask.dim() < 2 or mask.shape[-1] not in (1, m) or mask.shape[-2] not in (1, n):
        raise ValueError(
            f"mask must broadcast to (..., {n}, {m}) (queries x keys), got shape {tuple(mask.shape)}"
        )


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    safe: bool = False,
) -> torch.Tensor:
    """softmax(q k^T * scale [masked]) v, written out.

    q: (..., N, D); k: (..., N_k, D); v: (..., N_k, D_v) -> (..., N, D_v), with N_k keys and
    D_v the value width (D unless the values are narrower or wider).
    mask: bool, broadcastable to (..., N, N_k); True = may attend.
    scale: defaults to 1/sqrt(D), the per-head query and key width.
    safe: passed to :func:`softmax`; all-masked rows give zeros, not NaN.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _checks.tensor(name, t, min_dim=2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dim D, got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must hold the same number of keys N_k, got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    elif not scale > 0:
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., N, M)
    if mask is not None:
        _check_mask(mask, q.shape[-2], k.shape[-2])
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1, safe=safe)  # (..., N, M), rows sum to 1
    return weights @ v  # (..., N, D_v)


def causal_mask(n: int, device=None) -> torch.Tensor:
    """(n, n) bool mask, ``mask[i, j] = j <= i``: token i sees tokens 0..i."""
    n = _checks.positive_int("n", n)
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def sliding_window_mask(n: int, window: int, device=None) -> torch.Tensor:
    """(n, n) bool causal mask limited to the last ``window`` tokens.

    ``mask[i, j] = i - window < j <= i``: token i sees tokens
    max(0, i - window + 1) .. i, exactly ``min(i + 1, window)`` of them.
    """
    n = _checks.positive_int("n", n)
    window = _checks.positive_int("window", window)
    i = torch.arange(n, device=device)[:, None]  # (n, 1)
    j = torch.arange(n, device=device)[None, :]  # (1, n)
    return (j <= i) & (j > i - window)


class RotaryPositionalEmbedding(nn.Module):
    """Rotary position embedding (RoPE, Su et al. 2021).

    Each pair of coordinates (2i, 2i+1) of a query or key at position p is
    rotated by the angle p * theta^(-2i/d_k). A dot product of two rotated
    vectors then depends on positions only through their difference.

    theta: base (10000 in the paper); d_k: even head dim; max_seq_len: the
    largest position + 1 that the cos/sin tables hold.

    forward(x, token_positions=None): x (..., N, d_k); token_positions
    (..., N) integer, broadcastable against x's leading dims, default
    0..N-1. Returns the same shape as x.
    """

    def __init__(self, theta: float, d_k: int, max_seq_len: int, device=None):
        super().__init__()
        if not theta > 0:
            raise ValueError(f"theta must be a positive number, got {theta!r}")
        d_k = _checks.positive_int("d_k", d_k)
        if d_k % 2:
            raise ValueError(f"d_k must be even (RoPE rotates pairs), got {d_k}")
        self.max_seq_len = _checks.positive_int("max_seq_len", max_seq_len)
        self.d_k = d_k
        inv_freq = theta ** (-torch.arange(0, d_k, 2, device=device, dtype=torch.float64) / d_k)
        angles = torch.arange(max_seq_len, device=device, dtype=torch.float64)[:, None] * inv_freq
        # angles: (max_seq_len, d_k / 2); tables are not parameters, and not saved
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor | None = None) -> torch.Tensor:
        _checks.tensor("x", x, min_dim=2)
        if x.shape[-1] != self.d_k:
            raise ValueError(f"x must have last dim d_k = {self.d_k}, got shape {tuple(x.shape)}")
        n = x.shape[-2]
        if token_positions is None:
            token_positions = torch.arange(n, device=x.device)
        if token_positions.shape[-1] != n:
            raise ValueError(
                f"token_positions must end in N = {n}, got shape {tuple(token_positions.shape)}"
            )
        if token_positions.numel() and int(token_positions.min()) < 0:
            raise ValueError(f"token_positions must be >= 0, got min {int(token_positions.min())}")
        if token_positions.numel() and int(token_positions.max()) >= self.max_seq_len:
            raise ValueError(
                f"token_positions must be < max_seq_len = {self.max_seq_len}, "
                f"got max {int(token_positions.max())}"
            )
        cos = self.cos[token_positions].to(x.dtype)  # (..., N, d_k/2)
        sin = self.sin[token_positions].to(x.dtype)
        pairs = rearrange(x, "... N (half two) -> ... N half two", two=2)  # (..., N, d_k/2, 2)
        x1, x2 = pairs[..., 0], pairs[..., 1]
        rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return rearrange(rotated, "... N half two -> ... N (half two)")  # (..., N, d_k)


class MultiHeadSelfAttention(nn.Module):
    """Causal multi-head self-attention, optionally with RoPE on q and k.

    Multi-head splits d_model into H slices of D = d_model / H; each slice
    attends on its own (H score matrices of N x N) and the H outputs are
    concatenated and projected by W_o. Four bias-free d x d projections.

    forward(x, token_positions=None): x (..., N, d_model) -> (..., N, d_model).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        rope_theta: float | None = None,
        max_seq_len: int = 2048,
        device=None,
        dtype=None,
    ):
        super().__init__()
        d_model = _checks.positive_int("d_model", d_model)
        num_heads = _checks.positive_int("num_heads", num_heads)
        _checks.divisible("d_model", d_model, "num_heads", num_heads)
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        kw = dict(bias=False, device=device, dtype=dtype)
        self.q_proj = nn.Linear(d_model, d_model, **kw)
        self.k_proj = nn.Linear(d_model, d_model, **kw)
        self.v_proj = nn.Linear(d_model, d_model, **kw)
        self.output_proj = nn.Linear(d_model, d_model, **kw)
        self.rope = (
            RotaryPositionalEmbedding(rope_theta, self.d_head, max_seq_len, device=device)
            if rope_theta is not None
            else None
        )

    def heads(self, x: torch.Tensor, token_positions=None):
        """Project and split: x (..., N, d) -> q, k, v each (..., H, N, D), RoPE applied."""
        h = self.num_heads
        q = rearrange(self.q_proj(x), "... N (H D) -> ... H N D", H=h)  # (..., H, N, D)
        k = rearrange(self.k_proj(x), "... N (H D) -> ... H N D", H=h)  # (..., H, N, D)
        v = rearrange(self.v_proj(x), "... N (H D) -> ... H N D", H=h)  # (..., H, N, D)
        if self.rope is not None:
            if token_positions is not None and token_positions.dim() > 1:
                token_positions = token_positions.unsqueeze(-2)  # (..., 1, N): same for every head
            q, k = self.rope(q, token_positions), self.rope(k, token_positions)
        return q, k, v

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor | None = None) -> torch.Tensor:
        _checks.tensor("x", x, min_dim=2)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have last dim d_model = {self.d_model}, got {tuple(x.shape)}")
        q, k, v = self.heads(x, token_positions)
        out = scaled_dot_product_attention(q, k, v, causal_mask(x.shape[-2], x.device))
        out = rearrange(out, "... H N D -> ... N (H D)")  # (..., N, d_model)
        return self.output_proj(out)


class GroupedQueryAttention(nn.Module):
    """Causal grouped-query attention (Ainslie et al. 2023).

    H query heads share H_kv key/value heads, H / H_kv query heads per group.
    H_kv = H is MHA, H_kv = 1 is multi-query attention (Shazeer 2019). Only
    the K and V projections shrink (to d x H_kv*D), and so does the KV cache.

    forward(x): x (..., N, d_model) -> (..., N, d_model).
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, device=None, dtype=None):
        super().__init__()
        d_model = _checks.positive_int("d_model", d_model)
        num_heads = _checks.positive_int("num_heads", num_heads)
        num_kv_heads = _checks.positive_int("num_kv_heads", num_kv_heads)
        _checks.divisible("d_model", d_model, "num_heads", num_heads)
        _checks.divisible("num_heads", num_heads, "num_kv_heads", num_kv_heads)
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.d_head = d_model // num_heads
        kw = dict(bias=False, device=device, dtype=dtype)
        self.q_proj = nn.Linear(d_model, num_heads * self.d_head, **kw)
        self.k_proj = nn.Linear(d_model, num_kv_heads * self.d_head, **kw)
        self.v_proj = nn.Linear(d_model, num_kv_heads * self.d_head, **kw)
        self.output_proj = nn.Linear(num_heads * self.d_head, d_model, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _checks.tensor("x", x, min_dim=2)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have last dim d_model = {self.d_model}, got {tuple(x.shape)}")
        group = self.num_heads // self.num_kv_heads
        q = rearrange(self.q_proj(x), "... N (H D) -> ... H N D", H=self.num_heads)  # (..., H, N, D)
        kv_split = "... N (H_kv D) -> ... H_kv N D"
        k = rearrange(self.k_proj(x), kv_split, H_kv=self.num_kv_heads)  # (..., H_kv, N, D)
        v = rearrange(self.v_proj(x), kv_split, H_kv=self.num_kv_heads)  # (..., H_kv, N, D)
        # give each query head its group's K and V (a real kernel indexes, it does not copy)
        k = repeat(k, "... H_kv N D -> ... (H_kv G) N D", G=group)  # (..., H, N, D)
        v = repeat(v, "... H_kv N D -> ... (H_kv G) N D", G=group)  # (..., H, N, D)
        out = scaled_dot_product_attention(q, k, v, causal_mask(x.shape[-2], x.device))
        return self.output_proj(rearrange(out, "... H N D -> ... N (H D)"))  # (..., N, d_model)


def mha_forward(
    x: torch.Tensor,
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    w_v: torch.Tensor,
    w_o: torch.Tensor,
    num_heads: int,
    dropout_p: float = 0.0,
    causal: bool = False,
    training: bool = True,
) -> torch.Tensor:
    """The eager attention layer of the memory ledger, one explicit op per line.

    x: (B, N, d); weights (d, d), used as ``x @ w``. This is the layer whose
    saved tensors chapter 5 measures: every intermediate is a real tensor, with
    dropout on the weights P. (Hugging Face's "eager" attention is written the same way
    but takes the softmax in float32, so for 16-bit inputs it also keeps a float32 P.)
    Returns (B, N, d).
    """
    _checks.tensor("x", x, min_dim=3)
    num_heads = _checks.positive_int("num_heads", num_heads)
    _checks.divisible("d_model", x.shape[-1], "num_heads", num_heads)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p!r}")
    d_head = x.shape[-1] // num_heads
    q = rearrange(x @ w_q, "B N (H D) -> B H N D", H=num_heads)  # (B, H, N, D)
    k = rearrange(x @ w_k, "B N (H D) -> B H N D", H=num_heads)  # (B, H, N, D)
    v = rearrange(x @ w_v, "B N (H D) -> B H N D", H=num_heads)  # (B, H, N, D)
    s = (q @ k.transpose(-2, -1)) / math.sqrt(d_head)  # (B, H, N, N) scores
    if causal:
        s = s.masked_fill(~causal_mask(x.shape[-2], x.device), float("-inf"))
    p = torch.softmax(s, dim=-1)  # (B, H, N, N) weights
    if dropout_p > 0:
        p = F.dropout(p, dropout_p, training=training)
    ctx = rearrange(p @ v, "B H N D -> B N (H D)")  # (B, N, d) context
    return ctx @ w_o  # (B, N, d)


class TransformerLayer(nn.Module):
    """A pre-norm transformer layer: x + MHA(LN(x)), then x + FFN(LN(x)).

    The FFN is the classic two-matrix MLP d -> ffn_mult*d -> d with GELU, or
    with ``ffn="swiglu"`` the gated three-matrix form of Llama. Attention is
    the eager :func:`mha_forward` (no dropout). Its matmul FLOPs are what
    ``attn_core.flops.layer_flops`` predicts.

    forward(x): x (B, N, d_model) -> (B, N, d_model).
    """

    def __init__(self, d_model: int, num_heads: int, ffn: str = "mlp", ffn_mult: float = 4,
                 causal: bool = False, device=None, dtype=None):
        super().__init__()
        d_model = _checks.positive_int("d_model", d_model)
        num_heads = _checks.positive_int("num_heads", num_heads)
        _checks.divisible("d_model", d_model, "num_heads", num_heads)
        if ffn not in ("mlp", "swiglu"):
            raise ValueError(f"ffn must be 'mlp' or 'swiglu', got {ffn!r}")
        hidden = int(round(ffn_mult * d_model))
        if hidden <= 0:
            raise ValueError(f"ffn_mult must be positive, got {ffn_mult!r}")
        self.num_heads, self.ffn, self.causal = num_heads, ffn, causal
        kw = dict(device=device, dtype=dtype)
        self.w_qkvo = nn.Parameter(torch.randn(4, d_model, d_model, **kw) / math.sqrt(d_model))
        self.ln1 = nn.LayerNorm(d_model, **kw)
        self.ln2 = nn.LayerNorm(d_model, **kw)
        self.up = nn.Linear(d_model, hidden, bias=False, **kw)
        self.gate = nn.Linear(d_model, hidden, bias=False, **kw) if ffn == "swiglu" else None
        self.down = nn.Linear(hidden, d_model, bias=False, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w_q, w_k, w_v, w_o = self.w_qkvo
        x = x + mha_forward(self.ln1(x), w_q, w_k, w_v, w_o, self.num_heads, causal=self.causal)
        h = self.ln2(x)
        if self.gate is None:
            h = F.gelu(self.up(h))
        else:
            h = F.silu(self.gate(h)) * self.up(h)
        return x + self.down(h)


from .flash import flash_attention  # noqa: E402,F401  (tiled, in attn_core/flash.py)
