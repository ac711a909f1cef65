"""The symbols of attn_core.formulas and the menus that set them (plain data, no SymPy).

Kept apart from :mod:`attn_core.formulas` so the widgets can use them without importing SymPy.
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
    "f_ffn": "FFN width over d (ffn_mult)",
    "W": "sliding window in tokens, 0 = full attention",
    "b": "bytes per value (switch: dtype)",
    "k_drop": "1 with attention dropout, 0 without (switch: dropout)",
    "a_saved": "0: the teaching ledger, 1: what autograd saves (switch: saved)",
    "u_mask": "0: the dropout mask in the dtype (CPU), 1: a bool mask (CUDA) (switch: mask)",
    "c_mask": "1 if a dense (N, N) causal mask is materialized and saved",
    "m_ffn": "matrices in the FFN (switch: ffn; 2 mlp, 3 swiglu)",
    "w_ffn": "1 with the FFN, 0 for the attention block alone",
    "c_causal": "share of the N x N work done (switch: causal; 1 or 1/2)",
}

#: menu -> option -> symbol values (the page and Python use the same table)
SWITCHES: dict[str, dict[str, dict[str, int | Fraction]]] = {
    "dtype": {"fp32": {"b": 4}, "fp16": {"b": 2}, "bf16": {"b": 2}, "fp8": {"b": 1}},
    "dropout": {"true": {"k_drop": 1}, "false": {"k_drop": 0}},
    "saved": {"teaching": {"a_saved": 0}, "autograd": {"a_saved": 1}},
    "mask": {"dtype": {"u_mask": 0}, "bool": {"u_mask": 1}},
    "ffn": {"mlp": {"m_ffn": 2}, "swiglu": {"m_ffn": 3}},
    "causal": {"false": {"c_causal": 1}, "true": {"c_causal": Fraction(1, 2)}},
}
