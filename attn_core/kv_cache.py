"""The inference-side ledger: KV cache and linear-attention state sizes.

At decode time softmax attention keeps the keys and values of every past
token, for every layer: the KV cache grows with N. Linear attention keeps one
D_k x D_v state per key/value head (shared by its query heads) instead: a size that does not grow.

    KV bytes per token = 2 (K and V) * L * H_kv * D * b

``MODELS`` holds presets of real models, every number copied from the model's published
``config.json`` (the ``source`` field says which), and the book's worked example.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from . import _checks

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
    return 2 * num_layers * num_kv_heads * d_head * bytes_per_value


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
    kept = seq_len if window is None else min(seq_len, _checks.positive_int("window", window))
    return batch * kept * kv_cache_bytes_per_token(num_layers, num_kv_heads, d_head, bytes_per_value)


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
    return batch * num_layers * num_heads * d_k * d_v * bytes_per_value


@dataclass(frozen=True)
class ModelConfig:
    """The attention shape of a model, from its published config.

    num_layers L, d_model d, num_heads H, num_kv_heads H_kv, d_head D,
    ffn_dim (hidden width of the FFN; for a mixture of experts, the width of
    the experts active per token together), ffn ("mlp": two matrices,
    "swiglu": three), window (sliding window, None = full attention). MLA
    models (DeepSeek-V2) cache a latent of ``kv_lora_rank`` values plus a
    shared RoPE key of ``rope_dim`` values per layer instead of per-head K and
    V; their decompressed K has ``d_head`` + ``rope_dim`` per head and V
    ``d_v``, and their queries pass through a rank-``q_lora_rank`` bottleneck.
    """

    name: str
    num_layers: int
    d_model: int
    num_heads: int
    num_kv_heads: int
    d_head: int
    ffn_dim: int
    ffn: str = "swiglu"
    window: int | None = None
    kv_lora_rank: int | None = None
    rope_dim: int | None = None
    d_v: int | None = None
    q_lora_rank: int | None = None
    source: str = ""
    # for num_params(): the parts outside attention and the FFN (defaults: none of them)
    vocab_size: int = 0
    tie_embeddings: bool = False
    norm: str = "rmsnorm"
    bias: bool = False
    positions: int = 0
    num_experts: int = 0
    shared_experts: int = 0
    expert_dim: int = 0
    dense_layers: int = 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    def kv_values_per_token_per_layer(self, decompressed: bool = False) -> int:
        """Numbers cached per token and layer (K and V together)."""
        if self.is_mla and not decompressed:
            return self.kv_lora_rank + self.rope_dim
        if self.is_mla:  # per head: K = nope part + rope part, V = d_v
            return self.num_heads * (self.d_head + self.rope_dim + self.d_v)
        return 2 * self.num_kv_heads * self.d_head

    def kv_bytes_per_token(self, bytes_per_value: int = 2, decompressed: bool = False) -> int:
        """KV cache bytes per token over all layers."""
        bytes_per_value = _checks.positive_int("bytes_per_value", bytes_per_value)
        return self.num_layers * self.kv_values_per_token_per_layer(decompressed) * bytes_per_value

    def kv_bytes(self, seq_len: int, batch: int = 1, bytes_per_value: int = 2,
                 decompressed: bool = False, use_window: bool = True) -> int:
        """KV cache bytes for ``batch`` sequences of ``seq_len`` tokens."""
        seq_len = _checks.positive_int("seq_len", seq_len)
        batch = _checks.positive_int("batch", batch)
        kept = min(seq_len, self.window) if (use_window and self.window) else seq_len
        return batch * kept * self.kv_bytes_per_token(bytes_per_value, decompressed)

    def attention_params(self) -> int:
        """Weights of one layer's attention projections (matrices only: no norms, biases).

        Q d x H D, K d x H_kv D, V d x H_kv D_v, O H D_v x d; for MLA the queries go through
        d x q_lora_rank and q_lora_rank x H (D + rope), the keys and values through one
        latent: d x (kv_lora_rank + rope) down and kv_lora_rank x H (D + D_v) up.
        """
        d, H, D = self.d_model, self.num_heads, self.d_head
        D_v = self.d_v or D
        out = H * D_v * d  # output projection
        if not self.is_mla:
            return out + d * H * D + d * self.num_kv_heads * (D + D_v)
        qk = D + self.rope_dim
        q = d * H * qk if not self.q_lora_rank else d * self.q_lora_rank + self.q_lora_rank * H * qk
        kv = d * (self.kv_lora_rank + self.rope_dim) + self.kv_lora_rank * H * (D + D_v)
        return out + q + kv

    def ffn_params(self) -> int:
        """Weights of the FFN a token passes through in one layer: 2 or 3 matrices of d x ffn_dim."""
        return {"mlp": 2, "swiglu": 3}[self.ffn] * self.d_model * self.ffn_dim

    def num_params(self) -> int:
        """The exact parameter count of the architecture, as its published weights hold it.

        Token embeddings (``vocab_size`` x d) and learned positions (``positions`` x d), the
        output head (unless ``tie_embeddings``), per layer the attention projections
        (:meth:`attention_params`, plus biases with ``bias``; MLA's two latent RMSNorms) and
        two norms (RMSNorm d, LayerNorm 2d), the FFN (``ffn_params``, plus biases), and the
        final norm. A mixture of experts (``num_experts`` routed + ``shared_experts`` SwiGLU
        experts of width ``expert_dim`` and a router of num_experts x d) replaces the FFN in all
        but the first ``dense_layers`` layers.
        """
        d, H, H_kv, D = self.d_model, self.num_heads, self.num_kv_heads, self.d_head
        norm = self._norm_params()
        attn = self.attention_params()
        if self.bias:
            attn += H * D + 2 * H_kv * D + d
        if self.is_mla:  # RMSNorms on the query and key/value latents
            attn += (self.q_lora_rank or 0) + self.kv_lora_rank
        dense = self.ffn_params() + ((self.ffn_dim + d) if self.bias else 0)
        moe = (self.num_experts + self.shared_experts) * 3 * d * self.expert_dim + self.num_experts * d
        L, L_dense = self.num_layers, (self.dense_layers if self.num_experts else self.num_layers)
        layers = L * (attn + 2 * norm) + L_dense * dense + (L - L_dense) * moe
        embed = (self.vocab_size + self.positions) * d
        head = 0 if self.tie_embeddings else self.vocab_size * d
        return embed + layers + norm + head

    def _norm_params(self) -> int:
        """Parameters of one norm over d: RMSNorm a scale, LayerNorm a scale and a bias."""
        return {"rmsnorm": 1, "layernorm": 2}[self.norm] * self.d_model

    def tp_replicated_params(self) -> int:
        """Parameters every tensor-parallel rank holds whole, as Megatron-LM splits a model.

        The norms (two per layer and the final one), the biases of the row-parallel matrices
        (the output projection's and the FFN's second matrix's, added after the all-reduce) and
        learned position embeddings. Everything else (token embeddings and output head split by
        vocabulary rows, Q, K, V and the FFN's first matrices by columns with their biases, the
        output projection and the FFN's second matrix by rows) is split over the t ranks. Not
        defined for a mixture of experts, whose experts are split by expert parallelism instead.
        """
        if self.num_experts:
            raise ValueError(f"{self.name}: a mixture of experts is not split by tensor parallelism alone")
        d = self.d_model
        norm = self._norm_params()
        row_biases = 2 * d if self.bias else 0
        return self.num_layers * (2 * norm + row_biases) + norm + self.positions * d

    def with_(self, **changes) -> ModelConfig:
        """A copy with some fields changed, e.g. ``with_(num_kv_heads=64)``."""
        return replace(self, **changes)


_HF = "https://huggingface.co/{}/blob/main/config.json"

MODELS: dict[str, ModelConfig] = {
    m.name: m
    for m in [
        ModelConfig("Llama 2 7B", 32, 4096, 32, 32, 128, 11008,
                    vocab_size=32000, source=_HF.format("meta-llama/Llama-2-7b-hf")),
        ModelConfig("Llama 2 70B", 80, 8192, 64, 8, 128, 28672,
                    vocab_size=32000, source=_HF.format("meta-llama/Llama-2-70b-hf")),
        ModelConfig("Llama 3 8B", 32, 4096, 32, 8, 128, 14336,
                    vocab_size=128256, source=_HF.format("meta-llama/Meta-Llama-3-8B")),
        ModelConfig("Llama 3 70B", 80, 8192, 64, 8, 128, 28672,
                    vocab_size=128256, source=_HF.format("meta-llama/Meta-Llama-3-70B")),
        ModelConfig("Mistral 7B", 32, 4096, 32, 8, 128, 14336, window=4096,
                    vocab_size=32000, source=_HF.format("mistralai/Mistral-7B-v0.1")),
        # 59 of its 60 layers are mixtures of experts: 2 shared + 6 routed experts of 1536
        # per token are 12288 wide together, as wide as its one dense FFN (layer 0)
        ModelConfig("DeepSeek-V2", 60, 5120, 128, 128, 128, 12288,
                    kv_lora_rank=512, rope_dim=64, d_v=128, q_lora_rank=1536,
                    vocab_size=102400, num_experts=160, shared_experts=2, expert_dim=1536,
                    dense_layers=1, source=_HF.format("deepseek-ai/DeepSeek-V2")),
        ModelConfig("GPT-2 small", 12, 768, 12, 12, 64, 3072, ffn="mlp",
                    vocab_size=50257, tie_embeddings=True, norm="layernorm", bias=True, positions=1024,
                    source=_HF.format("openai-community/gpt2")),
        ModelConfig("3.6B worked example (d=3072, H=24)", 32, 3072, 24, 24, 128, 12288, ffn="mlp",
                    norm="layernorm",
                    source="the worked example of the memory ledger (chapter 5): a GPT-style "
                           "model with d = 3072, H = 24, L = 32 and a 4d MLP"),
    ]
}


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
def hf_config(model: ModelConfig, num_layers: int = 2, d_model: int | None = None, vocab_size: int = 128,
              window: int | None = None, ffn_dim: int = 64):
    """A ``transformers`` config with the attention geometry of ``model`` (H, H_kv, D, window, MLA).

    Fewer layers, a narrower model width and a small vocabulary keep it tiny: none of them
    changes what a layer caches per token (d_model defaults to 8 H: transformers wants a multiple
    of H). ``window`` overrides the model's sliding window.
    Llama's class for full attention, Mistral's for a sliding window, DeepSeek-V2's for MLA
    (dense FFNs). Needs ``transformers`` (a test dependency, imported here only).
    """
    import transformers

    num_layers = _checks.positive_int("num_layers", num_layers)
    d_model = 8 * model.num_heads if d_model is None else _checks.positive_int("d_model", d_model)
    common = dict(vocab_size=vocab_size, hidden_size=d_model, num_hidden_layers=num_layers,
                  intermediate_size=ffn_dim, num_attention_heads=model.num_heads,
                  num_key_value_heads=model.num_kv_heads)
    if model.is_mla:
        return transformers.DeepseekV2Config(
            **common, kv_lora_rank=model.kv_lora_rank, q_lora_rank=model.q_lora_rank,
            qk_rope_head_dim=model.rope_dim, qk_nope_head_dim=model.d_head, v_head_dim=model.d_v,
            first_k_dense_replace=num_layers, n_routed_experts=2, num_experts_per_tok=1,
            moe_intermediate_size=ffn_dim)
    window = window if window is not None else model.window
    if window is not None:
        return transformers.MistralConfig(**common, head_dim=model.d_head, sliding_window=window)
    return transformers.LlamaConfig(**common, head_dim=model.d_head)


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
