"""The symbols the formulas are written in, and the menus that set them (plain data, no SymPy).

* :data:`SYMBOLS`: each symbol of :mod:`attn_core.formulas` and what it means (book/notation.md
  has the book's notation; switches are 0/1 indicators or the value a menu sets);
* :data:`ASSUMPTIONS`: what SymPy may assume of each (positive integers, non-negative, ...);
* :data:`SWITCHES`: menu -> option -> symbol values. The public functions (``block_ledger(norm=
  "rmsnorm")``), the widgets' menus in Python and the page's menus all read this one table.
"""

from __future__ import annotations

from fractions import Fraction

SYMBOLS: dict[str, str] = {
    "B": "batch size (sequences)",
    "N": "sequence length, tokens",
    "d": "model width d_model",
    "H": "query heads",
    "H_kv": "key/value heads",
    "D": "head dimension of queries and keys (without MLA's RoPE part)",
    "D_v": "head dimension of values",
    "D_r": "MLA: the RoPE part of each query/key head (0 without MLA)",
    "R": "MLA: latent values cached per token and layer (0 = per-head K and V)",
    "Q_r": "MLA: rank of the low-rank query projection (0 = a direct d x H D projection)",
    "D_k": "key dimension of linear attention",
    "L": "layers",
    "F": "FFN hidden width",
    "W": "sliding window in tokens, 0 = full attention",
    "b": "bytes per value (switch: dtype)",
    "k_drop": "1 with attention dropout, 0 without (switch: dropout)",
    "a_saved": "0: the teaching ledger, 1: what autograd saves (switch: saved)",
    "u_mask": "0: the dropout mask in the dtype (CPU), 1: a bool mask (CUDA) (switch: mask)",
    "c_mask": "1 if a dense (N, N) causal mask is materialized and saved",
    "m_ffn": "matrices in the FFN (switch: ffn; 2 mlp, 3 swiglu)",
    "w_ffn": "1 with the FFN, 0 for the attention block alone",
    "c_causal": "share of the N x N work done (switch: causal; 1 or 1/2)",
    # the whole block and the training step (the "does it fit" widget)
    "n_rms": "0: LayerNorm, 1: RMSNorm (switch: norm)",
    "g_swiglu": "0: GeLU MLP, 1: SwiGLU FFN (switch: ffn_kind)",
    "e_fused": "0: eager attention, 1: fused (FlashAttention) (switch: attention)",
    "r_sel": "1 if the attention core is recomputed (switch: recompute; selective)",
    "r_full": "1 if only the block's input is kept (switch: recompute; full)",
    "P_w": "parameters of the model (Psi)",
    "N_d": "data-parallel ranks",
    "w_b": "bytes per weight (switch: precision)",
    "g_b": "bytes per gradient (switch: precision)",
    "o_master": "bytes of fp32 master weights per parameter (switch: precision; 0 or 4)",
    "n_opt": "fp32 optimizer buffers per parameter (switch: optimizer; AdamW 2, SGD momentum 1)",
    "z_1": "1 if ZeRO shards the optimizer state (switch: zero; stage >= 1)",
    "z_2": "1 if ZeRO shards the gradients (switch: zero; stage >= 2)",
    "z_3": "1 if ZeRO shards the weights (switch: zero; stage 3)",
    "M_gib": "accelerator memory, GiB (2^30 bytes)",
    # several devices (the chapter "beyond one device")
    "t": "tensor-parallel degree: ranks that split each layer's heads and FFN columns",
    "s_sp": "1 with sequence parallelism: the norms' and residual activations split along N over t",
    "c": "context-parallel degree: ranks that split the sequence (ring attention)",
    "P_rep": "parameters every tensor-parallel rank holds whole (norms, row-parallel biases, positions)",
}

_POS_INT = {"positive": True, "integer": True}
_NONNEG_INT = {"nonnegative": True, "integer": True}
#: symbol -> SymPy assumptions (every symbol of SYMBOLS has an entry)
ASSUMPTIONS: dict[str, dict] = {
    **dict.fromkeys(("B", "N", "d", "H", "H_kv", "D", "L", "F", "D_v", "D_k", "t", "c"), _POS_INT),
    **dict.fromkeys(("D_r", "R", "Q_r", "W", "P_rep"), _NONNEG_INT),
    **dict.fromkeys(("P_w", "N_d"), _POS_INT),
    **dict.fromkeys(("b", "m_ffn", "c_causal", "w_b", "g_b", "M_gib"), {"positive": True}),
    **dict.fromkeys(("k_drop", "a_saved", "u_mask", "c_mask", "w_ffn", "n_rms", "g_swiglu", "e_fused",
                     "r_sel", "r_full", "z_1", "z_2", "z_3", "o_master", "n_opt", "s_sp"),
                    {"nonnegative": True}),
}

#: menu -> option -> symbol values (the page and Python use the same table)
SWITCHES: dict[str, dict[str, dict[str, int | Fraction]]] = {
    "dtype": {"fp32": {"b": 4}, "fp16": {"b": 2}, "bf16": {"b": 2}, "fp8": {"b": 1}},
    "dropout": {"true": {"k_drop": 1}, "false": {"k_drop": 0}},
    "saved": {"teaching": {"a_saved": 0}, "autograd": {"a_saved": 1}},
    "mask": {"dtype": {"u_mask": 0}, "bool": {"u_mask": 1}},
    "ffn": {"mlp": {"m_ffn": 2}, "swiglu": {"m_ffn": 3}},
    "causal": {"false": {"c_causal": 1}, "true": {"c_causal": Fraction(1, 2)}},
    "norm": {"layernorm": {"n_rms": 0}, "rmsnorm": {"n_rms": 1}},
    "ffn_kind": {"gelu": {"g_swiglu": 0}, "swiglu": {"g_swiglu": 1}},
    "attention": {"eager": {"e_fused": 0}, "fused": {"e_fused": 1}},
    "recompute": {"none": {"r_sel": 0, "r_full": 0}, "selective": {"r_sel": 1, "r_full": 0},
                  "full": {"r_sel": 0, "r_full": 1}},
    # activations in 16-bit with mixed precision, in 32-bit otherwise
    "precision": {"fp32": {"w_b": 4, "g_b": 4, "o_master": 0, "b": 4},
                  "bf16_mixed": {"w_b": 2, "g_b": 2, "o_master": 4, "b": 2}},
    "optimizer": {"adamw": {"n_opt": 2}, "sgd_momentum": {"n_opt": 1}, "sgd": {"n_opt": 0}},
    "sequence_parallel": {"true": {"s_sp": 1}, "false": {"s_sp": 0}},
    "zero": {"0": {"z_1": 0, "z_2": 0, "z_3": 0}, "1": {"z_1": 1, "z_2": 0, "z_3": 0},
             "2": {"z_1": 1, "z_2": 1, "z_3": 0}, "3": {"z_1": 1, "z_2": 1, "z_3": 1}},
}
