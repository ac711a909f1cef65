"""Context parallelism over c ranks: what a rank saves and sends, and how long a transfer takes.

* :func:`cp_saved`, :func:`cp_sent`: ring attention (:func:`attn_core.parallel.ring_attention`);
* :func:`ulysses_sent`: all-to-all context parallelism (:func:`attn_core.parallel.ulysses_attention`);
* :func:`transfer_time`, :func:`ring_step`, :func:`ring_hide_tokens`: a time model, latency plus
  bytes over bandwidth (Hockney's), and when a ring step's compute hides its transfer.

H query heads share H_kv key/value heads (GQA; H_kv = H is MHA). Accumulators (the logsumexp, the
output and the dK, dV sums) are float32 for 16-bit values and the values' own dtype when wider:
max(b, 4) bytes. Exact when c divides N (every rank holds N/c tokens).
"""

from __future__ import annotations

from ._core import _ratio, formula, maximum, sqrt


@formula
def cp_saved(B, N, H, H_kv, D, D_v, b, c) -> dict:
    """Bytes one ring-attention rank saves for backward: its N/c tokens of q, k, v and the output,
    and one logsumexp per query row and head (an accumulator: max(b, 4) bytes). Nothing N x N."""
    n = _ratio(N, c)
    return {"q": B * H * n * D * b, "k": B * H_kv * n * D * b, "v": B * H_kv * n * D_v * b,
            "out": B * H * n * D_v * b, "logsumexp": B * H * n * maximum(b, 4)}


@formula
def cp_sent(B, N, H_kv, D, D_v, b, c) -> dict:
    """Bytes one ring-attention rank sends per layer: c - 1 K, V blocks forward (H_kv heads of N/c
    tokens, b bytes a value), c - 1 again backward, and c - 1 dK, dV accumulators (max(b, 4) bytes)."""
    block = B * H_kv * _ratio(N, c) * (D + D_v)
    return {"ring K, V (forward)": (c - 1) * block * b, "ring K, V (backward)": (c - 1) * block * b,
            "ring dK, dV (backward)": (c - 1) * block * maximum(b, 4)}


@formula
def ulysses_sent(B, N, H, H_kv, D, D_v, b, c) -> dict:
    """Bytes one all-to-all rank sends per layer: (c - 1)/c of each tensor it holds as it enters an
    all-to-all (its N/c tokens of q, k, v; the output as H/c heads of N tokens), forward, and the
    same tensors' gradients backward."""
    share = _ratio((c - 1) * B * N * b, c * c)  # (c - 1)/c of N/c tokens, per value of a token
    qkv, out = share * (H * D + H_kv * (D + D_v)), share * H * D_v
    return {"all-to-all q, k, v (forward)": qkv, "all-to-all out (forward)": out,
            "all-to-all dout (backward)": out, "all-to-all dq, dk, dv (backward)": qkv}


def transfer_time(nbytes, alpha, beta_l):
    """Seconds to move ``nbytes`` over a link with latency alpha (s) and bandwidth beta_l (bytes/s):
    alpha + nbytes / beta_l (Hockney's model; NCCL's tuner estimates a collective the same way).
    Numbers or SymPy expressions alike."""
    return alpha + nbytes / beta_l


@formula
def ring_step(B, N, H, H_kv, D, D_v, b, c, c_causal, alpha, beta_l, pi) -> dict:
    """One ring step of one rank, in seconds, computing at pi FLOP/s.

    Forward: QK^T and PV of H heads over the visiting block, 2 B H (N/c)^2 (D + D_v) c_causal FLOPs
    (c_causal: the share of the block computed; 1 without a mask, 1/2 for every step of the zigzag
    layout but the first), against one K, V block of H_kv heads, b bytes a value. Backward: five
    products (QK^T again, dV, dP, dQ, dK), 2 B H (N/c)^2 (3 D + 2 D_v) c_causal FLOPs, against two
    messages on the same link, the K, V block and the dK, dV accumulator (max(b, 4) bytes a value).
    A transfer is hidden when it takes at most the compute's time.
    """
    n = _ratio(N, c)
    block = B * H_kv * n * (D + D_v)
    return {"compute (forward)": 2 * B * H * n * n * (D + D_v) * c_causal / pi,
            "transfer (forward)": transfer_time(block * b, alpha, beta_l),
            "compute (backward)": 2 * B * H * n * n * (3 * D + 2 * D_v) * c_causal / pi,
            "transfer (backward)": transfer_time(block * (b + maximum(b, 4)), 2 * alpha, beta_l)}


@formula
def ring_hide_tokens(H, H_kv, D, D_v, b, c_causal, alpha, beta_l, pi):
    """The fewest tokens per rank, n = N/c, for which a forward ring step's compute hides its transfer
    (batch B = 1; a larger batch scales both sides but the latency).

    It solves a_2 n^2 = alpha + a_1 n, a_2 = 2 H (D + D_v) c_causal / pi, a_1 = H_kv (D + D_v) b / beta_l:
    n = (a_1 + sqrt(a_1^2 + 4 a_2 alpha)) / (2 a_2). Without latency n = H_kv b pi / (2 H c_causal beta_l):
    proportional to the bytes per value and to H_kv / H.
    """
    a2 = 2 * H * (D + D_v) * c_causal / pi
    a1 = H_kv * (D + D_v) * b / beta_l
    return (a1 + sqrt(a1 * a1 + 4 * a2 * alpha)) / (2 * a2)
