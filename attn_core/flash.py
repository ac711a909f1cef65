"""FlashAttention from scratch: tiled attention with the online softmax.

Eager attention writes the N x N scores S and weights P to memory and keeps P for
backward. FlashAttention (Dao et al., 2022; FlashAttention-2, Dao 2023) never forms
them: it walks over key/value blocks of ``block_k`` tokens and keeps, for each query
row, a running maximum m, a running sum l of exp(s - m) and a running output; when a
new block raises the maximum, the old sum and output are rescaled by exp(m_old - m_new).
Backward recomputes P tile by tile from the saved logsumexp lse = m + log l, so autograd
keeps q, k, v, the output and lse: memory linear in N.

On a GPU every query block of ``block_q`` rows is one thread block, scheduled in parallel
across the multiprocessors (in waves when there are more blocks than multiprocessors);
here the query blocks are the rows of one batched matmul (the same arithmetic), and the
loop over key blocks is the loop each thread block runs. With ``causal=True`` a tile whose
every key comes after its every query is skipped: :func:`flash_tile_counts` counts the
tiles and FLOPs done and skipped, exactly as :func:`flash_attention` does them.

:func:`flash_io_bytes` is the I/O ledger of the FlashAttention paper's Algorithm 1 for
an on-chip memory of ``sram_bytes`` (M_SRAM): Theta(N^2 D^2 b^2 / M_SRAM) bytes moved,
against eager attention's Theta(N D + N^2) (:func:`eager_io_bytes`). :func:`flash2_io_bytes`
counts the loop order of FlashAttention-2 (query blocks outside, each kept on chip while the
key and value blocks stream past): about 8 N^2 D^2 b^2 / M_SRAM, fewer bytes than eager from
M_SRAM > 2 D^2 b. Both count the bytes one thread block requests; a GPU's L2 cache can serve
the same K, V blocks to thread blocks running at once, and a cluster of thread blocks can share one
load of them (``cluster``, as FlashAttention-3 does on an H100), so the bytes read from HBM may be
fewer.

With 16-bit inputs (bf16, fp16) the scores, the running max and sum and the output are kept
in float32, as fused kernels keep them in registers: S is never rounded to 16 bits before
the exponential, P is rounded to the input dtype for the P V product (a tensor core's operand)
and every product is accumulated in float32; the output is cast back to the input dtype.
"""

from __future__ import annotations

import math

import torch

from . import _checks

__all__ = [
    "flash_attention",
    "FlashAttentionFunction",
    "flash_tile_counts",
    "flash_io_bytes",
    "flash2_io_bytes",
    "eager_io_bytes",
]


def _check(q, k, v, block_q, block_k, scale):
    block_q = _checks.positive_int("block_q", block_q)
    block_k = _checks.positive_int("block_k", block_k)
    n, _, _ = _checks.qkv(q, k, v)
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise ValueError(
            "q, k and v must have the same leading (batch, head) dims, got q "
            f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.is_floating_point():
        raise ValueError(f"q must be a floating-point tensor, got dtype {q.dtype}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or not math.isfinite(scale) or scale <= 0):
        raise ValueError(f"scale must be a positive finite number or None, got {scale!r}")
    return n, block_q, block_k


# A wave: the query blocks processed together, like the thread blocks a GPU's multiprocessors run
# together in one wave.
# Its tiles hold about _WAVE_VALUES scores (512 KiB in fp32), so they stay in a CPU's cache;
# the arithmetic does not depend on it.
_WAVE_VALUES = 1 << 17


def _wave_rows(batch: int, block_q: int, block_k: int) -> int:
    """Rows of one wave: a multiple of block_q, at least one query block."""
    return max(1, _WAVE_VALUES // (batch * block_k * block_q)) * block_q


def _tiles(n: int, block_q: int, block_k: int, causal: bool, wave: int):
    """(w1, k0, k1, r0, r_mask) per computed tile column: query rows [r0, w1) against keys
    [k0, k1). With causal, query blocks wholly before the key block (last row < k0) are skipped,
    and rows [r0, r_mask) cross the diagonal and need the mask."""
    for w0 in range(0, n, wave):
        w1 = min(w0 + wave, n)
        for k0 in range(0, w1 if causal else n, block_k):
            k1 = min(k0 + block_k, n)
            if not causal:
                yield w0, w1, k0, k1, w0, w0
                continue
            r0 = max(w0, (k0 // block_q) * block_q)
            # a tile needs the mask when its first row i*block_q < its last key k1 - 1
            r_mask = min(w1, -(-(k1 - 1) // block_q) * block_q)
            yield w0, w1, k0, k1, r0, max(r0, r_mask)


def _mask_diagonal(s: torch.Tensor, r0: int, r_mask: int, k0: int, k1: int) -> None:
    """Set s[..., row, col] = -inf where key k0 + col comes after query r0 + row (in place)."""
    if r_mask <= r0:
        return
    rows = torch.arange(r0, r_mask, device=s.device)[:, None]  # (r, 1)
    cols = torch.arange(k0, k1, device=s.device)[None, :]  # (1, c)
    s[:, : r_mask - r0].masked_fill_(cols > rows, float("-inf"))


def _forward(q, k, v, causal, block_q, block_k, scale):
    """q, k: (B, N, D), v: (B, N, D_v) -> out (B, N, D_v), lse (B, N).

    Scores, the running max, sum and output are kept in ``stat`` (at least float32) whatever the
    input dtype, as fused kernels keep them in registers: with bf16 or fp16 inputs the products are
    accumulated in float32 and S is never rounded to 16 bits before the exponential. P is rounded
    to the input dtype for the P V product (what a tensor core multiplies), accumulated in float32.
    """
    batch, n, _ = q.shape
    stat = torch.promote_types(q.dtype, torch.float32)  # running statistics at least fp32
    qs = q.to(stat) * scale  # scaled once: S = (q * scale) k^T, in stat
    kt = k.to(stat).transpose(-1, -2)  # (B, D, N)
    vs = v.to(stat)
    out = torch.empty((batch, n, v.shape[-1]), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, n), dtype=stat, device=q.device)
    wave = _wave_rows(batch, block_q, block_k)
    m = l = acc = None  # noqa: E741
    for w0, w1, k0, k1, r0, r_mask in _tiles(n, block_q, block_k, causal, wave):
        if k0 == 0:  # a new wave: running max, sum and output of its rows
            m = torch.full((batch, w1 - w0), float("-inf"), dtype=stat, device=q.device)
            l = torch.zeros((batch, w1 - w0), dtype=stat, device=q.device)  # noqa: E741
            acc = torch.zeros((batch, w1 - w0, v.shape[-1]), dtype=stat, device=q.device)
        s = torch.matmul(qs[:, r0:w1], kt[:, :, k0:k1])  # (B, r, c) scores of the tile, in stat
        if causal:
            _mask_diagonal(s, r0, r_mask, k0, k1)
        i = r0 - w0  # first row of the tile within the wave
        m_new = torch.maximum(m[:, i:], s.amax(dim=-1))  # (B, r); finite: key 0 comes first
        alpha = torch.exp(m[:, i:] - m_new)  # rescales what was summed under the old max
        p = s.sub_(m_new[..., None]).exp_()  # (B, r, c), exp(s - m_new)
        l[:, i:].mul_(alpha).add_(p.sum(dim=-1))
        acc[:, i:].mul_(alpha[..., None]).add_(torch.matmul(_as_input(p, v.dtype), vs[:, k0:k1]))
        m[:, i:] = m_new
        if k1 >= (w1 if causal else n):  # the wave's last key block: normalize
            out[:, w0:w1] = acc / l[..., None]  # cast back to the input dtype
            lse[:, w0:w1] = m + torch.log(l)
    return out, lse


def _backward(q, k, v, out, lse, d_out, causal, block_q, block_k, scale):
    """Gradients of q, k, v, recomputing P = exp(S - lse) one tile at a time.

    As in the forward, products are accumulated in ``stat`` (at least float32); P and dS are
    rounded to the input dtype before they are multiplied, as a fused kernel feeds its tensor cores.
    """
    stat = lse.dtype
    d_row = (d_out.to(stat) * out.to(stat)).sum(dim=-1)  # (B, N): rowsum(dO * O) = sum_j P dP
    qs = q.to(stat) * scale
    ks, vs, d_out_s = k.to(stat), v.to(stat), d_out.to(stat)
    kt = ks.transpose(-1, -2)
    dq = torch.zeros(q.shape, dtype=stat, device=q.device)
    dk = torch.zeros(k.shape, dtype=stat, device=q.device)
    dv = torch.zeros(v.shape, dtype=stat, device=q.device)
    wave = _wave_rows(q.shape[0], block_q, block_k)
    for _, w1, k0, k1, r0, r_mask in _tiles(q.shape[1], block_q, block_k, causal, wave):
        qr, dor = qs[:, r0:w1], d_out_s[:, r0:w1]
        s = torch.matmul(qr, kt[:, :, k0:k1])  # (B, r, c), in stat
        if causal:
            _mask_diagonal(s, r0, r_mask, k0, k1)
        p = s.sub_(lse[:, r0:w1, None]).exp_()  # P of this tile, recomputed
        dv[:, k0:k1] += torch.matmul(_as_input(p, v.dtype).transpose(-1, -2), dor)  # P^T dO
        dp = torch.matmul(dor, vs[:, k0:k1].transpose(-1, -2))  # dO V^T
        ds = p.mul_(dp.sub_(d_row[:, r0:w1, None]))  # dS = P * (dP - rowsum(dO * O))
        dq[:, r0:w1] += torch.matmul(_as_input(ds, k.dtype), ks[:, k0:k1]).mul_(scale)
        dk[:, k0:k1] += torch.matmul(_as_input(ds, q.dtype).transpose(-1, -2), qr)  # dS^T (q * scale)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _as_input(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x rounded to the input dtype and held in its own (wider) dtype: a tensor core's operand."""
    return x if x.dtype == dtype else x.to(dtype).to(x.dtype)


class FlashAttentionFunction(torch.autograd.Function):
    """Tiled attention whose backward recomputes P: saves q, k, v, out and lse only."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_q, block_k, scale):
        lead, n = q.shape[:-2], q.shape[-2]
        q3 = q.reshape(-1, n, q.shape[-1])  # "... N D -> (...) N D"
        k3 = k.reshape(-1, n, k.shape[-1])
        v3 = v.reshape(-1, n, v.shape[-1])
        out3, lse3 = _forward(q3, k3, v3, causal, block_q, block_k, scale)
        out = out3.reshape(*lead, n, v.shape[-1])  # "(...) N D_v -> ... N D_v"
        lse = lse3.reshape(*lead, n)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.config = (causal, block_q, block_k, scale)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        causal, block_q, block_k, scale = ctx.config
        n = q.shape[-2]
        flat = [t.reshape(-1, n, t.shape[-1]) for t in (q, k, v, out, d_out.contiguous())]
        dq, dk, dv = _backward(*flat[:4], lse.reshape(-1, n), flat[4], causal, block_q, block_k, scale)
        return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape), None, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    scale: float | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale [causal]) v, computed tile by tile without an N x N matrix.

    q, k: (..., N, D), v: (..., N, D_v), the same leading dims -> (..., N, D_v).
    scale defaults to 1/sqrt(D). Any N works (the last blocks are shorter). Autograd
    saves q, k, v, the output and the logsumexp (..., N) only.
    """
    n, block_q, block_k = _check(q, k, v, block_q, block_k, scale)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    return FlashAttentionFunction.apply(q, k, v, bool(causal), block_q, block_k, float(scale))


def flash_tile_counts(n: int, d_head: int, d_v: int | None = None, causal: bool = False,
                      block_q: int = 64, block_k: int = 64) -> dict[str, int]:
    """Tiles and FLOPs of :func:`flash_attention` on one head, as it computes them.

    A tile is block_q query rows x block_k keys (the last ones shorter). With causal=True
    the tiles wholly above the diagonal are skipped. Returns ``tiles``, ``tiles_skipped``,
    ``forward_flops`` (2 r c D for q k^T plus 2 r c D_v for P v, per tile), ``forward_flops_skipped``
    (what the skipped tiles would have cost) and ``backward_flops`` (q k^T again, P^T dO, dO v^T,
    dS k and dS^T q: 2 r c (3 D + 2 D_v) per tile).
    """
    n = _checks.positive_int("n", n)
    d_head = _checks.positive_int("d_head", d_head)
    d_v = d_head if d_v is None else _checks.positive_int("d_v", d_v)
    block_q = _checks.positive_int("block_q", block_q)
    block_k = _checks.positive_int("block_k", block_k)
    n_qblocks = -(-n // block_q)
    tiles = skipped = rc = rc_skipped = 0
    for _, _w1, k0, k1, r0, _ in _tiles(n, block_q, block_k, causal, n):  # one wave: the same tiles
        tiles += n_qblocks - r0 // block_q
        skipped += r0 // block_q
        rc += (n - r0) * (k1 - k0)
        rc_skipped += r0 * (k1 - k0)
    return {
        "tiles": tiles,
        "tiles_skipped": skipped,
        "forward_flops": 2 * rc * (d_head + d_v),
        "forward_flops_skipped": 2 * rc_skipped * (d_head + d_v),
        "backward_flops": 2 * rc * (3 * d_head + 2 * d_v),
    }


def flash_io_bytes(n: int, d_head: int, sram_bytes: int, bytes_per_value: int = 2) -> dict[str, int]:
    """Bytes moved between off-chip memory and an on-chip memory of ``sram_bytes`` (M_SRAM).

    The schedule of Algorithm 1 of the FlashAttention paper (Dao et al., 2022), one head:
    key/value blocks of B_c = ceil(M / (4 D b)) rows, query blocks of B_r = min(B_c, D) rows
    (M / b values fit on chip). The outer loop loads each K_j, V_j once; for each of its
    T_c = ceil(N / B_c) steps the inner loop reads every Q_i, O_i, l_i, m_i and writes O_i,
    l_i, m_i back. O, l, m start in off-chip memory (written once: zeros and -inf).
    About 12 N^2 D^2 b^2 / M for large N: Theta(N^2 D^2 / M). This is that schedule's
    count only: FlashAttention-2's loop order moves fewer bytes (:func:`flash2_io_bytes`).
    Returns the items in bytes, ``total``, and ``block_k`` (B_c), ``block_q`` (B_r).
    """
    n = _checks.positive_int("n", n)
    d_head = _checks.positive_int("d_head", d_head)
    sram_bytes = _checks.positive_int("sram_bytes", sram_bytes)
    b = _checks.positive_int("bytes_per_value", bytes_per_value)
    block_k = -(-sram_bytes // (4 * d_head * b))
    block_q = min(block_k, d_head)
    t_c = -(-n // block_k)
    items = {
        "K, V read once": 2 * n * d_head * b,
        "O, l, m initialised": (n * d_head + 2 * n) * b,
        "Q read per key block": t_c * n * d_head * b,
        "O read and written per key block": t_c * 2 * n * d_head * b,
        "l, m read and written per key block": t_c * 4 * n * b,
    }
    return {**items, "total": sum(items.values()), "block_k": block_k, "block_q": block_q}


def flash2_io_bytes(n: int, d_head: int, sram_bytes: int, bytes_per_value: int = 2,
                    block_q: int | None = None, cluster: int = 1) -> dict[str, int]:
    """Bytes requested from off-chip memory by FlashAttention-2's loop order, one head, forward.

    Query blocks of B_r rows are the outer loop (one thread block each): Q_i is read once, kept
    on chip with its running max, sum and output (the output accumulator in registers), and
    every key and value block streams past it; O_i and the logsumexp (fp32, 4 bytes per row)
    are written once. B_r defaults to ceil(M / (4 D b)), the block rule of Algorithm 1 applied
    to the outer blocks (:func:`flash_io_bytes`), or is ``block_q`` (a kernel's tile, e.g. 128).
    With T_r = ceil(N / B_r): 2 N D b + 4 N + T_r 2 N D b, about 8 N^2 D^2 b^2 / M for large N;
    fewer bytes than eager attention (4 N^2 b) when M > 2 D^2 b.

    ``cluster`` thread blocks on neighbouring query blocks may share each load of a K and V block:
    on an H100, FlashAttention-3 launches clusters of two thread blocks for 16-bit inputs with
    D >= 128, non-causal and an even number of query blocks, and its TMA multicast writes each K, V
    tile it reads into the shared memory of both (hopper/flash_fwd_launch_template.h, ``ClusterM``).
    The K, V reads then come once per cluster: ceil(T_r / cluster) 2 N D b. Returns the items in
    bytes, ``total``, ``block_q`` (B_r) and ``cluster``.
    """
    n = _checks.positive_int("n", n)
    d_head = _checks.positive_int("d_head", d_head)
    sram_bytes = _checks.positive_int("sram_bytes", sram_bytes)
    b = _checks.positive_int("bytes_per_value", bytes_per_value)
    if block_q is None:
        block_q = -(-sram_bytes // (4 * d_head * b))
    block_q = _checks.positive_int("block_q", block_q)
    cluster = _checks.positive_int("cluster", cluster)
    t_r = -(-n // block_q)
    items = {
        "Q read once, O written once": 2 * n * d_head * b,
        "logsumexp written once (fp32)": 4 * n,
        "K, V read per query block" if cluster == 1 else "K, V read per cluster of query blocks":
            -(-t_r // cluster) * 2 * n * d_head * b,
    }
    return {**items, "total": sum(items.values()), "block_q": block_q, "cluster": cluster}


def eager_io_bytes(n: int, d_head: int, bytes_per_value: int = 2) -> dict[str, int]:
    """Bytes moved by eager attention (the FlashAttention paper's Algorithm 0), one head.

    Read Q, K, write S (N x N); read S, write P; read P, V, write O:
    4 N D b + 4 N^2 b, Theta(N D + N^2).
    """
    n = _checks.positive_int("n", n)
    d_head = _checks.positive_int("d_head", d_head)
    b = _checks.positive_int("bytes_per_value", bytes_per_value)
    items = {
        "Q, K read": 2 * n * d_head * b,
        "S written, read": 2 * n * n * b,
        "P written, read": 2 * n * n * b,
        "V read, O written": 2 * n * d_head * b,
    }
    return {**items, "total": sum(items.values())}
