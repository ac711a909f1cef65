"""The chunked linear-attention forms without autograd, block by block (used by attn_core.linear).

Processing a sequence in blocks of whole chunks keeps every temporary the size of one block, and
the buffers are reused from block to block, so the only allocation that grows with N is the output.
Same maths as the vectorized forms of :mod:`attn_core.linear`; the tests check they agree.
"""

from __future__ import annotations

import math

import torch

from .linear import _decay_matrix


def factor_bound(dtype: torch.dtype) -> float:
    """The largest total log decay of a chunk for which the gated blocked path factors the decay.

    Factored, the decay e^(l_i - l_j) inside a chunk is split into e^(l_i - l_C) on the query and
    e^(l_C - l_j) on the key (l_C the chunk's total): the key's factor is at most 1, the query's
    at most e^span with span = -l_C. The bound keeps e^span below max^(1/4) of the dtype (e^22.2
    in float32 and bfloat16, e^2.8 in float16, e^177 in float64), so the scaled keys stay far from
    underflow; the path also checks that the largest query entry times e^span stays below max
    (in float16, whose max is 65504, that is a real limit: a query entry of 5000 would overflow).
    """
    return math.log(torch.finfo(dtype).max) / 4


def _spans_fit(log_g: torch.Tensor, c: int, full: int, q: torch.Tensor) -> bool:
    """Whether the decay may be factored for this call: every whole chunk's total log decay within
    :func:`factor_bound`, and no query so large that e^span times it overflows (log_g: (B', N))."""
    totals = log_g[:, : full * c].unflatten(1, (full, c)).sum(-1)  # (B', N/C): l_C of each chunk
    span = -float(totals.min())  # the largest decay of a chunk, in log space
    if span > factor_bound(q.dtype):
        return False
    lo, hi = torch.aminmax(q)  # one pass over q, no temporary
    return max(-float(lo), float(hi)) * math.exp(span) < torch.finfo(q.dtype).max


def _blocked_chunked(q, k, v, log_g, c: int, block_tokens: int) -> torch.Tensor:
    """Chunked (gated) linear attention in blocks of whole chunks, with bounded, reused buffers.

    The same maths as the vectorized forms, for inference (no autograd: products are written into
    their destinations with ``out=`` and in place). One sequence and one block of
    P = block_tokens / C chunks at a time: the scores (P, C, C), the chunk states (P + 1, D_k, D_v)
    and the scaled queries and keys (P, C, D_k) are views of one buffer sized by the block, not by
    N, and the only N-sized allocation is the output. The state entering the block is carried from the
    block before. A last chunk shorter than C is done on its own, so nothing is padded or copied.

    With a gate, the decay inside a chunk is factored onto the queries and keys when every chunk of
    the call allows it (:func:`factor_bound`, checked once per call); the scores are then one matmul
    of scaled queries and keys, as in the plain form. Otherwise (a chunk that forgets more than
    factor_bound allows, e^-22.2 in float32, or queries too large for the dtype) the exact decay
    matrix exp(segment_sum(log gamma)) multiplies the scores, as in the vectorized form.
    q, k: (B', N, D_k); v: (B', N, D_v); log_g: (B', N) or None (no gate) -> (B', N, D_v).
    """
    nb, n, d_k = q.shape
    d_v = v.shape[-1]
    dt = q.dtype
    y = torch.empty(nb, n, d_v, dtype=dt, device=q.device)  # (B', N, D_v): the output
    p_max = max(1, block_tokens // c)  # chunks per block
    full = n // c  # whole chunks; a shorter last chunk is done on its own
    gated = log_g is not None
    # Every scratch buffer is a view of one allocation: freed, one block is kept by glibc's malloc
    # for the next call (its trim threshold rises to twice the largest block it has unmapped), where
    # several smaller ones are given back to the kernel and fault in again on every call.
    # The states' rows are 16 values longer than D_k D_v: a cumsum down rows 2^k bytes apart (16 KiB
    # for D = 64) thrashes the cache and is several times slower.
    sizes = [p_max * c * c, p_max * d_k * d_v, (p_max + 1) * (d_k * d_v + 16)] + [p_max * c * d_k] * 2 * gated
    work = torch.empty(sum(sizes), dtype=dt, device=q.device).split(sizes)  # views of one allocation
    scores = work[0].view(p_max, c, c)  # (P, C, C), reused by every block
    kv = work[1].view(p_max, d_k, d_v)  # (P, D_k, D_v): each chunk's K^T V or U
    # (P + 1, D_k, D_v) states, a strided view (bmm writes into kv, contiguous, and not here: into
    # a strided out= it falls back to one small matmul per chunk)
    states = work[2].view(p_max + 1, d_k * d_v + 16)[:, : d_k * d_v].unflatten(1, (d_k, d_v))
    factored = False
    if gated:
        q_buf = work[3].view(p_max, c, d_k)  # (P, C, D_k): scaled queries
        k_buf = work[4].view(p_max, c, d_k)  # (P, C, D_k): scaled keys
        factored = _spans_fit(log_g, c, full, q)
    for seq in range(nb):
        states[0].zero_()  # M = 0 before the first chunk
        for c0 in range(0, full, p_max):
            p = min(p_max, full - c0)
            rows = slice(c0 * c, (c0 + p) * c)
            qb, kb, vb = (x[seq, rows].unflatten(0, (p, c)) for x in (q, k, v))  # (P, C, D) views
            yb = y[seq, rows].unflatten(0, (p, c))  # (P, C, D_v), a view of the output
            st = states[: p + 1]  # st[0] holds the state entering this block
            if log_g is None:
                s = torch.bmm(qb, kb.mT, out=scores[:p]).tril_()  # (P, C, C): tril(Q_c K_c^T)
                torch.bmm(s, vb, out=yb)  # intra-chunk part
                st[1:].copy_(torch.bmm(kb.mT, vb, out=kv[:p]))  # st[i + 1] = K_i^T V_i
                st.cumsum_(0)  # st[i] = state entering chunk i of the block; st[p] leaves the block
                yb.baddbmm_(qb, st[:p])  # y += Q_c M_{c-1}
            else:
                cum = log_g[seq, rows].view(p, c).cumsum(-1)  # (P, C): l_i, log decay from the chunk start
                last = cum[:, -1:]  # (P, 1): l_C, the chunk's total
                # keys scaled to the chunk's end, e^(l_C - l_j) <= 1: what each key writes into the state
                k_out = torch.mul(kb, torch.exp(last - cum).to(dt)[..., None], out=k_buf[:p])  # (P, C, D_k)
                if factored:  # scores (q_i e^(l_i - l_C)) . (k_j e^(l_C - l_j)) = e^(l_i - l_j) q_i . k_j
                    q_s = torch.mul(qb, torch.exp(cum - last).to(dt)[..., None], out=q_buf[:p])
                    s = torch.bmm(q_s, k_out.mT, out=scores[:p]).tril_()  # (P, C, C)
                else:  # exact: the decay matrix from segment sums, 0 above the diagonal
                    decay = _decay_matrix(log_g[seq, rows].view(p, c)).to(dt)  # (P, C, C)
                    s = torch.bmm(qb, kb.mT, out=scores[:p]).mul_(decay)
                torch.bmm(s, vb, out=yb)  # intra-chunk part
                u = torch.bmm(k_out.mT, vb, out=kv[:p])  # (P, D_k, D_v): U_i
                # the states entering the chunks, M_{i+1} = a_i M_i + U_i from the carry M_0 = st[0], one
                # chunk after the other: P small in-place products, cheaper than any scan over the block
                decays = torch.exp(last[:, 0]).tolist()  # a_i, the decay over the whole chunk i
                sts, us = st.unbind(0), u.unbind(0)  # views, taken once
                for i in range(p):
                    torch.add(us[i], sts[i], alpha=decays[i], out=sts[i + 1])
                q_in = torch.mul(qb, torch.exp(cum).to(dt)[..., None], out=q_buf[:p])  # e^(l_i) q_i
                yb.baddbmm_(q_in, st[:p])  # y += e^(l_i) M^T q_i
            states[0].copy_(st[p])  # the carry for the next block
        if full * c < n:  # the last, shorter chunk
            rows = slice(full * c, n)
            qt, kt, vt = q[seq, rows], k[seq, rows], v[seq, rows]  # (r, D)
            carry = states[0]
            if log_g is None:
                torch.mm(torch.mm(qt, kt.T).tril_(), vt, out=y[seq, rows])
                y[seq, rows].addmm_(qt, carry)
            else:
                lg = log_g[seq, rows]  # (r,)
                st_in = torch.exp(lg.cumsum(-1)).to(dt)[:, None]  # (r, 1)
                torch.mm(torch.mm(qt, kt.T).mul_(_decay_matrix(lg).to(dt)), vt, out=y[seq, rows])
                y[seq, rows].addmm_(qt * st_in, carry)
    return y
