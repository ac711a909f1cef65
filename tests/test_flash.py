"""attn_core.flash: tiled attention equals the reference, saves linear-size tensors, counts its tiles."""

import pytest
import torch

import attn_core.flash as flash
from attn_core.attention import causal_mask, scaled_dot_product_attention
from attn_core.attention import flash_attention as flash_from_attention
from attn_core.flash import (
    eager_io_bytes,
    flash2_io_bytes,
    flash_attention,
    flash_io_bytes,
    flash_tile_counts,
)
from attn_core.measure import count_flops, saved_tensor_bytes

CASES = [  # (lead dims, N, D, D_v, block_q, block_k)
    ((), 1, 8, 8, 64, 64),
    ((2,), 63, 20, 12, 16, 16),
    ((2, 3), 100, 20, 20, 7, 13),
    ((1, 2), 130, 60, 60, 64, 32),
    ((3,), 77, 16, 24, 200, 5),
]


def _qkv(lead, n, d, d_v, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, n, d, dtype=dtype, generator=g)
    k = torch.randn(*lead, n, d, dtype=dtype, generator=g)
    v = torch.randn(*lead, n, d_v, dtype=dtype, generator=g)
    return q, k, v


@pytest.fixture(params=[None, 64], ids=["one-wave", "many-waves"])
def waves(request, monkeypatch):
    """Run each case as one wave of query blocks and as many (a small wave budget)."""
    if request.param is not None:
        monkeypatch.setattr(flash, "_WAVE_VALUES", request.param)
    return request.param


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"N{c[1]}-bq{c[4]}-bk{c[5]}")
def test_output_and_gradients_equal_reference_float64(case, causal, waves):
    lead, n, d, d_v, bq, bk = case
    q, k, v = (t.requires_grad_() for t in _qkv(lead, n, d, d_v))
    out = flash_attention(q, k, v, causal=causal, block_q=bq, block_k=bk)
    ref = scaled_dot_product_attention(q, k, v, mask=causal_mask(n) if causal else None)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    d_out = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(1))
    got = torch.autograd.grad(out, (q, k, v), d_out)
    want = torch.autograd.grad(ref, (q, k, v), d_out)
    for name, a, b in zip("qkv", got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=f"grad {name}")


def test_scale_and_float32_and_gradcheck():
    q, k, v = _qkv((2,), 37, 12, 12)
    ref = scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(flash_attention(q, k, v, scale=0.3, block_q=8, block_k=8), ref)
    q32, k32, v32 = (t.float() for t in (q, k, v))
    torch.testing.assert_close(flash_attention(q32, k32, v32, causal=True, block_q=8, block_k=16),
                               scaled_dot_product_attention(q32, k32, v32, mask=causal_mask(37)),
                               rtol=1e-5, atol=1e-6)
    small = tuple(t[:1, :10].clone().requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(lambda a, b, c: flash_attention(a, b, c, causal=True, block_q=4,
                                                                    block_k=3), small)


def test_exported_from_attention():
    assert flash_from_attention is flash_attention


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_saves_only_q_k_v_out_lse(causal):
    """On the meta device: five storages, q, k, v (D each), out (D_v) and lse (one per row)."""
    meta = torch.device("meta")
    for n in (1000, 8192):
        q, k, v = (torch.empty(2, 3, n, 64, device=meta, requires_grad=True) for _ in range(3))
        saved = saved_tensor_bytes(flash_attention, q, k, v, causal=causal)
        shapes = sorted(t.shape for t in saved)
        assert shapes == sorted([(2, 3, n, 64)] * 4 + [(2, 3, n)])
        assert saved.total == 2 * 3 * n * (4 * 64 + 1) * 4


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n,bq,bk", [(63, 16, 16), (100, 7, 13), (256, 64, 64), (300, 64, 128)])
def test_tile_counts_equal_flop_counter(n, bq, bk, causal):
    q, k, v = _qkv((2,), n, 20, 12)
    counts = flash_tile_counts(n, 20, 12, causal=causal, block_q=bq, block_k=bk)
    kw = dict(causal=causal, block_q=bq, block_k=bk)
    assert count_flops(flash_attention, q, k, v, **kw) == 2 * counts["forward_flops"]
    qr, kr, vr = (t.requires_grad_() for t in (q, k, v))
    total = count_flops(lambda: flash_attention(qr, kr, vr, **kw).sum().backward())
    assert total == 2 * (counts["forward_flops"] + counts["backward_flops"])
    n_q, n_k = -(-n // bq), -(-n // bk)
    assert counts["tiles"] + counts["tiles_skipped"] == n_q * n_k
    full = flash_tile_counts(n, 20, 12, causal=False, block_q=bq, block_k=bk)
    done = counts["forward_flops"] + counts["forward_flops_skipped"]
    assert done == full["forward_flops"] == 2 * n * n * (20 + 12)
    if not causal:
        assert counts["tiles_skipped"] == 0
    else:  # a tile is skipped exactly when its first key comes after its last query
        want = sum(1 for i in range(n_q) for j in range(n_k) if j * bk > min(n, (i + 1) * bq) - 1)
        assert counts["tiles_skipped"] == want


def test_io_ledger():
    n, d, b = 4096, 64, 2
    eager = eager_io_bytes(n, d, b)
    assert eager["total"] == (4 * n * d + 4 * n * n) * b
    m = 100 * 1024
    f = flash_io_bytes(n, d, m, b)
    assert f["block_k"] == -(-m // (4 * d * b)) and f["block_q"] == min(f["block_k"], d)
    t_c = -(-n // f["block_k"])
    assert f["total"] == (2 * n * d + n * d + 2 * n + t_c * (3 * n * d + 4 * n)) * b
    # Theta(N^2 D^2 / M): T_c ~ 4 N D b / M steps of (3 N D + 4 N) b bytes
    big = flash_io_bytes(1 << 20, d, m, b)["total"]
    assert big == pytest.approx(4 * (1 << 20) ** 2 * d * b * b * (3 * d + 4) / m, rel=0.01)
    # quadrupling M cuts the traffic about four times
    assert flash_io_bytes(1 << 20, d, 4 * m, b)["total"] == pytest.approx(big / 4, rel=0.02)


def test_io_ledger_flash2_loop_order():
    """Query blocks outside: Q and O once, K and V once per query block; ~8 N^2 D^2 b^2 / M."""
    n, d, b, m = 4096, 64, 2, 100 * 1024
    f2 = flash2_io_bytes(n, d, m, b)
    assert f2["block_q"] == -(-m // (4 * d * b))
    t_r = -(-n // f2["block_q"])
    assert f2["total"] == 2 * n * d * b + 4 * n + t_r * 2 * n * d * b
    # a loop written out: per query block, its Q and O once, every K and V block
    loop = 4 * n  # the logsumexp
    for r0 in range(0, n, f2["block_q"]):
        rows = min(f2["block_q"], n - r0)
        loop += 2 * rows * d * b + 2 * n * d * b
    assert loop == f2["total"]
    big_n = 1 << 20
    big = flash2_io_bytes(big_n, d, m, b)["total"]
    assert big == pytest.approx(8 * big_n**2 * d**2 * b**2 / m, rel=0.01)
    # fewer bytes than Algorithm 1's schedule; fewer than eager exactly when M > 2 D^2 b (large N)
    assert big < flash_io_bytes(big_n, d, m, b)["total"]
    for m_try in (int(2 * d * d * b * 0.9), int(2 * d * d * b * 1.1)):
        fewer = flash2_io_bytes(big_n, d, m_try, b)["total"] < eager_io_bytes(big_n, d, b)["total"]
        assert fewer == (m_try > 2 * d * d * b)
    # a kernel's own tile: B_r = 128 rows gives 4 N^2 D / (2 N^2 D b / 128) = 256 / b FLOPs per byte
    tile = flash2_io_bytes(big_n, 128, m, b, block_q=128)
    assert tile["block_q"] == 128
    assert 4 * big_n**2 * 128 / tile["total"] == pytest.approx(256 / b, rel=0.001)
    with pytest.raises(ValueError, match="block_q"):
        flash2_io_bytes(n, d, m, b, block_q=0)


def test_io_ledger_cluster_shares_each_k_v_load():
    """A cluster of thread blocks on neighbouring query blocks loads each K, V block once for all of
    them (FlashAttention-3's 2-CTA clusters with TMA multicast): K, V bytes once per cluster."""
    n, d, b, m = 8192, 128, 2, 228 * 1024
    one = flash2_io_bytes(n, d, m, b, block_q=128)
    pair = flash2_io_bytes(n, d, m, b, block_q=128, cluster=2)
    assert one["cluster"] == 1 and pair["cluster"] == 2
    t_r = n // 128  # 64 query blocks: an even number, 32 clusters
    assert pair["total"] == 2 * n * d * b + 4 * n + (t_r // 2) * 2 * n * d * b
    # a loop written out: per cluster, one read of every K and V block
    loop = 2 * n * d * b + 4 * n
    for _ in range(0, t_r, 2):
        loop += 2 * n * d * b
    assert loop == pair["total"]
    # two blocks of 128 rows sharing their K, V loads move what one block of 256 rows would
    assert pair["total"] == flash2_io_bytes(n, d, m, b, block_q=256)["total"]
    # about twice the FLOPs per byte: 4 N^2 D over the bytes, near 512 / b for large N
    ratio = (4 * n * n * d / pair["total"]) / (4 * n * n * d / one["total"])
    assert 1.9 < ratio < 2
    # an odd number of query blocks: the last cluster is a whole one in the count
    assert flash2_io_bytes(3 * 128, d, m, b, block_q=128, cluster=2)["total"] == (
        2 * 384 * d * b + 4 * 384 + 2 * 2 * 384 * d * b)
    assert flash2_io_bytes(n, d, m, b, block_q=128, cluster=1) == one
    with pytest.raises(ValueError, match="cluster"):
        flash2_io_bytes(n, d, m, b, cluster=0)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(block_q=0), "block_q"),
        (dict(block_k=-4), "block_k"),
        (dict(block_q=1.5), "block_q"),
        (dict(block_k=True), "block_k"),
        (dict(scale=0.0), "scale"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, name):
    q, k, v = _qkv((), 8, 4, 4)
    with pytest.raises(ValueError, match=name):
        flash_attention(q, k, v, **kwargs)


def test_bad_shapes_name_themselves():
    q, k, v = _qkv((2,), 8, 4, 4)
    with pytest.raises(ValueError, match="k"):
        flash_attention(q, k[..., :3], v)
    with pytest.raises(ValueError, match="v"):
        flash_attention(q, k, v[:, :5])
    with pytest.raises(ValueError, match="leading"):
        flash_attention(q, k, v[:1])
    with pytest.raises(ValueError, match="q"):
        flash_attention(q[0, 0], k, v)
    for fn, arg in ((flash_io_bytes, "sram_bytes"), (flash_tile_counts, "block_q")):
        with pytest.raises(ValueError, match=arg):
            fn(8, 4, 0) if arg == "sram_bytes" else fn(8, 4, block_q=0)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_16_bit_inputs_accumulate_in_float32_like_sdpa(dtype, causal):
    """Logits of std 16 (sharp attention): scores, running max/sum and output kept in float32, so the
    error against float64 (output and gradients) is PyTorch SDPA's, not that of scores rounded to 16
    bits before the exponential (bf16 here: 0.055 of the largest |out| before the fix, SDPA 0.0023)."""
    g = torch.Generator().manual_seed(0)
    n, d = 200, 64
    q, k = ((torch.randn(2, 3, n, d, generator=g) * 4).to(dtype) for _ in range(2))  # q.k / 8: std 16
    v, d_out = (torch.randn(2, 3, n, d, generator=g).to(dtype) for _ in range(2))
    ref_scores = q.double() @ k.double().transpose(-1, -2) / d**0.5
    assert 15 < ref_scores.std().item() < 17

    def out_and_grads(fn, inputs):
        inputs = [t.clone().requires_grad_() for t in inputs]
        out = fn(*inputs)
        grads = torch.autograd.grad(out, inputs, d_out.to(out.dtype))
        assert out.dtype == inputs[0].dtype and all(gr.dtype == out.dtype for gr in grads)
        return [t.double() for t in (out, *grads)]

    def sdpa(a, b, c):
        return torch.nn.functional.scaled_dot_product_attention(a, b, c, is_causal=causal)

    ref = out_and_grads(sdpa, [t.double() for t in (q, k, v)])
    ours = out_and_grads(lambda a, b, c: flash_attention(a, b, c, causal=causal), [q, k, v])
    theirs = out_and_grads(sdpa, [q, k, v])
    for name, a, b, r in zip(["out", "dq", "dk", "dv"], ours, theirs, ref):
        err, err_sdpa = ((x - r).abs().max().item() / r.abs().max().item() for x in (a, b))
        assert err <= 1.5 * err_sdpa + 2e-4, (name, err, err_sdpa)
    limit = {torch.bfloat16: 0.012, torch.float16: 0.002}[dtype]  # a few roundings of the output dtype
    assert max((x - r).abs().max().item() / r.abs().max().item() for x, r in zip(ours, ref)) < limit
