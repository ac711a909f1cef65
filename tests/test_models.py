"""attn_core.models: ModelConfig.from_hf_config, the per-family rules (static/hf_families.json) and the
presets read from their shipped config.json files.

The reference is Hugging Face ``transformers``: each config below builds the model of its family on the
meta device (``AutoModelForCausalLM.from_config``), and ``num_params()`` must equal the number of its
parameters (tied ones once). Configs are written here (no download): small ones with odd sizes and every
switch of the family, and the architecture keys of published config.json files. The counts are also typed
here (they were counted by ``transformers`` 5.23), so the test runs without it. A reader of
hf_families.json in a few lines of JavaScript, run in Node.js, gives the same fields as Python.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import subprocess

import pytest
import torch

from attn_core import kv_cache, models
from attn_core.models import CONFIG_FILES, HF_FAMILIES_FILE, MODELS, ModelConfig

# --------------------------------------------------------------------------- the configs
_YARN = {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
         "original_max_position_embeddings": 4096, "type": "yarn"}
_LLAMA3_ROPE = {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192, "rope_type": "llama3"}
_DEEPSEEK_V2 = json.loads(CONFIG_FILES["DeepSeek-V2"].read_text())

# id -> (config.json as a dict, parameters counted by transformers 5.23 on the meta device)
CASES = {
    # ---------------------------------------------------------------- llama
    "llama-small-biases-tied": ({
        "model_type": "llama", "hidden_size": 84, "num_attention_heads": 6, "num_key_value_heads": 2,
        "intermediate_size": 77, "num_hidden_layers": 3, "vocab_size": 101, "attention_bias": True,
        "mlp_bias": True, "tie_word_embeddings": True}, 125_118),
    "llama-small-head-dim": ({
        "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 24,
        "intermediate_size": 100, "num_hidden_layers": 2, "vocab_size": 97}, 100_288),
    "llama-2-7b": (json.loads(CONFIG_FILES["Llama 2 7B"].read_text()), 6_738_415_616),
    "llama-3.1-8b": ({
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "max_position_embeddings": 131072,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "rope_scaling": _LLAMA3_ROPE,
        "rope_theta": 500000.0, "tie_word_embeddings": False, "vocab_size": 128256, "attention_bias": False,
        "mlp_bias": False}, 8_030_261_248),
    "llama-3.2-1b-tied": ({
        "model_type": "llama", "hidden_size": 2048, "head_dim": 64, "intermediate_size": 8192,
        "max_position_embeddings": 131072, "num_attention_heads": 32, "num_hidden_layers": 16,
        "num_key_value_heads": 8, "rope_scaling": {**_LLAMA3_ROPE, "factor": 32.0}, "rope_theta": 500000.0,
        "tie_word_embeddings": True, "vocab_size": 128256}, 1_235_814_400),
    # ---------------------------------------------------------------- mistral
    "mistral-small-window": ({
        "model_type": "mistral", "hidden_size": 60, "num_attention_heads": 5, "num_key_value_heads": 1,
        "intermediate_size": 70, "num_hidden_layers": 3, "vocab_size": 89, "sliding_window": 7}, 74_820),
    "mistral-7b-v0.1": (json.loads(CONFIG_FILES["Mistral 7B"].read_text()), 7_241_732_096),
    "mistral-7b-v0.3": ({
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
        "max_position_embeddings": 32768,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False,
        "vocab_size": 32768}, 7_248_023_552),
    "mistral-nemo-12b-head-dim": ({
        "model_type": "mistral", "hidden_size": 5120, "head_dim": 128, "intermediate_size": 14336,
        "max_position_embeddings": 1024000, "num_attention_heads": 32, "num_hidden_layers": 40,
        "num_key_value_heads": 8, "rope_theta": 1000000.0, "sliding_window": None,
        "tie_word_embeddings": False,
        "vocab_size": 131072}, 12_247_782_400),
    # ---------------------------------------------------------------- qwen2
    "qwen2-small-window-tied": ({
        "model_type": "qwen2", "hidden_size": 72, "num_attention_heads": 6, "num_key_value_heads": 2,
        "intermediate_size": 50, "num_hidden_layers": 5, "vocab_size": 103, "use_sliding_window": True,
        "sliding_window": 9, "max_window_layers": 2, "tie_word_embeddings": True}, 131_928),
    "qwen2-7b": ({
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
        "max_position_embeddings": 131072,
        "max_window_layers": 28, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072,
        "tie_word_embeddings": False,
        "use_sliding_window": False, "vocab_size": 152064}, 7_615_616_512),
    "qwen2.5-0.5b-tied": ({
        "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
        "max_position_embeddings": 32768,
        "max_window_layers": 24, "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
        "use_sliding_window": False, "vocab_size": 151936}, 494_032_768),
    # ---------------------------------------------------------------- gemma2
    "gemma2-small": ({
        "model_type": "gemma2", "hidden_size": 48, "num_attention_heads": 3, "num_key_value_heads": 1,
        "head_dim": 20, "intermediate_size": 66, "num_hidden_layers": 5, "vocab_size": 71,
        "sliding_window": 8,
        "query_pre_attn_scalar": 20}, 90_336),
    "gemma-2-2b": ({
        "model_type": "gemma2", "attention_bias": False, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "intermediate_size": 9216,
        "max_position_embeddings": 8192, "num_attention_heads": 8, "num_hidden_layers": 26,
        "num_key_value_heads": 4, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
        "sliding_window": 4096, "vocab_size": 256000}, 2_614_341_888),
    "gemma-2-9b": ({
        "model_type": "gemma2", "attention_bias": False, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "intermediate_size": 14336,
        "max_position_embeddings": 8192, "num_attention_heads": 16, "num_hidden_layers": 42,
        "num_key_value_heads": 8, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
        "sliding_window": 4096, "vocab_size": 256000}, 9_241_705_984),
    "gemma-2-27b": ({
        "model_type": "gemma2", "attention_bias": False, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "head_dim": 128, "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 4608, "intermediate_size": 36864, "max_position_embeddings": 8192,
        "num_attention_heads": 32, "num_hidden_layers": 46, "num_key_value_heads": 16,
        "query_pre_attn_scalar": 144, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
        "vocab_size": 256000}, 27_227_128_320),
    # ---------------------------------------------------------------- mixtral
    "mixtral-small": ({
        "model_type": "mixtral", "hidden_size": 40, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 30, "num_hidden_layers": 3, "vocab_size": 67, "num_local_experts": 5,
        "num_experts_per_tok": 2, "sliding_window": 11}, 74_640),
    "mixtral-8x7b": ({
        "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
        "max_position_embeddings": 32768,
        "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
        "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 32000}, 46_702_792_704),
    "mixtral-8x22b": ({
        "model_type": "mixtral", "hidden_size": 6144, "intermediate_size": 16384,
        "max_position_embeddings": 65536,
        "num_attention_heads": 48, "num_experts_per_tok": 2, "num_hidden_layers": 56,
        "num_key_value_heads": 8,
        "num_local_experts": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000, "router_aux_loss_coef": 0.001,
        "vocab_size": 32000}, 140_620_634_112),
    # ---------------------------------------------------------------- phi3
    "phi3-small-tied": ({
        "model_type": "phi3", "hidden_size": 56, "num_attention_heads": 7, "num_key_value_heads": 1,
        "intermediate_size": 45, "num_hidden_layers": 3, "vocab_size": 83, "tie_word_embeddings": True,
        "sliding_window": 5, "pad_token_id": None, "eos_token_id": 1}, 49_224),
    "phi-3-mini-4k": ({
        "model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "max_position_embeddings": 4096,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
        "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_scaling": None,
        "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
        "vocab_size": 32064}, 3_821_079_552),
    "phi-3-medium-4k": ({
        "model_type": "phi3", "hidden_size": 5120, "intermediate_size": 17920,
        "max_position_embeddings": 4096,
        "num_attention_heads": 40, "num_hidden_layers": 40, "num_key_value_heads": 10,
        "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_scaling": None,
        "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
        "vocab_size": 32064}, 13_960_238_080),
    "phi-4-mini-tied": ({
        "model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
        "max_position_embeddings": 131072,
        "num_attention_heads": 24, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "partial_rotary_factor": 0.75, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 262144,
        "tie_word_embeddings": True, "vocab_size": 200064}, 3_836_021_760),
    # ---------------------------------------------------------------- gpt2
    "gpt2-small-untied": ({
        "model_type": "gpt2", "n_embd": 48, "n_head": 3, "n_layer": 2, "n_inner": 100, "n_positions": 50,
        "vocab_size": 61, "tie_word_embeddings": False}, 47_048),
    "gpt2": (json.loads(CONFIG_FILES["GPT-2 small"].read_text()), 124_439_808),
    "gpt2-xl": ({
        "model_type": "gpt2", "activation_function": "gelu_new", "n_ctx": 1024, "n_embd": 1600, "n_head": 25,
        "n_layer": 48, "n_positions": 1024, "vocab_size": 50257}, 1_557_611_200),
    # ---------------------------------------------------------------- deepseek_v2
    "deepseek-v2-small-biases": ({
        "model_type": "deepseek_v2", "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 90,
        "num_hidden_layers": 3, "vocab_size": 79, "q_lora_rank": None, "kv_lora_rank": 12,
        "qk_nope_head_dim": 10,
        "qk_rope_head_dim": 6, "v_head_dim": 14, "n_routed_experts": 5, "n_shared_experts": 2,
        "num_experts_per_tok": 2, "moe_intermediate_size": 18, "first_k_dense_replace": 1,
        "attention_bias": True, "mlp_bias": True}, 107_614),
    "deepseek-v2-small-q-lora-all-dense": ({
        "model_type": "deepseek_v2", "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 90,
        "num_hidden_layers": 2, "vocab_size": 79, "q_lora_rank": 20, "kv_lora_rank": 12,
        "qk_nope_head_dim": 10,
        "qk_rope_head_dim": 6, "v_head_dim": 14, "n_routed_experts": 5, "n_shared_experts": 1,
        "num_experts_per_tok": 2, "moe_intermediate_size": 18, "first_k_dense_replace": 5,
        "tie_word_embeddings": True}, 56_896),
    "deepseek-v2": (_DEEPSEEK_V2, 235_741_434_880),
    "deepseek-v2-lite": ({
        **_DEEPSEEK_V2, "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "n_group": 1, "n_routed_experts": 64, "num_attention_heads": 16, "num_hidden_layers": 27,
        "num_key_value_heads": 16, "q_lora_rank": None, "routed_scaling_factor": 1.0, "topk_group": 1,
        "topk_method": "greedy", "rope_scaling": _YARN}, 15_706_484_224),
    # ---------------------------------------------------------------- deepseek_v3
    "deepseek-v3-small": ({
        "model_type": "deepseek_v3", "hidden_size": 48, "num_attention_heads": 3, "intermediate_size": 70,
        "num_hidden_layers": 4, "vocab_size": 59, "q_lora_rank": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 4, "v_head_dim": 12, "n_routed_experts": 6, "n_shared_experts": 1,
        "num_experts_per_tok": 3, "moe_intermediate_size": 10, "first_k_dense_replace": 2, "n_group": 2,
        "topk_group": 1, "attention_bias": True, "num_nextn_predict_layers": 1}, 63_904),
    "deepseek-v3": ({
        **_DEEPSEEK_V2, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "first_k_dense_replace": 3, "hidden_size": 7168, "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True, "num_experts_per_tok": 8,
        "num_hidden_layers": 61, "num_nextn_predict_layers": 1, "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid", "topk_group": 4, "topk_method": "noaux_tc", "vocab_size": 129280,
        "rope_scaling": {**_YARN, "mscale": 1.0, "mscale_all_dim": 1.0}}, 671_026_404_352),
}
FAMILIES = ["llama", "mistral", "qwen2", "gemma2", "mixtral", "phi3", "gpt2", "deepseek_v2", "deepseek_v3"]


def _transformers_model(config: dict):
    """The model transformers builds from ``config`` (on the meta device) and its config object."""
    T = pytest.importorskip("transformers", reason="transformers is a test dependency (not installed)")
    kwargs = {k: v for k, v in config.items() if k != "model_type"}
    cfg = T.AutoConfig.for_model(config["model_type"], **kwargs)
    with torch.device("meta"):
        return T.AutoModelForCausalLM.from_config(cfg), cfg


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied weight is one parameter


# --------------------------------------------------------------------------- num_params = transformers
def test_every_family_has_cases():
    types = {config["model_type"] for config, _ in CASES.values()}
    assert types == set(FAMILIES) == set(models._hf_families())


@pytest.mark.parametrize("case", list(CASES))
def test_num_params_equals_the_typed_count(case):
    config, count = CASES[case]
    assert ModelConfig.from_hf_config(config).num_params() == count


@pytest.mark.parametrize("case", list(CASES))
def test_num_params_equals_transformers(case):
    """Our count = the parameters of the transformers model built from the same config (meta device)."""
    config, count = CASES[case]
    model, cfg = _transformers_model(config)
    m = ModelConfig.from_hf_config(config)
    assert m.num_params() == _count(model) == count
    # the transformers config object reads the same (its defaults filled in)
    assert ModelConfig.from_hf_config(cfg) == dataclasses.replace(m, name=cfg.to_dict().get("_name_or_path")
                                                                  or m.model_type)
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert tied == m.tie_embeddings


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][0]["model_type"] != "gpt2"])
def test_attention_shapes_equal_transformers(case):
    """Per layer: the attention weights and the FFN's (dense layer) as the model holds them."""
    config, _ = CASES[case]
    model, _ = _transformers_model(config)
    m = ModelConfig.from_hf_config(config)
    layer = model.model.layers[0]
    attn = sum(p.numel() for n, p in layer.self_attn.named_parameters() if n.endswith("weight") and
               "layernorm" not in n)
    assert attn == m.attention_params()
    assert model.model.layers[-1].self_attn.layer_idx == m.num_layers - 1
    sliding = [getattr(layer.self_attn, "sliding_window", None) for layer in model.model.layers]
    if m.window is None:
        assert set(sliding) <= {None}
    elif m.model_type in ("gemma2", "qwen2"):  # per layer
        assert sum(w is not None for w in sliding) == (m.sliding_layers or m.num_layers)
        assert {w for w in sliding if w is not None} == {m.window}
    else:  # the config's window, on every layer
        assert model.config.sliding_window == m.window


def test_gpt2_shapes_equal_transformers():
    config, _ = CASES["gpt2-small-untied"]
    model, _ = _transformers_model(config)
    m = ModelConfig.from_hf_config(config)
    block = model.transformer.h[0]
    assert block.mlp.c_fc.weight.shape == (m.d_model, m.ffn_dim) == (48, 100)
    assert model.transformer.wpe.weight.shape == (m.positions, m.d_model) == (50, 48)
    assert not m.tie_embeddings and m.bias and m.norm == "layernorm" and m.ffn == "mlp"


# --------------------------------------------------------------------------- what each family needed
def test_fields_read_per_family():
    """The fields the families add, read from the published values."""
    m = lambda case: ModelConfig.from_hf_config(CASES[case][0])  # noqa: E731
    g = m("gemma-2-9b")
    assert (g.d_head, g.num_heads * g.d_head, g.d_model) == (256, 4096, 3584)  # D is not d / H
    assert (g.norms_per_layer, g.window, g.sliding_layers, g.query_pre_attn_scalar) == (4, 4096, 21, 256)
    assert g.tie_embeddings and g.activation == "gelu_pytorch_tanh" and g.ffn == "swiglu"
    assert m("gemma-2-27b").query_pre_attn_scalar == 144
    q = m("qwen2-7b")
    assert q.qkv_bias and not q.out_bias and not q.ffn_bias and q.window is None and q.sliding_layers is None
    qs = m("qwen2-small-window-tied")
    assert (qs.window, qs.sliding_layers) == (9, 5 - 2)  # layers from max_window_layers = 2 on
    x = m("mixtral-8x7b")
    assert (x.num_experts, x.experts_per_token, x.expert_dim, x.ffn_dim) == (8, 2, 14336, 2 * 14336)
    assert x.dense_layers == 0 and x.window is None
    p = m("phi-3-mini-4k")
    assert p.fused_qkv and p.fused_gate_up and p.window == 2047 and p.sliding_layers is None
    assert m("phi-4-mini-tied").tie_embeddings
    v3 = m("deepseek-v3")
    assert (v3.dense_layers, v3.dense_ffn_dim, v3.num_experts, v3.shared_experts, v3.experts_per_token) == \
        (3, 18432, 256, 1, 8)
    assert (v3.kv_lora_rank, v3.q_lora_rank, v3.d_head, v3.rope_dim, v3.d_v) == (512, 1536, 128, 64, 128)
    assert v3.ffn_dim == (8 + 1) * 2048 and v3.rope_scaling == "yarn" and v3.mtp_layers == 1
    assert v3.kv_values_per_token_per_layer() == 576
    assert m("deepseek-v2-lite").q_lora_rank is None
    assert m("llama-3.1-8b").rope_scaling == "llama3" and m("llama-2-7b").rope_scaling is None
    assert m("llama-3.2-1b-tied").d_head == 64 and m("mistral-7b-v0.3").window is None
    gp = m("gpt2")
    assert (gp.ffn_dim, gp.positions, gp.context_length, gp.activation) == (3072, 1024, 1024, "gelu_new")


def test_deepseek_v3_mtp_module_is_not_in_the_transformers_model():
    """transformers builds no MTP layer into the model (it loads one apart for speculative decoding), so
    num_params counts the 671B of the main model, as the DeepSeek-V3 report does."""
    config, count = CASES["deepseek-v3"]
    model, cfg = _transformers_model(config)
    assert cfg.num_nextn_predict_layers == 1 and len(model.model.layers) == 61
    assert not any("mtp" in n or "eh_proj" in n for n, _ in model.named_parameters())
    assert round(count / 1e9) == 671


def test_tp_replicated_params_counted_on_transformers():
    """Norms (Gemma 2: four a layer) and the row-parallel biases (o_proj and down_proj) are whole on
    every tensor-parallel rank."""
    for case in ("llama-small-biases-tied", "gemma2-small", "qwen2-small-window-tied"):
        config, _ = CASES[case]
        model, _ = _transformers_model(config)
        replicated = 0
        for name, mod in model.named_modules():
            if type(mod).__name__.endswith("RMSNorm"):
                replicated += sum(p.numel() for p in mod.parameters(recurse=False))
            elif name.endswith(("o_proj", "down_proj")) and mod.bias is not None:
                replicated += mod.bias.numel()
        assert replicated == ModelConfig.from_hf_config(config).tp_replicated_params(), case


def test_gemma2_cache_equals_kv_bytes_with_alternate_windows():
    """A real Gemma 2 cache (window 8 on layers 0, 2, 4 of 5): what it shows equals kv_bytes with the
    window it keeps visible (W - 1, as Mistral's) on the sliding layers and every token on the others."""
    T = pytest.importorskip("transformers", reason="transformers is a test dependency (not installed)")
    config, _ = CASES["gemma2-small"]
    cfg = T.AutoConfig.for_model("gemma2", **{k: v for k, v in config.items() if k != "model_type"})
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval()
    m = ModelConfig.from_hf_config(config)
    assert (m.window, m.sliding_layers) == (8, 3)
    for n in (5, 23):
        ids = torch.randint(0, m.vocab_size, (2, n), generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            cache = model(ids, use_cache=True).past_key_values
        got = kv_cache.hf_cache_bytes(cache)
        assert got["visible"] == m.with_(window=m.window - 1).kv_bytes(n, batch=2)
        assert got["visible"] == 2 * 2 * 2 * m.num_kv_heads * m.d_head * (3 * min(n, 7) + 2 * n)
    assert m.kv_bytes(23, use_window=False) == m.with_(window=None).kv_bytes(23)


def test_window_spellings_are_one():
    """No window: no sliding layers; a window on every layer: sliding_layers None; 0 layers: no window."""
    base = ModelConfig("m", 4, 64, 4, 4, 16, 128)
    assert base.with_(window=8, sliding_layers=4) == base.with_(window=8)
    assert base.with_(window=8, sliding_layers=0) == base
    assert base.with_(sliding_layers=2) == base
    assert base.with_(window=8, sliding_layers=2).kv_bytes(100) == \
        base.with_(num_layers=2, window=8).kv_bytes(100) + base.with_(num_layers=2).kv_bytes(100)


# --------------------------------------------------------------------------- inputs and errors
def test_reads_a_path_a_folder_and_a_dict_alike(tmp_path):
    config, _ = CASES["gemma-2-9b"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    from_dict = ModelConfig.from_hf_config(config, name="g")
    assert ModelConfig.from_hf_config(tmp_path / "config.json", name="g") == from_dict
    assert ModelConfig.from_hf_config(str(tmp_path), name="g") == from_dict
    named = ModelConfig.from_hf_config({**config, "_name_or_path": "google/gemma-2-9b"})
    assert named.name == "google/gemma-2-9b"
    assert ModelConfig.from_hf_config(config).name == "gemma2"


@pytest.mark.parametrize("config, match", [
    ({"model_type": "bert", "hidden_size": 768}, "unknown model_type 'bert'"),
    ({"hidden_size": 768}, "model_type"),
    ({k: v for k, v in CASES["llama-2-7b"][0].items() if k != "hidden_size"}, "'hidden_size'"),
    ({k: v for k, v in CASES["mixtral-8x7b"][0].items() if k != "num_local_experts"}, "'num_local_experts'"),
    ({k: v for k, v in CASES["gpt2"][0].items() if k != "n_layer"}, "'n_layer'"),
    ({k: v for k, v in _DEEPSEEK_V2.items() if k != "kv_lora_rank"}, "'kv_lora_rank'"),
    ({k: v for k, v in _DEEPSEEK_V2.items() if k != "n_routed_experts"}, "'n_routed_experts'"),
    ({**CASES["llama-2-7b"][0], "hidden_size": None}, "d_head is computed from values that are not numbers"),
    ({**CASES["llama-2-7b"][0], "num_hidden_layers": None}, "num_layers must be a positive integer"),
    ({**CASES["llama-2-7b"][0], "num_hidden_layers": 0}, "num_layers must be a positive integer"),
], ids=["unknown-type", "no-type", "llama-hidden-size", "mixtral-experts", "gpt2-layers", "deepseek-latent",
        "deepseek-experts", "null-width", "null-layers", "zero-layers"])
def test_unknown_type_or_missing_field_raises_naming_it(config, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig.from_hf_config(config)


def test_bad_config_argument(tmp_path):
    with pytest.raises(ValueError, match="config"):
        ModelConfig.from_hf_config(42)
    with pytest.raises(ValueError, match="config"):
        ModelConfig.from_hf_config(tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        ModelConfig.from_hf_config(tmp_path / "list.json")


# --------------------------------------------------------------------------- the presets
# what each preset gave before it was read from its config.json (num_params, fp16 KV bytes per token,
# attention weights per layer, KV bytes of 3 x 10000 tokens), and the fields typed then
BEFORE = {
    "Llama 2 7B": (6_738_415_616, 524_288, 67_108_864, 15_728_640_000),
    "Llama 2 70B": (68_976_648_192, 327_680, 150_994_944, 9_830_400_000),
    "Llama 3 8B": (8_030_261_248, 131_072, 41_943_040, 3_932_160_000),
    "Llama 3 70B": (70_553_706_496, 327_680, 150_994_944, 9_830_400_000),
    "Mistral 7B": (7_241_732_096, 131_072, 41_943_040, 1_610_612_736),
    "DeepSeek-V2": (235_741_434_880, 69_120, 149_225_472, 2_073_600_000),
    "GPT-2 small": (124_439_808, 36_864, 2_359_296, 1_105_920_000),
    "3.6B worked example (d=3072, H=24)": (3_624_278_016, 393_216, 37_748_736, 11_796_480_000),
}
_HF = "https://huggingface.co/{}/blob/main/config.json"
TYPED_BEFORE = {
    "Llama 2 7B": ModelConfig("Llama 2 7B", 32, 4096, 32, 32, 128, 11008, vocab_size=32000,
                              source=_HF.format("meta-llama/Llama-2-7b-hf")),
    "Llama 2 70B": ModelConfig("Llama 2 70B", 80, 8192, 64, 8, 128, 28672, vocab_size=32000,
                               source=_HF.format("meta-llama/Llama-2-70b-hf")),
    "Llama 3 8B": ModelConfig("Llama 3 8B", 32, 4096, 32, 8, 128, 14336, vocab_size=128256,
                              source=_HF.format("meta-llama/Meta-Llama-3-8B")),
    "Llama 3 70B": ModelConfig("Llama 3 70B", 80, 8192, 64, 8, 128, 28672, vocab_size=128256,
                               source=_HF.format("meta-llama/Meta-Llama-3-70B")),
    "Mistral 7B": ModelConfig("Mistral 7B", 32, 4096, 32, 8, 128, 14336, window=4096, vocab_size=32000,
                              source=_HF.format("mistralai/Mistral-7B-v0.1")),
    "DeepSeek-V2": ModelConfig("DeepSeek-V2", 60, 5120, 128, 128, 128, 12288, kv_lora_rank=512, rope_dim=64,
                               d_v=128, q_lora_rank=1536, vocab_size=102400, num_experts=160,
                               shared_experts=2, expert_dim=1536, dense_layers=1,
                               source=_HF.format("deepseek-ai/DeepSeek-V2")),
    "GPT-2 small": ModelConfig("GPT-2 small", 12, 768, 12, 12, 64, 3072, ffn="mlp", vocab_size=50257,
                               tie_embeddings=True, norm="layernorm", bias=True, positions=1024,
                               source=_HF.format("openai-community/gpt2")),
}
_NAMES = [f.name for f in dataclasses.fields(ModelConfig)]
_OLD_FIELDS = _NAMES[:_NAMES.index("dense_layers") + 1]  # the fields there were


def test_presets_keep_their_names():
    assert list(MODELS) == list(BEFORE)
    assert set(CONFIG_FILES) == set(TYPED_BEFORE) == set(MODELS) - {"3.6B worked example (d=3072, H=24)"}


@pytest.mark.parametrize("name", list(MODELS))
def test_presets_give_what_they_gave(name):
    m = MODELS[name]
    got = (m.num_params(), m.kv_bytes_per_token(), m.attention_params(), m.kv_bytes(10000, batch=3))
    assert got == BEFORE[name]
    if name in TYPED_BEFORE:
        old = TYPED_BEFORE[name]
        assert {f: getattr(m, f) for f in _OLD_FIELDS} == {f: getattr(old, f) for f in _OLD_FIELDS}


@pytest.mark.parametrize("name", list(CONFIG_FILES))
def test_presets_are_read_from_their_shipped_config(name):
    path = CONFIG_FILES[name]
    assert path.parent == pathlib.Path(models.__file__).parent / "configs"
    config = json.loads(path.read_text())
    assert MODELS[name] == ModelConfig.from_hf_config(path, name=name, source=MODELS[name].source)
    assert MODELS[name].source.endswith(f"/{path.stem}/blob/main/config.json")
    assert config["model_type"] == MODELS[name].model_type


@pytest.mark.parametrize("name", list(CONFIG_FILES))
def test_presets_equal_transformers_built_from_the_same_file(name):
    model, _ = _transformers_model(json.loads(CONFIG_FILES[name].read_text()))
    assert _count(model) == MODELS[name].num_params()


def test_package_data_ships_the_configs_and_rules():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")
    data = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["attn_core"]
    root = pathlib.Path(models.__file__).parent
    shipped = {p for pattern in patterns for p in root.glob(pattern)}
    assert HF_FAMILIES_FILE in shipped and set(CONFIG_FILES.values()) <= shipped


def test_kv_cache_module_gives_the_same_class():
    assert kv_cache.ModelConfig is ModelConfig and kv_cache.ModelConfig.from_hf_config


# --------------------------------------------------------------------------- the page's reader
# The page reads hf_families.json with static/hf_config.js (the "does it fit" widget's pasted config.json):
# run in Node.js, it gives the same fields as Python, and the same values of the formulas' symbols.
HF_CONFIG_JS = pathlib.Path(models.__file__).parent / "static" / "hf_config.js"
NODE = shutil.which("node")


def _run_reader(script: str, payload: dict):
    proc = subprocess.run([NODE, "-e", "const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));\n"
                           + HF_CONFIG_JS.read_text() + script], capture_output=True, text=True, timeout=60,
                          input=json.dumps(payload))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed: the page's reader is not run here")
def test_javascript_reader_of_the_rules_equals_python():
    families = json.loads(HF_FAMILIES_FILE.read_text())
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)
                if f.default is not dataclasses.MISSING}
    configs = [config for config, _ in CASES.values()] + [
        {**CASES["llama-2-7b"][0], "hidden_size": None}, {"model_type": "bert"},
        {k: v for k, v in CASES["mixtral-8x7b"][0].items() if k != "num_local_experts"}]
    script = ("process.stdout.write(JSON.stringify(input.configs.map((c) => {"
              "try { return readHfConfig(c, input.families, input.defaults); }"
              " catch (e) { return { error: e.message }; } })));")
    out = _run_reader(script, {"families": families, "defaults": defaults, "configs": configs})
    for config, js in zip(configs, out):
        try:
            m = ModelConfig.from_hf_config(config)
        except ValueError as e:
            assert "error" in js or None in (js.get("num_layers"), js.get("d_model")), (config, str(e))
            continue
        assert "error" not in js, (config, js)
        assert js == {f: getattr(m, f) for f in js}, config["model_type"]


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed: the page's reader is not run here")
def test_javascript_model_symbols_equal_python():
    """What the page evaluates for a pasted config.json: the same symbols as ModelConfig.symbol_values,
    and the same errors (by the field they name) for a config from_hf_config rejects."""
    from attn_core.widgets import formula_spec

    fit = formula_spec()["fit"]
    configs = [config for config, _ in CASES.values()]
    bad = [({**CASES["llama-2-7b"][0], "num_hidden_layers": 0}, "num_layers"),
           ({k: v for k, v in CASES["gpt2"][0].items() if k != "n_layer"}, "n_layer"),
           ({"model_type": "qwen3"}, "model_type")]
    script = ("const f = input.fit, sw = input.switches;"
              "process.stdout.write(JSON.stringify(input.configs.map((c) => {"
              "try { return modelSymbols(readModelConfig(c, f), f.model_symbols, f.model_menus, sw); }"
              " catch (e) { return { error: e.message }; } })));")
    out = _run_reader(script, {"fit": fit, "switches": formula_spec()["switches"],
                               "configs": configs + [c for c, _ in bad]})
    for config, js in zip(configs, out):
        m = ModelConfig.from_hf_config(config)
        assert js == m.symbol_values(), config["model_type"]
        assert models.formulas.model_params(**js)["P_w"] == m.num_params()
    for (config, name), js in zip(bad, out[len(configs):]):
        with pytest.raises(ValueError, match=name):
            ModelConfig.from_hf_config(config)
        assert name in js["error"], js
