"""The inference-side ledger: KV cache and linear-attention state sizes.

At decode time softmax attention keeps the keys and values of every past
token, for every layer: the KV cache grows with N. Linear attention keeps one
D_k x D_v state per head instead: a size that does not grow.

    KV bytes per token = 2 (K and V) * L * H_kv * D * b

``MODELS`` holds presets of real models; every number is copied from the
model's published ``config.json`` (the ``source`` field says which).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import _checks

__all__ = [
    "ModelConfig",
    "MODELS",
    "kv_cache_bytes_per_token",
    "kv_cache_bytes",
    "linear_state_bytes",
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
    """Bytes of the recurrent state of linear attention: L * H * D_k * D_v * b per sequence.

    It does not depend on the number of tokens seen. d_v defaults to d_k.
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

    def with_(self, **changes) -> ModelConfig:
        """A copy with some fields changed, e.g. ``with_(num_kv_heads=64)``."""
        return replace(self, **changes)


_HF = "https://huggingface.co/{}/blob/main/config.json"

MODELS: dict[str, ModelConfig] = {
    m.name: m
    for m in [
        ModelConfig("Llama 2 7B", 32, 4096, 32, 32, 128, 11008,
                    source=_HF.format("meta-llama/Llama-2-7b-hf")),
        ModelConfig("Llama 2 70B", 80, 8192, 64, 8, 128, 28672,
                    source=_HF.format("meta-llama/Llama-2-70b-hf")),
        ModelConfig("Llama 3 8B", 32, 4096, 32, 8, 128, 14336,
                    source=_HF.format("meta-llama/Meta-Llama-3-8B")),
        ModelConfig("Llama 3 70B", 80, 8192, 64, 8, 128, 28672,
                    source=_HF.format("meta-llama/Meta-Llama-3-70B")),
        ModelConfig("Mistral 7B", 32, 4096, 32, 8, 128, 14336, window=4096,
                    source=_HF.format("mistralai/Mistral-7B-v0.1")),
        # 59 of its 60 layers are mixtures of experts: 2 shared + 6 routed experts of 1536
        # per token are 12288 wide together, as wide as its one dense FFN (layer 0)
        ModelConfig("DeepSeek-V2", 60, 5120, 128, 128, 128, 12288,
                    kv_lora_rank=512, rope_dim=64, d_v=128, q_lora_rank=1536,
                    source=_HF.format("deepseek-ai/DeepSeek-V2")),
        ModelConfig("GPT-2 small", 12, 768, 12, 12, 64, 3072, ffn="mlp",
                    source=_HF.format("openai-community/gpt2")),
        ModelConfig("3.6B worked example (d=3072, H=24)", 32, 3072, 24, 24, 128, 12288, ffn="mlp",
                    source="the worked example of the memory ledger (chapter 5): a GPT-style "
                           "model with d = 3072, H = 24, L = 32 and a 4d MLP"),
    ]
}
