"""Tests for attn_core.attention: softmax, SDPA, masks, RoPE, MHA and GQA.

Every check compares against an independent reference: PyTorch's own functions
(torch.softmax, F.scaled_dot_product_attention), loops written from the
definitions in this file, or closed-form counts.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attn_core.attention import (
    GroupedQueryAttention,
    MultiHeadSelfAttention,
    RotaryPositionalEmbedding,
    causal_mask,
    mha_forward,
    scaled_dot_product_attention,
    sliding_window_mask,
    softmax,
)

F64 = dict(atol=1e-12, rtol=1e-12)  # float64, same algorithm up to summation order
LEADS = [
    pytest.param((), id="lead=()"),
    pytest.param((2,), id="lead=(2,)"),
    pytest.param((2, 3), id="lead=(2,3)"),
]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=gen(seed), dtype=dtype)


# --------------------------------------------------------------------------- references
def sdpa_loop(q, k, v, mask=None, scale=None):
    """softmax(q k^T * scale) v from the definition, one query and one key at a time (float64)."""
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    q = q.expand(*lead, *q.shape[-2:]).reshape(-1, n, q.shape[-1]).double()
    k = k.expand(*lead, *k.shape[-2:]).reshape(-1, m, k.shape[-1]).double()
    v = v.expand(*lead, m, d_v).reshape(-1, m, d_v).double()
    if mask is None:
        mask = torch.ones(n, m, dtype=torch.bool)
    mask = mask.expand(*lead, n, m).reshape(-1, n, m)
    out = torch.zeros(q.shape[0], n, d_v, dtype=torch.float64)
    for b in range(q.shape[0]):
        for i in range(n):
            keys = [j for j in range(m) if mask[b, i, j]]
            s = [scale * float(q[b, i] @ k[b, j]) for j in keys]
            top = max(s)
            w = [math.exp(x - top) for x in s]
            total = sum(w)
            for j, wj in zip(keys, w):
                out[b, i] += (wj / total) * v[b, j]
    return out.reshape(*lead, n, d_v)


def rope_reference(x, positions, theta):
    """Rotate each pair (2i, 2i+1) of x[..., t, :] by angle positions[t] * theta^(-2i/d_k), explicitly."""
    d_k = x.shape[-1]
    positions = positions.expand(x.shape[:-1])
    flat_x, flat_p = x.reshape(-1, d_k).double(), positions.reshape(-1)
    flat_o = torch.empty_like(flat_x)
    for row in range(flat_x.shape[0]):
        p = int(flat_p[row])
        for i in range(d_k // 2):
            angle = p * theta ** (-2 * i / d_k)
            rot = torch.tensor(
                [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=torch.float64
            )
            flat_o[row, 2 * i:2 * i + 2] = rot @ flat_x[row, 2 * i:2 * i + 2]
    return flat_o.reshape(x.shape)


def split_heads(t, h):
    """(..., N, H*D) -> (..., H, N, D) by view and transpose (not einops)."""
    return t.unflatten(-1, (h, t.shape[-1] // h)).transpose(-3, -2)


def merge_heads(t):
    """(..., H, N, D) -> (..., N, H*D)."""
    return t.transpose(-3, -2).flatten(-2)


# --------------------------------------------------------------------------- softmax
def test_softmax_large_logits_stable_where_naive_overflows():
    """logits [1000, 1001, 1002]: naive exp/sum is NaN; softmax is finite and equals torch.softmax."""
    x = torch.tensor([1000.0, 1001.0, 1002.0])
    naive = torch.exp(x) / torch.exp(x).sum()  # inf / inf
    assert torch.isnan(naive).all()
    got = softmax(x)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, torch.softmax(x, dim=-1), atol=1e-7, rtol=1e-6)
    # shift invariance: equals softmax([0, 1, 2]) = e^i / (1 + e + e^2), written out
    z = 1 + math.e + math.e**2
    torch.testing.assert_close(got, torch.tensor([1 / z, math.e / z, math.e**2 / z]), atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("dim", [-1, 0, 1], ids=lambda d: f"dim={d}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_softmax_matches_torch(dim, dtype):
    """softmax along any dim equals torch.softmax (f32: 1e-6, f64: 1e-12)."""
    x = randn(3, 63, 7, seed=1, dtype=dtype) * 30
    tol = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else F64
    torch.testing.assert_close(softmax(x, dim=dim), torch.softmax(x, dim=dim), **tol)
    torch.testing.assert_close(softmax(x, dim=dim, safe=True), torch.softmax(x, dim=dim), **tol)


def _masked_logits():
    x = randn(4, 7, seed=2)
    x[1] = float("-inf")  # fully masked row
    x[2, :3] = float("-inf")  # partly masked row
    return x


def test_softmax_safe_all_masked_row_gives_zero_and_zero_grad():
    """safe=True: an all -inf row gives zeros and zero grad; other rows equal torch.softmax and its grad."""
    x = _masked_logits().requires_grad_()
    w = randn(4, 7, seed=3)
    out = softmax(x, safe=True)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out[1], torch.zeros(7, dtype=torch.float64), atol=0, rtol=0)
    (out * w).sum().backward()
    torch.testing.assert_close(x.grad[1], torch.zeros(7, dtype=torch.float64), atol=0, rtol=0)

    keep = [0, 2, 3]
    x_ref = _masked_logits()[keep].requires_grad_()
    ref = torch.softmax(x_ref, dim=-1)
    (ref * w[keep]).sum().backward()
    torch.testing.assert_close(out[keep], ref, **F64)
    torch.testing.assert_close(x.grad[keep], x_ref.grad, **F64)


def test_softmax_unsafe_all_masked_row_is_nan():
    """safe=False: an all -inf row is NaN, as (-inf) - (-inf) is; torch.softmax agrees."""
    x = _masked_logits()
    out = softmax(x, safe=False)
    assert torch.isnan(out[1]).all()
    assert torch.isnan(torch.softmax(x, dim=-1)[1]).all()
    torch.testing.assert_close(out[[0, 2, 3]], torch.softmax(x[[0, 2, 3]], dim=-1), **F64)


def test_softmax_rejects_non_tensor():
    """softmax of a list raises ValueError naming x."""
    with pytest.raises(ValueError, match="x must be a torch.Tensor"):
        softmax([1.0, 2.0])


# --------------------------------------------------------------------------- SDPA
def _random_mask(*shape, seed):
    mask = torch.rand(*shape, generator=gen(seed)) < 0.5
    mask[..., 0] = True  # every query sees at least one key
    return mask


SDPA_CASES = [
    pytest.param(63, 63, 60, 60, id="self-N63-D60"),
    pytest.param(1, 1, 7, 7, id="N1"),
    pytest.param(7, 11, 7, 5, id="cross-N7-M11-Dv5"),
    pytest.param(65, 33, 8, 60, id="cross-N65-M33"),
]


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("n, m, d_k, d_v", SDPA_CASES)
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "boolmask"])
def test_sdpa_matches_torch(lead, n, m, d_k, d_v, masked):
    """SDPA (no mask / bool mask, self and cross) equals F.scaled_dot_product_attention in float64 (1e-12)."""
    q, k, v = randn(*lead, n, d_k, seed=4), randn(*lead, m, d_k, seed=5), randn(*lead, m, d_v, seed=6)
    mask = _random_mask(*lead, n, m, seed=7) if masked else None
    got = scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **F64)


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("n", [1, 63, 257], ids=lambda n: f"N={n}")
def test_sdpa_causal_matches_torch_is_causal(lead, n):
    """SDPA with causal_mask(n) equals F.scaled_dot_product_attention(is_causal=True), float64."""
    q, k, v = randn(*lead, n, 7, seed=8), randn(*lead, n, 7, seed=9), randn(*lead, n, 5, seed=10)
    got = scaled_dot_product_attention(q, k, v, mask=causal_mask(n))
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True), **F64)


@pytest.mark.parametrize("scale", [0.01, 0.5, 3.0], ids=lambda s: f"scale={s}")
def test_sdpa_custom_scale_matches_torch(scale):
    """A custom scale is used instead of 1/sqrt(D_k): equals F.sdpa(scale=...), float64."""
    q, k, v = randn(2, 9, 60, seed=11), randn(2, 13, 60, seed=12), randn(2, 13, 7, seed=13)
    got = scaled_dot_product_attention(q, k, v, scale=scale)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, scale=scale), **F64)


@pytest.mark.parametrize(
    "mask_shape", [(9, 13), (1, 13), (9, 1), (2, 1, 9, 13)], ids=["NxM", "1xM-padding", "Nx1", "per-batch"]
)
def test_sdpa_broadcast_mask_matches_torch(mask_shape):
    """Masks broadcast against (B, H, N, M) as in F.sdpa (float64)."""
    q, k, v = randn(2, 3, 9, 8, seed=14), randn(2, 3, 13, 8, seed=15), randn(2, 3, 13, 6, seed=16)
    mask = _random_mask(*mask_shape, seed=17)
    got = scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **F64)


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "boolmask"])
def test_sdpa_matches_definition_loop(lead, masked):
    """SDPA equals a loop over queries and keys written from the definition (float64, 1e-12)."""
    n, m = 5, 6
    q, k, v = randn(*lead, n, 7, seed=18), randn(*lead, m, 7, seed=19), randn(*lead, m, 3, seed=20)
    mask = _random_mask(n, m, seed=21) if masked else None
    got = scaled_dot_product_attention(q, k, v, mask=mask, scale=0.7)
    torch.testing.assert_close(got, sdpa_loop(q, k, v, mask=mask, scale=0.7), **F64)


def test_sdpa_float32_matches_float64_definition():
    """float32 SDPA agrees with the float64 definition loop to 1e-5."""
    q, k, v = randn(4, 7, seed=22), randn(6, 7, seed=23), randn(6, 5, seed=24)
    got = scaled_dot_product_attention(q.float(), k.float(), v.float())
    torch.testing.assert_close(got.double(), sdpa_loop(q, k, v), atol=1e-5, rtol=1e-5)


def test_sdpa_safe_all_masked_query_gives_zeros():
    """safe=True: a query that may attend to nothing outputs zeros; other rows equal F.sdpa."""
    q, k, v = randn(4, 7, seed=25), randn(6, 7, seed=26), randn(6, 5, seed=27)
    mask = _random_mask(4, 6, seed=28)
    mask[2] = False
    got = scaled_dot_product_attention(q, k, v, mask=mask, safe=True)
    torch.testing.assert_close(got[2], torch.zeros(5, dtype=torch.float64), atol=0, rtol=0)
    keep = [0, 1, 3]
    ref = F.scaled_dot_product_attention(q[keep], k, v, attn_mask=mask[keep])
    torch.testing.assert_close(got[keep], ref, **F64)
    assert torch.isnan(scaled_dot_product_attention(q, k, v, mask=mask)[2]).all()


@pytest.mark.parametrize(
    "shapes, match",
    [
        pytest.param(((4, 7), (6, 8), (6, 5)), "q and k must have the same last dim", id="qk-last-dim"),
        pytest.param(((4, 7), (6, 7), (5, 5)), "k and v must hold the same number of keys", id="kv-length"),
        pytest.param(((7,), (6, 7), (6, 5)), "q must have at least 2 dims", id="q-1d"),
    ],
)
def test_sdpa_rejects_bad_shapes(shapes, match):
    """Mismatched q/k/v shapes raise ValueError naming the argument."""
    q, k, v = (torch.zeros(s) for s in shapes)
    with pytest.raises(ValueError, match=match):
        scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize(
    "mask, match",
    [
        pytest.param(torch.ones(4, 6), "mask must be a bool tensor", id="float-mask"),
        pytest.param(torch.ones(4, 6, dtype=torch.int64), "mask must be a bool tensor", id="int-mask"),
        pytest.param(torch.ones(4, 5, dtype=torch.bool), "mask must broadcast", id="wrong-shape"),
        pytest.param(torch.ones(6, dtype=torch.bool), "mask must broadcast", id="1d"),
    ],
)
def test_sdpa_rejects_bad_mask(mask, match):
    """A mask that is not bool or does not broadcast to (N, M) raises ValueError naming mask."""
    with pytest.raises(ValueError, match=match):
        scaled_dot_product_attention(torch.zeros(4, 7), torch.zeros(6, 7), torch.zeros(6, 5), mask=mask)


@pytest.mark.parametrize("scale", [0.0, -1.0], ids=["zero", "negative"])
def test_sdpa_rejects_bad_scale(scale):
    """scale <= 0 raises ValueError naming scale."""
    with pytest.raises(ValueError, match="scale must be a positive number"):
        scaled_dot_product_attention(torch.zeros(4, 7), torch.zeros(6, 7), torch.zeros(6, 5), scale=scale)


# --------------------------------------------------------------------------- masks
@pytest.mark.parametrize("n", [1, 2, 63, 257], ids=lambda n: f"n={n}")
def test_causal_mask_matches_loop(n):
    """causal_mask(n)[i, j] == (j <= i), built by an explicit loop; equals F.sdpa's is_causal semantics."""
    ref = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(i + 1):
            ref[i, j] = True
    got = causal_mask(n)
    assert got.dtype == torch.bool
    assert torch.equal(got, ref)


WINDOW_CASES = [(1, 1), (8, 3), (63, 1), (63, 16), (63, 63), (20, 100), (257, 7)]


@pytest.mark.parametrize("n, window", WINDOW_CASES, ids=[f"n={n}-w={w}" for n, w in WINDOW_CASES])
def test_sliding_window_mask_matches_loop(n, window):
    """sliding_window_mask: mask[i, j] = i - w < j <= i (loop); row sums min(i+1, w); total n*w - w(w-1)/2."""
    ref = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(max(0, i - window + 1), i + 1):
            ref[i, j] = True
    got = sliding_window_mask(n, window)
    assert got.dtype == torch.bool
    assert torch.equal(got, ref)
    assert got.sum(-1).tolist() == [min(i + 1, window) for i in range(n)]
    if n >= window:
        assert int(got.sum()) == n * window - window * (window - 1) // 2
    if window >= n:
        assert torch.equal(got, causal_mask(n))


def test_sliding_window_mask_with_sdpa_matches_torch():
    """SDPA with a sliding-window mask equals F.sdpa given the same bool mask (float64)."""
    q, k, v = randn(2, 63, 7, seed=29), randn(2, 63, 7, seed=30), randn(2, 63, 5, seed=31)
    mask = sliding_window_mask(63, 16)
    got = scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **F64)


@pytest.mark.parametrize("bad", [0, -1, 2.5, "4"], ids=["zero", "negative", "float", "str"])
def test_masks_reject_bad_sizes(bad):
    """n <= 0 or non-integer n, and window <= 0 or non-integer window, raise ValueError naming them."""
    with pytest.raises(ValueError, match="^n must be a positive integer"):
        causal_mask(bad)
    with pytest.raises(ValueError, match="^n must be a positive integer"):
        sliding_window_mask(bad, 3)
    with pytest.raises(ValueError, match="^window must be a positive integer"):
        sliding_window_mask(5, bad)


# --------------------------------------------------------------------------- RoPE
ROPE_TOL = dict(atol=1e-6, rtol=1e-6)  # the cos/sin tables are stored in float32


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("d_k", [2, 8, 60], ids=lambda d: f"dk={d}")
def test_rope_matches_definition(lead, d_k):
    """RoPE equals explicit 2x2 rotations of pairs (2i, 2i+1) by p * theta^(-2i/d_k) (1e-6, f32 tables)."""
    n, theta = 9, 10000.0
    rope = RotaryPositionalEmbedding(theta, d_k, max_seq_len=16)
    x = randn(*lead, n, d_k, seed=32)
    torch.testing.assert_close(rope(x), rope_reference(x, torch.arange(n), theta), **ROPE_TOL)


@pytest.mark.parametrize(
    "x_shape, pos_shape",
    [((7, 8), (7,)), ((2, 7, 8), (2, 7)), ((2, 3, 7, 8), (2, 1, 7))],
    ids=["pos(N)", "pos(B,N)", "pos(B,1,N)-heads"],
)
def test_rope_custom_token_positions(x_shape, pos_shape):
    """Custom token_positions (any order, repeats, broadcast over heads) match the explicit rotations."""
    rope = RotaryPositionalEmbedding(500.0, 8, max_seq_len=64)
    x = randn(*x_shape, seed=33)
    pos = torch.randint(0, 64, pos_shape, generator=gen(34))
    torch.testing.assert_close(rope(x, pos), rope_reference(x, pos, 500.0), **ROPE_TOL)


def test_rope_preserves_norms_and_position_zero():
    """Rotations keep every token's norm (1e-6) and leave position 0 unchanged."""
    rope = RotaryPositionalEmbedding(10000.0, 60, max_seq_len=300)
    x = randn(2, 257, 60, seed=35)
    y = rope(x)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), **ROPE_TOL)
    torch.testing.assert_close(y[:, 0], x[:, 0], atol=0, rtol=0)


@pytest.mark.parametrize("p, p2, shift", [(0, 5, 3), (17, 2, 40), (100, 100, 150)], ids=str)
def test_rope_dot_product_depends_on_position_difference(p, p2, shift):
    """<R_p q, R_p' k> == <R_{p+s} q, R_{p'+s} k>, and differs from the unrotated dot product."""
    rope = RotaryPositionalEmbedding(10000.0, 60, max_seq_len=256)
    q, k = randn(1, 60, seed=36), randn(1, 60, seed=37)

    def dot(pq, pk):
        return (rope(q, torch.tensor([pq])) * rope(k, torch.tensor([pk]))).sum()

    torch.testing.assert_close(dot(p, p2), dot(p + shift, p2 + shift), atol=1e-5, rtol=1e-5)
    if p != p2:
        assert not torch.allclose(dot(p, p2), (q * k).sum(), atol=1e-3)


def test_rope_float32_matches_float64_definition():
    """float32 input agrees with the float64 definition to 1e-5."""
    rope = RotaryPositionalEmbedding(10000.0, 60, max_seq_len=64)
    x = randn(63, 60, seed=38)
    torch.testing.assert_close(rope(x.float()).double(), rope_reference(x, torch.arange(63), 1e4),
                               atol=1e-5, rtol=1e-5)


def test_rope_rejects_bad_arguments():
    """Odd d_k, theta <= 0, positions < 0 or >= max_seq_len, wrong last dim raise ValueError naming them."""
    with pytest.raises(ValueError, match="d_k must be even"):
        RotaryPositionalEmbedding(10000.0, 7, 16)
    with pytest.raises(ValueError, match="d_k must be a positive integer"):
        RotaryPositionalEmbedding(10000.0, 0, 16)
    with pytest.raises(ValueError, match="theta must be a positive number"):
        RotaryPositionalEmbedding(0.0, 8, 16)
    with pytest.raises(ValueError, match="max_seq_len must be a positive integer"):
        RotaryPositionalEmbedding(10000.0, 8, 0)
    rope = RotaryPositionalEmbedding(10000.0, 8, 16)
    with pytest.raises(ValueError, match="token_positions must be < max_seq_len"):
        rope(torch.zeros(17, 8))  # default positions 0..16
    with pytest.raises(ValueError, match="token_positions must be < max_seq_len"):
        rope(torch.zeros(3, 8), torch.tensor([0, 5, 16]))
    with pytest.raises(ValueError, match="token_positions must be >= 0"):
        rope(torch.zeros(3, 8), torch.tensor([0, -1, 2]))  # would silently wrap to the table's end
    with pytest.raises(ValueError, match="token_positions must end in N"):
        rope(torch.zeros(3, 8), torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="x must have last dim d_k"):
        rope(torch.zeros(3, 6))
    rope(torch.zeros(16, 8))  # positions 0..15 are allowed


# --------------------------------------------------------------------------- MHA
def _mha(d_model=60, num_heads=5, rope_theta=None, seed=0):
    torch.manual_seed(seed)
    return MultiHeadSelfAttention(d_model, num_heads, rope_theta=rope_theta, max_seq_len=128,
                                  dtype=torch.float64)


def mha_reference(mha, x, rope_ref_theta=None, positions=None):
    """Project with the module's weights, split heads by view, F.sdpa(is_causal=True), merge, output_proj."""
    h = mha.num_heads
    q = split_heads(x @ mha.q_proj.weight.T, h)  # (..., H, N, D)
    k = split_heads(x @ mha.k_proj.weight.T, h)
    v = split_heads(x @ mha.v_proj.weight.T, h)
    if rope_ref_theta is not None:
        pos = torch.arange(x.shape[-2]) if positions is None else positions.unsqueeze(-2)
        q, k = rope_reference(q, pos, rope_ref_theta), rope_reference(k, pos, rope_ref_theta)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return merge_heads(out) @ mha.output_proj.weight.T


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("n", [1, 63], ids=lambda n: f"N={n}")
def test_mha_matches_torch_sdpa(lead, n):
    """MHA (no RoPE) equals F.sdpa(is_causal=True) on its own projected, split q, k, v, then W_o (1e-12)."""
    mha = _mha()
    x = randn(*lead, n, 60, seed=39)
    torch.testing.assert_close(mha(x), mha_reference(mha, x), **F64)


@pytest.mark.parametrize("lead", LEADS[:2])
def test_mha_with_rope_matches_reference(lead):
    """MHA with RoPE equals F.sdpa(is_causal=True) on q, k rotated by the explicit reference (1e-6)."""
    mha = _mha(d_model=24, num_heads=3, rope_theta=10000.0)
    x = randn(*lead, 11, 24, seed=40)
    torch.testing.assert_close(mha(x), mha_reference(mha, x, rope_ref_theta=10000.0), **ROPE_TOL)


def test_mha_with_rope_batched_token_positions():
    """Per-sequence token_positions (B, N) are applied identically in every head (vs reference, 1e-6)."""
    mha = _mha(d_model=24, num_heads=3, rope_theta=10000.0)
    x = randn(2, 11, 24, seed=41)
    pos = torch.randint(0, 128, (2, 11), generator=gen(42))
    torch.testing.assert_close(mha(x, pos), mha_reference(mha, x, 10000.0, pos), **ROPE_TOL)


@pytest.mark.parametrize("rope_theta", [None, 10000.0], ids=["norope", "rope"])
@pytest.mark.parametrize("lead", LEADS)
def test_mha_is_causal(rope_theta, lead):
    """Changing the last token leaves every earlier output bit-identical (float64) and changes the last."""
    mha = _mha(rope_theta=rope_theta)
    x = randn(*lead, 63, 60, seed=43)
    x2 = x.clone()
    x2[..., -1, :] = randn(*lead, 60, seed=44)
    y, y2 = mha(x), mha(x2)
    torch.testing.assert_close(y2[..., :-1, :], y[..., :-1, :], atol=0, rtol=0)
    assert (y2[..., -1, :] - y[..., -1, :]).abs().min() > 0


def test_mha_rejects_bad_arguments():
    """d_model not divisible by num_heads, and a wrong input width, raise ValueError naming them."""
    with pytest.raises(ValueError, match=r"d_model \(10\) must be divisible by num_heads \(3\)"):
        MultiHeadSelfAttention(10, 3)
    with pytest.raises(ValueError, match="num_heads must be a positive integer"):
        MultiHeadSelfAttention(10, 0)
    with pytest.raises(ValueError, match="d_model must be a positive integer"):
        MultiHeadSelfAttention(-8, 2)
    with pytest.raises(ValueError, match="d_k must be even"):  # RoPE on an odd head dim (D = 7)
        MultiHeadSelfAttention(14, 2, rope_theta=10000.0)
    with pytest.raises(ValueError, match="x must have last dim d_model"):
        _mha()(torch.zeros(3, 59, dtype=torch.float64))


# --------------------------------------------------------------------------- GQA
def _has_enable_gqa() -> bool:
    """Whether the installed F.scaled_dot_product_attention accepts enable_gqa (torch >= 2.5)."""
    t = torch.zeros(1, 2, 1, 2)
    try:
        F.scaled_dot_product_attention(t, t[:, :1], t[:, :1], enable_gqa=True)
    except TypeError:
        return False
    return True


HAS_ENABLE_GQA = _has_enable_gqa()


def _gqa(d_model, num_heads, num_kv_heads, seed=0):
    torch.manual_seed(seed)
    return GroupedQueryAttention(d_model, num_heads, num_kv_heads, dtype=torch.float64)


def gqa_reference(gqa, x):
    """Project with the module's weights; F.sdpa(is_causal=True, enable_gqa=True) (or repeat_interleave)."""
    q = split_heads(x @ gqa.q_proj.weight.T, gqa.num_heads)  # (..., H, N, D)
    k = split_heads(x @ gqa.k_proj.weight.T, gqa.num_kv_heads)  # (..., H_kv, N, D)
    v = split_heads(x @ gqa.v_proj.weight.T, gqa.num_kv_heads)
    if HAS_ENABLE_GQA:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:  # pragma: no cover - older torch
        group = gqa.num_heads // gqa.num_kv_heads
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return merge_heads(out) @ gqa.output_proj.weight.T


GQA_CASES = [(8, 8), (8, 2), (8, 1), (6, 3)]


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("num_heads, num_kv_heads", GQA_CASES, ids=[f"H{h}-Hkv{g}" for h, g in GQA_CASES])
def test_gqa_matches_torch_sdpa(lead, num_heads, num_kv_heads):
    """GQA/MQA equals F.sdpa(is_causal=True, enable_gqa=True) on its own projections (float64, 1e-12)."""
    d_model = 7 * num_heads  # head dim D = 7
    gqa = _gqa(d_model, num_heads, num_kv_heads)
    x = randn(*lead, 63, d_model, seed=45)
    torch.testing.assert_close(gqa(x), gqa_reference(gqa, x), **F64)


@pytest.mark.parametrize("lead", LEADS)
def test_gqa_with_all_kv_heads_equals_mha(lead):
    """GQA with num_kv_heads = num_heads equals MultiHeadSelfAttention with the same weights (1e-12)."""
    gqa = _gqa(60, 5, 5, seed=1)
    mha = _mha(60, 5, seed=2)
    mha.load_state_dict(gqa.state_dict())
    x = randn(*lead, 63, 60, seed=46)
    torch.testing.assert_close(gqa(x), mha(x), **F64)


@pytest.mark.parametrize("num_kv_heads", [8, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_gqa_parameter_count(num_kv_heads):
    """Parameters = d*d*2 (W_q, W_o) + 2*d*(H_kv*D) (W_k, W_v); MHA's equals 4 d^2."""
    d, h = 64, 8
    gqa = _gqa(d, h, num_kv_heads)
    expected = d * d * 2 + 2 * d * (num_kv_heads * (d // h))
    assert sum(p.numel() for p in gqa.parameters()) == expected
    if num_kv_heads == h:
        assert sum(p.numel() for p in MultiHeadSelfAttention(d, h).parameters()) == expected == 4 * d * d


def test_gqa_is_causal():
    """Changing the last token leaves earlier GQA outputs bit-identical (float64) and changes the last."""
    gqa = _gqa(56, 8, 2)
    x = randn(2, 63, 56, seed=47)
    x2 = x.clone()
    x2[..., -1, :] = randn(2, 56, seed=48)
    y, y2 = gqa(x), gqa(x2)
    torch.testing.assert_close(y2[..., :-1, :], y[..., :-1, :], atol=0, rtol=0)
    assert (y2[..., -1, :] - y[..., -1, :]).abs().min() > 0


def test_gqa_rejects_bad_arguments():
    """num_heads not divisible by num_kv_heads, d_model not divisible by num_heads raise ValueError."""
    with pytest.raises(ValueError, match=r"num_heads \(8\) must be divisible by num_kv_heads \(3\)"):
        GroupedQueryAttention(64, 8, 3)
    with pytest.raises(ValueError, match=r"d_model \(60\) must be divisible by num_heads \(8\)"):
        GroupedQueryAttention(60, 8, 2)
    with pytest.raises(ValueError, match="num_kv_heads must be a positive integer"):
        GroupedQueryAttention(64, 8, 0)
    with pytest.raises(ValueError, match="x must have last dim d_model"):
        _gqa(64, 8, 2)(torch.zeros(3, 63, dtype=torch.float64))


# --------------------------------------------------------------------------- mha_forward (eager ledger layer)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_mha_forward_matches_torch_sdpa(causal):
    """mha_forward (x @ w convention, no dropout) equals F.sdpa on x @ w_q etc., then @ w_o (1e-12)."""
    d, h = 60, 5
    x = randn(2, 63, d, seed=49)
    w_q, w_k, w_v, w_o = (randn(d, d, seed=50 + i) / math.sqrt(d) for i in range(4))
    ref = F.scaled_dot_product_attention(
        split_heads(x @ w_q, h), split_heads(x @ w_k, h), split_heads(x @ w_v, h), is_causal=causal
    )
    got = mha_forward(x, w_q, w_k, w_v, w_o, h, causal=causal)
    torch.testing.assert_close(got, merge_heads(ref) @ w_o, **F64)


def test_mha_forward_rejects_bad_arguments():
    """dropout_p outside [0, 1) and d_model not divisible by num_heads raise ValueError naming them."""
    x, w = torch.zeros(1, 4, 6), torch.zeros(6, 6)
    with pytest.raises(ValueError, match="dropout_p must be in"):
        mha_forward(x, w, w, w, w, 2, dropout_p=1.0)
    with pytest.raises(ValueError, match=r"d_model \(6\) must be divisible by num_heads \(4\)"):
        mha_forward(x, w, w, w, w, 4)
