"""The KV-cache formulas of attn_core.kv_cache against what a real Hugging Face `transformers` cache holds.

Tiny random models with the attention geometry of the presets (their real H, H_kv, D, sliding window
and MLA ranks; two layers, a narrow width and a small vocabulary, configs built in code, nothing
downloaded) prefill N tokens; the bytes of the cache tensors are measured and compared with
``kv_cache_bytes`` / ``ModelConfig.kv_bytes``. Skipped when transformers is not installed.
"""

from __future__ import annotations

import pytest
import torch

from attn_core.kv_cache import MODELS, hf_cache_bytes, hf_config, kv_cache_bytes, kv_cache_bytes_per_token

transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (a test dependency: pip install transformers)")

LAYERS, B = 2, 2  # bf16 cache: 2 bytes per value


def _prefill(model_cfg, n, window=None, batch=1):
    """Build the tiny model in bf16, prefill n tokens, return (cache, ModelConfig with 2 layers)."""
    config = hf_config(model_cfg, num_layers=LAYERS, window=window)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16).eval()
    ids = torch.randint(0, config.vocab_size, (batch, n), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(ids, use_cache=True)
    return out.past_key_values, model_cfg.with_(num_layers=LAYERS)


FULL = [name for name, m in MODELS.items() if m.window is None and not m.is_mla]


@pytest.mark.parametrize("name", FULL)
def test_full_attention_cache_equals_formula(name):
    cache, m = _prefill(MODELS[name], 37, batch=2)
    got = hf_cache_bytes(cache)
    want = kv_cache_bytes(LAYERS, m.num_kv_heads, m.d_head, 37, batch=2, bytes_per_value=B)
    assert got["visible"] == got["held"] == want == m.kv_bytes(37, batch=2)


def test_sliding_window_model_keeps_window_minus_one():
    """Mistral's class with a window of 16: the model itself leaves W - 1 tokens visible per layer."""
    m = MODELS["Mistral 7B"]
    w = 16
    for n in (9, 15, 40):
        cache, m2 = _prefill(m, n, window=w)
        got = hf_cache_bytes(cache)
        assert got["visible"] == kv_cache_bytes(LAYERS, m.num_kv_heads, m.d_head, n, window=w - 1)
        # the slice keeps the whole prefill's tensor alive until the next step
        assert got["held"] == kv_cache_bytes(LAYERS, m.num_kv_heads, m.d_head, n)


@pytest.mark.parametrize("name", [n for n, m in MODELS.items() if m.window])
def test_sliding_window_cache_at_the_real_window(name):
    """The cache class of the model's real config (W = 4096), fed the K and V of N > W tokens."""
    m = MODELS[name]
    w = m.window
    cache = transformers.DynamicCache(config=hf_config(m, num_layers=LAYERS))
    per_layer = kv_cache_bytes_per_token(LAYERS, m.num_kv_heads, m.d_head)
    n = w + 904
    g = torch.Generator().manual_seed(0)
    for layer in range(LAYERS):
        kv = torch.randn(1, m.num_kv_heads, n, m.d_head, generator=g).bfloat16()
        cache.update(kv, kv.clone(), layer)
    got = hf_cache_bytes(cache)
    assert got["visible"] == (w - 1) * per_layer == kv_cache_bytes(LAYERS, m.num_kv_heads, m.d_head, n,
                                                                    window=w - 1)
    assert got["held"] == n * per_layer  # after the prefill: every token's storage still held
    for step in range(3):  # decode steps: W - 1 visible, a storage of W tokens held
        for layer in range(LAYERS):
            kv = torch.randn(1, m.num_kv_heads, 1, m.d_head, generator=g).bfloat16()
            cache.update(kv, kv.clone(), layer)
        got = hf_cache_bytes(cache)
        assert got["visible"] == kv_cache_bytes(LAYERS, m.num_kv_heads, m.d_head, n + step + 1, window=w - 1)
        assert got["held"] == kv_cache_bytes(LAYERS, m.num_kv_heads, m.d_head, n + step + 1, window=w)
        assert got["held"] == m.with_(num_layers=LAYERS).kv_bytes(n + step + 1)


def test_mla_cache_is_latent_or_decompressed():
    """DeepSeek-V2's class: the cache holds the latent (kv_lora_rank + rope_dim per token and layer,
    what `ModelConfig.kv_bytes` counts) or the decompressed per-head K and V; which one is measured."""
    cache, m = _prefill(MODELS["DeepSeek-V2"], 23)
    got = hf_cache_bytes(cache)
    latent, full = m.kv_bytes(23), m.kv_bytes(23, decompressed=True)
    assert got["visible"] == got["held"]
    assert got["visible"] in (latent, full)
    shapes = {tuple(t.shape) for t in (cache.layers[0].keys, cache.layers[0].values)}
    if got["visible"] == latent:  # transformers >= 5 caches the compressed latent and the RoPE key
        assert shapes == {(1, 1, 23, m.kv_lora_rank), (1, 1, 23, m.rope_dim)}


def _full_size_on_meta(name):
    """The preset at full size (its real width, layers, FFN and vocabulary) on the meta device."""
    m = MODELS[name]
    if name == "GPT-2 small":
        config = transformers.GPT2Config()  # the defaults are GPT-2 small
    else:
        config = transformers.LlamaConfig(
            vocab_size=m.vocab_size, hidden_size=m.d_model, num_hidden_layers=m.num_layers,
            intermediate_size=m.ffn_dim, num_attention_heads=m.num_heads, num_key_value_heads=m.num_kv_heads,
            head_dim=m.d_head, tie_word_embeddings=m.tie_embeddings)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize("name", ["GPT-2 small", "Llama 3 8B"])
def test_tp_replicated_params_counted_on_the_real_model(name):
    """Parameters a tensor-parallel rank keeps whole: the norms' weights and biases, the row-parallel
    biases (GPT-2's two c_proj biases per layer) and learned positions, counted on the full-size
    transformers model (meta device), against ModelConfig.tp_replicated_params and num_params."""
    model = _full_size_on_meta(name)
    replicated = 0
    for mod_name, mod in model.named_modules():
        if isinstance(mod, torch.nn.LayerNorm) or type(mod).__name__.endswith("RMSNorm"):
            replicated += sum(p.numel() for p in mod.parameters(recurse=False))
        elif mod_name.endswith("c_proj"):  # GPT-2's row-parallel matrices: W_o and W_2
            replicated += mod.bias.numel()
        elif mod_name.endswith("wpe"):
            replicated += mod.weight.numel()
    assert replicated == MODELS[name].tp_replicated_params()
    assert sum(p.numel() for p in model.parameters()) == MODELS[name].num_params()
