"""attn_core.inference: FLOPs and bytes per operation, the decode step, serving arithmetic."""

import pytest
import torch

from attn_core.attention import scaled_dot_product_attention
from attn_core.inference import (
    H100_SXM,
    decode_attention,
    decode_bytes,
    layer_ops,
    measure_bandwidth,
    measure_matmul_flops,
    serving,
)
from attn_core.kv_cache import MODELS
from attn_core.measure import count_flops

LLAMA3 = MODELS["Llama 3 8B"]
Z = torch.zeros


def test_h100_balance_point():
    assert H100_SXM["bf16_flops"] / H100_SXM["bandwidth"] == pytest.approx(295.2, abs=0.1)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_projection_and_ffn_flops_equal_flop_counter(phase):
    """Projections and FFN of a small GQA model: FlopCounterMode on real matmuls of those shapes."""
    m = LLAMA3.with_(d_model=64, num_heads=8, num_kv_heads=2, d_head=8, ffn_dim=96)
    n, batch = 10, 3
    ops = {o.name: o for o in layer_ops(m, n, phase, batch=batch)}
    t = batch * n if phase == "prefill" else batch
    x = torch.zeros(t, 64)
    assert count_flops(lambda: x @ torch.zeros(64, 64)) == ops["Q projection"].flops
    assert count_flops(lambda: x @ torch.zeros(64, 32)) == ops["K, V projections"].flops
    assert count_flops(lambda: x @ torch.zeros(64, 64)) == ops["output projection"].flops
    assert count_flops(lambda: [x @ torch.zeros(64, 96) for _ in range(3)]) == ops["FFN"].flops


def test_attention_flops_decode_and_prefill():
    m = LLAMA3.with_(num_heads=8, num_kv_heads=2, d_head=16)
    q = torch.zeros(3, 8, 16)
    k = torch.zeros(3, 2, 100, 16)
    dec = {o.name: o for o in layer_ops(m, 100, "decode", batch=3)}["attention (QK^T, PV)"]
    assert count_flops(decode_attention, q, k, k) == dec.flops
    pre = {o.name: o for o in layer_ops(m, 100, "prefill", batch=3)}["attention (QK^T, PV)"]
    full = count_flops(scaled_dot_product_attention, torch.zeros(3, 8, 100, 16), torch.zeros(3, 8, 100, 16),
                       torch.zeros(3, 8, 100, 16))
    assert pre.flops == full * 101 // 200  # causal: N (N + 1) / 2 of the N^2 pairs


@pytest.mark.parametrize("h_kv", [32, 8, 1], ids=["MHA", "GQA", "MQA"])
def test_decode_attention_intensity_is_about_group_size(h_kv):
    """Decode attention: 4 N H D FLOPs over 2 N H_kv D b bytes -> G / b * 2 FLOPs per byte (bf16: G)."""
    op = {o.name: o for o in layer_ops(LLAMA3, 32768, "decode", num_kv_heads=h_kv)}["attention (QK^T, PV)"]
    g = 32 // h_kv
    assert op.intensity == pytest.approx(g, rel=0.01)
    assert op.bytes == decode_bytes(32768, 32, h_kv, 128)


def test_minimum_traffic_prefill_above_the_bf16_roof_decode_below():
    """At layer_ops' minimum traffic every prefill op of Llama 3 8B is above the H100's bf16 balance
    point and every decode op below (a real kernel's tile re-reads lower prefill's intensity)."""
    h100 = H100_SXM["bf16_flops"] / H100_SXM["bandwidth"]
    for op in layer_ops(LLAMA3, 4096, "prefill"):
        assert op.intensity > h100, op
    for op in layer_ops(LLAMA3, 4096, "decode"):
        assert op.intensity < 10, op  # about 1 FLOP per byte (weights) or G (attention)
    # decode projections: 2 FLOPs per weight of b = 2 bytes -> about 1 FLOP per byte
    q = layer_ops(LLAMA3, 4096, "decode")[0]
    assert q.intensity == pytest.approx(1.0, rel=0.01)


def test_decode_attention_equals_reference():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 16, generator=g, dtype=torch.float64)
    k = torch.randn(2, 2, 33, 16, generator=g, dtype=torch.float64)
    v = torch.randn(2, 2, 33, 12, generator=g, dtype=torch.float64)
    out = decode_attention(q, k, v)
    kr = k.repeat_interleave(4, dim=1)  # (2, 8, 33, 16): head h reads K/V head h // G
    vr = v.repeat_interleave(4, dim=1)
    ref = scaled_dot_product_attention(q[:, :, None], kr, vr)[:, :, 0]
    torch.testing.assert_close(out, ref)


def test_serving_arithmetic():
    s = serving(LLAMA3, 8192, batch=4, bandwidth=1e12)
    w = 32 * (LLAMA3.attention_params() + LLAMA3.ffn_params()) * 2
    kv = 8192 * 32 * 2 * 8 * 128 * 2
    assert s["weight_bytes"] == w and s["kv_bytes"] == kv
    assert s["bytes_per_step"] == w + 4 * kv
    assert s["tokens_per_s"] == pytest.approx(1e12 / (w + 4 * kv))
    assert s["crossover_batch"] == pytest.approx(w / kv)
    b = serving(LLAMA3, 8192, batch=int(s["crossover_batch"]) + 1)
    assert b["bytes_per_step"] - b["weight_bytes"] > b["weight_bytes"]


def test_measurements_are_positive():
    assert measure_matmul_flops(128, repeats=2) > 0
    assert measure_bandwidth(1 << 20, repeats=2) > 0


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: layer_ops(LLAMA3, 10, "train"), "phase"),
        (lambda: layer_ops(LLAMA3, 0), "seq_len"),
        (lambda: layer_ops(MODELS["DeepSeek-V2"], 10), "model"),
        (lambda: decode_attention(Z(8, 16), Z(3, 5, 16), Z(3, 5, 16)), "q"),
        (lambda: decode_attention(Z(8, 16), Z(2, 5, 16), Z(2, 4, 16)), "v_cache"),
        (lambda: decode_attention(Z(8, 16), Z(2, 5, 15), Z(2, 5, 16)), "k_cache"),
        (lambda: serving(LLAMA3, 10, bandwidth=0), "bandwidth"),
        (lambda: decode_bytes(10, 8, 0, 16), "num_kv_heads"),
    ],
)
def test_bad_input_names_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
