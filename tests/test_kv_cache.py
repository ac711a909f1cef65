"""Tests for attn_core.kv_cache: KV cache and linear-state sizes, and the model presets.

References: published numbers (Llama 2 7B caches 512 KiB per token in fp16;
the configs of the models as published on their Hugging Face model cards and
in the DeepSeek-V2 paper), formulas written out in the tests, and the bytes
of real tensors of the cached shapes.
"""

from __future__ import annotations

import pytest
import torch

from attn_core.kv_cache import (
    MODELS,
    ModelConfig,
    dequantize_kv,
    kv_cache_bytes,
    kv_cache_bytes_per_token,
    linear_state_bytes,
    paged_kv_cache_bytes,
    quantize_kv,
    quantized_kv_cache_bytes,
)
from attn_core.linear import linear_attention_step

KiB, MiB, GiB = 1024, 1024**2, 1024**3


# --------------------------------------------------------------------------- per token
def test_llama2_7b_caches_512_kib_per_token():
    """Llama 2 7B (32 layers, 32 KV heads, D 128, fp16): 512 KiB of K and V per token (published)."""
    assert kv_cache_bytes_per_token(32, 32, 128) == 512 * KiB


def test_llama2_70b_caches_320_kib_per_token():
    """Llama 2 70B (80 layers, GQA with 8 KV heads, D 128, fp16): 320 KiB per token."""
    assert kv_cache_bytes_per_token(80, 8, 128) == 320 * KiB
    # with all 64 heads cached (MHA) it would be 8x as much
    assert kv_cache_bytes_per_token(80, 64, 128) == 8 * 320 * KiB


@pytest.mark.parametrize("b", [1, 2, 4], ids=["int8", "bf16", "fp32"])
@pytest.mark.parametrize("layers, kv_heads, d_head", [(1, 1, 1), (32, 8, 128), (7, 3, 60)], ids=str)
def test_bytes_per_token_formula(layers, kv_heads, d_head, b):
    """Bytes per token = 2 (K and V) * L * H_kv * D * b, and equals the bytes of real K, V tensors."""
    expected = 2 * layers * kv_heads * d_head * b
    assert kv_cache_bytes_per_token(layers, kv_heads, d_head, bytes_per_value=b) == expected
    dtype = {1: torch.int8, 2: torch.bfloat16, 4: torch.float32}[b]
    kv = torch.empty(layers, 2, kv_heads, 1, d_head, dtype=dtype)  # (L, K/V, H_kv, one token, D)
    assert kv.nbytes == expected


# --------------------------------------------------------------------------- whole cache
def test_kv_cache_bytes_llama2_7b_4096_tokens():
    """Llama 2 7B at 4096 tokens: 2 GiB per sequence in fp16, 16 GiB for a batch of 8."""
    assert kv_cache_bytes(32, 32, 128, seq_len=4096) == 2 * GiB
    assert kv_cache_bytes(32, 32, 128, seq_len=4096, batch=8) == 16 * GiB


@pytest.mark.parametrize("seq_len", [1, 63, 257, 4096], ids=lambda n: f"N={n}")
@pytest.mark.parametrize("batch", [1, 3], ids=lambda b: f"B={b}")
def test_kv_cache_bytes_grows_with_tokens_and_batch(seq_len, batch):
    """kv_cache_bytes = batch * seq_len * 2 L H_kv D b, equal to the bytes of real K, V tensors."""
    expected = batch * seq_len * 2 * 2 * 3 * 7 * 4
    assert kv_cache_bytes(2, 3, 7, seq_len, batch=batch, bytes_per_value=4) == expected
    cache = torch.empty(2, 2, batch, 3, seq_len, 7, dtype=torch.float32)  # (L, K/V, B, H_kv, N, D)
    assert cache.nbytes == expected


@pytest.mark.parametrize(
    "seq_len, window, kept",
    [(1000, 4096, 1000), (4096, 4096, 4096), (4097, 4096, 4096), (32768, 4096, 4096), (63, 16, 16),
     (5, 1, 1)],
    ids=["below", "equal", "one-above", "8x", "N63-w16", "w1"],
)
def test_kv_cache_bytes_sliding_window_is_capped(seq_len, window, kept):
    """With a sliding window only min(seq_len, window) tokens are kept (Mistral 7B: 128 KiB * kept)."""
    per_token = 2 * 32 * 8 * 128 * 2  # Mistral 7B: 128 KiB
    assert per_token == 128 * KiB
    assert kv_cache_bytes(32, 8, 128, seq_len, window=window) == kept * per_token
    assert kv_cache_bytes(32, 8, 128, seq_len, batch=2, window=window) == 2 * kept * per_token


def test_mistral_cache_stops_at_512_mib():
    """Mistral 7B (window 4096): the fp16 cache never exceeds 4096 * 128 KiB = 512 MiB per sequence."""
    m = MODELS["Mistral 7B"]
    assert m.kv_bytes(100_000) == 512 * MiB
    assert m.kv_bytes(100_000, use_window=False) == 100_000 * 128 * KiB
    assert m.kv_bytes(1000) == 1000 * 128 * KiB


# --------------------------------------------------------------------------- linear state
@pytest.mark.parametrize(
    "layers, heads, d_k, d_v, batch, b",
    [(1, 1, 1, 1, 1, 2), (24, 16, 64, 128, 1, 2), (7, 3, 60, None, 2, 4)],
    ids=["tiny", "Dk64-Dv128", "dv-default-B2-fp32"],
)
def test_linear_state_bytes_formula(layers, heads, d_k, d_v, batch, b):
    """Linear state bytes = B * L * H * D_k * D_v * b (D_v defaults to D_k)."""
    expected = batch * layers * heads * d_k * (d_k if d_v is None else d_v) * b
    assert linear_state_bytes(layers, heads, d_k, d_v, batch=batch, bytes_per_value=b) == expected


def test_linear_state_bytes_measured_independent_of_tokens():
    """The state linear_attention_step really keeps has the predicted bytes, for N = 1, 63 and 257."""
    layers, heads, d_k, d_v = 3, 4, 7, 5
    g = torch.Generator().manual_seed(0)
    predicted = linear_state_bytes(layers, heads, d_k, d_v, bytes_per_value=4)
    for n in (1, 63, 257):
        state = torch.zeros(heads, d_k, d_v)  # one layer's state, float32
        for _ in range(n):
            q, k = torch.randn(heads, d_k, generator=g), torch.randn(heads, d_k, generator=g)
            _, state = linear_attention_step(state, q, k, torch.randn(heads, d_v, generator=g), 0.9)
        assert layers * state.nbytes == predicted
    # a KV cache of the same heads grows with N instead
    assert kv_cache_bytes(layers, heads, d_k, 257, bytes_per_value=4) > kv_cache_bytes(
        layers, heads, d_k, 63, bytes_per_value=4)


# --------------------------------------------------------------------------- presets
# Published configs (Hugging Face config.json of each model; DeepSeek-V2: qk_nope_head_dim = d_head,
# qk_rope_head_dim = rope_dim, v_head_dim = d_v, dense-layer intermediate_size = ffn_dim).
PUBLISHED = {
    "Llama 2 7B": dict(num_layers=32, d_model=4096, num_heads=32, num_kv_heads=32, ffn_dim=11008),
    "Llama 2 70B": dict(num_layers=80, d_model=8192, num_heads=64, num_kv_heads=8, ffn_dim=28672),
    "Llama 3 8B": dict(num_layers=32, d_model=4096, num_heads=32, num_kv_heads=8, ffn_dim=14336),
    "Llama 3 70B": dict(num_layers=80, d_model=8192, num_heads=64, num_kv_heads=8, ffn_dim=28672),
    "Mistral 7B": dict(num_layers=32, d_model=4096, num_heads=32, num_kv_heads=8, ffn_dim=14336, window=4096),
    "DeepSeek-V2": dict(num_layers=60, d_model=5120, num_heads=128, num_kv_heads=128, kv_lora_rank=512,
                        rope_dim=64, d_head=128, d_v=128, ffn_dim=12288),
    "GPT-2 small": dict(num_layers=12, d_model=768, num_heads=12, num_kv_heads=12, ffn_dim=3072, ffn="mlp"),
}
# configs whose head dim is not d_model / num_heads (DeepSeek-V2: 128 heads of 128 + 64 rope dims, d 5120)
HEAD_DIM_NOT_D_OVER_H = {"DeepSeek-V2"}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_models_match_published_configs(name):
    """Each preset's fields equal the published config numbers typed in this test."""
    m = MODELS[name]
    assert m.name == name
    for field, value in PUBLISHED[name].items():
        assert getattr(m, field) == value, field
    if "window" not in PUBLISHED[name]:
        assert m.window is None
    assert m.source


@pytest.mark.parametrize("name", list(MODELS))
def test_models_are_consistent(name):
    """d_head * num_heads == d_model (unless the config says otherwise); H divisible by H_kv; sizes > 0."""
    m = MODELS[name]
    assert isinstance(m, ModelConfig)
    if name not in HEAD_DIM_NOT_D_OVER_H:
        assert m.d_head * m.num_heads == m.d_model
    assert m.num_heads % m.num_kv_heads == 0
    assert min(m.num_layers, m.d_model, m.num_heads, m.num_kv_heads, m.d_head, m.ffn_dim) > 0
    assert m.ffn in ("mlp", "swiglu")


@pytest.mark.parametrize("name", [n for n in MODELS if not MODELS[n].is_mla])
def test_model_kv_bytes_match_formula(name):
    """Non-MLA presets: kv_bytes_per_token = L * 2 H_kv D * b, written out here and via kv_cache_bytes."""
    m = MODELS[name]
    per_token = m.num_layers * 2 * m.num_kv_heads * m.d_head * 2
    assert m.kv_values_per_token_per_layer() == 2 * m.num_kv_heads * m.d_head
    assert m.kv_bytes_per_token() == per_token
    assert m.kv_bytes_per_token(bytes_per_value=4) == 2 * per_token
    assert m.kv_bytes_per_token() == kv_cache_bytes_per_token(m.num_layers, m.num_kv_heads, m.d_head)
    kept = 257 if m.window is None else min(257, m.window)
    assert m.kv_bytes(257, batch=3) == 3 * kept * per_token


@pytest.mark.parametrize(
    "name, kib",
    [("Llama 2 7B", 512), ("Llama 2 70B", 320), ("Llama 3 8B", 128), ("Llama 3 70B", 320),
     ("Mistral 7B", 128)],
)
def test_model_kv_kib_per_token(name, kib):
    """Published fp16 KV bytes per token: Llama 2 7B 512 KiB, 70B 320 KiB, Llama 3 8B and Mistral 128 KiB."""
    assert MODELS[name].kv_bytes_per_token() == kib * KiB


def test_deepseek_v2_mla_cache():
    """DeepSeek-V2 MLA caches 512 + 64 = 576 values per token per layer; decompressed 128*(128+64+128)."""
    m = MODELS["DeepSeek-V2"]
    assert m.is_mla
    assert m.kv_values_per_token_per_layer() == 512 + 64 == 576
    assert m.kv_values_per_token_per_layer(decompressed=True) == 128 * (128 + 64 + 128)
    assert m.kv_bytes_per_token() == 60 * 576 * 2
    assert m.kv_bytes_per_token(decompressed=True) == 60 * 128 * 320 * 2
    # the DeepSeek-V2 paper: MLA's cache equals GQA with 2.25 groups of d_h = 128 (4.5 d_h values per layer)
    assert m.kv_values_per_token_per_layer() / (2 * m.d_head) == 2.25
    assert m.kv_bytes(1000, batch=2) == 2 * 1000 * 60 * 576 * 2
    assert not MODELS["Llama 2 7B"].is_mla


def test_with_changes_one_field():
    """with_ returns a changed copy: Llama 2 70B with MHA (64 KV heads) caches 8x more; original unchanged."""
    m = MODELS["Llama 2 70B"]
    mha = m.with_(num_kv_heads=64)
    assert mha.num_kv_heads == 64 and m.num_kv_heads == 8
    assert mha.kv_bytes_per_token() == 8 * m.kv_bytes_per_token() == 2560 * KiB


# --------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("bad", [0, -1, 2.5], ids=["zero", "negative", "float"])
@pytest.mark.parametrize("arg", ["num_layers", "num_kv_heads", "d_head", "bytes_per_value"])
def test_bytes_per_token_rejects_bad_sizes(arg, bad):
    """kv_cache_bytes_per_token: a zero, negative or non-integer size raises ValueError naming it."""
    kwargs = dict(num_layers=32, num_kv_heads=8, d_head=128, bytes_per_value=2)
    kwargs[arg] = bad
    with pytest.raises(ValueError, match=f"^{arg} must be a positive integer"):
        kv_cache_bytes_per_token(**kwargs)


@pytest.mark.parametrize("bad", [0, -1, 2.5], ids=["zero", "negative", "float"])
@pytest.mark.parametrize("arg", ["num_layers", "num_kv_heads", "d_head", "seq_len", "batch", "window",
                                 "bytes_per_value"])
def test_kv_cache_bytes_rejects_bad_sizes(arg, bad):
    """kv_cache_bytes: a zero, negative or non-integer size (window too) raises ValueError naming it."""
    kwargs = dict(num_layers=32, num_kv_heads=8, d_head=128, seq_len=100, batch=1, window=64,
                  bytes_per_value=2)
    kwargs[arg] = bad
    with pytest.raises(ValueError, match=f"^{arg} must be a positive integer"):
        kv_cache_bytes(**kwargs)


@pytest.mark.parametrize("bad", [0, -1, 2.5], ids=["zero", "negative", "float"])
@pytest.mark.parametrize("arg", ["num_layers", "num_heads", "d_k", "d_v", "batch", "bytes_per_value"])
def test_linear_state_bytes_rejects_bad_sizes(arg, bad):
    """linear_state_bytes: a zero, negative or non-integer size raises ValueError naming it."""
    kwargs = dict(num_layers=4, num_heads=8, d_k=64, d_v=64, batch=1, bytes_per_value=2)
    kwargs[arg] = bad
    with pytest.raises(ValueError, match=f"^{arg} must be a positive integer"):
        linear_state_bytes(**kwargs)


def test_model_methods_reject_bad_sizes():
    """ModelConfig.kv_bytes / kv_bytes_per_token: seq_len, batch, bytes_per_value <= 0 raise ValueError."""
    m = MODELS["Llama 3 8B"]
    with pytest.raises(ValueError, match="^seq_len must be a positive integer"):
        m.kv_bytes(0)
    with pytest.raises(ValueError, match="^batch must be a positive integer"):
        m.kv_bytes(10, batch=-1)
    with pytest.raises(ValueError, match="^bytes_per_value must be a positive integer"):
        m.kv_bytes_per_token(bytes_per_value=0)


# --------------------------------------------------------------------------- quantized and paged caches
@pytest.mark.parametrize("quant", ["int8", "fp8"])
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_quantized_bytes_equal_real_tensors(quant, group_size):
    """Values (1 byte) plus fp16 scales (one per group) of a real quantized K and V, all layers."""
    layers, kv_heads, d, n, batch = 3, 8, 128, 37, 2
    g = torch.Generator().manual_seed(0)
    total = 0
    for _ in range(layers):
        for _ in range(2):  # K and V
            x = torch.randn(batch, kv_heads, n, d, generator=g)
            values, scales = quantize_kv(x, quant, group_size)
            total += values.nbytes + scales.nbytes
            assert values.element_size() == 1 and scales.dtype == torch.float16
    formula = quantized_kv_cache_bytes(layers, kv_heads, d, n, batch, quant=quant, group_size=group_size)
    assert total == formula
    # against bf16: (1 + 2 / g) / 2 of the bytes
    bf16 = kv_cache_bytes(layers, kv_heads, d, n, batch)
    assert total * 2 * group_size == bf16 * (group_size + 2)


def test_quantized_window_and_uneven_groups():
    assert quantized_kv_cache_bytes(1, 1, 100, 50, window=10, group_size=64) == 10 * 2 * (100 + 2 * 2)
    assert quantized_kv_cache_bytes(2, 4, 64, 9, quant="fp8", scale_bytes=4) == 9 * 2 * 2 * 4 * (64 + 4)


@pytest.mark.parametrize("quant,tol", [("int8", 1 / 254), ("fp8", 1 / 16)])
def test_quantize_round_trip(quant, tol):
    """Error at most half a step of the group's scale (int8) or of e4m3's 3-bit mantissa (fp8)."""
    x = torch.randn(4, 5, 64, generator=torch.Generator().manual_seed(1))
    values, scales = quantize_kv(x, quant, 32)
    back = dequantize_kv(values, scales)
    amax = x.reshape(4, 5, 2, 32).abs().amax(-1, keepdim=True).expand(4, 5, 2, 32).reshape(x.shape)
    if quant == "int8":
        assert ((back - x).abs() <= amax * tol * 1.01).all()
    else:
        assert ((back - x).abs() <= x.abs() * tol + amax / 448 * 2 ** -6).all()
    zeros, s = quantize_kv(torch.zeros(2, 64), quant)
    assert dequantize_kv(zeros, s).abs().max() == 0


def test_paged_rounds_up_to_pages():
    per_token = kv_cache_bytes_per_token(32, 8, 128)
    assert paged_kv_cache_bytes(32, 8, 128, 1, page_size=16) == 16 * per_token
    assert paged_kv_cache_bytes(32, 8, 128, 16, page_size=16) == 16 * per_token
    assert paged_kv_cache_bytes(32, 8, 128, 17, page_size=16) == 32 * per_token
    lens = [1, 100, 4096, 33]
    got = paged_kv_cache_bytes(32, 8, 128, lens, page_size=16)
    assert got == sum(-(-n // 16) * 16 for n in lens) * per_token
    waste = got - sum(kv_cache_bytes(32, 8, 128, n) for n in lens)
    assert 0 <= waste <= len(lens) * 15 * per_token
    exact = sum(kv_cache_bytes(32, 8, 128, n) for n in lens)
    assert paged_kv_cache_bytes(32, 8, 128, lens, page_size=1) == exact


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: quantized_kv_cache_bytes(1, 1, 64, 8, quant="int4"), "quant"),
        (lambda: quantized_kv_cache_bytes(1, 1, 64, 8, group_size=0), "group_size"),
        (lambda: quantize_kv(torch.zeros(2, 64), "nf4"), "quant"),
        (lambda: quantize_kv(torch.zeros(2, 60), "int8", 64), "group_size"),
        (lambda: paged_kv_cache_bytes(1, 1, 64, 8, page_size=0), "page_size"),
        (lambda: paged_kv_cache_bytes(1, 1, 64, [8, 0]), "seq_lens"),
        (lambda: paged_kv_cache_bytes(1, 1, 64, []), "seq_lens"),
    ],
    ids=["quant", "group_size", "quantize-quant", "quantize-group", "page_size", "seq_len-0", "empty"],
)
def test_quantized_and_paged_reject_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()
