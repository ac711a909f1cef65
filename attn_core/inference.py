"""The inference roofline: FLOPs per byte of each operation, prefill against decode.

A machine does at most ``peak`` (pi) FLOP/s and moves at most ``bandwidth`` (beta) bytes/s
between memory and its cores. An operation of intensity I = FLOPs / bytes runs at most at
min(pi, I * beta) FLOP/s: below the ridge point pi / beta it is bound by memory, above it by
compute (the roofline, Williams et al. 2009).

Prefill multiplies N tokens at once by every weight (intensity ~ N); decode multiplies one
token per sequence by every weight and reads the whole KV cache for it (intensity ~ 1, and
G = H / H_kv for the attention of GQA). :func:`layer_ops` counts both; :func:`measure_matmul_flops`
and :func:`measure_bandwidth` measure the two roofs of this machine, and :func:`measure_roofs` takes
each as the best the machine attains over thread counts and repeats; :func:`decode_attention` is
the decode step of attention that :func:`decode_bytes` prices; :func:`serving` is the arithmetic
of serving a preset: bytes per generated token, tokens per second, the batch where the KV cache
reads overtake the weight reads; :func:`serving_memory` the memory it holds for a number of users.

Beyond the two roofs: :func:`exp_roof_flops` is the rate attention's matmuls could reach if the
exponentials of the softmax alone set the time (a GPU computes them on slower units);
:func:`mla_decode_ops` prices a decode step of MLA with and without weight absorption;
:func:`split_kv_decode` is the split-KV decode of Flash-Decoding (chunks of the cache attended in
parallel, combined by their logsumexp), and :func:`fa2_decode_launch` the thread blocks and the
number of chunks FlashAttention-2 itself chooses for a decode step.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import torch

from . import _checks
from .kv_cache import ModelConfig
from .measure import time_fn
from .symbols import ACCELERATORS

__all__ = [
    "H100_SXM",
    "Op",
    "layer_ops",
    "measure_matmul_flops",
    "measure_bandwidth",
    "measure_roofs",
    "decode_attention",
    "decode_bytes",
    "serving",
    "serving_memory",
    "exp_roof_flops",
    "mla_decode_ops",
    "split_kv_decode",
    "fa2_decode_launch",
]

#: Published figures of one current GPU (NVIDIA H100 SXM5 datasheet): dense BF16 tensor-core FLOP/s
#: (the datasheet's 1,979 TFLOP/s is with 2:4 sparsity; dense is half), FP32 on the CUDA cores, dense
#: TF32 tensor-core FLOP/s (989 with sparsity), dense FP8 tensor-core FLOP/s (3,958 with sparsity),
#: HBM3 bytes/s, and shared memory per SM (configurable up to 228 KB, Hopper tuning guide).
#:
#: Memory. The datasheet's "80GB" is 80 GiB of HBM3 (``hbm_bytes``: 80 x 2^30 bytes, not 80 x 10^9).
#: ``memory_bytes`` is what software sees, the total nvidia-smi reports for an "NVIDIA H100 80GB HBM3":
#: 81,559 MiB (85,520,809,984 bytes, 79.6 GiB), "0MiB / 81559MiB" in NVIDIA/nccl issue 1264
#: (https://github.com/NVIDIA/nccl/issues/1264) and "H100: 81559MiB (85.52 GB)" in modal-labs/modal-client
#: pull request 2797 (https://github.com/modal-labs/modal-client/pull/2797); it is the memory the widgets'
#: menu of accelerators opens with (attn_core.symbols.ACCELERATORS), and the default device of
#: :func:`serving_memory`. ``cuda_memory_bytes`` is CUDA's own total (cudaMemGetInfo's total,
#: torch.cuda.mem_get_info()[1]), a little less again: deviceQuery's "Total amount of global memory:
#: 81106 MBytes (85045477376 bytes)" on an H100 80GB HBM3 (https://github.com/thamada/nvidia-smi,
#: nvsim/H100SXMx8_deviceQuery.py).
#:
#: From the FlashAttention-3 paper (Shah et al., 2024): 50 MiB of L2 cache and 256 KiB of registers per
#: SM (Table 1), 132 SMs (the footnotes of sections 2.2 and 3.1), and the special functions such as exp
#: at 16 per SM per clock: 16 x 132 x 1.83 GHz, the paper's 3.9 TFLOPS (section 3.1 and its footnote).
H100_SXM = {
    "name": "NVIDIA H100 SXM",
    "bf16_flops": 989e12,
    "fp32_flops": 67e12,
    "tf32_flops": 989e12 / 2,
    "fp8_flops": 1979e12,
    "hbm_bytes": 80 * 2**30,
    "memory_bytes": ACCELERATORS["H100 80GB HBM3"] * 2**20,  # 81,559 MiB, as nvidia-smi reports it
    "cuda_memory_bytes": 85_045_477_376,  # deviceQuery: "81106 MBytes (85045477376 bytes)"
    "bandwidth": 3.35e12,
    "smem_per_sm": 228 * 1024,
    "num_sms": 132,
    "l2_bytes": 50 * 1024**2,
    "regs_per_sm": 256 * 1024,
    "exp_per_s": 16 * 132 * 1.83e9,
    "source": "https://www.nvidia.com/en-us/data-center/h100/",
    "source_fa3": "https://arxiv.org/abs/2407.08608",
}


@dataclass(frozen=True)
class Op:
    """One operation of a layer: FLOPs (2mkn per matmul) and bytes read plus written."""

    name: str
    flops: int
    bytes: int

    @property
    def intensity(self) -> float:
        """FLOPs per byte."""
        return self.flops / self.bytes


def layer_ops(model: ModelConfig, seq_len: int, phase: str = "prefill", batch: int = 1,
              bytes_per_value: int = 2, num_kv_heads: int | None = None) -> list[Op]:
    """The operations of one layer of ``model``, their FLOPs and the bytes they move.

    phase "prefill": ``batch`` sequences of ``seq_len`` tokens at once, causal (half the
    scores). phase "decode": one new token per sequence against a cache of ``seq_len`` tokens.
    Bytes count each operand read once and each result written once: the minimum traffic (a
    fused attention kernel keeps no N x N matrix in memory, but it re-reads tiles: see
    :func:`attn_core.flash.flash_io_bytes`), ``bytes_per_value`` each. ``num_kv_heads`` overrides
    H_kv (MHA: H, GQA: H / G, MQA: 1). MLA models are not modelled here.
    """
    if model.is_mla:
        raise ValueError(f"model must not be an MLA model ({model.name}); layer_ops models MHA/GQA/MQA")
    if phase not in ("prefill", "decode"):
        raise ValueError(f"phase must be 'prefill' or 'decode', got {phase!r}")
    n = _checks.positive_int("seq_len", seq_len)
    batch = _checks.positive_int("batch", batch)
    b = _checks.positive_int("bytes_per_value", bytes_per_value)
    h_kv = model.num_kv_heads if num_kv_heads is None else _checks.positive_int("num_kv_heads", num_kv_heads)
    d, h, dh, f = model.d_model, model.num_heads, model.d_head, model.ffn_dim
    n_mat = {"mlp": 2, "swiglu": 3}[model.ffn]
    t = batch * n if phase == "prefill" else batch  # tokens multiplied by the weights
    if phase == "prefill":  # causal: each of the N queries sees (N + 1) / 2 keys on average
        pairs = batch * n * (n + 1) // 2
        attn_bytes = (2 * t * h * dh + 2 * t * h_kv * dh) * b  # read Q, K, V, write O
    else:
        pairs = batch * n
        attn_bytes = (2 * batch * h * dh + 2 * batch * n * h_kv * dh) * b  # q, o; the whole cache
    return [
        Op("Q projection", 2 * t * d * h * dh, (t * d + d * h * dh + t * h * dh) * b),
        Op("K, V projections", 2 * t * d * 2 * h_kv * dh,
           (t * d + 2 * d * h_kv * dh + 2 * t * h_kv * dh) * b),
        Op("attention (QK^T, PV)", 4 * pairs * h * dh, attn_bytes),
        Op("output projection", 2 * t * h * dh * d, (t * h * dh + h * dh * d + t * d) * b),
        Op("FFN", 2 * t * d * f * n_mat, (t * d + n_mat * d * f + t * d) * b),
    ]


def measure_matmul_flops(n: int = 1024, dtype: torch.dtype = torch.float32, repeats: int = 5) -> float:
    """FLOP/s of an n x n by n x n matmul on the CPU (2 n^3 FLOPs over its median time)."""
    n = _checks.positive_int("n", n)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(dtype)
    c = torch.randn(n, n, generator=g).to(dtype)
    out = torch.empty(n, n, dtype=dtype)
    seconds = time_fn(torch.matmul, a, c, out=out, repeats=repeats, warmup=1)
    return 2 * n**3 / seconds


def measure_bandwidth(nbytes: int = 1 << 28, repeats: int = 5) -> float:
    """Bytes/s of a streaming copy of ``nbytes`` (read ``nbytes`` and write ``nbytes``)."""
    nbytes = _checks.positive_int("nbytes", nbytes)
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    seconds = time_fn(dst.copy_, src, repeats=repeats, warmup=1)
    return 2 * src.nbytes / seconds


def measure_roofs(n: int = 1024, nbytes: int = 1 << 28, thread_counts=None, repeats: int = 5) -> dict:
    """The two roofs of this CPU as the best it attains: pi and beta, each the maximum over thread
    counts and repeats.

    For every thread count of ``thread_counts`` (default: torch's current count and one thread),
    ``repeats`` rounds each time one n x n fp32 matmul (2 n^3 FLOPs) and one copy of ``nbytes``
    (read and written), one after the other, after one untimed run of each. A roof is a bound, and
    a machine that other work slows down only ever measures less, so the best round is the
    estimate: taking the maximum keeps pi and beta (and the ridge point pi / beta) from mixing a
    quiet moment with a busy one. torch's thread count is restored afterwards. Returns ``flops``
    (pi, FLOP/s), ``bandwidth`` (beta, bytes/s), ``ridge`` (pi / beta) and ``by_threads``: for each
    thread count its best ``flops`` and ``bandwidth``.
    """
    n = _checks.positive_int("n", n)
    nbytes = _checks.positive_int("nbytes", nbytes)
    repeats = _checks.positive_int("repeats", repeats)
    default = torch.get_num_threads()
    counts = (default, 1) if thread_counts is None else tuple(thread_counts)
    if not counts:
        raise ValueError("thread_counts must name at least one thread count")
    counts = tuple(dict.fromkeys(_checks.positive_int("thread_counts", c) for c in counts))
    g = torch.Generator().manual_seed(0)
    a, c = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    out = torch.empty(n, n)
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    by_threads = {}
    try:
        for count in counts:
            torch.set_num_threads(count)
            t_mm, t_cp = [], []
            for r in range(repeats):  # the matmul and the copy in turn; one untimed run of each first
                t_mm.append(time_fn(torch.matmul, a, c, out=out, repeats=1, warmup=int(r == 0)))
                t_cp.append(time_fn(dst.copy_, src, repeats=1, warmup=int(r == 0)))
            by_threads[count] = {"flops": 2 * n**3 / min(t_mm), "bandwidth": 2 * src.nbytes / min(t_cp)}
    finally:
        torch.set_num_threads(default)
    flops = max(r["flops"] for r in by_threads.values())
    bandwidth = max(r["bandwidth"] for r in by_threads.values())
    return {"flops": flops, "bandwidth": bandwidth, "ridge": flops / bandwidth, "by_threads": by_threads}


def _decode_shapes(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, ...]:
    """(H, D, H_kv, N) of one decode step's query and cache, checked: q (..., H, D),
    k_cache (..., H_kv, N, D), v_cache (..., H_kv, N, D_v), H a multiple of H_kv."""
    _checks.tensor("q", q, min_dim=2)
    _checks.tensor("k_cache", k_cache, min_dim=3)
    _checks.tensor("v_cache", v_cache, min_dim=3)
    h, dh = q.shape[-2:]
    h_kv, n = k_cache.shape[-3:-1]
    if k_cache.shape[-1] != dh or k_cache.shape[:-3] != q.shape[:-2]:
        raise ValueError(f"k_cache (..., H_kv, N, D) does not match q (..., H, D): {tuple(k_cache.shape)} "
                         f"against {tuple(q.shape)}")
    if v_cache.shape[:-1] != k_cache.shape[:-1]:
        raise ValueError(f"v_cache must be (..., H_kv, N, D_v) like k_cache, got {tuple(v_cache.shape)}")
    if h % h_kv:
        raise ValueError(f"the query heads of q ({h}) must be a multiple of the K/V heads of "
                         f"k_cache ({h_kv})")
    return h, dh, h_kv, n


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     scale: float | None = None) -> torch.Tensor:
    """One decode step of attention: the new token's queries against the cached keys and values.

    q: (..., H, D); k_cache: (..., H_kv, N, D); v_cache: (..., H_kv, N, D_v) -> (..., H, D_v).
    The G = H / H_kv query heads of a group share one K/V head: each cached byte is read once.
    """
    h, dh, h_kv, n = _decode_shapes(q, k_cache, v_cache)
    scale = 1.0 / math.sqrt(dh) if scale is None else scale
    qg = q.reshape(*q.shape[:-2], h_kv, h // h_kv, dh)  # "... (H_kv G) D -> ... H_kv G D"
    s = torch.matmul(qg, k_cache.transpose(-1, -2)) * scale  # (..., H_kv, G, N)
    p = torch.softmax(s, dim=-1)
    out = torch.matmul(p, v_cache)  # (..., H_kv, G, D_v)
    return out.reshape(*q.shape[:-2], h, v_cache.shape[-1])  # "... H_kv G D_v -> ... (H_kv G) D_v"


def decode_bytes(seq_len: int, num_heads: int, num_kv_heads: int, d_head: int,
                 bytes_per_value: int = 2, batch: int = 1) -> int:
    """Bytes a decode step of attention reads and writes: the cache 2 B N H_kv D b, plus q and o."""
    n = _checks.positive_int("seq_len", seq_len)
    h = _checks.positive_int("num_heads", num_heads)
    h_kv = _checks.positive_int("num_kv_heads", num_kv_heads)
    dh = _checks.positive_int("d_head", d_head)
    b = _checks.positive_int("bytes_per_value", bytes_per_value)
    batch = _checks.positive_int("batch", batch)
    return batch * (2 * n * h_kv * dh + 2 * h * dh) * b


def serving(model: ModelConfig, seq_len: int, batch: int = 1, bandwidth: float = H100_SXM["bandwidth"],
            bytes_per_value: int = 2) -> dict[str, float]:
    """Memory-bound serving arithmetic of ``model`` at a context of ``seq_len`` tokens.

    Each decode step reads the layers' weights once (the matrices a token passes through:
    ``L * (attention_params + ffn_params)``; embeddings, norms and the output head left out)
    and every sequence's KV cache. Returns ``weight_bytes``, ``kv_bytes`` (per sequence),
    ``bytes_per_step``, ``bytes_per_token`` (per generated token: the step's bytes over the
    batch), ``tokens_per_s`` (per sequence, at ``bandwidth`` bytes/s of one device holding the
    whole model, if reading were all the step did) and ``crossover_batch`` (weights / KV per
    sequence: the batch from which the KV reads outweigh the weight reads).
    """
    n = _checks.positive_int("seq_len", seq_len)
    batch = _checks.positive_int("batch", batch)
    if not (isinstance(bandwidth, (int, float)) and bandwidth > 0):
        raise ValueError(f"bandwidth must be a positive number of bytes/s, got {bandwidth!r}")
    b = _checks.positive_int("bytes_per_value", bytes_per_value)
    weights = model.num_layers * (model.attention_params() + model.ffn_params()) * b
    kv = model.kv_bytes(n, bytes_per_value=b)
    step = weights + batch * kv
    return {
        "weight_bytes": weights,
        "kv_bytes": kv,
        "bytes_per_step": step,
        "bytes_per_token": step / batch,
        "tokens_per_s": bandwidth / step,
        "crossover_batch": weights / kv,
    }


def serving_memory(model: ModelConfig, seq_len: int, users: int = 1, bytes_per_value: int = 2,
                   device_bytes: float = H100_SXM["memory_bytes"]) -> dict[str, int]:
    """Memory that serving ``users`` sequences of ``seq_len`` tokens holds: weights + KV cache x users.

    Every weight of the model (:meth:`ModelConfig.num_params`: embeddings, output head and, for a
    mixture of experts, every expert) at ``bytes_per_value``, plus one KV cache per user
    (:meth:`ModelConfig.kv_bytes`; MLA: the latent); activations and the allocator's slack left
    out. Returns ``weight_bytes``, ``kv_bytes_per_user``, ``kv_bytes`` (all users), ``total_bytes``
    and ``devices``, the fewest devices of ``device_bytes`` that hold the total (by default an H100 80GB's
    81,559 MiB, the memory nvidia-smi reports: ``H100_SXM["memory_bytes"]``).
    """
    n = _checks.positive_int("seq_len", seq_len)
    users = _checks.positive_int("users", users)
    b = _checks.positive_int("bytes_per_value", bytes_per_value)
    if not (isinstance(device_bytes, (int, float)) and device_bytes > 0):
        raise ValueError(f"device_bytes must be a positive number of bytes, got {device_bytes!r}")
    weights = model.num_params() * b
    per_user = model.kv_bytes(n, bytes_per_value=b)
    total = weights + users * per_user
    return {
        "weight_bytes": weights,
        "kv_bytes_per_user": per_user,
        "kv_bytes": users * per_user,
        "total_bytes": total,
        "devices": math.ceil(total / device_bytes),
    }


def exp_roof_flops(d_head: int, exp_per_s: float = H100_SXM["exp_per_s"], phase: str = "forward") -> float:
    """FLOP/s attention's matmuls could reach if the softmax's exponentials alone set the time.

    Each score needs one exponential. In the forward pass it also costs 4 D matmul FLOPs (2 D in
    q k^T, 2 D in P V), so exponentials at ``exp_per_s`` per second allow 4 D x exp_per_s FLOP/s;
    the backward pass recomputes P (one exponential per score) for five matmuls, 10 D FLOPs. On an
    H100 the exponentials run on the multi-function units at 3.9e12 per second, beside 989e12
    FLOP/s of bf16 matmul: at D = 128 the exponentials of the forward take half as long as the
    matmuls, so a kernel must overlap the two (FlashAttention-3's ping-pong scheduling).
    """
    d_head = _checks.positive_int("d_head", d_head)
    if not (isinstance(exp_per_s, (int, float)) and exp_per_s > 0):
        raise ValueError(f"exp_per_s must be a positive number, got {exp_per_s!r}")
    per_exp = {"forward": 4, "backward": 10}
    if phase not in per_exp:
        raise ValueError(f"phase must be 'forward' or 'backward', got {phase!r}")
    return per_exp[phase] * d_head * exp_per_s


def mla_decode_ops(model: ModelConfig, seq_len: int, batch: int = 1, bytes_per_value: int = 2,
                   absorbed: bool = True) -> Op:
    """One decode step of MLA's attention (one layer, ``batch`` sequences of ``seq_len`` cached tokens).

    The cache holds, per token, a latent of R = ``kv_lora_rank`` numbers and a RoPE key of D_r =
    ``rope_dim`` shared by the H heads. ``absorbed=True`` (DeepSeek-V2, section 2.1.2): W^UK is
    folded into the query and W^UV into the output projection, so each head compares a query of
    R + D_r numbers with the cached latent and RoPE key and sums latents: per cached token and head
    2 (R + D_r) + 2 R FLOPs; bytes: the cache N (R + D_r) b, the query H (R + D_r) b and the output
    H R b. ``absorbed=False``: every step decompresses the keys (D per head) and values (D_v) of
    every cached token from its latent, 2 R H (D + D_v) FLOPs per token, then attends over them,
    2 H (D + D_r) + 2 H D_v; bytes: the same cache, W^UK and W^UV (R H (D + D_v) b), the query
    H (D + D_r) b and the output H D_v b (the decompressed keys and values kept on chip). The
    projections before and after (the absorbed W^UK, W^UV included) are left out.
    """
    if not model.is_mla:
        raise ValueError(f"model must be an MLA model (kv_lora_rank set), got {model.name}")
    n = _checks.positive_int("seq_len", seq_len)
    batch = _checks.positive_int("batch", batch)
    b = _checks.positive_int("bytes_per_value", bytes_per_value)
    h, r, d_r = model.num_heads, model.kv_lora_rank, model.rope_dim
    d, d_v = model.d_head, model.d_v or model.d_head
    cache = batch * n * (r + d_r) * b
    if absorbed:
        flops = batch * n * h * (2 * (r + d_r) + 2 * r)
        nbytes = cache + batch * h * (r + d_r + r) * b
        return Op("MLA attention, absorbed", flops, nbytes)
    flops = batch * n * (2 * r * h * (d + d_v) + 2 * h * (d + d_r) + 2 * h * d_v)
    nbytes = cache + r * h * (d + d_v) * b + batch * h * (d + d_r + d_v) * b
    return Op("MLA attention, decompressed each step", flops, nbytes)


def split_kv_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, num_splits: int,
                    scale: float | None = None) -> torch.Tensor:
    """A decode step computed as Flash-Decoding does: the cache split along N into chunks.

    Shapes as :func:`decode_attention`. The cache is cut into ``num_splits`` chunks of about
    N / num_splits tokens (fewer when N is smaller); each chunk's attention gives a normalized
    output o_s and a logsumexp l_s per query head (on a GPU, one thread block per chunk, so a
    batch of one still fills the GPU); the outputs combine as sum_s exp(l_s - l) o_s with
    l = logsumexp_s l_s, the online softmax applied across the chunks. Computed in at least
    float32, returned in q's dtype.
    """
    h, dh, h_kv, n = _decode_shapes(q, k_cache, v_cache)
    num_splits = _checks.positive_int("num_splits", num_splits)
    scale = 1.0 / math.sqrt(dh) if scale is None else scale
    stat = torch.promote_types(q.dtype, torch.float32)
    qg = q.to(stat).reshape(*q.shape[:-2], h_kv, h // h_kv, dh)  # "... (H_kv G) D -> ... H_kv G D"
    outs, lses = [], []
    for k_s, v_s in zip(k_cache.tensor_split(min(num_splits, n), dim=-2),
                        v_cache.tensor_split(min(num_splits, n), dim=-2)):
        s = torch.matmul(qg, k_s.to(stat).transpose(-1, -2)) * scale  # (..., H_kv, G, n_s)
        lse = torch.logsumexp(s, dim=-1)  # (..., H_kv, G): one number per query head and chunk
        outs.append(torch.matmul(torch.exp(s - lse[..., None]), v_s.to(stat)))  # (..., H_kv, G, D_v)
        lses.append(lse)
    weights = torch.softmax(torch.stack(lses), dim=0)  # (S, ..., H_kv, G): exp(l_s - l)
    out = (weights[..., None] * torch.stack(outs)).sum(dim=0)  # (..., H_kv, G, D_v)
    out = out.reshape(*q.shape[:-2], h, v_cache.shape[-1])  # "... H_kv G D_v -> ... (H_kv G) D_v"
    return out.to(q.dtype)



#: The version of FlashAttention-2's code that :func:`fa2_decode_launch` follows
#: (github.com/Dao-AILab/flash-attention, csrc/flash_attn/flash_api.cpp).
FA2_SOURCE_COMMIT = "0251105a2fb19d2957484b7f023cd8c115286ced"


def fa2_decode_launch(batch: int, num_heads: int, num_kv_heads: int, seq_len: int, d_head: int,
                      num_sms: int = H100_SXM["num_sms"], num_splits: int = 0) -> dict[str, int]:
    """The thread blocks FlashAttention-2's forward launches for one decode step, and its KV splits.

    As ``mha_fwd`` and ``mha_fwd_kvcache`` of csrc/flash_attn/flash_api.cpp (commit
    :data:`FA2_SOURCE_COMMIT`) do it for one query token per sequence (no sliding window, no ALiBi,
    no dropout, ``d_head`` a multiple of 8): with GQA (H > H_kv) they swap the G = H / H_kv query
    heads of a K/V head into the query rows (``seqlenq_ngroups_swapped``), so one thread block
    serves a whole group and the heads are the H_kv K/V heads; query rows go in blocks of 64
    (``num_m_blocks``). ``num_splits=0`` (the default of ``flash_attn_with_kvcache``, and what
    ``mha_fwd`` always passes) lets ``num_splits_heuristic`` choose the number of chunks of the cache:
    if the blocks already reach 80% of 2 x ``num_sms`` (two blocks of 128 threads per SM), one;
    otherwise, among the splits up to min(128, 2 x ``num_sms``, key blocks), the fewest whose wave
    efficiency (blocks / slots over its ceiling) reaches 85% of the best, skipping splits that give
    the same chunk length as one fewer. Key blocks are of 256 rows for D <= 64, 128 for D <= 128,
    else 64. Returns ``query_rows`` (per block row: G, or 1 without GQA), ``heads``, ``m_blocks``,
    ``n_blocks``, ``num_splits`` and ``thread_blocks`` (m_blocks x splits x batch x heads).
    """
    batch = _checks.positive_int("batch", batch)
    h = _checks.positive_int("num_heads", num_heads)
    h_kv = _checks.positive_int("num_kv_heads", num_kv_heads)
    n = _checks.positive_int("seq_len", seq_len)
    dh = _checks.positive_int("d_head", d_head)
    num_sms = _checks.positive_int("num_sms", num_sms)
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise ValueError(f"num_splits must be 0 (the heuristic) or a positive integer, got {num_splits!r}")
    if h % h_kv:
        raise ValueError(f"num_heads ({h}) must be a multiple of num_kv_heads ({h_kv})")
    swapped = h > h_kv and dh % 8 == 0  # seqlenq_ngroups_swapped
    rows, heads = (h // h_kv, h_kv) if swapped else (1, h)
    m_blocks = -(-rows // 64)
    block_n = 256 if dh <= 64 else (128 if dh <= 128 else 64)
    n_blocks = -(-n // block_n)
    if num_splits == 0:
        num_splits = _fa2_num_splits_heuristic(batch * heads * m_blocks, 2 * num_sms, n_blocks, 128)
    return {"query_rows": rows, "heads": heads, "m_blocks": m_blocks, "n_blocks": n_blocks,
            "num_splits": num_splits, "thread_blocks": m_blocks * num_splits * batch * heads}


def _f32(x: float) -> float:
    """x rounded to float32, as the C++ ``float`` arithmetic of the heuristic rounds it."""
    return struct.unpack("f", struct.pack("f", x))[0]


def _fa2_num_splits_heuristic(blocks: int, slots: int, n_blocks: int, max_splits: int) -> int:
    """``num_splits_heuristic`` of FlashAttention-2's flash_api.cpp, line for line (in float32)."""
    if blocks >= _f32(_f32(0.8) * slots):
        return 1
    max_splits = min(max_splits, slots, n_blocks)

    def eligible(s: int) -> bool:
        return s == 1 or -(-n_blocks // s) != -(-n_blocks // (s - 1))

    efficiency = []
    for s in range(1, max_splits + 1):
        if not eligible(s):
            efficiency.append(0.0)
        else:
            waves = _f32(blocks * s / slots)
            efficiency.append(_f32(waves / math.ceil(waves)))
    best = max(efficiency, default=0.0)
    for s in range(1, max_splits + 1):
        if eligible(s) and efficiency[s - 1] >= 0.85 * best:
            return s
    return 1
