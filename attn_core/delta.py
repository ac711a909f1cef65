"""The delta rule (DeltaNet) and the gated delta rule (Gated DeltaNet): parallel, recurrent and chunked.

Plain linear attention only adds to its state. The delta rule first reads what the state
already stores under the key k_t, M_{t-1}^T k_t, and replaces a fraction beta_t of it by v_t:

    M_t = gamma_t (I - beta_t k_t k_t^T) M_{t-1} + beta_t k_t v_t^T      (state: D_k x D_v)
    y_t = M_t^T q_t

gamma_t = 1 is DeltaNet (Schlag et al. 2021; Yang et al. 2024), a gamma_t in (0, 1] per token
and head is Gated DeltaNet (Yang, Kautz and Hatamizadeh 2024). The same update, written with
the *corrected value* u_t = beta_t (v_t - gamma_t M_{t-1}^T k_t), is

    M_t = gamma_t M_{t-1} + k_t u_t^T,

plain gated linear attention with u_t in place of v_t. Three forms of each, as in fla's ``naive.py``:

* parallel: the whole sequence as one block, O(N^2 D): with D[i, j] = exp(l_i - l_j) for j <= i
  (0 above the diagonal), l_i the sum of log gamma up to token i, and M_0 = 0,

      Y = (Q K^T * D) (I + A)^-1 diag(beta) V,   A = strict_tril(diag(beta) (K K^T * D)),

  one triangular solve of N x N (for gamma = 1, D is the causal 0/1 mask).
* recurrent: the loop above, one token at a time, a D_k x D_v state.
* chunked: the parallel form inside chunks of C tokens, the state carried across them. Inside a
  chunk the u_t depend on each other only through a unit lower-triangular C x C system (the WY /
  UT representation of products of Householder-like matrices: Bischof and Van Loan 1987,
  Joffrain et al. 2006), with l_i now summed from the chunk start,

      (I + A) U = diag(beta) V - diag(beta exp(l)) K M,   A = strict_tril(diag(beta) (K K^T * D)),

  so U = U0 - W M with U0 = (I + A)^-1 diag(beta) V and W = (I + A)^-1 diag(beta exp(l)) K
  (the book writes W as K~: W is its sliding window),
  for every chunk at once (by a batched triangular solve when autograd records, which keeps
  less for the backward pass, else by the inverse of I + A by blocks, :func:`_unit_lower_inverse`,
  faster on a CPU). Only the pass of the state
  from chunk to chunk is a loop, N/C steps of small matmuls:

      U_c = U0_c - W_c M,  M <- exp(l_C) M + (K_c * exp(l_C - l))^T U_c,
      Y_c = (Q_c * exp(l)) M_entering + tril(Q_c K_c^T * D) U_c.

Every exponent is <= 0, so the *decays* never overflow. The state itself stays bounded only while
the transitions do not expand it: I - beta k k^T has the eigenvalue 1 - beta ||k||^2 along k and
1 on the D_k - 1 directions orthogonal to k. The update is one gradient step of size beta_t on
1/2 ||M^T k_t - v_t||^2 (the least-mean-squares rule), which is stable for beta_t ||k_t||^2 in
[0, 2]. So:

* beta: (..., N) in [0, 2]. With unit keys, beta in [0, 1] keeps every eigenvalue in [0, 1]
  (DeltaNet, Gated DeltaNet); beta in (1, 2] gives the eigenvalue 1 - beta in [-1, 0), negative
  (Grazzi et al. 2024, fla's ``allow_neg_eigval``; beta = 2 is a Householder reflection).
* A ``RuntimeWarning`` is raised when some beta_t ||k_t||^2 exceeds 2 (beyond the dtype's
  rounding; checked once per call, O(N D_k), skipped on the meta device): the state can then
  grow geometrically (randn keys with D_k = 64 have ||k||^2 near 64).
* ``normalize_qk=True`` L2-normalizes q and k first, x / sqrt(||x||^2 + 1e-6) (fla's ``l2norm``
  and ``use_qk_l2norm_in_kernel``), as DeltaNet and Gated DeltaNet do; then ||k_t||^2 < 1.
  Without it, keys are used as given.

Conventions of the papers and of flash-linear-attention (fla), for readers of either: the papers
write the state as S_t = M_t^T (D_v x D_k), S_t = S_{t-1}(I - beta_t k_t k_t^T) + beta_t v_t k_t^T,
o_t = S_t q_t; fla's kernels keep (D_k, D_v) as here, take (B, T, H, D) tensors (heads after
tokens), scale q by 1/sqrt(D_k) by default (y is linear in q: multiply the output by D_k**-0.5,
after normalize_qk too, for the same outputs) and take the gate in log space, g_t = log gamma_t.

Shapes: q, k (..., N, D_k); v (..., N, D_v); beta, gamma (..., N), broadcast to q's leading
dims; outputs (..., N, D_v). ``initial_state`` (..., D_k, D_v) is M_0 (default 0);
``output_final_state=True`` returns ``(y, M_N)`` instead of ``y``, as flash-linear-attention's
functions do, so a long sequence can be processed piece by piece.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch

from . import _checks
from ._chunking import _check_chunk, _check_gamma, _log_gamma, _to_chunks, segment_sum

__all__ = [
    "delta_rule_parallel",
    "delta_rule_recurrent",
    "delta_rule_chunked",
    "gated_delta_rule_parallel",
    "gated_delta_rule_recurrent",
    "gated_delta_rule_chunked",
    "DEFAULT_DELTA_CHUNK",
    "BETA_MAX",
]

# the fastest of C = 32, 64, 128 for the plain delta rule at N = 4096, D = 64 on a 2-core CPU, one thread
DEFAULT_DELTA_CHUNK = 32

# beta's largest value: with unit keys, I - beta k k^T then has eigenvalues in [-1, 1] (Grazzi et al. 2024)
BETA_MAX = 2.0
# beta_t ||k_t||^2 above 2 makes |1 - beta ||k||^2| > 1; the warning allows this much rounding (relative,
# or 16 of the dtype's eps if that is more), so that unit keys with beta = 2 never warn
_STABLE_SLACK = 1e-4
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


# --------------------------------------------------------------------------- checks
def _check_beta(beta, q: torch.Tensor) -> torch.Tensor:
    """beta must be (..., N), broadcastable to q's leading dims, values in [0, 2]."""
    _checks.tensor("beta", beta, min_dim=1)
    n = q.shape[-2]
    if beta.shape[-1] != n:
        raise ValueError(f"beta must have shape (..., N) with N = {n}, got {tuple(beta.shape)}")
    try:
        torch.broadcast_shapes(beta.shape, q.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"beta of shape {tuple(beta.shape)} does not broadcast to q's (..., N) = {tuple(q.shape[:-1])}"
        ) from None
    if beta.device.type != "meta" and not bool(((beta >= 0) & (beta <= BETA_MAX)).all()):
        raise ValueError(
            f"beta must lie in [0, 2], got min {beta.min().item():.3g}, max {beta.max().item():.3g}"
        )
    return beta


def _outside_caller() -> int:
    """The ``stacklevel`` of warnings.warn, called here, that names the first frame outside attn_core."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR:
        frame, level = frame.f_back, level + 1
    return level


def _warn_if_unstable(k: torch.Tensor, beta: torch.Tensor) -> None:
    """RuntimeWarning when some beta_t ||k_t||^2 > 2: the state can then grow without bound.

    One pass over k (O(N D_k)) and one number read back; skipped on the meta device (no values).
    """
    if k.device.type == "meta" or beta.device.type == "meta":
        return
    with torch.no_grad():
        work = torch.promote_types(torch.promote_types(k.dtype, beta.dtype), torch.float32)
        step = beta.to(work) * k.to(work).square().sum(-1)  # (..., N): beta_t ||k_t||^2
        worst = step.max().item()
    slack = max(_STABLE_SLACK, 16 * torch.finfo(k.dtype).eps)
    if not worst <= 2 * (1 + slack):  # also catches NaN
        warnings.warn(
            f"beta_t ||k_t||^2 reaches {worst:.3g} > 2: I - beta_t k_t k_t^T then has the eigenvalue "
            f"1 - beta_t ||k_t||^2 < -1 and the state can grow without bound (one gradient step of size "
            f"beta_t on 1/2 ||M^T k_t - v_t||^2 is stable only for beta_t ||k_t||^2 in [0, 2]). "
            f"Normalize the keys (normalize_qk=True, as DeltaNet does) or keep beta_t ||k_t||^2 <= 2.",
            RuntimeWarning, stacklevel=_outside_caller(),
        )


def _l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(||x||^2 + eps) along the last dim: fla's ``l2norm`` (differentiable)."""
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + eps)


def _check_scalar_gamma(gamma, q: torch.Tensor) -> torch.Tensor:
    _checks.tensor("gamma", gamma, min_dim=1)
    if gamma.dim() >= q.dim() and gamma.shape[-2] == q.shape[-2]:
        raise ValueError(
            f"gamma of the gated delta rule is one gate per token, shape (..., N), got {tuple(gamma.shape)}"
        )
    return _check_gamma(gamma, q)


def _prepare(q, k, v, beta, gamma, initial_state, normalize_qk=False):
    """Check everything; return (q, k, N, D_k, D_v, lead, beta, gamma, initial_state expanded or None).

    q and k come back L2-normalized when ``normalize_qk``; warns when some beta_t ||k_t||^2 > 2.
    """
    n, d_k, d_v = _checks.qkv(q, k, v)
    beta = _check_beta(beta, q)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], beta.shape[:-1])
    if gamma is not None:
        gamma = _check_scalar_gamma(gamma, q)
        lead = torch.broadcast_shapes(lead, gamma.shape[:-1])
    if initial_state is not None:
        _checks.tensor("initial_state", initial_state, min_dim=2)
        if tuple(initial_state.shape[-2:]) != (d_k, d_v):
            raise ValueError(
                f"initial_state must have shape (..., D_k, D_v) = (..., {d_k}, {d_v}), "
                f"got {tuple(initial_state.shape)}"
            )
        try:
            lead = torch.broadcast_shapes(lead, initial_state.shape[:-2])
        except RuntimeError:
            raise ValueError(
                f"initial_state of shape {tuple(initial_state.shape)} does not broadcast to the batch dims "
                f"{tuple(lead)}"
            ) from None
        initial_state = initial_state.to(q.dtype).expand(*lead, d_k, d_v)
    if not isinstance(normalize_qk, bool):
        raise ValueError(f"normalize_qk must be True or False, got {normalize_qk!r}")
    if normalize_qk:
        q, k = _l2_normalize(q), _l2_normalize(k)
    _warn_if_unstable(k, beta)
    return q, k, n, d_k, d_v, lead, beta, gamma, initial_state


def _unit_lower_inverse(a: torch.Tensor, base: int = 16) -> torch.Tensor:
    """(I + A)^-1 for A strictly lower triangular, (..., C, C): blockwise, for many small C at once.

    With A = [[A11, 0], [A21, A22]] the inverse is [[T11, 0], [-T22 A21 T11, T22]], Tii = (I + Aii)^-1:
    the two halves are inverted together (stacked), down to blocks of ``base`` rows, which a
    triangular solve inverts. Matrix products do most of the work, which is faster on a CPU than
    one batched triangular solve of C x C (LAPACK, one small problem at a time).
    """
    c = a.shape[-1]
    if c <= base or c % 2:
        eye = torch.eye(c, dtype=a.dtype, device=a.device).expand_as(a)
        return torch.linalg.solve_triangular(a, eye, upper=False, unitriangular=True)
    h = c // 2
    halves = _unit_lower_inverse(torch.stack([a[..., :h, :h], a[..., h:, h:]]), base)  # (2, ..., h, h)
    t11, t22 = halves[0], halves[1]
    t21 = -(t22 @ a[..., h:, :h]) @ t11  # (..., h, h)
    top = torch.cat([t11, torch.zeros_like(t11)], -1)  # (..., h, C)
    return torch.cat([top, torch.cat([t21, t22], -1)], -2)  # (..., C, C)


# --------------------------------------------------------------------------- parallel
def gated_delta_rule_parallel(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor | None,
    *, initial_state: torch.Tensor | None = None, output_final_state: bool = False,
    normalize_qk: bool = False,
):
    """Parallel gated delta rule: Y = (Q K^T * D) (I + A)^-1 diag(beta) V, the whole sequence at once.

    D[i, j] = gamma_{j+1} ... gamma_i for j <= i and 0 above the diagonal (the causal 0/1 mask when
    gamma is None), A = strict_tril(diag(beta) (K K^T * D)): the chunked form with one chunk of N
    tokens, one N x N triangular solve, O(N^2 D) time and O(N^2) memory, like the other parallel forms.
    With an initial state M_0 the corrected values are U = U0 - W M_0, W = (I + A)^-1 diag(beta e^l) K,
    and Y gains diag(e^l) Q M_0 (see the module docstring).
    q, k: (..., N, D_k); v: (..., N, D_v); beta: (..., N) in [0, 2]; gamma: (..., N) in (0, 1] or
    None (= 1); initial_state: (..., D_k, D_v) or None (= 0) -> y (..., N, D_v), and the final state
    M_N (..., D_k, D_v) as ``(y, M_N)`` when ``output_final_state``. ``normalize_qk``: L2-normalize
    q and k first.
    """
    q, k, n, d_k, d_v, lead, beta, gamma, state = _prepare(q, k, v, beta, gamma, initial_state, normalize_qk)
    dt = q.dtype
    q, k, v = (x.expand(*lead, *x.shape[-2:]) for x in (q, k, v))  # (..., N, D_k or D_v)
    b = beta.to(dt).expand(*lead, n)[..., None]  # (..., N, 1)
    if gamma is None:
        decay = torch.ones(n, n, dtype=dt, device=q.device).tril()  # (N, N): the causal mask
        ell = None
    else:
        log_g = _log_gamma(gamma, dt).expand(*lead, n)  # (..., N)
        decay = torch.exp(segment_sum(log_g)).to(dt)  # (..., N, N): e^{l_i - l_j}, 0 above the diagonal
        ell = log_g.cumsum(-1)  # (..., N): log decay from the start to token i
    a = (b * (k @ k.mT) * decay).tril(-1)  # (..., N, N): A, strictly lower triangular
    rhs = b * v  # (..., N, D_v): diag(beta) V
    if state is not None:
        into = b if ell is None else b * torch.exp(ell).to(dt)[..., None]  # (..., N, 1): beta e^l
        rhs = torch.cat([rhs, into * k], -1)  # (..., N, D_v + D_k)
    solved = torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)  # (I + A)^-1 rhs
    u = solved[..., :d_v]  # (..., N, D_v): the corrected values U0 (those of M_0 = 0)
    if state is not None:
        u = u - solved[..., d_v:] @ state  # (..., N, D_v): U0 - W M_0
    y = ((q @ k.mT) * decay) @ u  # (..., N, D_v): (Q K^T * D) U
    if state is not None:  # what each query reads from M_0, decayed to its token
        y = y + (q if ell is None else q * torch.exp(ell).to(dt)[..., None]) @ state
    if not output_final_state:
        return y
    k_out = k if ell is None else k * torch.exp(ell[..., -1:] - ell).to(dt)[..., None]  # (..., N, D_k)
    final = k_out.mT @ u  # (..., D_k, D_v): what the N tokens wrote, decayed to the end
    if state is not None:
        final = final + (state if ell is None else torch.exp(ell[..., -1]).to(dt)[..., None, None] * state)
    return y, final


def delta_rule_parallel(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
    *, initial_state: torch.Tensor | None = None, output_final_state: bool = False,
    normalize_qk: bool = False,
):
    """Parallel delta rule (DeltaNet): Y = tril(Q K^T) (I + A)^-1 diag(beta) V, A = tril_-1(diag(beta) K K^T).

    :func:`gated_delta_rule_parallel` with gamma = 1; same arguments and returns.
    """
    return gated_delta_rule_parallel(q, k, v, beta, None, initial_state=initial_state,
                                     output_final_state=output_final_state, normalize_qk=normalize_qk)


# --------------------------------------------------------------------------- recurrent
def gated_delta_rule_recurrent(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor | None,
    *, initial_state: torch.Tensor | None = None, output_final_state: bool = False,
    normalize_qk: bool = False,
):
    """Recurrent gated delta rule: M_t = gamma_t (I - beta_t k_t k_t^T) M_{t-1} + beta_t k_t v_t^T.

    Computed as M_t = gamma_t M_{t-1} + k_t u_t^T, u_t = beta_t (v_t - gamma_t M_{t-1}^T k_t), and
    y_t = M_t^T q_t, one token at a time (the inference form; a Python loop, for clarity).
    q, k: (..., N, D_k); v: (..., N, D_v); beta: (..., N) in [0, 2]; gamma: (..., N) in (0, 1]
    or None (= 1); initial_state: (..., D_k, D_v) or None (= 0) -> y (..., N, D_v), and the final
    state M_N (..., D_k, D_v) as ``(y, M_N)`` when ``output_final_state``. ``normalize_qk``:
    L2-normalize q and k first (see the module docstring).
    """
    q, k, n, d_k, d_v, lead, beta, gamma, state = _prepare(q, k, v, beta, gamma, initial_state, normalize_qk)
    dt = q.dtype
    if state is None:
        state = q.new_zeros(*lead, d_k, d_v)  # (..., D_k, D_v): M_0
    ys = []
    for t in range(n):
        k_t, v_t = k[..., t, :], v[..., t, :]  # (..., D_k), (..., D_v)
        b_t = beta[..., t, None].to(dt)  # (..., 1)
        old = (k_t[..., None, :] @ state)[..., 0, :]  # (..., D_v): M_{t-1}^T k_t, what k_t reads now
        if gamma is not None:
            g_t = gamma[..., t, None].to(dt)  # (..., 1)
            state, old = g_t[..., None] * state, g_t * old
        u_t = b_t * (v_t - old)  # (..., D_v): the corrected value
        state = state + k_t[..., :, None] * u_t[..., None, :]  # (..., D_k, D_v)
        ys.append((q[..., t, None, :] @ state)[..., 0, :])  # (..., D_v): M_t^T q_t
    y = torch.stack(ys, dim=-2)  # (..., N, D_v)
    return (y, state) if output_final_state else y


def delta_rule_recurrent(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
    *, initial_state: torch.Tensor | None = None, output_final_state: bool = False,
    normalize_qk: bool = False,
):
    """Recurrent delta rule (DeltaNet): M_t = (I - beta_t k_t k_t^T) M_{t-1} + beta_t k_t v_t^T.

    :func:`gated_delta_rule_recurrent` with gamma = 1; same arguments and returns.
    """
    return gated_delta_rule_recurrent(q, k, v, beta, None, initial_state=initial_state,
                                      output_final_state=output_final_state, normalize_qk=normalize_qk)


# --------------------------------------------------------------------------- chunked
def gated_delta_rule_chunked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor | None,
    chunk: int = DEFAULT_DELTA_CHUNK,
    *, initial_state: torch.Tensor | None = None, output_final_state: bool = False,
    normalize_qk: bool = False,
):
    """Chunked gated delta rule, by the WY / UT representation (see the module docstring).

    Everything inside a chunk (the C x C triangular solves, the decays, Q K^T) is computed for
    all chunks at once; the state crosses the N/C chunk borders in a loop of small matmuls, so
    autograd keeps one D_k x D_v state per chunk (the recurrent form keeps one per token).
    N need not be a multiple of C (padding: zero q, k, v, beta = 0, gamma = 1,
    tokens that change nothing). Arguments and returns as :func:`gated_delta_rule_recurrent`.
    """
    q, k, n, d_k, d_v, lead, beta, gamma, state = _prepare(q, k, v, beta, gamma, initial_state, normalize_qk)
    chunk = _check_chunk(chunk)
    c = min(chunk, n)
    dt = q.dtype
    qc, kc, vc = (_to_chunks(x, lead, c) for x in (q, k, v))  # (B', N/C, C, D_k or D_v)
    bc = _to_chunks(beta[..., None], lead, c)[..., 0].to(dt)  # (B', N/C, C); padding beta = 0
    t = qc.shape[1]
    if gamma is None:
        decay = into = out_of = end = None  # Gamma is the causal 0/1 mask
    else:
        log_g = _to_chunks(_log_gamma(gamma, dt)[..., None], lead, c)[..., 0]  # (B', N/C, C); pad 0
        ell = log_g.cumsum(-1)  # (B', N/C, C): log decay from the chunk start to token i
        decay = torch.exp(segment_sum(log_g)).to(dt)  # (B', N/C, C, C): exp(l_i - l_j), 0 above diag
        into = torch.exp(ell).to(dt)[..., None]  # (B', N/C, C, 1): decay of the entering state at i
        out_of = torch.exp(ell[..., -1:] - ell).to(dt)[..., None]  # (B', N/C, C, 1): from j to the chunk end
        end = torch.exp(ell[..., -1]).to(dt)[..., None, None]  # (B', N/C, 1, 1): the whole chunk
    # the UT transform: (I + A) [U0 | W] = [diag(beta) V | diag(beta e^l) K], A strictly lower
    # triangular: (I + A)^-1 for all chunks at once, then one product for both right-hand sides
    lower = torch.ones(c, c, dtype=dt, device=q.device).tril()  # (C, C): 1 on and below the diagonal
    k_beta = kc * bc[..., None]  # (B', N/C, C, D_k): beta_i k_i
    a = (k_beta @ kc.mT).mul_(lower.tril(-1) if decay is None else decay.tril(-1))  # (B', N/C, C, C): A
    rhs = torch.cat([vc * bc[..., None], k_beta if into is None else k_beta * into], -1)  # (.., C, D_v + D_k)
    if torch.is_grad_enabled() and a.requires_grad:  # autograd keeps less for a solve than for the blocks
        solved = torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)  # (.., C, D_v + D_k)
    else:
        solved = _unit_lower_inverse(a) @ rhs  # (B', N/C, C, D_v + D_k)
    u0, w = solved[..., :d_v], solved[..., d_v:]  # (B', N/C, C, D_v), (B', N/C, C, D_k)
    k_out = kc if out_of is None else kc * out_of  # (B', N/C, C, D_k)
    if state is None:
        state = q.new_zeros(lead.numel(), d_k, d_v)  # (B', D_k, D_v): M_0
    else:
        state = state.reshape(-1, d_k, d_v)  # (B', D_k, D_v)
    q_in = qc if into is None else qc * into  # (B', N/C, C, D_k): queries reading the entering state
    qk = (qc @ kc.mT).mul_(lower if decay is None else decay)  # (B', N/C, C, C): tril(Q K^T * Gamma)
    ys = []
    for i in range(t):  # the only sequential part: N/C steps, each state used (and saved) once
        u = torch.baddbmm(u0[:, i], w[:, i], state, alpha=-1)  # (B', C, D_v): U0 - W M, corrected values
        ys.append(torch.baddbmm(q_in[:, i] @ state, qk[:, i], u))  # (B', C, D_v)
        kept = state if end is None else end[:, i] * state  # (B', D_k, D_v)
        state = torch.baddbmm(kept, k_out[:, i].mT, u)  # (B', D_k, D_v): the state leaving chunk i
    y = torch.stack(ys, 1)  # (B', N/C, C, D_v)
    y = y.reshape(*lead, t * c, d_v)[..., :n, :]  # (..., N, D_v)
    return (y, state.reshape(*lead, d_k, d_v)) if output_final_state else y


def delta_rule_chunked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, chunk: int = DEFAULT_DELTA_CHUNK,
    *, initial_state: torch.Tensor | None = None, output_final_state: bool = False,
    normalize_qk: bool = False,
):
    """Chunked delta rule (DeltaNet): :func:`gated_delta_rule_chunked` with gamma = 1."""
    return gated_delta_rule_chunked(q, k, v, beta, None, chunk, initial_state=initial_state,
                                    output_final_state=output_final_state, normalize_qk=normalize_qk)
