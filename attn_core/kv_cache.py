"""The inference-side ledger: KV cache and linear-attention state sizes.

At decode time softmax attention keeps the keys and values of every past
token, for every layer: the KV cache grows with N. Linear attention keeps one
D_k x D_v state per key/value head (shared by its query heads) instead: a size that does not grow.

    KV bytes per token = 2 (K and V) * L * H_kv * D * b

The model presets (:class:`ModelConfig`, :data:`MODELS`) live in :mod:`attn_core.models` and are
importable from here too; the sizes are written once in :mod:`attn_core.formulas`.
"""

from __future__ import annotations

import math

import torch

from . import _checks, formulas
from .models import MODELS, ModelConfig, hf_config

__all__ = [
    "ModelConfig",
    "MODELS",
    "kv_cache_bytes_per_token",
    "kv_cache_bytes",
    "linear_state_bytes",
    "QUANT_BYTES",
    "quantized_kv_cache_bytes",
    "quantize_kv",
    "dequantize_kv",
    "paged_kv_cache_bytes",
    "hf_config",
    "hf_cache_bytes",
]

def kv_cache_bytes_per_token(
    num_layers: int, num_kv_heads: int, d_head: int, bytes_per_value: int = 2
) -> int:
    """Bytes of K and V cached per token: 2 * L * H_kv * D * b."""
    num_layers = _checks.positive_int("num_layers", num_layers)
    num_kv_heads = _checks.positive_int("num_kv_heads", num_kv_heads)
    d_head = _checks.positive_int("d_head", d_head)
    bytes_per_value = _checks.positive_int("bytes_per_value", bytes_per_value)
    return formulas.kv_cache_bytes(B=1, N=1, L=num_layers, H_kv=num_kv_heads, D=d_head, D_v=d_head, R=0, W=0,
                                   b=bytes_per_value)


def kv_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    d_head: int,
    seq_len: int,
    batch: int = 1,
    window: int | None = None,
    bytes_per_value: int = 2,
) -> int:
    """Bytes of the KV cache for ``batch`` sequences of ``seq_len`` tokens.

    With a sliding window only the last ``window`` tokens are kept, so the
    cache stops growing at ``window`` tokens (Mistral 7B: 4096).
    """
    seq_len = _checks.positive_int("seq_len", seq_len)
    batch = _checks.positive_int("batch", batch)
    window = 0 if window is None else _checks.positive_int("window", window)
    kv_cache_bytes_per_token(num_layers, num_kv_heads, d_head, bytes_per_value)  # checks the rest
    return formulas.kv_cache_bytes(B=batch, N=seq_len, L=num_layers, H_kv=num_kv_heads, D=d_head, D_v=d_head,
                                   R=0, W=window, b=bytes_per_value)


def linear_state_bytes(
    num_layers: int,
    num_heads: int,
    d_k: int,
    d_v: int | None = None,
    batch: int = 1,
    bytes_per_value: int = 2,
) -> int:
    """Bytes of the recurrent state of linear attention: L * H_kv * D_k * D_v * b per sequence.

    ``num_heads`` is H_kv, the number of states per layer: one per key/value head (query heads
    that share a key and value head share its state M_t = sum k v^T). It does not depend on the
    number of tokens seen. d_v defaults to d_k.
    """
    num_layers = _checks.positive_int("num_layers", num_layers)
    num_heads = _checks.positive_int("num_heads", num_heads)
    d_k = _checks.positive_int("d_k", d_k)
    d_v = d_k if d_v is None else _checks.positive_int("d_v", d_v)
    batch = _checks.positive_int("batch", batch)
    bytes_per_value = _checks.positive_int("bytes_per_value", bytes_per_value)
    return formulas.linear_state_bytes(B=batch, L=num_layers, H_kv=num_heads, D_k=d_k, D_v=d_v,
                                       b=bytes_per_value)


# --------------------------------------------------------------------------- quantized caches
#: bytes per cached value of each quantization (the scales come on top, per group)
QUANT_BYTES: dict[str, int] = {"int8": 1, "fp8": 1}
_QUANT_MAX = {"int8": 127.0, "fp8": 448.0}  # largest value: int8 symmetric, float8 e4m3


def _quant(quant: str) -> str:
    if quant not in QUANT_BYTES:
        raise ValueError(f"quant must be one of {sorted(QUANT_BYTES)}, got {quant!r}")
    return quant


def quantized_kv_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    d_head: int,
    seq_len: int,
    batch: int = 1,
    window: int | None = None,
    quant: str = "int8",
    group_size: int = 64,
    scale_bytes: int = 2,
) -> int:
    """Bytes of a KV cache stored as 8-bit values plus one scale per group of values.

    Each cached K or V vector of D values is split into ceil(D / group_size) groups along D;
    a group stores its values in 1 byte each (``quant`` "int8" or "fp8") and one scale of
    ``scale_bytes`` (2: fp16). Per token: 2 L H_kv (D + ceil(D / g) * scale_bytes).
    """
    _quant(quant)
    group_size = _checks.positive_int("group_size", group_size)
    scale_bytes = _checks.positive_int("scale_bytes", scale_bytes)
    d_head = _checks.positive_int("d_head", d_head)
    per_vector = d_head * QUANT_BYTES[quant] + math.ceil(d_head / group_size) * scale_bytes
    # cached vectors: 2 (K and V) * batch * kept tokens * L * H_kv
    vectors = kv_cache_bytes(num_layers, num_kv_heads, 1, seq_len, batch, window, bytes_per_value=1)
    return vectors * per_vector


def quantize_kv(x: torch.Tensor, quant: str = "int8", group_size: int = 64
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize cached keys or values ``x`` (..., D) per group of ``group_size`` values along D.

    Symmetric: scale = max |x| of the group / the format's largest value (127 for int8, 448 for
    float8 e4m3), values = x / scale rounded to int8 or cast to ``torch.float8_e4m3fn``.
    Returns ``(values (..., D), scales (..., D / group_size) in float16)``.
    """
    _quant(quant)
    _checks.tensor("x", x)
    group_size = _checks.positive_int("group_size", group_size)
    d = x.shape[-1]
    if d % group_size:
        raise ValueError(f"group_size ({group_size}) must divide the last dim of x ({d})")
    groups = x.float().reshape(*x.shape[:-1], d // group_size, group_size)  # "... (G g) -> ... G g"
    amax = groups.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / _QUANT_MAX[quant], torch.ones_like(amax)).half()
    scaled = groups / scale.float()
    if quant == "int8":
        values = scaled.round().clamp(-127, 127).to(torch.int8)
    else:
        values = scaled.clamp(-448, 448).to(torch.float8_e4m3fn)
    return values.reshape(x.shape), scale.squeeze(-1)  # "... G g -> ... (G g)"


def dequantize_kv(values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Undo :func:`quantize_kv`: values (..., D), scales (..., G) -> float32 (..., D)."""
    _checks.tensor("values", values)
    _checks.tensor("scales", scales)
    d, g = values.shape[-1], scales.shape[-1]
    if values.shape[:-1] != scales.shape[:-1] or d % g:
        raise ValueError(f"scales {tuple(scales.shape)} do not match values {tuple(values.shape)}")
    groups = values.float().reshape(*values.shape[:-1], g, d // g)  # "... (G g) -> ... G g"
    return (groups * scales.float()[..., None]).reshape(values.shape)


# --------------------------------------------------------------------------- paged caches
def paged_kv_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    d_head: int,
    seq_lens: int | list[int],
    page_size: int = 16,
    bytes_per_value: int = 2,
) -> int:
    """Bytes allocated by a paged KV cache: each sequence gets ceil(N / page_size) pages of page_size tokens.

    ``seq_lens``: one length or a list (one per sequence of the batch). The last page of a
    sequence is partly empty: at most page_size - 1 tokens' worth of waste per sequence (vLLM's
    PagedAttention allocates this way, in blocks of 16 tokens by default).
    """
    page_size = _checks.positive_int("page_size", page_size)
    lens = [seq_lens] if not isinstance(seq_lens, (list, tuple)) else list(seq_lens)
    if not lens:
        raise ValueError("seq_lens must hold at least one length")
    pages = sum(-(-_checks.positive_int("seq_lens", n) // page_size) for n in lens)
    return pages * page_size * kv_cache_bytes_per_token(num_layers, num_kv_heads, d_head, bytes_per_value)


# --------------------------------------------------------------------------- Hugging Face transformers
def hf_cache_bytes(cache) -> dict[str, int]:
    """What a ``transformers`` cache holds: ``visible`` (bytes of the cached K and V tensors, as
    their shapes say) and ``held`` (bytes of the storages behind them, each counted once: a
    sliding-window layer keeps a slice of a larger tensor alive), summed over the layers."""
    visible, storages = 0, {}
    for layer in cache.layers:
        for t in (layer.keys, layer.values):
            if t is None:
                continue
            visible += t.numel() * t.element_size()
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return {"visible": visible, "held": sum(storages.values())}
