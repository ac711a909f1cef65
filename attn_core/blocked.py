"""The tuned CPU path of chunked linear attention: the same maths, block by block, without autograd.

:func:`attn_core.linear.causal_linear_attention_chunked` and
:func:`~attn_core.linear.gated_linear_attention_chunked` (scalar gate) take this path when autograd
is not recording and the batch holds more than :data:`BLOCK_TOKENS` tokens (:func:`runs_blocked`
says whether a call does). Processing a sequence in blocks of whole chunks keeps every temporary the
size of one block (or of the gate), and the buffers are reused from block to block, so the only
allocation of N D values is the output. Same maths as the vectorized forms; tests/test_linear.py
checks they agree. How the block size and the chunk sizes were chosen: bench/README.md.
"""

from __future__ import annotations

import itertools
import math

import torch

from ._chunking import _decay_matrix, _is_vector_gate

__all__ = ["BLOCK_TOKENS", "runs_blocked", "factor_bound", "blocked_chunked"]

#: tokens per block: every temporary holds one block, whatever N is (chosen in bench/README.md)
BLOCK_TOKENS = 2048


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
    :func:`factor_bound`, and no query so large that e^span times it overflows (log_g: (..., N))."""
    totals = log_g[..., : full * c].unflatten(-1, (full, c)).sum(-1)  # (..., N/C): l_C of each chunk
    span = -float(totals.min())  # the largest decay of a chunk, in log space
    if span > factor_bound(q.dtype):
        return False
    lo, hi = torch.aminmax(q)  # one pass over q, no temporary
    return max(-float(lo), float(hi)) * math.exp(span) < torch.finfo(q.dtype).max


def blocked_chunked(q, k, v, log_g, c: int, block_tokens: int) -> torch.Tensor:
    """Chunked (gated) linear attention in blocks of whole chunks, with bounded, reused buffers.

    The same maths as the vectorized forms, for inference (no autograd: products are written into
    their destinations with ``out=`` and in place). One sequence and one block of
    P = block_tokens / C chunks at a time, into views of one buffer sized by the block, not by N:
    the scores (P, C, C), the states entering the chunks (P + 1, D_k, D_v), and the block's
    queries, keys and values (P, C, D). The inputs may be any strided views (expanded heads too):
    each sequence is read in place, block by block, and the only allocation of N D values is the
    output.

    The state is carried by P small in-place additions per block, M_{i+1} = U_i + a_i M_i, where
    U_i = K_i^T V_i (keys decayed to the chunk's end with a gate) is written by bmm straight into
    the state that follows chunk i, and a_i = 1 without a gate: no cumsum, no separate buffer. In
    float16 and bfloat16 the running sum is kept in a float32 copy, since rounding it to 16 bits
    after every chunk loses precision as N grows. A last chunk shorter than C is done on its own,
    so nothing is padded.

    Without a gate, the block's queries, keys and values are copied into the buffer first, which
    pays for itself: a copy streams them in from memory, where a matmul reading them in place stalls
    on cache misses (measured once by hand in blocks of 2048 tokens, B' = 4, N = 8K, D = 64, 2
    threads: Q K^T took 1.7 ms over all blocks after the copies, 2.7-2.9 ms reading q and k in
    place; the whole call 9.4 ms with the copies' 1.1 ms, 9.8-10.1 ms without). With a gate the
    values are copied and the keys written scaled, e^(l_C - l_j) k_j; the decay inside a chunk is
    factored onto queries and keys when every chunk of the call allows it (:func:`factor_bound`,
    checked once per call), and the scores are then one matmul of scaled queries and keys, as in
    the plain form. Otherwise (a chunk that forgets more than factor_bound allows, e^-22.2 in
    float32, or queries too large for the dtype) the scores of the raw queries and keys are
    multiplied by the exact decay matrix exp(segment_sum(log gamma)), as in the vectorized form. The
    gate's own small temporaries ((P, C) per block, and the (P, C, C) decay matrices on the exact
    path) are allocated per block.
    q, k: (..., N, D_k); v: (..., N, D_v), all with the same leading dims; log_g: (..., N) or None
    (no gate) -> (..., N, D_v).
    """
    *lead, n, d_k = q.shape
    d_v = v.shape[-1]
    dt = q.dtype
    y = torch.empty(*lead, n, d_v, dtype=dt, device=q.device)  # (..., N, D_v): the output
    p_max = max(1, block_tokens // c)  # chunks per block
    full = n // c  # whole chunks; a shorter last chunk is done on its own
    # Every block-sized buffer is a view of one allocation: freed, one block is kept by glibc's
    # malloc for the next call (its trim threshold rises to twice the largest block it has
    # unmapped), where several smaller ones are given back to the kernel and fault in again.
    sizes = [p_max * c * c, (p_max + 1) * d_k * d_v, p_max * c * d_k, p_max * c * d_k, p_max * c * d_v]
    work = torch.empty(sum(sizes), dtype=dt, device=q.device).split(sizes)  # views of one allocation
    scores = work[0].view(p_max, c, c)  # (P, C, C), reused by every block
    states = work[1].view(p_max + 1, d_k, d_v)  # (P + 1, D_k, D_v): states[i] enters chunk i
    sts = states.unbind(0)  # a view of each state, taken once per call
    q_buf, k_buf = work[2].view(p_max, c, d_k), work[3].view(p_max, c, d_k)  # (P, C, D_k)
    v_buf = work[4].view(p_max, c, d_v)  # (P, C, D_v)
    wide = torch.promote_types(dt, torch.float32)
    acc = None if wide == dt else torch.empty(d_k, d_v, dtype=wide, device=q.device)  # 16-bit: running sum
    gated = log_g is not None
    factored = gated and _spans_fit(log_g, c, full, q)
    ones = [1.0] * p_max  # a_i without a gate

    def carry(p: int, decays: list[float]) -> None:
        """states[i + 1] holds U_i on entry and M_{i+1} = U_i + a_i M_i on exit, for i < p."""
        if acc is None:
            for i in range(p):
                sts[i + 1].add_(sts[i], alpha=decays[i])
        else:
            for i in range(p):
                torch.add(sts[i + 1], acc, alpha=decays[i], out=acc)
                sts[i + 1].copy_(acc)

    for idx in itertools.product(*map(range, lead)):  # one sequence at a time: (N, D) views
        # the sequence's whole chunks, (N/C, C, D) each, split into blocks of P chunks
        blocks = [x[idx][: full * c].unflatten(0, (full, c)).split(p_max) for x in (q, k, v, y)]
        gates = log_g[idx][: full * c].view(full, c).split(p_max) if gated else [None] * len(blocks[0])
        sts[0].zero_()  # M = 0 before the first chunk
        if acc is not None:
            acc.zero_()
        for qb, kb, vb, yb, lg in zip(*blocks, gates):  # (P, C, D) views of the inputs; lg (P, C) or None
            p = qb.shape[0]
            vb = v_buf[:p].copy_(vb)
            if lg is None:
                qb, kb = q_buf[:p].copy_(qb), k_buf[:p].copy_(kb)
                s = torch.bmm(qb, kb.mT, out=scores[:p]).tril_()  # (P, C, C): tril(Q_c K_c^T)
                torch.bmm(s, vb, out=yb)  # intra-chunk part
                torch.bmm(kb.mT, vb, out=states[1 : p + 1])  # states[i + 1] = K_i^T V_i, for now
                carry(p, ones)  # the states entering the chunks: M_{i+1} = K_i^T V_i + M_i
                yb.baddbmm_(qb, states[:p])  # y += Q_c M_{c-1}
            else:
                cum = lg.cumsum(-1)  # (P, C): l_i, log decay from the chunk start
                last = cum[:, -1:]  # (P, 1): l_C, the chunk's total
                # keys scaled to the chunk's end, e^(l_C - l_j) <= 1: what each key writes into the state
                k_out = torch.mul(kb, torch.exp(last - cum).to(dt)[..., None], out=k_buf[:p])  # (P, C, D_k)
                if factored:  # scores (q_i e^(l_i - l_C)) . (k_j e^(l_C - l_j)) = e^(l_i - l_j) q_i . k_j
                    q_s = torch.mul(qb, torch.exp(cum - last).to(dt)[..., None], out=q_buf[:p])
                    s = torch.bmm(q_s, k_out.mT, out=scores[:p]).tril_()  # (P, C, C)
                else:  # exact: the decay matrix from segment sums, 0 above the diagonal
                    s = torch.bmm(qb, kb.mT, out=scores[:p]).mul_(_decay_matrix(lg).to(dt))  # (P, C, C)
                torch.bmm(s, vb, out=yb)  # intra-chunk part
                torch.bmm(k_out.mT, vb, out=states[1 : p + 1])  # states[i + 1] = U_i, for now
                carry(p, torch.exp(last[:, 0]).tolist())  # M_{i+1} = U_i + a_i M_i, a_i = e^(l_C)
                q_in = torch.mul(qb, torch.exp(cum).to(dt)[..., None], out=q_buf[:p])  # e^(l_i) q_i
                yb.baddbmm_(q_in, states[:p])  # y += e^(l_i) M^T q_i
            sts[0].copy_(sts[p])  # the carry for the next block
        if full * c < n:  # the last, shorter chunk
            qt, kt, vt, yt = (x[idx][full * c :] for x in (q, k, v, y))  # (r, D)
            if not gated:
                torch.mm(torch.mm(qt, kt.T).tril_(), vt, out=yt)
                yt.addmm_(qt, sts[0])
            else:
                lg = log_g[idx][full * c :]  # (r,)
                st_in = torch.exp(lg.cumsum(-1)).to(dt)[:, None]  # (r, 1)
                torch.mm(torch.mm(qt, kt.T).mul_(_decay_matrix(lg).to(dt)), vt, out=yt)
                yt.addmm_(qt * st_in, sts[0])
    return y


# ------------------------------------------------------------------------ when it runs
def use_blocks(lead: torch.Size, n: int, q, k, v, gamma=None) -> bool:
    """Whether a chunked form runs block by block.

    Only when nothing will be differentiated (the blocks write into buffers with out=, which
    autograd does not allow) and the batch holds more than one block of tokens: a smaller input
    is done at once, in fewer and larger operations, its temporaries no larger than one block's.
    """
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, gamma)):
        return False
    if q.device.type == "meta":  # the blocked path reads values (the gates choose how it runs)
        return False
    return q.dtype == k.dtype == v.dtype and lead.numel() * n > BLOCK_TOKENS  # read at call time


def runs_blocked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gamma: torch.Tensor | None = None,
                 ) -> bool:
    """Whether the chunked form called now on these inputs (plain, or gated with ``gamma``) runs
    block by block: without autograd recording it, on a real device, with more than BLOCK_TOKENS
    tokens over all batch dims and heads together (B H N), and never for a vector gate.

    q, k: (..., N, D_k); v: (..., N, D_v); gamma: None, (..., N) or (..., N, D_k). Shapes are
    what count, not values: expanded views of one small tensor will do.
    """
    shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]]
    if gamma is not None:
        if _is_vector_gate(gamma, q):
            return False
        shapes.append(gamma.shape[:-1])
    return use_blocks(torch.broadcast_shapes(*shapes), q.shape[-2], q, k, v, gamma)
