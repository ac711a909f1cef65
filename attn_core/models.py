"""Models: the shape of a real transformer, from its published config, and the book's presets.

:class:`ModelConfig` holds what the ledgers need of a model (layers, width, heads, head dims, FFN,
sliding window, MLA's latent, and for the parameter count the vocabulary, norms, biases, experts).
:data:`MODELS` holds presets of real models, every number copied from the model's published
``config.json`` (the ``source`` field says which), and the book's worked example.
:func:`hf_config` builds a small ``transformers`` config of the same attention geometry (tests and
chapters measure a real cache with it). The sizes these shapes give are written once, in
:mod:`attn_core.formulas`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import _checks, formulas

__all__ = ["ModelConfig", "MODELS", "hf_config"]


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

    def formula_args(self) -> dict:
        """The model's values of the symbols of :mod:`attn_core.formulas` (d, H, H_kv, D, D_v, D_r,
        R, Q_r, F, m_ffn, L, W): R is MLA's cached latent (kv_lora_rank + rope_dim, 0 without MLA)
        and W the sliding window (0 for full attention)."""
        return {"d": self.d_model, "H": self.num_heads, "H_kv": self.num_kv_heads, "D": self.d_head,
                "D_v": self.d_v or self.d_head, "D_r": self.rope_dim or 0,
                "R": (self.kv_lora_rank + self.rope_dim) if self.is_mla else 0, "Q_r": self.q_lora_rank or 0,
                "F": self.ffn_dim, "m_ffn": {"mlp": 2, "swiglu": 3}[self.ffn], "L": self.num_layers,
                "W": self.window or 0}

    def _kv_args(self, decompressed: bool) -> dict:
        a = self.formula_args()
        if self.is_mla and decompressed:  # per head: K = nope part + rope part, V = d_v
            a.update(R=0, H_kv=self.num_heads, D=self.d_head + self.rope_dim)
        return {k: a[k] for k in ("L", "H_kv", "D", "D_v", "R")}

    def kv_values_per_token_per_layer(self, decompressed: bool = False) -> int:
        """Numbers cached per token and layer (K and V together)."""
        return formulas.kv_cache_bytes(B=1, N=1, W=0, b=1, **{**self._kv_args(decompressed), "L": 1})

    def kv_bytes_per_token(self, bytes_per_value: int = 2, decompressed: bool = False) -> int:
        """KV cache bytes per token over all layers."""
        bytes_per_value = _checks.positive_int("bytes_per_value", bytes_per_value)
        return formulas.kv_cache_bytes(B=1, N=1, W=0, b=bytes_per_value, **self._kv_args(decompressed))

    def kv_bytes(self, seq_len: int, batch: int = 1, bytes_per_value: int = 2,
                 decompressed: bool = False, use_window: bool = True) -> int:
        """KV cache bytes for ``batch`` sequences of ``seq_len`` tokens (the last ``window`` of them
        with a sliding window, unless ``use_window=False``)."""
        seq_len = _checks.positive_int("seq_len", seq_len)
        batch = _checks.positive_int("batch", batch)
        bytes_per_value = _checks.positive_int("bytes_per_value", bytes_per_value)
        window = (self.window or 0) if use_window else 0
        return formulas.kv_cache_bytes(B=batch, N=seq_len, W=window, b=bytes_per_value,
                                       **self._kv_args(decompressed))

    def attention_params(self) -> int:
        """Weights of one layer's attention projections (matrices only: no norms, biases).

        Q d x H D, K d x H_kv D, V d x H_kv D_v, O H D_v x d; for MLA the queries go through
        d x q_lora_rank and q_lora_rank x H (D + rope), the keys and values through one
        latent: d x (kv_lora_rank + rope) down and kv_lora_rank x H (D + D_v) up
        (:func:`attn_core.formulas.attention_params`).
        """
        a = self.formula_args()
        names = ("d", "H", "H_kv", "D", "D_v", "D_r", "R", "Q_r")
        return formulas.attention_params(**{k: a[k] for k in names})

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


