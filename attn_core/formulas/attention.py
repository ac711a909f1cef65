"""One attention layer: the activation ledger, the fused layer, the projections' weights, the layer's
FLOPs, the KV cache and linear attention's state."""

from __future__ import annotations

from ._core import _ratio, eq, formula, minimum, where


# ------------------------------------------------------------------------ one attention layer
#: plain multi-head attention: every head its own K and V, head dims d / H, no MLA
def MHA(d, H) -> dict:
    """The symbol values of plain MHA for width d and H heads: H_kv = H, D = D_v = d / H, no MLA."""
    D = _ratio(d, H)
    return {"H_kv": H, "D": D, "D_v": D, "D_r": 0, "R": 0, "Q_r": 0}


@formula
def memory_items(B, N, d, H, H_kv, D, D_v, D_r, b, k_drop, a_saved, u_mask, c_mask) -> dict:
    """Activation bytes one eager attention layer keeps for backward, item by item.

    ``a_saved = 0`` is the teaching ledger (X, Q, K, V, S, P, dropout, ctx, O); ``a_saved = 1`` is
    what autograd saves for :func:`attn_core.attention.mha_forward`: no S (softmax's backward
    needs only its output P), the dropout mask in ``(1 - u_mask) b + u_mask`` bytes, P after
    dropout (saved by the P V matmul; without dropout that matmul saves P itself), the dense
    causal mask when one is materialized (``c_mask``), and no O (the next layer saves it).
    Q and K have D + D_r values per head (MLA's RoPE part; 0 elsewhere), V and ctx D_v.
    """
    quad = B * H * N**2
    mask_b = (1 - u_mask) * b + u_mask
    return {
        "X": B * N * d * b,
        "Q": B * N * H * (D + D_r) * b,
        "K": B * N * H_kv * (D + D_r) * b,
        "V": B * N * H_kv * D_v * b,
        "S": (1 - a_saved) * quad * b,
        "P": quad * b,
        "dropout": k_drop * quad * ((1 - a_saved) * b + a_saved * mask_b),
        "P_drop": a_saved * k_drop * quad * b,
        "ctx": B * N * H * D_v * b,
        "mask": a_saved * c_mask * N**2,
        "O": (1 - a_saved) * B * N * d * b,
    }


@formula
def fused_bytes(B, N, d, H, H_kv, D, D_v, D_r, b, a_saved):
    """A fused (FlashAttention-style) layer: no N x N tensor.

    Teaching ledger: six (B, N, d) tensors. As autograd saves it (PyTorch's fused SDPA): X, Q, K,
    V, the output and a float32 logsumexp per query row and head (4 B H N bytes).
    """
    linear = B * N * (d + H * (D + D_r) + H_kv * (D + D_r) + H_kv * D_v + H * D_v) * b
    return (1 - a_saved) * 6 * B * N * d * b + a_saved * (linear + 4 * B * H * N)


@formula
def attention_params(d, H, H_kv, D, D_v, D_r, R, Q_r):
    """Weights of the attention projections of one layer (matrices only, no norms or biases).

    Per-head K and V (``R = 0``): Q d x H D, K d x H_kv D, V d x H_kv D_v, O H D_v x d.
    MLA (``R > 0``, DeepSeek-V2): queries through a rank-``Q_r`` bottleneck (or direct when 0),
    keys and values from one latent of R values (D_r of them the shared RoPE key): d x R down,
    (R - D_r) x H (D + D_v) up, O as above.
    """
    standard = d * H * D + d * H_kv * D + d * H_kv * D_v
    q_mla = where(eq(Q_r, 0), d * H * (D + D_r), d * Q_r + Q_r * H * (D + D_r))
    mla = q_mla + d * R + (R - D_r) * H * (D + D_v)
    return where(eq(R, 0), standard, mla) + H * D_v * d


@formula
def layer_flops(N, d, H, H_kv, D, D_v, D_r, R, Q_r, F, m_ffn, w_ffn, c_causal):
    """(linear, quadratic) forward FLOPs of one layer, 2 FLOPs per multiply-accumulate.

    linear = 2 N (attention projections + w_ffn m_ffn d F); quadratic = 2 N^2 H (D + D_r + D_v)
    (Q K^T and P V), times c_causal (1/2 for a kernel that skips the masked half).
    """
    weights = attention_params(d, H, H_kv, D, D_v, D_r, R, Q_r) + w_ffn * m_ffn * d * F
    return 2 * N * weights, 2 * N**2 * H * (D + D_r + D_v) * c_causal


@formula
def kv_cache_bytes(B, N, L, H_kv, D, D_v, R, W, b):
    """KV cache of B sequences: per token and layer H_kv (D + D_v) values, or R for MLA's latent.

    A sliding window (W > 0) keeps min(N, W) tokens.
    """
    kept = where(eq(W, 0), N, minimum(N, W))
    return B * kept * L * where(eq(R, 0), H_kv * (D + D_v), R) * b


@formula
def linear_state_bytes(B, L, H_kv, D_k, D_v, b):
    """Linear attention's recurrent state: L H_kv D_k D_v values per sequence, whatever N.

    One state per key/value head: query heads that share a key and value head share its state
    M_t = sum k v^T.
    """
    return B * L * H_kv * D_k * D_v * b
