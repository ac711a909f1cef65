"""The chunked linear-attention forms without autograd, block by block (used by attn_core.linear).

Processing a sequence in blocks of whole chunks keeps every temporary the size of one block, and
the buffers are reused from block to block, so the only allocation that grows with N is the output.
Same maths as the vectorized forms of :mod:`attn_core.linear`; the tests check they agree.
"""

from __future__ import annotations

import torch

from .linear import _decay_matrix


def _blocked_chunked(q, k, v, log_g, c: int, block_tokens: int) -> torch.Tensor:
    """Chunked (gated) linear attention in blocks of whole chunks, with bounded, reused buffers.

    The same maths as the vectorized forms below, for inference (no autograd: products are
    written into their destinations with ``out=`` and in place). One sequence and one block of
    P = block_tokens / C chunks at a time: the scores (P, C, C), the chunk states (P + 1, D_k, D_v)
    and the gate's decays live in buffers sized by the block, not by N, and the only N-sized
    allocation is the output. The state entering the block is carried from the block before.
    A last chunk shorter than C is done on its own, so nothing is padded or copied.
    q, k: (B', N, D_k); v: (B', N, D_v); log_g: (B', N) or None (no gate) -> (B', N, D_v).
    """
    nb, n, d_k = q.shape
    d_v = v.shape[-1]
    dt = q.dtype
    y = torch.empty(nb, n, d_v, dtype=dt, device=q.device)  # (B', N, D_v): the output
    p_max = max(1, block_tokens // c)  # chunks per block
    scores = torch.empty(p_max, c, c, dtype=dt, device=q.device)  # (P, C, C), reused by every block
    kv = torch.empty(p_max, d_k, d_v, dtype=dt, device=q.device)  # (P, D_k, D_v): each chunk's K^T V or U
    # (P + 1, D_k, D_v) states, each row 16 values longer than D_k D_v: a cumsum down rows 2^k bytes
    # apart (16 KiB for D = 64) thrashes the cache and is several times slower. (bmm writes into kv,
    # contiguous, and not here: into a strided out= it falls back to one small matmul per chunk.)
    states = torch.empty(p_max + 1, d_k * d_v + 16, dtype=dt, device=q.device)[:, : d_k * d_v]
    states = states.unflatten(1, (d_k, d_v))  # (P + 1, D_k, D_v), a strided view
    full = n // c  # whole chunks; a shorter last chunk is done on its own
    for b in range(nb):
        states[0].zero_()  # M = 0 before the first chunk
        for c0 in range(0, full, p_max):
            p = min(p_max, full - c0)
            rows = slice(c0 * c, (c0 + p) * c)
            qb, kb, vb = (x[b, rows].unflatten(0, (p, c)) for x in (q, k, v))  # (P, C, D) views
            yb = y[b, rows].unflatten(0, (p, c))  # (P, C, D_v), a view of the output
            s = torch.bmm(qb, kb.mT, out=scores[:p])  # (P, C, C): Q_c K_c^T of each chunk
            st = states[: p + 1]  # st[0] holds the state entering this block
            if log_g is None:
                s.tril_()
                torch.bmm(s, vb, out=yb)  # intra-chunk part
                st[1:].copy_(torch.bmm(kb.mT, vb, out=kv[:p]))  # st[i + 1] = K_i^T V_i
                st.cumsum_(0)  # st[i] = state entering chunk i of the block; st[p] leaves the block
                yb.baddbmm_(qb, st[:p])  # y += Q_c M_{c-1}
            else:
                lg = log_g[b, c0 * c:(c0 + p) * c].view(p, c)  # (P, C)
                cum = lg.cumsum(-1)  # (P, C): log decay from the chunk start to token i
                s.mul_(_decay_matrix(lg).to(dt))  # (P, C, C): scores * exp(b_i - b_j), 0 above diagonal
                torch.bmm(s, vb, out=yb)
                k_out = kb * torch.exp(cum[:, -1:] - cum).to(dt)[..., None]  # (P, C, D_k)
                u = torch.bmm(k_out.mT, vb, out=kv[:p])  # (P, D_k, D_v): U_i
                # the states entering the chunks, M_{i+1} = a_i M_i + U_i from the carry M_0 = st[0], one
                # chunk after the other: P small in-place products, cheaper than any scan over the block
                decays = torch.exp(cum[:, -1]).tolist()  # a_i, the decay over the whole chunk i
                for i in range(p):
                    torch.add(u[i], st[i], alpha=decays[i], out=st[i + 1])
                yb.baddbmm_(qb * torch.exp(cum).to(dt)[..., None], st[:p])  # y += exp(b_i) M^T q_i
            states[0].copy_(st[p])  # the carry for the next block
        if full * c < n:  # the last, shorter chunk
            rows = slice(full * c, n)
            qt, kt, vt = q[b, rows], k[b, rows], v[b, rows]  # (r, D)
            carry = states[0]
            if log_g is None:
                torch.mm(torch.mm(qt, kt.T).tril_(), vt, out=y[b, rows])
                y[b, rows].addmm_(qt, carry)
            else:
                lg = log_g[b, rows]  # (r,)
                st_in = torch.exp(lg.cumsum(-1)).to(dt)[:, None]  # (r, 1)
                torch.mm(torch.mm(qt, kt.T).mul_(_decay_matrix(lg).to(dt)), vt, out=y[b, rows])
                y[b, rows].addmm_(qt * st_in, carry)
    return y
