"""Tests for attn_core.delta (re-exported by attn_core.linear): the delta rule and the gated delta rule,
parallel, recurrent and chunked; beta in [0, 2]; the warning when beta_t ||k_t||^2 > 2; normalize_qk.

The reference is the definition, M_t = gamma_t (I - beta_t k_t k_t^T) M_{t-1} + beta_t k_t v_t^T,
y_t = M_t^T q_t, written as a loop with the explicit D_k x D_k matrix I - beta_t k_t k_t^T: in
float64 numpy for outputs and final states, in float64 torch (autograd) for gradients. Neither
shares code with the library's corrected-value (u_t) recurrence, its WY / UT chunked form or its
parallel form (one N x N triangular solve).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
import torch

from attn_core import delta, linear
from attn_core.linear import (
    delta_rule_chunked,
    delta_rule_parallel,
    delta_rule_recurrent,
    gated_delta_rule_chunked,
    gated_delta_rule_parallel,
    gated_delta_rule_recurrent,
)

F64 = dict(atol=1e-10, rtol=1e-10)
F32 = dict(atol=2e-4, rtol=1e-4)


# --------------------------------------------------------------------------- references
def delta_reference(q, k, v, beta, gamma=None, m0=None):
    """The definition as a float64 numpy loop: returns (y (..., N, D_v), M_N (..., D_k, D_v))."""
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], beta.shape[:-1])
    if gamma is not None:
        lead = torch.broadcast_shapes(lead, gamma.shape[:-1])
    if m0 is not None:
        lead = torch.broadcast_shapes(lead, m0.shape[:-2])
    n, d_k, d_v = q.shape[-2], q.shape[-1], v.shape[-1]

    def flat(x, *tail):
        return x.detach().double().expand(*lead, *tail).reshape(-1, *tail).numpy()

    qq, kk, vv, bb = flat(q, n, d_k), flat(k, n, d_k), flat(v, n, d_v), flat(beta, n)
    gg = np.ones_like(bb) if gamma is None else flat(gamma, n)
    mm = np.zeros((qq.shape[0], d_k, d_v)) if m0 is None else flat(m0, d_k, d_v).copy()
    y = np.zeros((qq.shape[0], n, d_v))
    eye = np.eye(d_k)
    for b in range(qq.shape[0]):
        m = mm[b]
        for t in range(n):
            kt = kk[b, t][:, None]  # (D_k, 1)
            m = gg[b, t] * (eye - bb[b, t] * kt @ kt.T) @ m + bb[b, t] * kt @ vv[b, t][None, :]
            y[b, t] = m.T @ qq[b, t]
        mm[b] = m
    return torch.from_numpy(y).reshape(*lead, n, d_v), torch.from_numpy(mm).reshape(*lead, d_k, d_v)


def delta_reference_torch(q, k, v, beta, gamma=None, m0=None):
    """The same definition in torch, differentiable (unbatched: q, k (N, D_k), v (N, D_v))."""
    n, d_k = q.shape
    m = torch.zeros(d_k, v.shape[-1], dtype=q.dtype) if m0 is None else m0
    eye = torch.eye(d_k, dtype=q.dtype)
    ys = []
    for t in range(n):
        kt = k[t][:, None]
        g = 1.0 if gamma is None else gamma[t]
        m = g * (eye - beta[t] * kt @ kt.T) @ m + beta[t] * kt @ v[t][None, :]
        ys.append(m.T @ q[t])
    return torch.stack(ys), m


def make_inputs(lead, n, d_k, d_v, seed, gated=True, low=0.5, with_state=False):
    """q, k (unit-length keys, as DeltaNet uses), v, beta in [0, 1], gamma in [low, 1), M_0."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, n, d_k, generator=g, dtype=torch.float64) / d_k**0.5
    k = torch.nn.functional.normalize(torch.randn(*lead, n, d_k, generator=g, dtype=torch.float64), dim=-1)
    v = torch.randn(*lead, n, d_v, generator=g, dtype=torch.float64)
    beta = torch.rand(*lead, n, generator=g, dtype=torch.float64)
    gamma = low + (1 - low) * torch.rand(*lead, n, generator=g, dtype=torch.float64) if gated else None
    m0 = torch.randn(*lead, d_k, d_v, generator=g, dtype=torch.float64) if with_state else None
    return q, k, v, beta, gamma, m0


FORMS = {
    "delta_parallel": lambda q, k, v, b, g, c, **kw: delta_rule_parallel(q, k, v, b, **kw),
    "gated_parallel": lambda q, k, v, b, g, c, **kw: gated_delta_rule_parallel(q, k, v, b, g, **kw),
    "delta_recurrent": lambda q, k, v, b, g, c, **kw: delta_rule_recurrent(q, k, v, b, **kw),
    "delta_chunked": lambda q, k, v, b, g, c, **kw: delta_rule_chunked(q, k, v, b, c, **kw),
    "gated_recurrent": lambda q, k, v, b, g, c, **kw: gated_delta_rule_recurrent(q, k, v, b, g, **kw),
    "gated_chunked": lambda q, k, v, b, g, c, **kw: gated_delta_rule_chunked(q, k, v, b, g, c, **kw),
}
GATED = {"gated_parallel", "gated_recurrent", "gated_chunked"}

# (lead, N, D_k, D_v, chunk)
CASES = [
    pytest.param((), 1, 7, 7, 16, id="N1-C16"),
    pytest.param((), 63, 7, 5, 16, id="N63-C16-Dv5"),
    pytest.param((2,), 63, 60, 60, 16, id="B2-N63-D60-C16"),
    pytest.param((2, 3), 63, 7, 9, 64, id="B2x3-N63-C64>N"),
    pytest.param((2,), 63, 7, 7, 1, id="B2-N63-C1"),
    pytest.param((), 64, 7, 7, 16, id="N64-C16-divides"),
    pytest.param((2,), 257, 16, 8, 100, id="B2-N257-C100"),
]


@functools.cache
def case(lead, n, d_k, d_v, gated, with_state):
    x = make_inputs(lead, n, d_k, d_v, seed=n + d_k + 7 * with_state, gated=gated, with_state=with_state)
    return x, delta_reference(*x)


# --------------------------------------------------------------------------- outputs and final states
@pytest.mark.parametrize("with_state", [False, True], ids=["M0=0", "M0"])
@pytest.mark.parametrize("name", list(FORMS))
@pytest.mark.parametrize("lead, n, d_k, d_v, chunk", CASES)
def test_forms_match_definition(name, lead, n, d_k, d_v, chunk, with_state):
    """Output and final state of every form equal the float64 definition to 1e-10, M_0 given or 0."""
    (q, k, v, beta, gamma, m0), (y_ref, m_ref) = case(lead, n, d_k, d_v, name in GATED, with_state)
    y, m = FORMS[name](q, k, v, beta, gamma, chunk, initial_state=m0, output_final_state=True)
    assert y.shape == (*lead, n, d_v) and m.shape == (*lead, d_k, d_v) and y.dtype == torch.float64
    torch.testing.assert_close(y, y_ref, **F64)
    torch.testing.assert_close(m, m_ref, **F64)


@pytest.mark.parametrize("name", list(FORMS))
def test_without_final_state_returns_the_output_only(name):
    """output_final_state=False (the default) returns y alone, the same y."""
    (q, k, v, beta, gamma, _), (y_ref, _) = case((2,), 63, 7, 5, name in GATED, False)
    y = FORMS[name](q, k, v, beta, gamma, 16)
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, y_ref, **F64)


def test_default_chunk_with_n_not_a_multiple():
    """The chunked forms with their default chunk on N = 257 (not a multiple of it) equal the definition."""
    assert delta.DEFAULT_DELTA_CHUNK == linear.DEFAULT_DELTA_CHUNK and 257 % delta.DEFAULT_DELTA_CHUNK
    (q, k, v, beta, gamma, _), (y_ref, _) = case((2,), 257, 16, 8, True, False)
    torch.testing.assert_close(gated_delta_rule_chunked(q, k, v, beta, gamma), y_ref, **F64)
    (q, k, v, beta, _, _), (y_ref, _) = case((2,), 257, 16, 8, False, False)
    torch.testing.assert_close(delta_rule_chunked(q, k, v, beta), y_ref, **F64)


def test_split_sequence_through_the_state():
    """Two halves, the second started from the first's final state, give the whole sequence's outputs."""
    q, k, v, beta, gamma, _ = make_inputs((2,), 100, 8, 6, seed=3)
    y_all, m_all = gated_delta_rule_chunked(q, k, v, beta, gamma, 16, output_final_state=True)
    y1, m1 = gated_delta_rule_chunked(q[:, :37], k[:, :37], v[:, :37], beta[:, :37], gamma[:, :37], 16,
                                      output_final_state=True)
    y2, m2 = gated_delta_rule_recurrent(q[:, 37:], k[:, 37:], v[:, 37:], beta[:, 37:], gamma[:, 37:],
                                        initial_state=m1, output_final_state=True)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y_all, **F64)
    torch.testing.assert_close(m2, m_all, **F64)


def test_beta_zero_keeps_the_state_and_beta_one_with_unit_key_overwrites():
    """beta = 0 leaves M unchanged; beta = 1 with a unit key stores exactly v under k: M^T k = v."""
    q, k, v, _, _, m0 = make_inputs((), 1, 5, 3, seed=4, with_state=True)
    _, m = delta_rule_chunked(q, k, v, torch.zeros(1, dtype=torch.float64), initial_state=m0,
                              output_final_state=True)
    torch.testing.assert_close(m, m0, **F64)
    _, m = delta_rule_chunked(q, k, v, torch.ones(1, dtype=torch.float64), initial_state=m0,
                              output_final_state=True)
    torch.testing.assert_close(m.T @ k[0], v[0], **F64)


def test_gamma_one_is_the_delta_rule_and_delta_differs_from_linear_attention():
    """gamma = 1 gives the ungated delta rule; the delta rule is not plain linear attention (guard)."""
    q, k, v, beta, _, _ = make_inputs((2,), 63, 7, 5, seed=5, gated=False)
    ones = torch.ones(2, 63, dtype=torch.float64)
    torch.testing.assert_close(gated_delta_rule_chunked(q, k, v, beta, ones, 16),
                               delta_rule_chunked(q, k, v, beta, 16), **F64)
    plain = linear.causal_linear_attention_parallel(q, k, v * beta[..., None])
    assert (delta_rule_chunked(q, k, v, beta, 16) - plain).abs().max() > 1e-2


@pytest.mark.parametrize("shape", [(63,), (2, 1, 63), (3, 63)], ids=["(N)", "(B,1,N)", "(H,N)"])
def test_beta_and_gamma_broadcast_over_heads(shape):
    """beta and gamma of shape (N,), (B, 1, N), (H, N) against q (B, H, N, D): = definition (1e-10)."""
    q, k, v, _, _, m0 = make_inputs((2, 3), 63, 7, 5, seed=6, with_state=True)
    g = torch.Generator().manual_seed(7)
    beta = torch.rand(*shape, generator=g, dtype=torch.float64)
    gamma = 0.5 + 0.5 * torch.rand(*shape, generator=g, dtype=torch.float64)
    y_ref, m_ref = delta_reference(q, k, v, beta, gamma, m0[0])
    for fn in (gated_delta_rule_recurrent, gated_delta_rule_chunked):
        y, m = fn(q, k, v, beta, gamma, initial_state=m0[0], output_final_state=True)  # M_0 (D_k, D_v)
        assert y.shape == (2, 3, 63, 5)
        torch.testing.assert_close(y, y_ref, **F64)
        torch.testing.assert_close(m, m_ref, **F64)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["gated_parallel", "gated_recurrent", "gated_chunked"])
def test_tiny_gamma_stays_finite(name, dtype):
    """Gates down to 1e-30 (mixed with 1) are finite and match the definition (f32: F32 tolerances)."""
    q, k, v, beta, _, _ = make_inputs((2,), 63, 7, 5, seed=8, gated=False)
    gamma = torch.where(torch.rand(2, 63, generator=torch.Generator().manual_seed(9)) < 0.5, 1e-30, 1.0)
    gamma = gamma.double()
    y_ref, _ = delta_reference(q, k, v, beta, gamma)
    y = FORMS[name](*(x.to(dtype) for x in (q, k, v, beta, gamma)), 16)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y.double(), y_ref, **(F64 if dtype == torch.float64 else F32))


# --------------------------------------------------------------------------- gradients
GRAD_CASES = [
    pytest.param(37, 8, 16, True, id="N37-C8-gated-M0"),
    pytest.param(37, 64, 16, False, id="N37-C64>N"),
    pytest.param(40, 8, 5, True, id="N40-C8-divides-M0"),
]


@pytest.mark.parametrize("name", list(FORMS))
@pytest.mark.parametrize("n, chunk, d_k, with_state", GRAD_CASES)
def test_gradients_match_definition(name, n, chunk, d_k, with_state):
    """Gradients of q, k, v, beta, gamma and M_0, through y and M_N, equal the definition's (1e-10)."""
    gated = name in GATED
    inputs = make_inputs((), n, d_k, 6, seed=n + chunk, gated=gated, with_state=with_state)
    q, k, v, beta, gamma, m0 = (x.requires_grad_() if x is not None else None for x in inputs)
    leaves = [x for x in (q, k, v, beta, gamma, m0) if x is not None]
    g = torch.Generator().manual_seed(11)
    dy, dm = torch.randn(n, 6, generator=g, dtype=torch.float64), torch.randn(d_k, 6, generator=g).double()

    y_ref, m_ref = delta_reference_torch(q, k, v, beta, gamma, m0)
    ref = torch.autograd.grad((y_ref * dy).sum() + (m_ref * dm).sum(), leaves)
    y, m = FORMS[name](q, k, v, beta, gamma, chunk, initial_state=m0, output_final_state=True)
    got = torch.autograd.grad((y * dy).sum() + (m * dm).sum(), leaves)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, **F64)


@pytest.mark.parametrize("name", list(FORMS))
def test_gradcheck(name):
    """torch.autograd.gradcheck (finite differences, float64) on N = 5, D_k = 3, D_v = 2, C = 2."""
    q, k, v, beta, gamma, m0 = make_inputs((2,), 5, 3, 2, seed=12, gated=name in GATED, with_state=True)
    beta = 0.1 + 0.8 * beta  # away from the ends of [0, 1], where finite differences would step outside

    def fn(q, k, v, beta, m0, *gate):
        y, m = FORMS[name](q, k, v, beta, gate[0] if gate else None, 2, initial_state=m0,
                           output_final_state=True)
        return y, m

    args = [x.requires_grad_() for x in (q, k, v, beta, m0)] + ([gamma.requires_grad_()] if gamma is not None
                                                                  else [])
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- bad input
def _call(name, q, k, v, beta=None, gamma=None, chunk=16, **kw):
    beta = torch.full(q.shape[:-1], 0.5) if beta is None else beta
    gamma = torch.full(q.shape[:-1], 0.9) if gamma is None else gamma
    return FORMS[name](q, k, v, beta, gamma, chunk, **kw)


BAD_BETA = [
    pytest.param(torch.tensor([0.5, -0.1, 0.5, 0.5, 0.5]), "beta must lie in", id="negative"),
    pytest.param(torch.tensor([0.5, 2.1, 0.5, 0.5, 0.5]), r"beta must lie in \[0, 2\]", id="2.1"),
    pytest.param(torch.tensor([0.5, float("nan"), 0.5, 0.5, 0.5]), "beta must lie in", id="nan"),
    pytest.param(torch.full((4,), 0.5), r"beta must have shape \(\.\.\., N\)", id="length-N-1"),
    pytest.param(torch.full((3, 5), 0.5), "beta of shape .* does not broadcast", id="no-broadcast"),
    pytest.param(0.5, "beta must be a torch.Tensor", id="float"),
]


@pytest.mark.parametrize("beta, match", BAD_BETA)
@pytest.mark.parametrize("name", list(FORMS))
def test_rejects_bad_beta(name, beta, match):
    """beta outside [0, 2], of the wrong length or shape, or not a tensor: ValueError naming beta."""
    q = torch.zeros(2, 5, 7)
    with pytest.raises(ValueError, match=match):
        _call(name, q, q, q, beta=beta)


BAD_GAMMA = [
    pytest.param(torch.tensor([0.9, 0.0, 0.9, 0.9, 0.9]), "gamma must lie in", id="zero"),
    pytest.param(torch.tensor([0.9, 1.5, 0.9, 0.9, 0.9]), "gamma must lie in", id="1.5"),
    pytest.param(torch.full((6,), 0.9), r"gamma must have shape \(\.\.\., N\)", id="length-N+1"),
    pytest.param(torch.full((3, 5), 0.9), "gamma of shape .* does not broadcast", id="no-broadcast"),
    pytest.param(torch.full((2, 5, 7), 0.9), "one gate per token", id="vector-gate"),
]


@pytest.mark.parametrize("gamma, match", BAD_GAMMA)
@pytest.mark.parametrize("name", sorted(GATED))
def test_rejects_bad_gamma(name, gamma, match):
    """gamma outside (0, 1], of a shape that does not broadcast, or a vector gate: ValueError naming gamma."""
    q = torch.zeros(2, 5, 7)
    with pytest.raises(ValueError, match=match):
        _call(name, q, q, q, gamma=gamma)


@pytest.mark.parametrize("chunk", [0, -1, 2.5, None], ids=["0", "-1", "2.5", "None"])
@pytest.mark.parametrize("name", ["delta_chunked", "gated_chunked"])
def test_rejects_bad_chunk(name, chunk):
    """chunk 0, negative or not an integer: ValueError naming chunk."""
    q = torch.zeros(5, 7)
    with pytest.raises(ValueError, match="chunk must be a positive integer"):
        _call(name, q, q, q, chunk=chunk)


@pytest.mark.parametrize("m0, match", [
    pytest.param(torch.zeros(7, 4), r"initial_state must have shape \(\.\.\., D_k, D_v\)", id="wrong-D_v"),
    pytest.param(torch.zeros(3, 7, 5), "initial_state of shape .* does not broadcast", id="no-broadcast"),
    pytest.param(torch.zeros(7), "initial_state must have at least 2 dims", id="1d"),
])
@pytest.mark.parametrize("name", list(FORMS))
def test_rejects_bad_initial_state(name, m0, match):
    """An initial state of the wrong shape: ValueError naming initial_state."""
    q, v = torch.zeros(2, 5, 7), torch.zeros(2, 5, 5)
    with pytest.raises(ValueError, match=match):
        _call(name, q, q, v, initial_state=m0)


def test_meta_device_runs_without_data():
    """On the meta device (no values to check, so no warning either) every form runs, right shapes."""
    q, v = torch.empty(1, 4, 300, 16, device="meta"), torch.empty(1, 4, 300, 8, device="meta")
    beta = torch.empty(1, 4, 300, device="meta")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y, m = gated_delta_rule_chunked(q, q, v, beta, beta, 64, output_final_state=True)
        assert y.shape == (1, 4, 300, 8) and m.shape == (1, 4, 16, 8)
        y, m = gated_delta_rule_parallel(q, q, v, beta, beta, output_final_state=True, normalize_qk=True)
        assert y.shape == (1, 4, 300, 8) and m.shape == (1, 4, 16, 8)
        y = delta_rule_recurrent(q[..., :5, :], q[..., :5, :], v[..., :5, :], beta[..., :5])
        assert y.shape == (1, 4, 5, 8)


@pytest.mark.parametrize("chunk", [7, 16, 64], ids=lambda c: f"C={c}")
def test_solve_and_block_inverse_agree(chunk):
    """Autograd on: the chunked form solves (I + A) X = R; off: it inverts I + A by blocks. Same y (1e-10)."""
    q, k, v, beta, gamma, m0 = make_inputs((2,), 100, 8, 6, seed=13, with_state=True)
    without = gated_delta_rule_chunked(q, k, v, beta, gamma, chunk, initial_state=m0)
    with_grad = gated_delta_rule_chunked(q.requires_grad_(), k, v, beta, gamma, chunk, initial_state=m0)
    assert with_grad.requires_grad and not without.requires_grad
    torch.testing.assert_close(with_grad.detach(), without, **F64)
    torch.testing.assert_close(without, delta_reference(q, k, v, beta, gamma, m0)[0], **F64)


def test_unit_lower_inverse():
    """_unit_lower_inverse(A) (I + A) = I for strictly lower A, C = 64 (blocks) and C = 12 (a solve)."""
    g = torch.Generator().manual_seed(14)
    for c in (64, 12):
        a = (0.3 * torch.randn(3, c, c, generator=g, dtype=torch.float64)).tril(-1)
        eye = torch.eye(c, dtype=torch.float64)
        torch.testing.assert_close(delta._unit_lower_inverse(a) @ (eye + a), eye.expand(3, c, c), **F64)


# --------------------------------------------------------------------------- the parallel form
def test_parallel_is_the_chunked_form_with_one_chunk():
    """The parallel form equals the chunked form with C >= N (one chunk), M_0 given (1e-10)."""
    q, k, v, beta, gamma, m0 = make_inputs((2, 3), 63, 60, 60, seed=15, with_state=True)
    y_par, m_par = gated_delta_rule_parallel(q, k, v, beta, gamma, initial_state=m0, output_final_state=True)
    y_chk, m_chk = gated_delta_rule_chunked(q, k, v, beta, gamma, 64, initial_state=m0,
                                            output_final_state=True)
    torch.testing.assert_close(y_par, y_chk, **F64)
    torch.testing.assert_close(m_par, m_chk, **F64)


def test_parallel_formula_by_hand():
    """Y = (Q K^T * mask) (I + A)^-1 diag(beta) V with A = tril_-1(diag(beta) K K^T), written with an
    explicit inverse (not a triangular solve), equals delta_rule_parallel (float64, 1e-10)."""
    q, k, v, beta, _, _ = make_inputs((), 63, 60, 5, seed=16, gated=False)
    mask = torch.ones(63, 63, dtype=torch.bool).tril()
    a = torch.where(mask.tril(-1), beta[:, None] * (k @ k.T), 0.0)
    y = torch.where(mask, q @ k.T, 0.0) @ torch.linalg.inv(torch.eye(63, dtype=torch.float64) + a) @ (
        beta[:, None] * v)
    torch.testing.assert_close(delta_rule_parallel(q, k, v, beta), y, **F64)


# --------------------------------------------------------------------------- beta in [0, 2]
@pytest.mark.parametrize("name", list(FORMS))
def test_beta_up_to_two_matches_definition(name):
    """beta in [0, 2] (negative eigenvalues 1 - beta of I - beta k k^T for unit keys): every form equals the
    definition (1e-10), outputs and final state, N = 63 with chunks of 16, M_0 given."""
    q, k, v, beta, gamma, m0 = make_inputs((2,), 63, 7, 5, seed=17, gated=name in GATED, with_state=True)
    beta = 2 * beta
    beta[0, :3] = torch.tensor([2.0, 0.0, 1.5], dtype=torch.float64)  # both ends of [0, 2] included
    assert beta.max() == 2 and beta.min() == 0
    y_ref, m_ref = delta_reference(q, k, v, beta, gamma, m0)
    y, m = FORMS[name](q, k, v, beta, gamma, 16, initial_state=m0, output_final_state=True)
    torch.testing.assert_close(y, y_ref, **F64)
    torch.testing.assert_close(m, m_ref, **F64)


def test_eigenvalues_of_the_transition():
    """I - beta k k^T has eigenvalue 1 - beta ||k||^2 along k and 1 on the D_k - 1 directions orthogonal to k:
    in [-1, 1] for a unit key and beta in [0, 2], negative for beta > 1, -1 at beta = 2 (a reflection)."""
    g = torch.Generator().manual_seed(18)
    k = torch.randn(7, generator=g, dtype=torch.float64)
    for b in (0.0, 0.5, 1.0, 1.5, 2.0):
        for kk in (k, k / k.norm()):
            eig = torch.linalg.eigvalsh(torch.eye(7, dtype=torch.float64) - b * torch.outer(kk, kk))
            expected = torch.tensor([1 - b * kk.dot(kk).item()] + [1.0] * 6, dtype=torch.float64)
            torch.testing.assert_close(eig, expected.sort().values, **F64)


def test_beta_two_flips_the_sign_parity():
    """beta = 2 with a unit key reflects the state along k: reading with k after m such writes of v = 0
    returns (-1)^m times the initial read, the parity of m, which no beta in [0, 1] can produce."""
    e = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)  # (1, D_k)
    bits = torch.tensor([1, 0, 1, 1, 0, 1, 1], dtype=torch.float64)  # 5 ones: odd parity
    n = len(bits)
    k = e.expand(n, 3) * bits[:, None]  # write with the key e where the bit is 1, else nothing
    m0 = torch.tensor([[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)  # reads (1, 2) under e
    for name in ("delta_parallel", "delta_recurrent", "delta_chunked"):
        y = FORMS[name](e.expand(n, 3), k, torch.zeros(n, 2, dtype=torch.float64), 2 * bits, None, 4,
                        initial_state=m0)
        signs = (-1.0) ** bits.cumsum(0)  # (-1)^(ones so far)
        torch.testing.assert_close(y, signs[:, None] * m0[0], **F64)


# --------------------------------------------------------------------------- stability: warning, normalize_qk
def _unit_free_inputs(n=256, d=64, dtype=torch.float64, seed=19):
    """randn keys of D_k = 64 (||k||^2 near 64), beta uniform in [0, 1): beta ||k||^2 far above 2."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(n, d, generator=g, dtype=dtype) for _ in range(3))
    return q, k, v, torch.rand(n, generator=g, dtype=dtype)


def test_unnormalized_keys_blow_up():
    """Why the warning exists: randn keys with D_k = 64 make the float64 state grow past 1e50 in 256 tokens,
    and the float32 outputs overflow to inf or NaN."""
    q, k, v, beta = _unit_free_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _, m = delta_reference(q, k, v, beta)
        assert m.abs().max() > 1e50
        y32 = delta_rule_chunked(*(x.float() for x in (q, k, v, beta)))
    assert not torch.isfinite(y32).all()


@pytest.mark.parametrize("name", list(FORMS))
def test_warns_when_beta_k_squared_exceeds_two(name):
    """Some beta_t ||k_t||^2 > 2: a RuntimeWarning naming beta_t ||k_t||^2 and the fix, at the caller."""
    q, k, v, beta = _unit_free_inputs(n=20)
    gamma = torch.full((20,), 0.9, dtype=torch.float64)
    match = r"beta_t \|\|k_t\|\|\^2 reaches .* > 2.*normalize_qk=True"
    with pytest.warns(RuntimeWarning, match=match) as record:
        FORMS[name](q, k, v, beta, gamma, 8)
    assert record[0].filename == __file__


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(FORMS))
def test_no_warning_for_unit_keys_up_to_beta_two(name, dtype):
    """Unit keys (normalized, rounded to the dtype), beta = 2: beta ||k||^2 = 2 up to rounding: no warning."""
    q, k, v, _ = _unit_free_inputs(n=20, dtype=dtype)
    k = torch.nn.functional.normalize(k.double(), dim=-1).to(dtype)
    beta, gamma = torch.full((20,), 2.0, dtype=dtype), torch.full((20,), 0.9, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FORMS[name](q, k, v, beta, gamma, 8)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_warning_allows_the_rounding_of_half_precision(dtype):
    """The check alone (the triangular solves have no half-precision CPU kernels): unit keys rounded to bf16
    or f16 with beta = 2 pass, randn keys warn."""
    _, k, _, _ = _unit_free_inputs(n=200)
    beta = torch.full((200,), 2.0, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        delta._warn_if_unstable(torch.nn.functional.normalize(k, dim=-1).to(dtype), beta)
    with pytest.warns(RuntimeWarning, match="reaches"):
        delta._warn_if_unstable(k.to(dtype), beta)


@pytest.mark.parametrize("name", list(FORMS))
def test_normalize_qk(name):
    """normalize_qk=True equals passing q and k divided by sqrt(||x||^2 + 1e-6) (fla's l2norm): no warning,
    outputs and gradients of the raw q and k equal the definition's on the normalized inputs (1e-10)."""
    q, k, v, beta = _unit_free_inputs(n=37, d=6)
    gamma = torch.full((37,), 0.95, dtype=torch.float64)
    q, k = q.requires_grad_(), k.requires_grad_()

    def unit(x):
        return x / (x * x).sum(-1, keepdim=True).add(1e-6).sqrt()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = FORMS[name](q, k, v, beta, gamma, 8, normalize_qk=True)
    y_ref, _ = delta_reference_torch(unit(q), unit(k), v, beta, gamma if name in GATED else None)
    torch.testing.assert_close(y, y_ref, **F64)
    dy = torch.randn(37, 6, generator=torch.Generator().manual_seed(20), dtype=torch.float64)
    got = torch.autograd.grad((y * dy).sum(), (q, k))
    ref = torch.autograd.grad((y_ref * dy).sum(), (q, k))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, **F64)


@pytest.mark.parametrize("name", list(FORMS))
def test_rejects_bad_normalize_qk(name):
    """normalize_qk must be a bool: ValueError naming it."""
    q = torch.zeros(5, 7)
    with pytest.raises(ValueError, match="normalize_qk must be True or False"):
        _call(name, q, q, q, normalize_qk="yes")
