"""attn_core: the reference library of The Attention Ledger.

Modules (see book/notation.md for the symbols):

* :mod:`attn_core.attention`: softmax, SDPA, masks, RoPE, MHA, GQA, and FlashAttention from scratch
  (:mod:`attn_core.flash`)
* :mod:`attn_core.linear`: causal linear attention, parallel / recurrent / chunked, gated (scalar
  and vector gates), and the delta rule (:mod:`attn_core.delta`)
* :mod:`attn_core.kv_cache`: KV cache and linear-state sizes, quantized and paged caches, presets
  of real models with their exact parameter counts
* :mod:`attn_core.ledger`: the activation-memory ledger of one attention layer and of a whole block
  (:mod:`attn_core.block` builds and measures the block)
* :mod:`attn_core.flops`: the FLOPs ledger of one transformer layer, of a real model as built
* :mod:`attn_core.training`: weights, gradients, optimizer state and ZeRO
* :mod:`attn_core.inference`: arithmetic intensity, the roofline of this machine, decoding
* :mod:`attn_core.parallel`: ring attention, tensor and sequence parallelism on torch.distributed
* :mod:`attn_core.measure`: saved tensors, FLOP counts and timings, measured
* :mod:`attn_core.formulas`: every formula the widgets show, once, as SymPy expressions
  (imported on demand: it imports SymPy)
* :mod:`attn_core.widgets`: the slider explorers and answer boxes (imported on demand)
"""

from . import attention, flops, kv_cache, ledger, linear, measure

__version__ = "0.1.0"

__all__ = ["attention", "flops", "kv_cache", "ledger", "linear", "measure", "__version__"]
