"""attn_core.inference: FLOPs and bytes per operation, the decode step, serving arithmetic."""

import math

import pytest
import torch

from attn_core.attention import scaled_dot_product_attention
from attn_core.inference import (
    H100_SXM,
    decode_attention,
    decode_bytes,
    exp_roof_flops,
    fa2_decode_launch,
    layer_ops,
    measure_bandwidth,
    measure_matmul_flops,
    measure_roofs,
    mla_decode_ops,
    serving,
    serving_memory,
    split_kv_decode,
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


def test_h100_memory_is_80_gib_and_what_nvidia_smi_and_cuda_report():
    """An "80GB" H100 has 80 GiB of HBM3; nvidia-smi reports 81,559 MiB of it (NVIDIA/nccl issue 1264,
    modal-labs/modal-client PR 2797), CUDA 85,045,477,376 bytes (deviceQuery's 81106 MBytes): each a
    little less than the last, and all more than 80 x 10^9 bytes (74.5 GiB)."""
    assert H100_SXM["hbm_bytes"] == 80 * 2**30
    assert H100_SXM["memory_bytes"] == 81559 * 2**20 == 85_520_809_984
    assert round(H100_SXM["cuda_memory_bytes"] / 2**20) == 81106
    assert 80e9 < H100_SXM["cuda_memory_bytes"] < H100_SXM["memory_bytes"] < H100_SXM["hbm_bytes"]
    from attn_core.symbols import ACCELERATORS, DEFAULT_ACCELERATOR

    assert H100_SXM["memory_bytes"] == ACCELERATORS[DEFAULT_ACCELERATOR] * 2**20  # the widgets' default


def test_h100_figures_of_the_fa3_paper():
    """FlashAttention-3 (Shah et al. 2024): 3.9 TFLOPS of special functions, 16 per SM per clock at
    1.83 GHz on 132 SMs (footnotes of sections 2.2 and 3.1); 989 / 3.9 is about 256; L2 50 MiB and
    256 KiB of registers per SM (Table 1)."""
    assert H100_SXM["exp_per_s"] == pytest.approx(3.9e12, rel=0.01)
    assert H100_SXM["bf16_flops"] / H100_SXM["exp_per_s"] == pytest.approx(256, rel=0.01)
    assert H100_SXM["num_sms"] == 132 and H100_SXM["l2_bytes"] == 50 * 2**20
    assert H100_SXM["regs_per_sm"] == 256 * 1024
    assert H100_SXM["fp8_flops"] / H100_SXM["bf16_flops"] == pytest.approx(2, rel=0.001)  # 1,979 and 989


def test_exp_roof():
    """Forward: 4 D matmul FLOPs per exponential. At D = 128 the paper's '512x more matmul FLOPs, 256x
    lower throughput': the exponentials take half the matmuls' time; at D = 64 as long."""
    assert exp_roof_flops(128, exp_per_s=1.0) == 512
    assert exp_roof_flops(128, exp_per_s=1.0, phase="backward") == 1280
    share = H100_SXM["bf16_flops"] / exp_roof_flops(128)  # exp time / matmul time
    assert share == pytest.approx(0.5, rel=0.01)
    assert H100_SXM["bf16_flops"] / exp_roof_flops(64) == pytest.approx(1.0, rel=0.01)
    # FlopCounterMode: the forward of one head's attention is 4 N^2 D FLOPs for N^2 exponentials
    n, d = 16, 8
    flops = count_flops(scaled_dot_product_attention, Z(1, n, d), Z(1, n, d), Z(1, n, d))
    assert flops == exp_roof_flops(d, exp_per_s=1.0) * n * n


DS = MODELS["DeepSeek-V2"]


def test_mla_decode_absorbed_near_h100_ridge_and_decompressed_costs_flops():
    """Absorbed: H (2 (R + D_r) + 2 R) FLOPs per cached token over (R + D_r) b bytes, 128 * 2176 / 1152
    = 241.8 FLOPs per byte as N grows; the counts equal FlopCounterMode on the absorbed computation."""
    n = 1 << 20
    op = mla_decode_ops(DS, n)
    assert op.intensity == pytest.approx(128 * (2 * 576 + 2 * 512) / (576 * 2), rel=1e-3)
    ridge = H100_SXM["bf16_flops"] / H100_SXM["bandwidth"]
    assert 0.8 * ridge < op.intensity < ridge
    assert op.bytes - DS.kv_bytes(n) // DS.num_layers == 128 * (576 + 512) * 2  # the cache: one layer
    full = mla_decode_ops(DS, n, absorbed=False)
    assert full.flops / op.flops == pytest.approx((2 * 512 * 256 + 2 * 192 + 2 * 128) / 2176, rel=1e-6)
    assert full.intensity > 40 * ridge  # decompressing every step: far on the arithmetic side
    # the absorbed computation, written out on a small MLA (3 heads, R = 8, D_r = 2), counted
    m = DS.with_(num_heads=3, kv_lora_rank=8, rope_dim=2, d_head=4, d_v=5)
    n_small, batch = 7, 2
    q_lat, q_rope = Z(batch, 3, 8), Z(batch, 3, 2)  # absorbed query: latent part and RoPE part
    c, k_r = Z(batch, n_small, 8), Z(batch, n_small, 2)  # cached latent and RoPE key

    def absorbed():
        s = q_lat @ c.transpose(-1, -2) + q_rope @ k_r.transpose(-1, -2)  # (B, H, N)
        return torch.softmax(s, -1) @ c  # (B, H, R): then W^UV, absorbed into the output

    assert count_flops(absorbed) == mla_decode_ops(m, n_small, batch=batch).flops
    w_uk, w_uv = Z(8, 3 * 4), Z(8, 3 * 5)
    q_nope, q_r = Z(batch, 3, 1, 4), Z(batch, 3, 1, 2)

    def decompressed():
        k = (c @ w_uk).reshape(batch, n_small, 3, 4).transpose(1, 2)  # (B, H, N, D)
        v = (c @ w_uv).reshape(batch, n_small, 3, 5).transpose(1, 2)  # (B, H, N, D_v)
        s = q_nope @ k.transpose(-1, -2) + q_r @ k_r[:, None].transpose(-1, -2)  # (B, H, 1, N)
        return torch.softmax(s, -1) @ v

    assert count_flops(decompressed) == mla_decode_ops(m, n_small, batch=batch, absorbed=False).flops


@pytest.mark.parametrize("splits", [1, 3, 8, 100], ids=lambda s: f"splits{s}")
def test_split_kv_decode_equals_decode_attention(splits):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 16, generator=g, dtype=torch.float64) * 3
    k = torch.randn(2, 2, 37, 16, generator=g, dtype=torch.float64)
    v = torch.randn(2, 2, 37, 12, generator=g, dtype=torch.float64)
    torch.testing.assert_close(split_kv_decode(q, k, v, splits), decode_attention(q, k, v),
                               rtol=1e-12, atol=1e-12)
    bf = [t.bfloat16() for t in (q, k, v)]
    out = split_kv_decode(*bf, splits)
    assert out.dtype == torch.bfloat16
    ref = decode_attention(*(t.double() for t in bf))
    torch.testing.assert_close(out.double(), ref, rtol=0.02, atol=0.02)


def test_serving_memory():
    s = serving_memory(LLAMA3, 8192, users=5)
    kv = 8192 * 32 * 2 * 8 * 128 * 2
    assert s["weight_bytes"] == 2 * LLAMA3.num_params() and s["kv_bytes_per_user"] == kv
    assert s["kv_bytes"] == 5 * kv and s["total_bytes"] == s["weight_bytes"] + 5 * kv
    assert s["devices"] == 1
    many = serving_memory(LLAMA3, 8192, users=100)
    device = 81559 * 2**20  # the default device: an H100 80GB as nvidia-smi reports it
    assert (many["devices"] - 1) * device < many["total_bytes"] <= many["devices"] * device
    # 123.4 GB in all: two such devices, two of 80 x 10^9 bytes as well, three of 40 GiB
    assert many["devices"] == 2 == serving_memory(LLAMA3, 8192, users=100, device_bytes=80e9)["devices"]
    assert serving_memory(LLAMA3, 8192, users=100, device_bytes=40 * 2**30)["devices"] == 3
    # the layer weights that a step reads (serving) are part of all the weights held
    assert serving(LLAMA3, 8192)["weight_bytes"] < s["weight_bytes"]


def test_batching_raises_the_weights_intensity_not_attentions():
    """Decode: a weight matrix is read once for the whole batch (intensity ~ B), each sequence's
    cache once for that sequence (intensity ~ G, whatever B)."""
    for batch in (1, 8, 64):
        ops = {o.name: o for o in layer_ops(LLAMA3, 8192, "decode", batch=batch)}
        assert ops["FFN"].intensity == pytest.approx(batch, rel=0.02)
        assert ops["attention (QK^T, PV)"].intensity == pytest.approx(4, rel=0.01)


def test_measurements_are_positive():
    assert measure_matmul_flops(128, repeats=2) > 0
    assert measure_bandwidth(1 << 20, repeats=2) > 0


def test_measure_roofs_takes_the_best_over_threads_and_repeats():
    """pi and beta are each the maximum over the thread counts (each already the best of its
    repeats), the ridge is their ratio, and torch's thread count is restored."""
    default = torch.get_num_threads()
    roofs = measure_roofs(128, 1 << 20, thread_counts=(default, 1, 1), repeats=2)
    assert torch.get_num_threads() == default
    assert list(roofs["by_threads"]) == list(dict.fromkeys((default, 1)))  # each count once
    assert roofs["flops"] == max(r["flops"] for r in roofs["by_threads"].values()) > 0
    assert roofs["bandwidth"] == max(r["bandwidth"] for r in roofs["by_threads"].values()) > 0
    assert roofs["ridge"] == roofs["flops"] / roofs["bandwidth"]
    one = measure_roofs(64, 1 << 16, thread_counts=(1,), repeats=1)
    assert list(one["by_threads"]) == [1] and torch.get_num_threads() == default
    for bad in ((), (0,)):
        with pytest.raises(ValueError, match="thread_counts"):
            measure_roofs(64, 1 << 16, thread_counts=bad)
    with pytest.raises(ValueError, match="repeats"):
        measure_roofs(64, 1 << 16, repeats=0)


def _splits_by_hand(blocks, slots, n_blocks):
    """FlashAttention-2's num_splits_heuristic, restated: fewest eligible splits within 85% of the
    best wave efficiency; one split when the blocks nearly fill the slots."""
    if blocks >= 0.8 * slots:
        return 1
    top = min(128, slots, n_blocks)
    eligible = [s for s in range(1, top + 1) if s == 1 or -(-n_blocks // s) != -(-n_blocks // (s - 1))]
    eff = {s: (blocks * s / slots) / math.ceil(blocks * s / slots) for s in eligible}
    return min(s for s in eligible if eff[s] >= 0.85 * max(eff.values()))


def test_fa2_decode_launch_packs_a_group_per_block_and_picks_its_splits():
    """Llama 3 8B (H = 32, H_kv = 8, D = 128), one sequence at N = 32768: the 4 query heads of a K/V
    head share one thread block (8 blocks unsplit); the heuristic fills 2 x 132 slots with 29 chunks."""
    one = fa2_decode_launch(1, 32, 8, 32768, 128, num_splits=1)
    assert one == {"query_rows": 4, "heads": 8, "m_blocks": 1, "n_blocks": 256, "num_splits": 1,
                   "thread_blocks": 8}
    auto = fa2_decode_launch(1, 32, 8, 32768, 128)
    assert auto["num_splits"] == _splits_by_hand(8, 264, 256) == 29
    assert auto["thread_blocks"] == 29 * 8 and 0.85 * 264 <= 29 * 8 < 264
    # MHA: no swap, one block per (sequence, head); enough blocks: no split
    mha = fa2_decode_launch(1, 32, 32, 32768, 128)
    assert (mha["query_rows"], mha["heads"]) == (1, 32)
    assert mha["num_splits"] == _splits_by_hand(32, 264, 256)
    assert fa2_decode_launch(64, 32, 8, 32768, 128)["num_splits"] == 1  # 512 blocks >= 0.8 x 264
    # key blocks of 256 rows for D <= 64, 128 for D <= 128, else 64
    assert [fa2_decode_launch(1, 8, 8, 1000, d)["n_blocks"] for d in (64, 128, 256)] == [4, 8, 16]
    # a large group spans several blocks of 64 query rows
    assert fa2_decode_launch(1, 128, 1, 4096, 128)["m_blocks"] == 2
    for batch, h, h_kv, n, d in [(1, 32, 8, 4096, 128), (2, 64, 8, 100_000, 128), (3, 16, 16, 777, 64),
                                 (1, 8, 1, 50_000, 256)]:
        got = fa2_decode_launch(batch, h, h_kv, n, d)
        blocks = batch * got["heads"] * got["m_blocks"]
        assert got["num_splits"] == _splits_by_hand(blocks, 264, got["n_blocks"])
        assert got["thread_blocks"] == blocks * got["num_splits"]
    with pytest.raises(ValueError, match="num_splits"):
        fa2_decode_launch(1, 32, 8, 4096, 128, num_splits=-1)
    with pytest.raises(ValueError, match="num_heads"):
        fa2_decode_launch(1, 30, 8, 4096, 128)


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
        (lambda: mla_decode_ops(LLAMA3, 10), "model"),
        (lambda: mla_decode_ops(DS, 0), "seq_len"),
        (lambda: split_kv_decode(Z(8, 16), Z(2, 5, 16), Z(2, 5, 16), 0), "num_splits"),
        (lambda: split_kv_decode(Z(8, 16), Z(2, 5, 16), Z(2, 4, 16), 2), "v_cache"),
        (lambda: exp_roof_flops(128, phase="decode"), "phase"),
        (lambda: exp_roof_flops(0), "d_head"),
        (lambda: serving_memory(LLAMA3, 10, users=0), "users"),
        (lambda: serving_memory(LLAMA3, 10, device_bytes=0), "device_bytes"),
    ],
)
def test_bad_input_names_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
