"""A whole block and a training step: the block's saved activations, the training state (weights,
gradients, optimizer state, ZeRO) and one rank's share under tensor, sequence and context parallelism."""

from __future__ import annotations

from ._core import _ratio, eq, formula, maximum, where


# ----------------------------------------------------------------------------- a whole block
@formula
def block_items(B, N, d, H, H_kv, F, b, k_drop, u_mask, n_rms, g_swiglu, e_fused, r_sel, r_full) -> dict:
    """Bytes one pre-norm block keeps for backward, by item (:data:`attn_core.ledger.BLOCK_ITEMS`).

    MHA head dims D = d / H with H_kv K/V heads; the FFN of width F. Switches: ``n_rms``
    (RMSNorm: float32 input copy when b != 4, float32 normalized tensor, rstd; LayerNorm: the
    input, mean and rstd counted as float32 as on a GPU or on the meta device, where they are
    measured; the CPU kernel keeps them in a 16-bit weight's dtype), ``g_swiglu``, ``e_fused``
    (no N x N tensor, a float32 logsumexp), ``k_drop`` and ``u_mask`` (masks in the dtype or 1
    byte), ``r_sel`` (the attention core recomputed) and ``r_full`` (only X kept).
    """
    keep, core = 1 - r_full, (1 - r_full) * (1 - r_sel)
    tok = B * N
    mask_b = (1 - u_mask) * b + u_mask
    up = n_rms * where(eq(b, 4), 0, 1)  # RMSNorm's float32 copy of a 16-bit input
    quad = B * H * N**2
    D = _ratio(d, H)
    out = {"X": keep * (1 - up) * tok * d * b + r_full * tok * d * b}

    def norm(i: str) -> None:
        out[f"{i}.fp32_input"] = keep * up * tok * d * 4
        out[f"{i}.stats"] = keep * tok * maximum(b, 4) * (2 - n_rms)  # float32, or the dtype if wider
        out[f"{i}.normalized"] = keep * n_rms * tok * d * 4
        out[f"{i}.out"] = keep * tok * d * b

    norm("norm1")
    out.update({
        "Q": keep * tok * d * b,
        "K": keep * tok * H_kv * D * b,
        "V": keep * tok * H_kv * D * b,
        "P": core * (1 - e_fused) * quad * b,
        "attn_dropout.mask": core * (1 - e_fused) * k_drop * quad * mask_b,
        "P_drop": core * (1 - e_fused) * k_drop * quad * b,
        "attn.lse": core * e_fused * 4 * B * H * N,
        "ctx": keep * tok * d * b,
        "attn_resid.mask": keep * k_drop * tok * d * mask_b,
        "h": keep * (1 - up) * tok * d * b,
    })
    norm("norm2")
    out.update({
        "ffn.gate": keep * g_swiglu * tok * F * b,
        "ffn.silu": keep * g_swiglu * tok * F * b,
        "ffn.up": keep * tok * F * b,
        "ffn.act": keep * tok * F * b,
        "ffn_resid.mask": keep * k_drop * tok * d * mask_b,
    })
    return out


@formula
def training_state(P_w, w_b, g_b, o_master, n_opt, m_b, u_q, m_q, z_1, z_2, z_3, N_d) -> dict:
    """Bytes per data-parallel rank of weights, gradients, optimizer state (:mod:`attn_core.training`).

    P_w parameters; w_b, g_b bytes per weight and gradient; the optimizer keeps o_master bytes of
    master weights and n_opt moments per parameter, of m_b bytes (m_q when quantized, u_q = 1).
    ZeRO shards over N_d ranks: z_1 the optimizer state, z_2 the gradients, z_3 the weights.
    """
    def share(z):
        return 1 - z + _ratio(z, N_d)

    moment = (1 - u_q) * m_b + u_q * m_q
    return {"weights": P_w * w_b * share(z_3), "gradients": P_w * g_b * share(z_2),
            "optimizer": P_w * (o_master + n_opt * moment) * share(z_1)}


# ------------------------------------------------------------------------- several devices
#: items of a block's ledger that tensor parallelism splits over its t ranks: they belong to the
#: rank's H/t heads (and H_kv/t key/value heads) or F/t FFN columns; the rest (norms, the residual
#: stream and its dropout masks) is split only by sequence parallelism
TP_SPLIT_ITEMS: frozenset[str] = frozenset({
    "Q", "K", "V", "P", "attn_dropout.mask", "P_drop", "attn.lse", "ctx",
    "ffn.gate", "ffn.silu", "ffn.up", "ffn.act",
})


def per_rank_items(items: dict, t, c, s_sp, e_fused) -> dict:
    """A block's items (:func:`block_items`) on one rank of t-way tensor and c-way context parallelism.

    Items of :data:`TP_SPLIT_ITEMS` are divided by t; the rest by t only with sequence parallelism
    (``s_sp = 1``). A rank of c-way context parallelism keeps its N/c tokens: every item / c (N/c
    rows of each N x N item), except K and V under eager attention (``e_fused = 0``), whose N tokens
    its queries' backward needs; a ring with a fused kernel keeps only its own N/c.
    """
    out = {}
    for name, value in items.items():
        tp = t if name in TP_SPLIT_ITEMS else 1 + s_sp * (t - 1)
        cp = 1 + e_fused * (c - 1) if name in ("K", "V") else c
        out[name] = _ratio(value, tp * cp)
    return out


@formula
def per_rank_params(P_w, P_rep, t):
    """Parameters one tensor-parallel rank holds: each matrix (embeddings included) split t ways,
    as Megatron-LM splits them, and P_rep (norms, row-parallel biases, positions) whole."""
    return _ratio(P_w - P_rep, t) + P_rep
