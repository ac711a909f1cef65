"""Every formula of the book, written once, as a plain Python function.

Each function here evaluates on numbers (ints and :class:`fractions.Fraction` stay exact) and on
SymPy symbols alike, so one definition serves every reader:

* the library's public functions (:func:`attn_core.ledger.block_ledger`,
  :func:`attn_core.flops.layer_flops`, :func:`attn_core.kv_cache.kv_cache_bytes`,
  :func:`attn_core.training.training_state_bytes`, ...) check their arguments, turn options into
  the switch values of :data:`attn_core.symbols.SWITCHES` and call these functions with ints;
* the widgets call :func:`widget_values` with exact Fractions (Python) and run the JavaScript
  that SymPy prints from the same call with symbols (``static/formulas.js``, written by
  ``make formulas``; tests/test_formulas.py checks it is current);
* a chapter calls a function without arguments and gets the SymPy expression in the book's
  symbols (``layer_flops()`` -> ``(2 N (...), 2 N**2 H (...))``), to print or to solve.

Switches are numbers too: 0/1 indicators (``k_drop`` dropout, ``n_rms`` RMSNorm, ...) or the value a
menu sets (``c_causal`` 1 or 1/2), so a branch is a product, and a choice that depends on the
architecture (a sliding window, MLA's latent) goes through :func:`where`. Symbols and switches are
listed, with their meaning, in :mod:`attn_core.symbols`. SymPy is imported only when a symbol
appears, so evaluating with numbers needs no SymPy.
"""

from __future__ import annotations

from ..symbols import SYMBOLS
from ._core import (
    crossover,
    eq,
    formula,
    le,
    linear_and_quadratic,
    maximum,
    minimum,
    positive_root,
    quadratic_coefficients,
    split_in,
    sqrt,
    symbols,
    where,
)
from .attention import (
    MHA,
    attention_params,
    fused_bytes,
    kv_cache_bytes,
    layer_flops,
    linear_state_bytes,
    memory_items,
)
from .model import LORA_SYMBOLS, model_params, step_model
from .parallel import cp_saved, cp_sent, ring_hide_tokens, ring_step, transfer_time, ulysses_sent
from .step import PHASES, STEP_ITEMS, layer_items, rebuilt_bytes, step_items
from .training import TP_SPLIT_ITEMS, block_items, per_rank_items, per_rank_params, training_state
from .widgets import GENERATED_JS, javascript, widget_names, widget_values, write_generated

__all__ = [
    "formula", "symbols", "where", "eq", "le", "maximum", "minimum", "sqrt", "MHA", "TP_SPLIT_ITEMS",
    "memory_items", "fused_bytes", "attention_params", "layer_flops", "kv_cache_bytes", "linear_state_bytes",
    "block_items", "training_state", "per_rank_items", "per_rank_params", "linear_and_quadratic",
    "positive_root", "quadratic_coefficients", "widget_values", "widget_names", "crossover", "split_in",
    "javascript", "write_generated",
    "GENERATED_JS", "PHASES", "STEP_ITEMS", "layer_items", "rebuilt_bytes", "step_items",
    "model_params", "step_model", "LORA_SYMBOLS",
    "cp_saved", "cp_sent", "ulysses_sent", "transfer_time", "ring_step", "ring_hide_tokens",
]


def __getattr__(name: str):
    """``formulas.N``, ``formulas.d``, ...: the book's symbols (SymPy imported on first use)."""
    if name in SYMBOLS:
        return symbols()[name]
    raise AttributeError(f"module 'attn_core.formulas' has no attribute {name!r}")
