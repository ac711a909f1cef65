"""attn_core: the reference library of The Attention Ledger.

Modules (see book/notation.md for the symbols):

* :mod:`attn_core.attention`: softmax, SDPA, masks, RoPE, MHA, GQA
* :mod:`attn_core.linear`: causal linear attention, parallel / recurrent / chunked, gated
* :mod:`attn_core.kv_cache`: KV cache and linear-state sizes, presets of real models
* :mod:`attn_core.ledger`: the activation-memory ledger of one attention layer
* :mod:`attn_core.flops`: the FLOPs ledger of one transformer layer
* :mod:`attn_core.measure`: saved tensors, FLOP counts and timings, measured
"""

from . import attention, flops, kv_cache, ledger, linear, measure

__version__ = "0.1.0"

__all__ = ["attention", "flops", "kv_cache", "ledger", "linear", "measure", "__version__"]
