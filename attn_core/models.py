"""Models: the shape of a real transformer, from its published config, and the book's presets.

:class:`ModelConfig` holds what the ledgers need of a model (layers, width, heads, head dims, FFN,
sliding window, MLA's latent, and for the parameter count the vocabulary, norms, biases, experts).
:meth:`ModelConfig.from_hf_config` reads one from a Hugging Face ``config.json`` through the
per-family rules of ``static/hf_families.json`` (data the page's reader applies too).
:data:`MODELS` holds presets of real models, each read from its published ``config.json`` shipped
in ``configs/`` (the ``source`` field says where it was published), and the book's worked example.
:func:`hf_config` builds a small ``transformers`` config of the same attention geometry (tests and
chapters measure a real cache with it). The sizes these shapes give are written once, in
:mod:`attn_core.formulas`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
from dataclasses import dataclass, replace

from . import _checks, formulas
from .symbols import MODEL_MENUS, MODEL_SYMBOLS, SWITCHES

__all__ = ["ModelConfig", "MODELS", "CONFIG_FILES", "HF_FAMILIES_FILE", "hf_config"]

_HERE = pathlib.Path(__file__).parent
HF_FAMILIES_FILE = _HERE / "static" / "hf_families.json"
#: the fields a config.json must give as positive integers (the page's reader checks the same ones),
#: and those a mixture of experts must give too
REQUIRED_FIELDS = ("num_layers", "d_model", "num_heads", "num_kv_heads", "d_head", "ffn_dim", "vocab_size")
EXPERT_FIELDS = ("experts_per_token", "expert_dim")


@dataclass(frozen=True)
class ModelConfig:
    """The attention shape of a model, from its published config.

    num_layers L, d_model d, num_heads H, num_kv_heads H_kv, d_head D,
    ffn_dim (hidden width of the FFN; for a mixture of experts, the width of
    the experts active per token together), ffn ("mlp": two matrices,
    "swiglu": three, a gated FFN: SwiGLU, or GeGLU when ``activation`` is a
    GELU), window (sliding window, None = full attention; on
    ``sliding_layers`` of the L layers, None = all of them). MLA models
    (DeepSeek-V2/V3) cache a latent of ``kv_lora_rank`` values plus a shared
    RoPE key of ``rope_dim`` values per layer instead of per-head K and V;
    their decompressed K has ``d_head`` + ``rope_dim`` per head and V ``d_v``,
    and their queries pass through a rank-``q_lora_rank`` bottleneck (None:
    one d x H (D + rope_dim) matrix).

    For :meth:`num_params` (defaults: none of these parts): the vocabulary
    (``tie_embeddings``: the output head is the embedding matrix), ``norm``
    ("rmsnorm" or "layernorm", ``norms_per_layer`` of them a layer), biases
    (``bias``: on every matrix, as GPT-2; or ``qkv_bias`` on Q, K, V (MLA: on
    its down projections), ``out_bias`` on the output projection, ``ffn_bias``
    on the FFN's matrices), learned ``positions``, a mixture of experts
    (``num_experts`` routed experts of width ``expert_dim``,
    ``experts_per_token`` of them per token, ``shared_experts`` always on, a
    router of num_experts x d; the first ``dense_layers`` layers keep a dense
    FFN of ``dense_ffn_dim``, 0 = ffn_dim). Read from a config.json and not
    counted: ``fused_qkv`` / ``fused_gate_up`` (Phi-3 keeps Q, K, V and the
    gate and up matrices in one weight each: the same count, one module),
    ``query_pre_attn_scalar`` (Gemma 2 scales scores by its -1/2 power
    instead of d_head's), ``activation``, ``context_length``
    (max_position_embeddings), ``rope_scaling`` (its type: "yarn",
    "llama3", ...), ``mtp_layers`` (DeepSeek-V3's multi-token-prediction
    modules, which ``transformers`` does not build into the model: left out
    of num_params, as the 671B the DeepSeek-V3 report gives for its main
    model leaves them out) and ``model_type``.
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
    # read from a config.json (from_hf_config); the defaults are the architecture of the fields above
    model_type: str = ""
    activation: str = ""
    qkv_bias: bool = False
    out_bias: bool = False
    ffn_bias: bool = False
    norms_per_layer: int = 2
    sliding_layers: int | None = None
    query_pre_attn_scalar: int | None = None
    fused_qkv: bool = False
    fused_gate_up: bool = False
    experts_per_token: int = 0
    dense_ffn_dim: int = 0
    context_length: int = 0
    rope_scaling: str | None = None
    mtp_layers: int = 0

    def __post_init__(self):
        # one spelling per geometry (hf_families.json's _format says the same): no window, no sliding
        # layers; a window on every layer is sliding_layers None
        sliding = self.sliding_layers
        if self.window is None or sliding == 0:
            object.__setattr__(self, "window", None)
            sliding = None
        if sliding == self.num_layers:
            sliding = None
        object.__setattr__(self, "sliding_layers", sliding)

    @classmethod
    def from_hf_config(cls, config, name: str | None = None, source: str = "") -> ModelConfig:
        """The model a Hugging Face ``config.json`` describes.

        ``config``: the parsed file (a dict), a path to it (or to its folder), or a ``transformers``
        ``PretrainedConfig``. Its ``model_type`` picks the family's rules in ``static/hf_families.json``
        (:data:`HF_FAMILIES_FILE`: llama, mistral, mixtral, qwen2, gemma2, phi3, gpt2, deepseek_v2,
        deepseek_v3), which say how each field is read; its format is written in the file's ``_format``.
        :meth:`num_params` then equals the parameter count of the ``transformers`` model built from the
        same config. ``name`` defaults to the config's ``_name_or_path`` or its model_type.
        Raises ``ValueError`` naming an unknown ``model_type`` or a key the family needs and the config
        lacks.
        """
        cfg = _config_dict(config)
        model_type = cfg.get("model_type")
        if not model_type:
            raise ValueError("config has no 'model_type': from_hf_config needs it to pick the family")
        families = _hf_families()
        if model_type not in families:
            known = ", ".join(sorted(families))
            raise ValueError(f"unknown model_type {model_type!r}: from_hf_config reads {known}")
        values = _RuleReader(model_type, _family_rules(families, model_type), cfg).values()
        for f in REQUIRED_FIELDS + (EXPERT_FIELDS if values.get("num_experts") else ()):
            _checks.positive_int(f"{model_type} config: {f}", values[f])
        name = name or cfg.get("_name_or_path") or model_type
        return cls(name=name, source=source, model_type=model_type, **values)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    def formula_args(self) -> dict:
        """The model's values of the symbols of :mod:`attn_core.formulas` (d, H, H_kv, D, D_v, D_r,
        R, Q_r, F, m_ffn, L, W): R is MLA's cached latent (kv_lora_rank + rope_dim, 0 without MLA)
        and W the sliding window (0 for full attention; with ``sliding_layers`` set, only that many
        of the L layers have it, which :meth:`kv_bytes` counts apart)."""
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
        with a sliding window, on the ``sliding_layers`` that have it, unless ``use_window=False``)."""
        seq_len = _checks.positive_int("seq_len", seq_len)
        batch = _checks.positive_int("batch", batch)
        bytes_per_value = _checks.positive_int("bytes_per_value", bytes_per_value)
        window = (self.window or 0) if use_window else 0
        args = self._kv_args(decompressed)
        sliding = self.num_layers if self.sliding_layers is None else self.sliding_layers
        if not window or sliding == self.num_layers:
            return formulas.kv_cache_bytes(B=batch, N=seq_len, W=window, b=bytes_per_value, **args)
        # layers with the window, then layers with full attention (Gemma 2 alternates them)
        return sum(formulas.kv_cache_bytes(B=batch, N=seq_len, W=w, b=bytes_per_value, **{**args, "L": n})
                   for w, n in ((window, sliding), (0, self.num_layers - sliding)))

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
        return self._ffn_weights(self.ffn_dim)

    def _ffn_weights(self, width: int) -> int:
        """Matrices of one FFN of hidden width ``width``: 2 (mlp) or 3 (gated) of d x width."""
        return {"mlp": 2, "swiglu": 3}[self.ffn] * self.d_model * width

    def symbol_values(self) -> dict:
        """The model's values of the symbols of :mod:`attn_core.formulas` that a whole model sets
        (:data:`attn_core.symbols.MODEL_SYMBOLS`, :data:`~attn_core.symbols.MODEL_MENUS`): d, H, H_kv,
        D, D_v, L, F, the vocabulary, MLA's ranks, norms, biases, experts, m_ffn and n_rms. The page
        applies the same table to a config.json it reads (static/hf_config.js)."""
        out = {}
        for sym, fields in MODEL_SYMBOLS.items():
            values = [getattr(self, f) for f in ([fields] if isinstance(fields, str) else fields)]
            value = next((v for v in values if v), 0)  # the first field that is set; null and false are 0
            out[sym] = int(value)
        for field, menu in MODEL_MENUS.items():
            out.update(SWITCHES[menu][getattr(self, field)])
        return out

    def num_params(self) -> int:
        """The exact parameter count of the architecture, as ``transformers`` builds it.

        Token embeddings (``vocab_size`` x d) and learned positions (``positions`` x d), the
        output head (unless ``tie_embeddings``), per layer the attention projections
        (:meth:`attention_params`, plus their biases; MLA's two latent RMSNorms) and
        ``norms_per_layer`` norms (RMSNorm d, LayerNorm 2d), the FFN (2 or 3 matrices of
        d x ffn_dim, plus biases), and the final norm. A mixture of experts (``num_experts``
        routed experts of width ``expert_dim`` without biases, ``shared_experts`` more as one
        FFN of ``shared_experts`` x expert_dim, and a router of num_experts x d) replaces the
        FFN in all but the first ``dense_layers`` layers, whose FFN is ``dense_ffn_dim`` wide
        (0: ffn_dim). DeepSeek-V3's multi-token-prediction modules (``mtp_layers``) are not
        counted: ``transformers`` does not build them into the model. The formula is
        :func:`attn_core.formulas.model_params`, which the "does it fit" widget's page evaluates too.
        """
        return formulas.model_params(**self.symbol_values())["P_w"]

    def io_params(self) -> int:
        """Parameters outside the blocks: token embeddings, learned positions, the output head
        (unless tied) and the final norm (:meth:`num_params` less the layers)."""
        return formulas.model_params(**self.symbol_values())["P_io"]

    def _norm_params(self) -> int:
        """Parameters of one norm over d: RMSNorm a scale, LayerNorm a scale and a bias."""
        return {"rmsnorm": 1, "layernorm": 2}[self.norm] * self.d_model

    def tp_replicated_params(self) -> int:
        """Parameters every tensor-parallel rank holds whole, as Megatron-LM splits a model.

        The norms (``norms_per_layer`` per layer and the final one), the biases of the
        row-parallel matrices (the output projection's and the FFN's last matrix's, added after
        the all-reduce) and learned position embeddings. Everything else (token embeddings and
        output head split by vocabulary rows, Q, K, V and the FFN's first matrices by columns with
        their biases, the output projection and the FFN's last matrix by rows) is split over the
        t ranks. Not defined for a mixture of experts, whose experts are split by expert
        parallelism instead.
        """
        if self.num_experts:
            raise ValueError(f"{self.name}: a mixture of experts is not split by tensor parallelism alone")
        d = self.d_model
        norm = self._norm_params()
        row_biases = (d if (self.bias or self.out_bias) else 0) + (d if (self.bias or self.ffn_bias) else 0)
        return self.num_layers * (self.norms_per_layer * norm + row_biases) + norm + self.positions * d

    def with_(self, **changes) -> ModelConfig:
        """A copy with some fields changed, e.g. ``with_(num_kv_heads=64)``."""
        return replace(self, **changes)


# --------------------------------------------------------------------------- reading a config.json
def _config_dict(config) -> dict:
    """A config.json as a dict: given parsed, as a path (file or folder), or as a transformers config."""
    if isinstance(config, dict):
        return config
    if isinstance(config, (str, os.PathLike)):
        path = pathlib.Path(config)
        path = path / "config.json" if path.is_dir() else path
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"config: cannot read a config.json at {str(path)!r} ({e})") from e
        if not isinstance(data, dict):
            raise ValueError(f"config: {str(path)!r} holds a {type(data).__name__}, not a JSON object")
        return data
    if callable(getattr(config, "to_dict", None)) and hasattr(config, "model_type"):  # PretrainedConfig
        return {"model_type": config.model_type, **config.to_dict()}
    raise ValueError("config must be a parsed config.json (dict), a path to one or a transformers "
                     f"PretrainedConfig, got {type(config).__name__}")


@functools.cache
def _hf_families() -> dict:
    """static/hf_families.json without its notes: {model_type: rules}."""
    data = json.loads(HF_FAMILIES_FILE.read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


def _family_rules(families: dict, model_type: str) -> dict:
    """A family's rules, those of the family it extends (and so on) first."""
    own = families[model_type]
    base = _family_rules(families, own["_extends"]) if "_extends" in own else {}
    return {**base, **{k: v for k, v in own.items() if not k.startswith("_")}}


_FIELD_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
_ABSENT = object()


class _RuleReader:
    """Applies one family's rules to one config (the vocabulary of hf_families.json's _format)."""

    def __init__(self, model_type: str, rules: dict, cfg: dict):
        self.model_type, self.rules, self.cfg = model_type, rules, cfg
        self.done: dict = {}
        self.busy: list[str] = []

    def values(self) -> dict:
        return {f: self.field(f) for f in self.rules}

    def field(self, name: str):
        if name in self.done:
            return self.done[name]
        if name not in self.rules:
            if name not in _FIELD_DEFAULTS or name in ("name", "source", "model_type"):
                raise ValueError(f"hf_families.json, {self.model_type}: no ModelConfig field {name!r}")
            return _FIELD_DEFAULTS[name]
        if name in self.busy:
            raise ValueError(f"hf_families.json, {self.model_type}: fields {self.busy} refer to each other")
        self.busy.append(name)
        self.done[name] = self.rule(self.rules[name], name)
        self.busy.pop()
        return self.done[name]

    def lookup(self, key: str):
        """The value at a (dotted) key; _ABSENT when a step is missing (or null before the last)."""
        value, parts = self.cfg, key.split(".")
        for i, part in enumerate(parts):
            if not isinstance(value, dict) or part not in value:
                return _ABSENT
            value = value[part]
            if value is None and i < len(parts) - 1:
                return _ABSENT
        return value

    def missing(self, key: str, name: str) -> ValueError:
        return ValueError(f"{self.model_type} config has no {key!r} (ModelConfig.{name} is read from it)")

    def rule(self, r, name: str):
        if isinstance(r, str):
            value = self.lookup(r)
            if value is _ABSENT:
                raise self.missing(r, name)
            return value
        if r is None or isinstance(r, (bool, int, float)):
            return r
        if not isinstance(r, dict):
            raise ValueError(f"hf_families.json, {self.model_type}.{name}: not a rule: {r!r}")
        if "value" in r:
            return r["value"]
        if "key" in r:
            value = self.lookup(r["key"])
            if value is _ABSENT:
                if "absent" in r or "default" in r:
                    return self.rule(r["absent"] if "absent" in r else r["default"], name)
                raise self.missing(r["key"], name)
            if value is None or value in r.get("none", ()):
                return self.rule(r["default"], name) if "default" in r else None
            return value
        if "count" in r:
            items = self.lookup(r["in"])
            if items is _ABSENT or items is None:
                if "default" not in r:
                    raise self.missing(r["in"], name)
                return self.rule(r["default"], name)
            return sum(1 for x in items if x == r["count"])
        if "field" in r:
            return self.field(r["field"])
        if "if" in r:
            c = self.rule(r["if"], name)
            return self.rule(r["then"] if c is not None and c is not False and c != 0 else r["else"], name)
        ops = {"sum": sum, "product": lambda xs: functools.reduce(lambda a, b: a * b, xs, 1), "max": max,
               "difference": lambda xs: xs[0] - xs[1], "quotient": lambda xs: xs[0] // xs[1]}
        for op, fn in ops.items():
            if op in r:
                xs = [self.rule(x, name) for x in r[op]]
                if any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in xs):
                    raise ValueError(f"{self.model_type} config: ModelConfig.{name} is computed from "
                                     f"values that are not numbers: {xs}")
                return fn(xs)
        raise ValueError(f"hf_families.json, {self.model_type}.{name}: not a rule: {r!r}")


# --------------------------------------------------------------------------- the presets
_HF = "https://huggingface.co/{}/blob/main/config.json"
# name -> Hugging Face repository; its config.json, as published, is configs/<repository name>.json
_PRESETS = {
    "Llama 2 7B": "meta-llama/Llama-2-7b-hf",
    "Llama 2 70B": "meta-llama/Llama-2-70b-hf",
    "Llama 3 8B": "meta-llama/Meta-Llama-3-8B",
    "Llama 3 70B": "meta-llama/Meta-Llama-3-70B",
    "Mistral 7B": "mistralai/Mistral-7B-v0.1",
    # 59 of its 60 layers are mixtures of experts: 2 shared + 6 routed experts of 1536
    # per token are 12288 wide together, as wide as its one dense FFN (layer 0)
    "DeepSeek-V2": "deepseek-ai/DeepSeek-V2",
    "GPT-2 small": "openai-community/gpt2",
}
CONFIG_FILES: dict[str, pathlib.Path] = {
    name: _HERE / "configs" / f"{repo.split('/')[1]}.json" for name, repo in _PRESETS.items()}

MODELS: dict[str, ModelConfig] = {
    **{name: ModelConfig.from_hf_config(CONFIG_FILES[name], name=name, source=_HF.format(repo))
       for name, repo in _PRESETS.items()},
    # not a published model: no config.json (the memory ledger's example of chapter 5)
    "3.6B worked example (d=3072, H=24)": ModelConfig(
        "3.6B worked example (d=3072, H=24)", 32, 3072, 24, 24, 128, 12288, ffn="mlp", norm="layernorm",
        source="the worked example of the memory ledger (chapter 5): a simplified ~3.6B transformer "
               "(d = 3072, H = 24, L = 32, a 4d MLP) trained on 1024 x 1024 image-to-video, one frame's "
               "latent of 64 x 64 patches (N = 4096); a teaching construction, not a published model"),
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


