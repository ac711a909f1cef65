"""Tests for attn_core.linear: causal linear attention, plain and gated, in all its forms.

The reference is the definition itself, written as an explicit double loop in
float64 (numpy, independent of the library):

    y_t = sum_{s <= t} (prod_{r=s+1..t} gamma_r) (q_t . k_s) v_s

Every form (parallel, recurrent, chunked, chunked_loop, and the decode step)
is compared with it; hypothesis checks that the forms agree on random shapes.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attn_core.blocked as blocked
from attn_core.linear import (
    causal_linear_attention_chunked,
    causal_linear_attention_chunked_loop,
    causal_linear_attention_parallel,
    causal_linear_attention_recurrent,
    gated_linear_attention_chunked,
    gated_linear_attention_chunked_loop,
    gated_linear_attention_parallel,
    gated_linear_attention_recurrent,
    linear_attention_step,
    segment_sum,
)

F64 = dict(atol=1e-10, rtol=1e-10)  # float64 vs the float64 definition
F32 = dict(atol=2e-4, rtol=1e-4)  # float32 vs the float64 definition (inputs scaled so |y| ~ 10)


# --------------------------------------------------------------------------- reference
def linear_attention_reference(q, k, v, gamma=None):
    """y_t = sum_{s<=t} (prod_{r=s+1..t} gamma_r) (q_t . k_s) v_s, a double loop in float64 numpy."""
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if gamma is not None:
        lead = torch.broadcast_shapes(lead, gamma.shape[:-1])
    n, d_k, d_v = q.shape[-2], q.shape[-1], v.shape[-1]
    qq = q.double().expand(*lead, n, d_k).reshape(-1, n, d_k).numpy()
    kk = k.double().expand(*lead, n, d_k).reshape(-1, n, d_k).numpy()
    vv = v.double().expand(*lead, n, d_v).reshape(-1, n, d_v).numpy()
    g = np.ones((qq.shape[0], n)) if gamma is None else gamma.double().expand(*lead, n).reshape(-1, n).numpy()
    y = np.zeros((qq.shape[0], n, d_v))
    for t in range(n):
        decay = np.ones(qq.shape[0])  # prod_{r=s+1..t} gamma_r, empty product at s = t
        for s in range(t, -1, -1):
            if s < t:
                decay = decay * g[:, s + 1]
            y[:, t] += (decay * (qq[:, t] * kk[:, s]).sum(-1))[:, None] * vv[:, s]
    return torch.from_numpy(y).reshape(*lead, n, d_v)


def final_state_reference(k, v, gamma):
    """S_N = sum_s (prod_{r=s+1..N-1} gamma_r) k_s v_s^T, a loop in float64 (k (N, D_k), v (N, D_v))."""
    n = k.shape[0]
    s_ref = torch.zeros(k.shape[-1], v.shape[-1], dtype=torch.float64)
    for s in range(n):
        decay = 1.0
        for r in range(s + 1, n):
            decay *= float(gamma[r])
        s_ref += decay * torch.outer(k[s].double(), v[s].double())
    return s_ref


def make_qkv(lead, n, d_k, d_v, seed, dtype=torch.float64):
    """Random q, k, v with q, k scaled by D_k^-1/2, so outputs stay O(sqrt(N))."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, n, d_k, generator=g, dtype=torch.float64) / d_k**0.5
    k = torch.randn(*lead, n, d_k, generator=g, dtype=torch.float64) / d_k**0.5
    v = torch.randn(*lead, n, d_v, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def make_gamma(shape, seed, low=0.5):
    """gamma uniform in [low, 1), float64."""
    g = torch.Generator().manual_seed(seed)
    return low + (1 - low) * torch.rand(*shape, generator=g, dtype=torch.float64)


@functools.cache
def case_data(lead, n, d_k, d_v, gated):
    """Inputs and the reference output of one case, computed once per test session."""
    q, k, v = make_qkv(lead, n, d_k, d_v, seed=n + d_k)
    gamma = make_gamma((*lead, n), seed=n + 1) if gated else None
    return q, k, v, gamma, linear_attention_reference(q, k, v, gamma)


# --------------------------------------------------------------------------- forms
PLAIN_FNS = {
    "parallel": lambda q, k, v, c: causal_linear_attention_parallel(q, k, v),
    "recurrent": lambda q, k, v, c: causal_linear_attention_recurrent(q, k, v),
    "chunked": lambda q, k, v, c: causal_linear_attention_chunked(q, k, v, c),
    "chunked_loop": lambda q, k, v, c: causal_linear_attention_chunked_loop(q, k, v, c),
}
GATED_FNS = {
    "gated_parallel": lambda q, k, v, g, c: gated_linear_attention_parallel(q, k, v, g),
    "gated_recurrent": lambda q, k, v, g, c: gated_linear_attention_recurrent(q, k, v, g),
    "gated_chunked": lambda q, k, v, g, c: gated_linear_attention_chunked(q, k, v, g, c),
    "gated_chunked_loop": lambda q, k, v, g, c: gated_linear_attention_chunked_loop(q, k, v, g, c),
}
PLAIN = [pytest.param(f, id=name) for name, f in PLAIN_FNS.items()]
GATED = [pytest.param(f, id=name) for name, f in GATED_FNS.items()]

# (lead, N, D_k, D_v, chunk)
CASES = [
    pytest.param((), 1, 7, 7, 16, id="N1-C16"),
    pytest.param((), 63, 7, 5, 16, id="N63-C16-Dv5"),
    pytest.param((2,), 63, 60, 60, 16, id="B2-N63-D60-C16"),
    pytest.param((2, 3), 63, 7, 9, 64, id="B2x3-N63-C64>N"),
    pytest.param((2,), 63, 7, 7, 1, id="B2-N63-C1"),
    pytest.param((), 64, 7, 7, 16, id="N64-C16-divides"),
    pytest.param((), 257, 60, 7, 16, id="N257-D60-C16"),
    pytest.param((2,), 257, 7, 7, 100, id="B2-N257-C100"),
]


@pytest.mark.parametrize("form", PLAIN)
@pytest.mark.parametrize("lead, n, d_k, d_v, chunk", CASES)
def test_plain_forms_match_definition(form, lead, n, d_k, d_v, chunk):
    """Every plain form equals the float64 double-loop definition (gamma = 1) to 1e-10."""
    q, k, v, _, ref = case_data(lead, n, d_k, d_v, gated=False)
    out = form(q, k, v, chunk)
    assert out.shape == (*lead, n, d_v) and out.dtype == torch.float64
    torch.testing.assert_close(out, ref, **F64)


@pytest.mark.parametrize("form", GATED)
@pytest.mark.parametrize("lead, n, d_k, d_v, chunk", CASES)
def test_gated_forms_match_definition(form, lead, n, d_k, d_v, chunk):
    """Every gated form (gamma in [0.5, 1)) equals the float64 double-loop definition to 1e-10."""
    q, k, v, gamma, ref = case_data(lead, n, d_k, d_v, gated=True)
    out = form(q, k, v, gamma, chunk)
    assert out.shape == (*lead, n, d_v) and out.dtype == torch.float64
    torch.testing.assert_close(out, ref, **F64)


def test_chunked_default_chunk_with_n_not_a_multiple():
    """The chunked forms with their default chunk on N = 257 equal the definition (1e-10)."""
    q, k, v, _, ref = case_data((), 257, 60, 7, gated=False)
    torch.testing.assert_close(causal_linear_attention_chunked(q, k, v), ref, **F64)
    torch.testing.assert_close(causal_linear_attention_chunked_loop(q, k, v), ref, **F64)
    q, k, v, gamma, ref = case_data((), 257, 60, 7, gated=True)
    torch.testing.assert_close(gated_linear_attention_chunked(q, k, v, gamma), ref, **F64)
    torch.testing.assert_close(gated_linear_attention_chunked_loop(q, k, v, gamma), ref, **F64)


@pytest.mark.parametrize("plain, gated", list(zip(PLAIN_FNS.values(), GATED_FNS.values())),
                         ids=list(PLAIN_FNS))
def test_gated_with_gamma_one_equals_plain(plain, gated):
    """gamma = 1 turns each gated form into its plain form, and both equal the definition (1e-10)."""
    q, k, v, _, ref = case_data((2,), 63, 7, 7, gated=False)
    ones = torch.ones(2, 63, dtype=torch.float64)
    out = gated(q, k, v, ones, 16)
    torch.testing.assert_close(out, plain(q, k, v, 16), **F64)
    torch.testing.assert_close(out, ref, **F64)


def test_decay_changes_the_output():
    """gamma < 1 really decays: the gated output differs from the plain one (guards the tests above)."""
    q, k, v, gamma, ref = case_data((2,), 63, 7, 7, gated=True)
    plain_ref = linear_attention_reference(q, k, v)
    assert (ref - plain_ref)[..., 1:, :].abs().max() > 1e-2
    assert torch.equal(ref[..., 0, :], plain_ref[..., 0, :])  # nothing to decay at t = 0


def _tiny_gamma(pattern, n, seed):
    g = torch.Generator().manual_seed(seed)
    if pattern == "all-1e-30":
        return torch.full((2, n), 1e-30, dtype=torch.float64)
    if pattern == "mixed-1e-30-and-1":
        return torch.where(torch.rand(2, n, generator=g) < 0.5, 1e-30, 1.0).double()
    gamma = torch.full((2, n), 0.9, dtype=torch.float64)  # "blocks": 8 tiny, 8 near-one, per chunk of 16
    for s in range(0, n, 16):
        gamma[:, s:s + 8] = 1e-30
    return gamma


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("pattern", ["all-1e-30", "mixed-1e-30-and-1", "blocks-1e-30-then-0.9"])
@pytest.mark.parametrize("form", GATED)
def test_tiny_gamma_stays_finite_and_exact(form, pattern, dtype):
    """gamma down to 1e-30 (mixed with 1.0 or 0.9) is finite and matches the float64 definition."""
    q, k, v = make_qkv((2,), 63, 7, 5, seed=3)
    gamma = _tiny_gamma(pattern, 63, seed=4)
    ref = linear_attention_reference(q, k, v, gamma)
    out = form(q.to(dtype), k.to(dtype), v.to(dtype), gamma.to(dtype), 16)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, **(F64 if dtype == torch.float64 else F32))


@pytest.mark.parametrize("name", [*PLAIN_FNS, *GATED_FNS])
def test_float32_matches_float64_definition(name):
    """float32 inputs give float32 outputs within atol 2e-4, rtol 1e-4 of the float64 definition."""
    gated = name in GATED_FNS
    q, k, v, gamma, ref = case_data((2,), 63, 60, 60, gated=gated)
    args = [t.float() for t in (q, k, v)] + ([gamma.float()] if gated else [])
    out = {**PLAIN_FNS, **GATED_FNS}[name](*args, 16)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, **F32)


@pytest.mark.parametrize("gamma_shape", [(63,), (2, 1, 63), (3, 63), (2, 3, 63)],
                         ids=["gamma(N)", "gamma(B,1,N)", "gamma(H,N)", "gamma(B,H,N)"])
@pytest.mark.parametrize("form", GATED)
def test_gamma_broadcasts_over_heads(form, gamma_shape):
    """gamma of shape (N,), (B, 1, N), (H, N) against q (B, H, N, D) equals the definition (1e-10)."""
    q, k, v = make_qkv((2, 3), 63, 7, 5, seed=5)
    gamma = make_gamma(gamma_shape, seed=6)
    out = form(q, k, v, gamma, 16)
    assert out.shape == (2, 3, 63, 5)
    torch.testing.assert_close(out, linear_attention_reference(q, k, v, gamma), **F64)


@pytest.mark.parametrize("form", GATED)
def test_float64_gamma_with_float32_inputs(form):
    """float64 gamma with float32 q, k, v: every gated form returns float32 close to the definition (F32)."""
    q, k, v, gamma, ref = case_data((2,), 63, 7, 7, gated=True)
    out = form(q.float(), k.float(), v.float(), gamma, 16)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, **F32)


@pytest.mark.parametrize("form", GATED)
def test_gamma_below_float32_range_with_float32_inputs(form):
    """float64 gamma = 1e-50 (valid, 0 once cast to float32) with float32 q, k, v: finite, = definition."""
    q, k, v = make_qkv((2,), 63, 7, 5, seed=13)
    gamma = torch.full((2, 63), 0.9, dtype=torch.float64)
    gamma[:, ::3] = 1e-50
    ref = linear_attention_reference(q, k, v, gamma)
    out = form(q.float(), k.float(), v.float(), gamma, 16)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, **F32)


# --------------------------------------------------------------------------- decode step
def _run_steps(q, k, v, gammas):
    """Feed tokens one by one through linear_attention_step from a zero state."""
    lead = q.shape[:-2]
    state = torch.zeros(*lead, q.shape[-1], v.shape[-1], dtype=q.dtype)
    ys = []
    for t in range(q.shape[-2]):
        y, state = linear_attention_step(state, q[..., t, :], k[..., t, :], v[..., t, :], gammas(t))
        ys.append(y)
    return torch.stack(ys, dim=-2), state


@pytest.mark.parametrize("lead", [(), (2,), (2, 3)], ids=["lead=()", "lead=(2,)", "lead=(2,3)"])
@pytest.mark.parametrize("gamma_kind", ["default", "scalar-0.9", "tensor"])
def test_step_token_by_token_equals_recurrent_and_definition(lead, gamma_kind):
    """linear_attention_step token by token equals the recurrent form and the definition (1e-10)."""
    q, k, v = make_qkv(lead, 63, 7, 5, seed=7)
    if gamma_kind == "default":
        gamma = torch.ones(*lead, 63, dtype=torch.float64)
        out, _ = _run_steps(q, k, v, lambda t: 1.0)
    elif gamma_kind == "scalar-0.9":
        gamma = torch.full((*lead, 63), 0.9, dtype=torch.float64)
        out, _ = _run_steps(q, k, v, lambda t: 0.9)
    else:
        gamma = make_gamma((*lead, 63), seed=8)
        out, _ = _run_steps(q, k, v, lambda t: gamma[..., t])
    torch.testing.assert_close(out, gated_linear_attention_recurrent(q, k, v, gamma), **F64)
    torch.testing.assert_close(out, linear_attention_reference(q, k, v, gamma), **F64)


def test_step_default_gamma_is_one():
    """Calling linear_attention_step without gamma is S' = S + k v^T (no decay), y = S'^T q."""
    g = torch.Generator().manual_seed(9)
    state = torch.randn(7, 5, generator=g, dtype=torch.float64)
    q, k, v = (torch.randn(d, generator=g, dtype=torch.float64) for d in (7, 7, 5))
    y, new = linear_attention_step(state, q, k, v)
    torch.testing.assert_close(new, state + torch.outer(k, v), **F64)
    torch.testing.assert_close(y, new.T @ q, **F64)


def test_step_float64_gamma_keeps_state_dtype():
    """A float64 gamma keeps a float32 state float32: S' = gamma S + k v^T, y = S'^T q (f64 reference)."""
    g = torch.Generator().manual_seed(14)
    state = torch.randn(2, 7, 5, generator=g)
    q, k, v = torch.randn(2, 7, generator=g), torch.randn(2, 7, generator=g), torch.randn(2, 5, generator=g)
    gamma = torch.tensor([0.5, 0.9], dtype=torch.float64)
    y, new = linear_attention_step(state, q, k, v, gamma)
    assert y.dtype == new.dtype == torch.float32
    ref = gamma[:, None, None] * state.double() + k.double()[:, :, None] * v.double()[:, None, :]
    torch.testing.assert_close(new.double(), ref, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(y.double(), (q.double()[:, None, :] @ ref)[:, 0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n", [1, 63, 257], ids=lambda n: f"N={n}")
def test_state_size_does_not_depend_on_n(n):
    """After N steps the state is still (D_k, D_v), and equals sum_s (prod gamma) k_s v_s^T (1e-10)."""
    q, k, v = make_qkv((), n, 7, 5, seed=10)
    gamma = make_gamma((n,), seed=11)
    _, state = _run_steps(q, k, v, lambda t: gamma[t])
    assert state.shape == (7, 5) and state.numel() == 7 * 5
    torch.testing.assert_close(state, final_state_reference(k, v, gamma), **F64)


# --------------------------------------------------------------------------- segment_sum
def test_segment_sum_matches_loop():
    """segment_sum(x)[..., t, s] = x[s+1] + ... + x[t] for s <= t, -inf above (explicit loop, 1e-12)."""
    x = torch.randn(2, 3, 9, generator=torch.Generator().manual_seed(12), dtype=torch.float64)
    ref = torch.full((2, 3, 9, 9), float("-inf"), dtype=torch.float64)
    for t in range(9):
        for s in range(t + 1):
            ref[..., t, s] = x[..., s + 1:t + 1].sum(-1)
    torch.testing.assert_close(segment_sum(x), ref, atol=1e-12, rtol=1e-12)


def test_segment_sum_no_cancellation_of_large_prefix():
    """A huge term before the segment does not spoil it (float32): no difference of two prefix sums."""
    x = torch.full((40,), 1e-3, dtype=torch.float32)
    x[1] = -1e4  # log gamma of a tiny gamma; segments starting after it must not feel it
    out = segment_sum(x)
    expected = torch.tensor([1e-3 * (t - 1) for t in range(2, 40)], dtype=torch.float32)
    torch.testing.assert_close(out[2:, 1], expected, atol=1e-7, rtol=1e-5)


# --------------------------------------------------------------------------- hypothesis
shapes = dict(
    lead=st.sampled_from([(), (2,), (1, 3)]),
    n=st.integers(1, 40),
    d_k=st.integers(1, 8),
    d_v=st.integers(1, 8),
    chunk=st.integers(1, 48),
    seed=st.integers(0, 2**16),
)


@settings(max_examples=30, deadline=None)
@given(**shapes)
def test_plain_forms_agree_property(lead, n, d_k, d_v, chunk, seed):
    """parallel == recurrent == chunked == chunked_loop == definition on random shapes and chunks."""
    q, k, v = make_qkv(lead, n, d_k, d_v, seed)
    ref = linear_attention_reference(q, k, v)
    outs = [f(q, k, v, chunk) for f in PLAIN_FNS.values()]
    for out in outs:
        torch.testing.assert_close(out, outs[0], **F64)
        torch.testing.assert_close(out, ref, **F64)


@settings(max_examples=30, deadline=None)
@given(low=st.sampled_from([1e-30, 1e-3, 0.5, 1.0]), **shapes)
def test_gated_forms_agree_property(lead, n, d_k, d_v, chunk, seed, low):
    """Gated: parallel == recurrent == chunked == chunked_loop == definition, gamma in [low, 1]."""
    q, k, v = make_qkv(lead, n, d_k, d_v, seed)
    gamma = make_gamma((*lead, n), seed + 1, low=low) if low < 1 else torch.ones(*lead, n).double()
    ref = linear_attention_reference(q, k, v, gamma)
    outs = [f(q, k, v, gamma, chunk) for f in GATED_FNS.values()]
    for out in outs:
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, outs[0], **F64)
        torch.testing.assert_close(out, ref, **F64)


# --------------------------------------------------------------------------- bad inputs
ALL_NAMES = [*PLAIN_FNS, *GATED_FNS]


def _call(name, q, k, v, gamma=None, chunk=16):
    """Call the form called ``name``; gated forms get gamma (default 0.9 everywhere)."""
    if name in GATED_FNS:
        gamma = torch.full(q.shape[:-1], 0.9) if gamma is None else gamma
        return GATED_FNS[name](q, k, v, gamma, chunk)
    return PLAIN_FNS[name](q, k, v, chunk)


BAD_SHAPES = [
    pytest.param((5, 7), (5, 6), (5, 4), "q and k must have the same last dim", id="qk-last-dim"),
    pytest.param((5, 7), (5, 7), (6, 4), "k and v must have the same length", id="kv-length"),
    pytest.param((4, 7), (5, 7), (5, 4), "q and k must have the same length", id="qk-length"),
    pytest.param((0, 7), (0, 7), (0, 4), "at least one token", id="N=0"),
    pytest.param((7,), (5, 7), (5, 4), "q must have at least 2 dims", id="q-1d"),
]


@pytest.mark.parametrize("q_shape, k_shape, v_shape, match", BAD_SHAPES)
@pytest.mark.parametrize("name", ALL_NAMES)
def test_rejects_mismatched_shapes(name, q_shape, k_shape, v_shape, match):
    """Mismatched q/k/v dims or lengths, or N = 0, raise ValueError naming the arguments."""
    q, k, v = torch.zeros(q_shape), torch.zeros(k_shape), torch.zeros(v_shape)
    gamma = torch.full(q_shape[:-1], 0.9) if len(q_shape) > 1 else torch.full((5,), 0.9)
    with pytest.raises(ValueError, match=match):
        _call(name, q, k, v, gamma=gamma)


CHUNKED = [name for name in ALL_NAMES if "chunked" in name]


@pytest.mark.parametrize("chunk", [0, -1, 2.5, "16", None], ids=["0", "-1", "2.5", "str", "None"])
@pytest.mark.parametrize("name", CHUNKED)
def test_rejects_bad_chunk(name, chunk):
    """chunk <= 0 or not an integer raises ValueError naming chunk (None: the gated forms' default)."""
    q = torch.zeros(5, 7)
    if chunk is None and name.startswith("gated"):
        assert _call(name, q, q, q, chunk=chunk).shape == (5, 7)
        return
    with pytest.raises(ValueError, match="chunk must be a positive integer"):
        _call(name, q, q, q, chunk=chunk)


BAD_GAMMA = [
    pytest.param(torch.tensor([0.9, 0.0, 0.9, 0.9, 0.9]), "gamma must lie in", id="zero"),
    pytest.param(torch.tensor([0.9, 1.5, 0.9, 0.9, 0.9]), "gamma must lie in", id="1.5"),
    pytest.param(torch.tensor([0.9, -0.5, 0.9, 0.9, 0.9]), "gamma must lie in", id="negative"),
    pytest.param(torch.tensor([0.9, float("nan"), 0.9, 0.9, 0.9]), "gamma must lie in", id="nan"),
    pytest.param(torch.full((4,), 0.9), r"gamma must have shape \(\.\.\., N\)", id="length-N-1"),
    pytest.param(torch.full((6,), 0.9), r"gamma must have shape \(\.\.\., N\)", id="length-N+1"),
    pytest.param(torch.full((3, 5), 0.9), "gamma of shape .* does not broadcast", id="no-broadcast"),
    pytest.param(0.9, "gamma must be a torch.Tensor", id="float"),
]


@pytest.mark.parametrize("gamma, match", BAD_GAMMA)
@pytest.mark.parametrize("name", list(GATED_FNS))
def test_rejects_bad_gamma(name, gamma, match):
    """gamma outside (0, 1], of the wrong length or shape, or not a tensor raises ValueError naming gamma."""
    q = torch.zeros(2, 5, 7)
    with pytest.raises(ValueError, match=match):
        _call(name, q, q, q, gamma=gamma)


def test_step_rejects_bad_arguments():
    """linear_attention_step: bad gamma (scalar or tensor), mismatched dims raise ValueError naming them."""
    state, q, v = torch.zeros(7, 5), torch.zeros(7), torch.zeros(5)
    for bad in (0.0, 1.5, -0.5):
        with pytest.raises(ValueError, match="gamma must lie in"):
            linear_attention_step(state, q, q, v, bad)
    with pytest.raises(ValueError, match="gamma must lie in"):
        linear_attention_step(torch.zeros(2, 7, 5), torch.zeros(2, 7), torch.zeros(2, 7), torch.zeros(2, 5),
                              torch.tensor([0.9, 0.0]))
    with pytest.raises(ValueError, match="q and k must have last dim D_k"):
        linear_attention_step(state, torch.zeros(6), q, v)
    with pytest.raises(ValueError, match="q and k must have last dim D_k"):
        linear_attention_step(state, q, torch.zeros(6), v)
    with pytest.raises(ValueError, match="v must have last dim D_v"):
        linear_attention_step(state, q, q, torch.zeros(4))
    with pytest.raises(ValueError, match="state must have at least 2 dims"):
        linear_attention_step(torch.zeros(7), q, q, v)


# --------------------------------------------------------------------------- vector gates
def vector_gate_reference(q, k, v, gamma):
    """y_t = sum_{s<=t} sum_i q_ti k_si (prod_{r=s+1..t} gamma_ri) v_s: a float64 numpy double loop.

    gamma: (..., N, D_k), one gate per key dimension (M_t = diag(gamma_t) M_{t-1} + k_t v_t^T).
    """
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], gamma.shape[:-2])
    n, d_k, d_v = q.shape[-2], q.shape[-1], v.shape[-1]
    qq, kk, gg = (x.detach().double().expand(*lead, n, d_k).reshape(-1, n, d_k).numpy()
                  for x in (q, k, gamma))
    vv = v.detach().double().expand(*lead, n, d_v).reshape(-1, n, d_v).numpy()
    y = np.zeros((qq.shape[0], n, d_v))
    for t in range(n):
        decay = np.ones((qq.shape[0], d_k))  # prod_{r=s+1..t} gamma_r, per key dimension
        for s in range(t, -1, -1):
            if s < t:
                decay = decay * gg[:, s + 1]
            y[:, t] += (qq[:, t] * kk[:, s] * decay).sum(-1)[:, None] * vv[:, s]
    return torch.from_numpy(y).reshape(*lead, n, d_v)


@pytest.mark.parametrize("form", GATED)
@pytest.mark.parametrize("lead, n, d_k, d_v, chunk", CASES[:6])
def test_vector_gate_forms_match_definition(form, lead, n, d_k, d_v, chunk):
    """A vector gate gamma (..., N, D_k) in [0.5, 1): every gated form equals the definition (1e-10)."""
    q, k, v = make_qkv(lead, n, d_k, d_v, seed=n + 2)
    gamma = make_gamma((*lead, n, d_k), seed=n + 3)
    out = form(q, k, v, gamma, chunk)
    assert out.shape == (*lead, n, d_v)
    torch.testing.assert_close(out, vector_gate_reference(q, k, v, gamma), **F64)


@pytest.mark.parametrize("form", GATED)
def test_vector_gate_equal_entries_is_the_scalar_gate(form):
    """A vector gate whose D_k entries are equal is the scalar gate (1e-10)."""
    q, k, v, gamma, ref = case_data((2,), 63, 7, 7, gated=True)
    out = form(q, k, v, gamma[..., None].expand(2, 63, 7), 16)
    torch.testing.assert_close(out, ref, **F64)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("form", GATED)
def test_vector_gate_tiny_gates_stay_finite(form, dtype):
    """Vector gates down to 1e-30 in some dimensions and 1 in others: finite, = definition.

    The factored form (q_i * exp(b_i)) . (k_j * exp(-b_j)) would overflow here: b_j reaches
    16 log(1e-30) ~ -1105 inside a chunk of 16, and exp(1105) is inf even in float64.
    """
    q, k, v = make_qkv((2,), 63, 6, 5, seed=15)
    g = torch.Generator().manual_seed(16)
    gamma = torch.where(torch.rand(2, 63, 6, generator=g) < 0.5, 1e-30, 1.0).double()
    gamma[..., 0] = 1e-30  # one dimension forgets at every token
    assert torch.isinf(torch.exp(-torch.log(gamma[0, :16, 0]).cumsum(0))).any()  # the factored form's factor
    ref = vector_gate_reference(q, k, v, gamma)
    out = form(q.to(dtype), k.to(dtype), v.to(dtype), gamma.to(dtype), 16)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, **(F64 if dtype == torch.float64 else F32))


@pytest.mark.parametrize("gamma_shape", [(1, 1, 63, 7), (2, 1, 63, 7), (1, 3, 63, 7)],
                         ids=["(1,1,N,D_k)", "(B,1,N,D_k)", "(1,H,N,D_k)"])
@pytest.mark.parametrize("form", GATED)
def test_vector_gate_broadcasts(form, gamma_shape):
    """Vector gates (as many dims as q) broadcast over batch and head dims (1e-10)."""
    q, k, v = make_qkv((2, 3), 63, 7, 5, seed=17)
    gamma = make_gamma(gamma_shape, seed=18)
    out = form(q, k, v, gamma, 16)
    assert out.shape == (2, 3, 63, 5)
    torch.testing.assert_close(out, vector_gate_reference(q, k, v, gamma.expand(2, 3, 63, 7)), **F64)


@pytest.mark.parametrize("name", list(GATED_FNS))
def test_rejects_vector_gate_with_wrong_last_dim(name):
    """A vector gate (..., N, D) with D != D_k: ValueError naming gamma and D_k."""
    q = torch.zeros(2, 5, 7)
    with pytest.raises(ValueError, match=r"gamma as a vector gate must have shape \(\.\.\., N, D_k\)"):
        _call(name, q, q, q, gamma=torch.full((2, 5, 6), 0.9))
    with pytest.raises(ValueError, match="gamma must lie in"):
        _call(name, q, q, q, gamma=torch.full((2, 5, 7), 1.5))


# --------------------------------------------------------------------------- gradients
def gated_reference_torch(q, k, v, gamma):
    """M_t = gamma_t M_{t-1} + k_t v_t^T (gamma scalar (N,) or vector (N, D_k)), y_t = M_t^T q_t, in torch."""
    m = torch.zeros(q.shape[-1], v.shape[-1], dtype=q.dtype)
    ys = []
    for t in range(q.shape[0]):
        g = gamma[t][:, None] if gamma.dim() == 2 else gamma[t]
        m = g * m + torch.outer(k[t], v[t])
        ys.append(m.T @ q[t])
    return torch.stack(ys)


def _drop_gate(f):
    return lambda q, k, v, g, c: f(q, k, v, c)


GRAD_FNS = {**{f"plain_{n}": _drop_gate(f) for n, f in PLAIN_FNS.items()}, **GATED_FNS}


GRAD_CASES = [(name, "none") for name in GRAD_FNS if name.startswith("plain")] + [
    (name, gate) for name in GATED_FNS for gate in ("scalar", "vector")]


@pytest.mark.parametrize("name, gate", GRAD_CASES, ids=[f"{n}-{g}" for n, g in GRAD_CASES])
def test_gradients_match_definition(name, gate):
    """Gradients of q, k, v (and gamma) of every form = the definition loop's (1e-10), N = 37, C = 8."""
    q, k, v = (x.requires_grad_() for x in make_qkv((), 37, 5, 4, seed=19))
    shape = (37,) if gate == "scalar" else (37, 5)
    gamma = None if gate == "none" else make_gamma(shape, seed=20).requires_grad_()
    leaves = [q, k, v] + ([gamma] if gamma is not None else [])
    dy = torch.randn(37, 4, generator=torch.Generator().manual_seed(21), dtype=torch.float64)
    ones = torch.ones(37, dtype=torch.float64)
    y_ref = gated_reference_torch(q, k, v, ones if gamma is None else gamma)
    ref = torch.autograd.grad((y_ref * dy).sum(), leaves)
    got = torch.autograd.grad((GRAD_FNS[name](q, k, v, gamma, 8) * dy).sum(), leaves)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, **F64)


@pytest.mark.parametrize("gate", ["scalar", "vector"])
@pytest.mark.parametrize("name", list(GATED_FNS))
def test_gradcheck_gated(name, gate):
    """torch.autograd.gradcheck of each gated form, scalar and vector gates, N = 5, D_k = 3, C = 2."""
    q, k, v = (x.requires_grad_() for x in make_qkv((2,), 5, 3, 2, seed=22))
    gamma = make_gamma((2, 5) if gate == "scalar" else (2, 5, 3), seed=23, low=0.6).requires_grad_()
    assert torch.autograd.gradcheck(lambda *a: GATED_FNS[name](*a, 2), (q, k, v, gamma), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", list(PLAIN_FNS))
def test_gradcheck_plain(name):
    """torch.autograd.gradcheck of each plain form, N = 5, D_k = 3, C = 2."""
    q, k, v = (x.requires_grad_() for x in make_qkv((2,), 5, 3, 2, seed=24))
    assert torch.autograd.gradcheck(lambda *a: PLAIN_FNS[name](*a, 2), (q, k, v), eps=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- the blocked no-grad path
@pytest.mark.parametrize("block", [16, 40, 48, 512], ids=lambda b: f"block={b}")
@pytest.mark.parametrize("gate", ["none", "scalar", "tiny"])
def test_blocked_path_many_blocks(monkeypatch, gate, block):
    """Without autograd and with more tokens than one block, the chunked forms run block by block;
    with blocks of 16, 40, 48 or 512 tokens and C = 8, N = 101 (12 whole chunks: blocks of 2 chunks,
    of 5, 5 and a shorter 2, of 6, or one block per sequence; then a last chunk of 5 tokens) they
    equal the definition (1e-10) and the vectorized path that autograd uses."""
    import attn_core.linear as lin

    monkeypatch.setattr(blocked, "BLOCK_TOKENS", block)
    q, k, v = make_qkv((2, 3), 101, 7, 5, seed=25)  # 606 tokens: more than one block, so blocks are used
    gamma = None
    if gate == "scalar":
        gamma = make_gamma((3, 101), seed=26)
    elif gate == "tiny":
        gamma = torch.where(torch.rand(3, 101, generator=torch.Generator().manual_seed(27)) < 0.3, 1e-30, 0.9)
        gamma = gamma.double()
    ref = linear_attention_reference(q, k, v, gamma)
    if gamma is None:
        out = lin.causal_linear_attention_chunked(q, k, v, 8)
        grad_path = lin.causal_linear_attention_chunked(q.requires_grad_(), k, v, 8)
    else:
        out = lin.gated_linear_attention_chunked(q, k, v, gamma, 8)
        grad_path = lin.gated_linear_attention_chunked(q.requires_grad_(), k, v, gamma, 8)
    assert grad_path.requires_grad and not out.requires_grad
    torch.testing.assert_close(out, ref, **F64)
    torch.testing.assert_close(grad_path.detach(), out, **F64)


@pytest.mark.parametrize("case", ["expanded heads", "transposed q", "q is k", "no batch dims"])
def test_blocked_path_reads_any_strided_input(monkeypatch, case):
    """The blocked path reads each sequence in place from the broadcast inputs: keys and values
    shared by all heads (expanded, as grouped-query attention would pass them), a query that is a
    transposed view, one tensor passed as both q and k, or a single (N, D) sequence; each equals
    the vectorized path that autograd uses (1e-10), scalar gate included."""
    import attn_core.linear as lin

    monkeypatch.setattr(blocked, "BLOCK_TOKENS", 24)
    q, k, v = make_qkv((2, 3), 53, 6, 4, seed=41)
    gamma = make_gamma((2, 3, 53), seed=42)
    if case == "expanded heads":
        k, v, gamma = k[:, :1], v[:, :1], gamma[:, :1]  # (2, 1, N, D): broadcast over the 3 heads
    elif case == "transposed q":
        q = q.transpose(1, 2).contiguous().transpose(1, 2)  # (2, 3, N, D) view of a (2, N, 3, D) tensor
        assert not q.is_contiguous()
    elif case == "q is k":
        q = k
    else:
        q, k, v, gamma = q[0, 0], k[0, 0], v[0, 0], gamma[0, 0]
    forms = ((lin.causal_linear_attention_chunked, ()), (lin.gated_linear_attention_chunked, (gamma,)))
    for fn, extra in forms:
        out = fn(q, k, v, *extra, 8)
        ref = fn(q.detach().clone().requires_grad_(), k, v, *extra, 8).detach()  # the vectorized path
        torch.testing.assert_close(out, ref, **F64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("gated", [False, True], ids=["plain", "gated"])
def test_blocked_path_16bit_keeps_the_running_state_in_float32(monkeypatch, dtype, gated):
    """In float16 and bfloat16 the blocked path carries the state in a float32 copy: over 512 chunks
    (N = 4096, C = 8) its largest error against the float64 computation on the same rounded inputs
    stays within one epsilon of the dtype (relative to the largest output; the output itself is
    rounded once, at most half an epsilon). Rounding the running state to 16 bits after every
    chunk instead gave 4.6 epsilon here (measured once by hand)."""
    import attn_core.linear as lin

    monkeypatch.setattr(blocked, "BLOCK_TOKENS", 256)
    g = torch.Generator().manual_seed(43)
    q, k, v = (torch.randn(2, 4096, 16, generator=g, dtype=torch.float64).to(dtype) for _ in range(3))
    gamma = (1 - 1e-3 * torch.rand(2, 4096, generator=g, dtype=torch.float64)).to(dtype) if gated else None
    extra = () if gamma is None else (gamma,)
    fn = lin.gated_linear_attention_chunked if gated else lin.causal_linear_attention_chunked
    out = fn(q, k, v, *extra, 8)
    ref = fn(*(x.double() for x in (q, k, v, *extra)), 8)  # float64 on the same rounded inputs
    err = (out.double() - ref).abs().max() / ref.abs().max()
    assert err <= torch.finfo(dtype).eps, float(err)


def test_runs_blocked_says_which_path_runs(monkeypatch):
    """runs_blocked is True exactly when a chunked call runs block by block: the real
    blocked_chunked, wrapped to record its calls, is called for more than BLOCK_TOKENS tokens over
    batch and heads without autograd, and not at BLOCK_TOKENS, with autograd, on the meta device
    or with a vector gate."""
    import attn_core.linear as lin

    calls = []
    real = blocked.blocked_chunked
    monkeypatch.setattr(blocked, "blocked_chunked", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(blocked, "BLOCK_TOKENS", 64)
    q, k, v = make_qkv((2,), 40, 4, 3, seed=44)  # 80 tokens > 64
    scalar, vector = make_gamma((2, 40), seed=45), make_gamma((2, 40, 4), seed=46)
    cases = [((q, k, v, None), True), ((q[:, :32], k[:, :32], v[:, :32], None), False),  # 64 tokens
             ((q.clone().requires_grad_(), k, v, None), False), ((q, k, v, scalar), True),
             ((q, k, v, vector), False),
             (tuple(torch.empty(2, 40, 4, device="meta") for _ in range(3)) + (None,), False)]
    for (qq, kk, vv, g), expected in cases:
        calls.clear()
        if g is None:
            lin.causal_linear_attention_chunked(qq, kk, vv, 8)
        else:
            lin.gated_linear_attention_chunked(qq, kk, vv, g, 8)
        assert lin.runs_blocked(qq, kk, vv, g) is expected and bool(calls) is expected


def test_blocked_path_float32_tiny_gates_finite():
    """float32, gates of 1e-30 across block borders (blocks of 16 tokens): finite, = definition (F32)."""
    q, k, v = make_qkv((2,), 100, 7, 5, seed=28)
    gamma = torch.full((2, 100), 0.9, dtype=torch.float64)
    gamma[:, ::5] = 1e-30
    import attn_core.linear as lin

    old, blocked.BLOCK_TOKENS = blocked.BLOCK_TOKENS, 16
    try:
        out = lin.gated_linear_attention_chunked(q.float(), k.float(), v.float(), gamma.float(), 8)
    finally:
        blocked.BLOCK_TOKENS = old
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), linear_attention_reference(q, k, v, gamma), **F32)


@pytest.mark.parametrize("over", [False, True], ids=["span just under the bound", "just over"])
def test_blocked_gated_factors_the_decay_only_within_its_bound(monkeypatch, over):
    """The gated blocked path factors e^(l_i - l_j) onto queries and keys only when every chunk's
    total log decay is within factor_bound (float32: ln(max) / 4 = 22.18); just under it the scaled
    queries reach e^22 and the output still equals the definition to float32 rounding, just over it
    the exact decay matrix is used, with the same result."""
    import attn_core.linear as lin

    monkeypatch.setattr(blocked, "BLOCK_TOKENS", 64)
    c, n = 8, 203  # 25 whole chunks and a last one of 3 tokens
    bound = blocked.factor_bound(torch.float32)
    assert abs(bound - math.log(torch.finfo(torch.float32).max) / 4) < 1e-12 and 22.1 < bound < 22.2
    span = bound * (1.01 if over else 0.99)  # every chunk's total log decay
    gamma = torch.full((2, n), math.exp(-span / c), dtype=torch.float64)
    q, k, v = make_qkv((2,), n, 7, 5, seed=29)
    log_g = torch.log(gamma.float())
    assert blocked._spans_fit(log_g, c, n // c, q.float()) is (not over)
    out = lin.gated_linear_attention_chunked(q.float(), k.float(), v.float(), gamma.float(), c)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), linear_attention_reference(q, k, v, gamma), **F32)


def test_blocked_gated_path_choice_for_the_tests_gates():
    """The scalar gates of the tests above are factored, the ones with 1e-30 are not: both paths run."""
    from attn_core.blocked import _spans_fit

    scalar = torch.log(make_gamma((3, 101), seed=26))
    tiny = torch.log(torch.where(torch.rand(3, 101, generator=torch.Generator().manual_seed(27)) < 0.3,
                                 1e-30, 0.9).double())
    q = make_qkv((3,), 101, 7, 5, seed=25)[0]
    assert _spans_fit(scalar, 8, 101 // 8, q)
    assert not _spans_fit(tiny, 8, 101 // 8, q)


def test_blocked_gated_float16_large_queries_stay_finite(monkeypatch):
    """float16 (max 65504): a chunk of 64 gates of 0.96 decays by e^-2.61, within the bound e^-2.77,
    but the factor e^2.61 = 13.6 on a query entry of 5000 would overflow; the blocked path checks the
    queries' size, takes the exact form, and equals the float64 definition to float16 rounding."""
    import attn_core.linear as lin

    monkeypatch.setattr(blocked, "BLOCK_TOKENS", 64)
    n, c = 200, 64
    q = torch.full((1, n, 4), 5000.0, dtype=torch.float64)
    k = torch.full((1, n, 4), 1e-3, dtype=torch.float64)
    v = torch.ones(1, n, 3, dtype=torch.float64)
    gamma = torch.full((1, n), 0.96, dtype=torch.float64)
    span = c * math.log(1 / 0.96)
    assert span < blocked.factor_bound(torch.float16) and 5000 * math.exp(span) > 65504
    assert not blocked._spans_fit(torch.log(gamma.float()), c, n // c, q.half())
    assert blocked._spans_fit(torch.log(gamma.float()), c, n // c, q.half() / 10)  # 500: it would factor
    out = lin.gated_linear_attention_chunked(q.half(), k.half(), v.half(), gamma.half(), c)
    assert torch.isfinite(out).all()
    ref = linear_attention_reference(q, k, v, gamma)
    torch.testing.assert_close(out.double(), ref, rtol=2e-3, atol=1e-2)


def test_blocked_gated_one_strong_chunk_sends_the_call_to_the_exact_form(monkeypatch):
    """The choice is made once per call: one chunk that forgets more than the bound, among mild ones,
    makes the whole call exact; both calls equal the definition."""
    import attn_core.linear as lin

    monkeypatch.setattr(blocked, "BLOCK_TOKENS", 64)
    n, c = 200, 8
    q, k, v = make_qkv((2,), n, 5, 4, seed=31)
    gamma = make_gamma((2, n), seed=32, low=0.9)
    assert blocked._spans_fit(torch.log(gamma), c, n // c, q)
    gamma[1, 40:48] = 1e-3  # one chunk of the second sequence: 8 ln 1000 = 55 > 22.2 (float32)
    assert not blocked._spans_fit(torch.log(gamma.float()), c, n // c, q.float())
    out = lin.gated_linear_attention_chunked(q.float(), k.float(), v.float(), gamma.float(), c)
    torch.testing.assert_close(out.double(), linear_attention_reference(q, k, v, gamma), **F32)


def test_gated_default_chunk_depends_on_the_gate():
    """chunk=None: the scalar gate's default, or the vector gate's smaller one (its decay tensor
    grows with C); both equal an explicit chunk of that size."""
    import attn_core.linear as lin

    q, k, v = make_qkv((2,), 70, 5, 4, seed=33)
    scalar, vector = make_gamma((2, 70), seed=34), make_gamma((2, 70, 5), seed=35)
    assert lin._gated_chunk(None, scalar, q) == lin.DEFAULT_GATED_CHUNK
    assert lin._gated_chunk(None, vector, q) == lin.DEFAULT_VECTOR_GATED_CHUNK
    explicit = lin.gated_linear_attention_chunked(q, k, v, vector, lin.DEFAULT_VECTOR_GATED_CHUNK)
    torch.testing.assert_close(lin.gated_linear_attention_chunked(q, k, v, vector), explicit)
    with pytest.raises(ValueError, match="chunk"):
        lin.gated_linear_attention_chunked(q, k, v, scalar, 0)
