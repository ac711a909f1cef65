"""What the chunked forms of linear attention and of the delta rule share: argument checks, decays
in log space, chunk reshapes and the scan of chunk states (used by :mod:`attn_core.linear`,
:mod:`attn_core.delta` and :mod:`attn_core.blocked`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import _checks

SCAN_BLOCK = 16  # chunks per block of _chunk_states' scan (the fastest by measurement: bench/README.md)


# --------------------------------------------------------------------------- checks
def _check_gamma(gamma, q: torch.Tensor, vector_ok: bool = False) -> torch.Tensor:
    """gamma must be (..., N), broadcastable to q's leading dims, values in (0, 1].

    With ``vector_ok``, gamma may also be a vector gate (..., N, D_k), one gate per key
    dimension: it is one when it has at least as many dims as q and its dim -2 is N.
    """
    _checks.tensor("gamma", gamma, min_dim=1)
    n, d_k = q.shape[-2], q.shape[-1]
    if vector_ok and _is_vector_gate(gamma, q):
        if gamma.shape[-1] != d_k:
            raise ValueError(
                f"gamma as a vector gate must have shape (..., N, D_k) with D_k = {d_k} (q's last dim), "
                f"got {tuple(gamma.shape)}"
            )
        target = q.shape
    else:
        if gamma.shape[-1] != n:
            vec = f", or (..., N, D_k) with as many dims as q {tuple(q.shape)}" if vector_ok else ""
            raise ValueError(f"gamma must have shape (..., N) with N = {n}{vec}, got {tuple(gamma.shape)}")
        target = q.shape[:-1]
    try:
        torch.broadcast_shapes(gamma.shape, target)
    except RuntimeError:
        raise ValueError(
            f"gamma of shape {tuple(gamma.shape)} does not broadcast to q's {tuple(target)}"
        ) from None
    if gamma.device.type != "meta" and not bool(((gamma > 0) & (gamma <= 1)).all()):
        raise ValueError(
            f"gamma must lie in (0, 1], got min {gamma.min().item():.3g}, max {gamma.max().item():.3g}"
        )
    return gamma


def _is_vector_gate(gamma: torch.Tensor, q: torch.Tensor) -> bool:
    """A vector gate (..., N, D_k) has at least as many dims as q and N in its dim -2."""
    return gamma.dim() >= q.dim() and gamma.shape[-2] == q.shape[-2]


def _check_chunk(chunk) -> int:
    return _checks.positive_int("chunk", chunk)


def _log_gamma(gamma: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """log gamma in at least float32, and in gamma's own precision if higher (float64 stays float64).

    Taking the log before any cast keeps a float64 gamma below float32's range (1e-50) finite.
    """
    work = torch.promote_types(torch.promote_types(dtype, torch.float32), gamma.dtype)
    return torch.log(gamma.to(work))


def segment_sum(x: torch.Tensor) -> torch.Tensor:
    """Pairwise segment sums of the last dim: out[..., t, s] = x[s+1] + ... + x[t].

    x: (..., T) -> (..., T, T); the diagonal is 0 and entries above it
    (s > t) are -inf, so ``exp(segment_sum(log gamma))`` is the decay matrix
    D of the gated parallel form. Each entry is a cumulative sum of the terms
    it covers, not a difference of two prefix sums, so it keeps full relative precision (no
    cancellation) for
    very negative logs (Mamba-2's ``segsum``).
    """
    t = x.shape[-1]
    ones = torch.ones(t, t, dtype=torch.bool, device=x.device)
    xx = torch.where(ones.tril(-1), x[..., :, None], 0.0)  # (..., T, T): xx[i, j] = x[i] if i > j, else 0
    # out[..., t, s] = sum_{s < i <= t} x[i]; the new tensor xx is summed and masked in place
    return xx.cumsum_(-2).masked_fill_(~ones.tril(), float("-inf"))


def _pad_to_chunks(x: torch.Tensor, chunk: int, dim: int, value: float = 0.0) -> torch.Tensor:
    """Right-pad dimension ``dim`` (negative) of x to a multiple of ``chunk``."""
    n = x.shape[dim]
    pad = (-n) % chunk
    if pad == 0:
        return x
    widths = [0, 0] * (-dim - 1) + [0, pad]
    return F.pad(x, widths, value=value)


def _decay_matrix(x: torch.Tensor) -> torch.Tensor:
    """exp(segment_sum(x)), the exponential taken in place: (..., C) -> (..., C, C), 0 above the diagonal."""
    return segment_sum(x).exp_()


def _to_chunks(x: torch.Tensor, lead: torch.Size, c: int) -> torch.Tensor:
    """x (..., N, D) -> (B', N/C, C, D): broadcast to the batch dims ``lead``, flattened to one
    batch dim B' (a view when nothing broadcasts), right-padded with zeros to a multiple of C."""
    x = x.expand(*lead, *x.shape[-2:]).reshape(-1, *x.shape[-2:])  # (B', N, D)
    return _pad_to_chunks(x, c, -2).unflatten(-2, (-1, c))  # (B', N/C, C, D)


def _chunk_states(log_a: torch.Tensor, u: torch.Tensor, block: int = SCAN_BLOCK) -> torch.Tensor:
    """The state entering each chunk: the recurrence M_c = a_c M_{c-1} + U_c, M_{-1} = 0, solved at once.

    log_a: (..., T) log of each chunk's total decay (0 for plain linear attention);
    u: (..., T, D_k, D_v) each chunk's contribution -> (..., T, D_k, D_v) with
        out[c] = M_{c-1} = sum_{c' < c} exp(log_a[c'+1] + ... + log_a[c-1]) U_{c'}.
    For T <= block this is one product with a (T, T) lower-triangular weight matrix (Mamba-2's
    SSD). For longer T the same is done inside blocks of ``block`` chunks, and the states
    between blocks come from the same function one level up, so the work stays linear in T.
    """
    t = log_a.shape[-1]
    if t <= block:
        w = torch.exp(segment_sum(log_a))  # (..., T, T): w[c, c'] = a_{c'+1} ... a_c
        w = F.pad(w[..., :-1, :], (0, 0, 1, 0))  # (..., T, T): shifted one row down: a_{c'+1} ... a_{c-1}
        return (w.to(u.dtype) @ u.flatten(-2)).unflatten(-1, u.shape[-2:])  # (..., T, D_k, D_v)
    x = _pad_to_chunks(log_a, block, -1).unflatten(-1, (-1, block))  # (..., T/P, P)
    ub = _pad_to_chunks(u, block, -3).unflatten(-3, (-1, block))  # (..., T/P, P, D_k, D_v)
    local = _chunk_states(x, ub, block)  # (..., T/P, P, D_k, D_v): what comes from inside the block
    last = local[..., -1, :, :].clone()  # (..., T/P, D_k, D_v); cloned, local is updated in place
    ends = torch.exp(x[..., -1]).to(u.dtype)[..., None, None] * last + ub[..., -1, :, :]  # block's own state
    entering = _chunk_states(x.sum(-1), ends, block)  # (..., T/P, D_k, D_v): state entering each block
    into = F.pad(x[..., :-1], (1, 0)).cumsum(-1)  # (..., T/P, P): log decay from block start to chunk c
    local.addcmul_(torch.exp(into).to(u.dtype)[..., None, None], entering[..., None, :, :])
    return local.flatten(-4, -3)[..., :t, :, :]  # (..., T, D_k, D_v)
