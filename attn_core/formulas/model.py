"""A whole model: its parameters, and the shapes a training step of it needs (LoRA's adapters included).

:func:`model_params` is the parameter count of :meth:`attn_core.models.ModelConfig.num_params`, written
once for the library, the "does it fit" widget and its page (which reads a pasted config.json): the
vocabulary (tied or not), learned positions, norms (RMSNorm or LayerNorm, n_norm a block), biases, MLA's
low-rank projections and latent norms, and a mixture of experts (routed and shared experts, the router,
the first blocks dense). :func:`step_model` turns a model and LoRA's targets into the symbols of
:func:`attn_core.formulas.step.step_items`. A model's values of these symbols come from its fields through
the table :data:`attn_core.symbols.MODEL_SYMBOLS` (``ModelConfig.symbol_values()``).
"""

from __future__ import annotations

from ._core import _ratio, eq, formula, maximum, minimum, where
from .attention import attention_params


@formula
def model_params(n_vocab, d, L, H, H_kv, D, D_v, D_r, R_kv, Q_r, F, m_ffn, n_rms, n_norm, k_tie, n_pos,
                 k_bias, k_qkv_b, k_out_b, k_ffn_b, n_exp, n_shared, F_e, L_dense, F_dense) -> dict:
    """Parameters of a model, as ``transformers`` builds it: ``P_w`` in all, ``P_io`` of the input and
    output layers (token embeddings, learned positions, the output head unless tied, the final norm),
    ``P_layer`` of one block on average (the blocks' parameters / L) and ``P_lin`` of the blocks'
    matrices (the blocks less their norms: what a QLoRA base can quantize).

    A block: the attention projections (:func:`attention_params`; MLA when ``R_kv`` > 0, with an RMSNorm
    on each latent), their biases (``k_qkv_b`` on Q, K, V, MLA's on its down projections; ``k_out_b`` on
    the output; ``k_bias`` on every matrix), ``n_norm`` norms (RMSNorm d, LayerNorm 2d), and the FFN:
    ``m_ffn`` matrices of d x F (biases: m_ffn - 1 of F and one of d). A mixture of experts (``n_exp`` >
    0) replaces the FFN in all but the first ``L_dense`` blocks (whose FFN is ``F_dense`` wide) by
    n_exp routed experts of width ``F_e`` (no biases), ``n_shared`` shared ones as one FFN of
    n_shared F_e, and a router of n_exp x d.
    """
    mla = where(eq(R_kv, 0), 0, 1)
    R = mla * (R_kv + D_r)  # MLA caches its latent and the shared RoPE key
    norm = (2 - n_rms) * d
    qkv_b, out_b, ffn_b = maximum(k_bias, k_qkv_b), maximum(k_bias, k_out_b), maximum(k_bias, k_ffn_b)
    qkv_bias = where(eq(R_kv, 0), H * D + H_kv * D + H_kv * D_v, Q_r + R)
    attn = attention_params(d, H, H_kv, D, D_v, D_r, R, Q_r) + qkv_b * qkv_bias + out_b * d
    attn = attn + mla * (Q_r + R_kv)  # MLA's RMSNorms on the query and key/value latents

    def ffn(width, biases):
        # m_ffn matrices of d x width; biases: m_ffn - 1 of width, one of d (none for an FFN of width 0)
        return m_ffn * d * width + biases * ((m_ffn - 1) * width + d * minimum(1, width))

    dense = ffn(F_dense, ffn_b)
    moe = n_exp * ffn(F_e, 0) + ffn(n_shared * F_e, ffn_b) + n_exp * d
    dense_blocks = where(eq(n_exp, 0), L, minimum(L_dense, L))
    blocks = L * (attn + n_norm * norm) + dense_blocks * dense + (L - dense_blocks) * moe
    io = (n_vocab + n_pos) * d + (1 - k_tie) * n_vocab * d + norm
    return {"P_w": io + blocks, "P_io": io, "P_layer": _ratio(blocks, L), "P_lin": blocks - L * n_norm * norm}


#: LoRA's target projections (Hugging Face's Llama names them ``q_proj`` ... ``down_proj``) and their symbols
LORA_SYMBOLS: dict[str, str] = {"q": "l_q", "k": "l_k", "v": "l_v", "o": "l_o", "gate": "l_gate",
                                "up": "l_up", "down": "l_down"}


@formula
def step_model(n_vocab, d, L, H, H_kv, D, D_v, D_r, R_kv, Q_r, F, m_ffn, n_rms, n_norm, k_tie, n_pos, k_bias,
               k_qkv_b, k_out_b, k_ffn_b, n_exp, n_shared, F_e, L_dense, F_dense, l_q, l_k, l_v, l_o, l_gate,
               l_up, l_down, r_lora, q_all) -> dict:
    """The symbols of :func:`attn_core.formulas.step.step_items` a model sets, with LoRA's targets.

    ``P_w``, ``P_io``, ``P_layer`` (:func:`model_params`); ``P_lora``: r_lora (in + out) per adapted
    projection and block (``l_q`` ... ``l_down`` 0/1; the gate only in a gated FFN, and the FFN's only
    in a dense one: LoRA on experts is not modelled); ``P_lin``: what a QLoRA base quantizes, the adapted
    projections' matrices, or every block matrix with ``q_all``; ``H_kv`` and ``D`` of the keys and values
    a block keeps (MLA's decompressed: H heads of D + D_r); ``g_swiglu``; the adapted projections'
    indicators ``a_qkv``, ``a_o``, ``a_up``, ``a_down`` and their number ``n_lora``.
    """
    p = model_params(n_vocab, d, L, H, H_kv, D, D_v, D_r, R_kv, Q_r, F, m_ffn, n_rms, n_norm, k_tie, n_pos,
                     k_bias, k_qkv_b, k_out_b, k_ffn_b, n_exp, n_shared, F_e, L_dense, F_dense)
    dense = where(eq(n_exp, 0), 1, 0)
    g_swiglu = m_ffn - 2  # a gated FFN has three matrices
    gate, up, down = l_gate * g_swiglu * dense, l_up * dense, l_down * dense
    # (in, out) features of each target projection, and whether it is adapted
    shapes = [(l_q, d, H * D), (l_k, d, H_kv * D), (l_v, d, H_kv * D_v), (l_o, H * D_v, d),
              (gate, d, F), (up, d, F), (down, F, d)]
    adapted_lin = L * sum(a * i * o for a, i, o in shapes)
    mla = where(eq(R_kv, 0), 0, 1)
    return {
        "P_w": p["P_w"], "P_io": p["P_io"], "P_layer": p["P_layer"],
        "P_lin": q_all * p["P_lin"] + (1 - q_all) * adapted_lin,
        "P_lora": L * r_lora * sum(a * (i + o) for a, i, o in shapes),
        "H_kv": H_kv + mla * (H - H_kv), "D": D + mla * D_r, "g_swiglu": g_swiglu,
        "a_qkv": maximum(l_q, maximum(l_k, l_v)), "a_o": l_o, "a_up": maximum(gate, up), "a_down": down,
        "n_lora": l_q + l_k + l_v + l_o + gate + up + down,
    }
