"""One training step on an accelerator, as PyTorch runs it: every term of the busiest rank's memory.

The block ledger (:func:`attn_core.formulas.training.block_items`) counts one block as measured on the
CPU and the meta device. A training step on a GPU keeps more and other things: the logits and the loss,
the state in one of several precision conventions, the buffers of sharded data parallelism, what a
recomputed block rebuilds, the optimizer's temporaries. This module writes each term once, as a
function of the book's symbols and of switches that say how the step is run (the menus of
:data:`attn_core.symbols.SWITCHES`, set by :func:`attn_core.training.training_memory`):

* :func:`layer_items`: what one block keeps for backward, by item, under CUDA's kernels: fused or
  Python (float32) norms, K and V repeated to every head or not, SwiGLU's SiLU kept or recomputed;
  recomputation none, selective (Korthikanti et al.), per op (torchtitan) or full; LoRA keeps only the
  inputs of the projections it adapts.
* :func:`step_items`: weights, gradients, optimizer state, activations, logits, buffers, the total of
  each phase of the step, and ``peak``, the largest.

Every symbol is listed, with its meaning, in :mod:`attn_core.symbols`.
"""

from __future__ import annotations

from ._core import _ratio, formula, maximum
from .training import block_items

#: the items of one block on a GPU, in order: what autograd (or a checkpoint) keeps for backward
STEP_ITEMS: dict[str, str] = {
    "X": "block input [B, N, d] (saved by a fused norm, or kept as a checkpoint's input)",
    "norm1.saved": "norm 1, Python float32 code: its float32 input and normalized output [B, N, d] (the "
                   "output only for the norm weight's gradient: not with a frozen base)",
    "norm1.stats": "norm 1: 1/rms (and the mean for LayerNorm), float32, per token",
    "norm1.out": "norm 1's output, the Q, K, V projections' input [B, N, d]",
    "Q": "queries after RoPE, attention's input [B, H, N, D] (per op: the query projection's output)",
    "K": "keys after RoPE [B, H_kv, N, D] (repeated to H heads by some code)",
    "V": "values [B, H_kv, N, D] (repeated to H heads by some code)",
    "attn.out": "fused attention's output, saved by it and read by the output projection [B, N, H D]",
    "attn.lse": "fused attention: float32 logsumexp per query and head [B, H, N]",
    "attn.P": "eager attention: softmax's output (float32 in Python code), P, dropout's [B, H, N, N]",
    "ctx": "eager attention: P V in [B, N, H D] layout, the output projection's input",
    "h": "the residual stream after attention [B, N, d] (saved by a fused norm 2)",
    "norm2.saved": "norm 2: as norm 1",
    "norm2.stats": "norm 2: as norm 1",
    "norm2.out": "norm 2's output, the FFN's input [B, N, d]",
    "ffn.gate": "SwiGLU: the gate projection's output, SiLU's input [B, N, F]",
    "ffn.silu": "SwiGLU: SiLU's output, kept by eager code [B, N, F]",
    "ffn.up": "the up projection's output (GeLU's input for an MLP) [B, N, F]",
    "ffn.act": "the down projection's input [B, N, F]",
    "ffn.out": "per op: the down projection's output [B, N, d]",
    "lora": "LoRA: the rank-r intermediate of each adapted projection [B, N, r]",
    "lora.drop": "LoRA's dropout on each adapted projection's input: its output and its mask, 1 byte a value "
                 "on CUDA [B, N, input width]",
    "masks": "the two residual dropouts' masks, 1 byte a value (as on CUDA) [B, N, d] each",
}

#: items tensor parallelism does not split (sequence parallelism does): norms, the residual stream
REPLICATED_ITEMS = frozenset({"X", "norm1.saved", "norm1.stats", "norm1.out", "h", "norm2.saved",
                              "norm2.stats", "norm2.out", "ffn.out", "masks", "lora.drop"})

#: the phases of one step whose totals :func:`step_items` compares
PHASES = ("forward", "forward_last", "backward", "backward_end", "step")
#: the items of :func:`step_items` that add up to a phase's total
STEP_TOTAL_ITEMS = ("weights", "gradients", "optimizer", "activations", "logits", "buffers")


@formula
def layer_items(B, N, N_k, d, H, H_kv, D, F, b, n_py, n_rms, kr, sl, g_swiglu, e_fused, k_drop,
                r_sel, r_op, r_full, f_lora, a_qkv, a_o, a_up, a_down, n_lora, r_lora, q_in=0,
                k_ldrop=0) -> dict:
    """Bytes one block keeps for backward on a GPU, by item (:data:`STEP_ITEMS`), for B sequences of N
    query tokens against N_k keys (N_k = N but for context parallelism).

    Kernels: ``n_py`` 1 for Python code that upcasts to float32 (Hugging Face's and torchtune's
    RMSNorm: a float32 copy of the input and the normalized output in the dtype, 4 + b bytes a value,
    where a fused norm saves its input; eager softmax's float32 output), ``n_rms`` RMSNorm (1/rms) or
    LayerNorm (mean too), ``kr`` 1 when K and V are repeated to H heads before attention, ``sl`` 1
    when SwiGLU keeps SiLU's output. Recomputation: ``r_sel`` (Korthikanti et al.'s selective: the
    attention core), ``r_op`` (torchtitan's per-op policy: the block input, every other matmul's
    output and attention's outputs), ``r_full`` (the block input only); what is not kept is rebuilt
    during backward (:func:`rebuilt_bytes`). LoRA (``f_lora`` 1, a frozen base): a frozen projection
    needs no input for backward, so a projection's input is kept only where one it feeds is adapted
    (``a_qkv``, ``a_o``, ``a_up``, ``a_down`` 0/1), and each of the ``n_lora`` adapted projections
    keeps its rank-``r_lora`` intermediate. A QLoRA base whose quantized projections keep their input
    (``q_in`` 1: bitsandbytes' ``MatMul4Bit`` up to 0.43.1 saves it whenever it needs a gradient,
    bitsandbytes/autograd/_functions.py) keeps every projection's input, adapted or not. LoRA's
    dropout (``k_ldrop`` 1: PEFT's ``lora_B(lora_A(dropout(x)))``, peft/tuners/lora/layer.py, one dropout
    per adapted projection) keeps, for each adapted projection, its input's dropped-out copy (what
    ``lora_A`` saves) and the dropout's mask.
    """
    tok = B * N
    kept = 1 - r_full - r_op  # 1 unless a checkpoint keeps only some items
    core = kept * (1 - r_sel)  # the attention core, unless recomputed

    def needs(adapted):  # a projection's input: kept for a trained base, a bitsandbytes 4-bit one, or an
        # adapter without dropout (with dropout the adapter keeps the dropped-out copy, "lora.drop")
        return 1 - f_lora * (1 - adapted * (1 - k_ldrop)) * (1 - q_in)

    kv_heads = H_kv + kr * (H - H_kv)  # K and V repeated to H heads, or not
    stats = 4 * (2 - n_rms)
    return {
        "X": tok * d * b * (kept * (1 - n_py) + r_op + r_full),
        "norm1.saved": kept * n_py * tok * d * (4 + b * (1 - f_lora)),
        "norm1.stats": kept * tok * stats,
        "norm1.out": kept * tok * d * b * needs(a_qkv),
        "Q": (kept + r_op) * tok * H * D * b,
        "K": kept * tok * kv_heads * D * b,
        "V": (kept * kv_heads + r_op * H_kv) * tok * D * b,
        # fused attention's output: saved by the kernel, and the output projection's input (which keeps
        # it under selective recomputation too, unless that projection is frozen and not adapted)
        "attn.out": (kept * (1 - r_sel * (1 - needs(a_o))) + r_op) * e_fused * tok * H * D * b,
        "attn.lse": (core + r_op) * e_fused * 4 * B * H * N,
        "attn.P": core * (1 - e_fused) * B * H * N * N_k * (b + 4 * n_py + k_drop * (1 + b)),
        "ctx": kept * (1 - e_fused) * tok * H * D * b * needs(a_o),
        "h": kept * (1 - n_py) * tok * d * b,
        "norm2.saved": kept * n_py * tok * d * (4 + b * (1 - f_lora)),
        "norm2.stats": kept * tok * stats,
        "norm2.out": kept * tok * d * b * needs(a_up),
        "ffn.gate": (kept + r_op) * g_swiglu * tok * F * b,
        "ffn.silu": kept * g_swiglu * sl * tok * F * b,
        "ffn.up": kept * tok * F * b,
        "ffn.act": kept * tok * F * b * needs(a_down),
        "ffn.out": r_op * tok * d * b,
        "lora": kept * f_lora * n_lora * tok * r_lora * b,
        # each adapted projection's input: d wide, but the output projection's (H D) and down's (F)
        "lora.drop": kept * f_lora * k_ldrop * tok * (b + 1) * (d * n_lora + a_o * (H * D - d)
                                                                + a_down * (F - d)),
        "masks": kept * k_drop * tok * 2 * d,
    }


@formula
def rebuilt_bytes(B, N, N_k, d, H, H_kv, D, F, b, n_py, n_rms, kr, sl, g_swiglu, e_fused, k_drop,
                  r_sel, r_op, r_full, f_lora, a_qkv, a_o, a_up, a_down, n_lora, r_lora, q_in=0, k_ldrop=0):
    """Bytes a recomputed block rebuilds while its backward runs (one block at a time): item by item,
    what the block keeps without recomputation less what recomputation kept; 0 with none. The items a
    checkpoint keeps beyond the block's own (its input X, which a Python norm does not save, and the
    per-op policy's FFN output) are not rebuilt: for them recomputation keeps at least as much."""
    args = {k: v for k, v in locals().items() if k not in ("r_sel", "r_op", "r_full")}
    whole = layer_items(**args, r_sel=0, r_op=0, r_full=0)
    kept = layer_items(**args, r_sel=r_sel, r_op=r_op, r_full=r_full)
    return sum(whole[k] - kept[k] for k in whole if k not in ("X", "ffn.out"))


@formula
def step_items(B, N, n_vocab, L, P_w, P_io, P_layer, P_lin, P_lora, d, H, H_kv, D, F, b, n_py, n_rms,
               kr, sl, g_swiglu, e_fused, k_drop, u_mask, u_cpu, r_sel, r_op, r_full, r_off, f_lora, f_quant,
               q_w, a_qkv, a_o, a_up, a_down, n_lora, r_lora, w_b, g_b, o_master, n_opt, m_b, u_q, m_q,
               f_temp, o_bwd, l_loss, z_1, z_2, z_3, N_d, t, s_sp, c, pp, q_in=0, k_ldrop=0,
               c_cast=0) -> dict:
    """Bytes on the busiest rank of a training step: by item at the step's peak, and each phase's total.

    Parameters: ``P_w`` in all, ``P_io`` of the input and output layers (embeddings, the output
    head, the final norm), ``P_layer`` of one block, ``P_lin`` of the block matrices a QLoRA base
    quantizes to ``q_w`` bytes (``f_quant``), ``P_lora`` of LoRA's adapters (``f_lora``: only they
    train; the base is frozen in b bytes a value). State: ``w_b`` and ``g_b`` bytes per weight and
    gradient, ``o_master`` bytes of a master copy, ``n_opt`` moments of ``m_b`` bytes (``m_q`` with
    a quantized optimizer, ``u_q``); ``f_temp`` a copy of the trained parameters the optimizer's step
    makes (foreach AdamW); ``o_bwd`` steps the optimizer inside the backward, one parameter at a time.
    ZeRO (``z_1``, ``z_2``, ``z_3``) shards over the ``N_d`` x ``c`` data- and context-parallel ranks;
    tensor parallelism splits each matrix over ``t`` ranks (``s_sp``: the norms and residual too), a
    pipeline of ``pp`` stages the blocks (the first stage keeps ``pp`` micro-batches of its L / pp
    blocks, as 1F1B does; the last one holds the logits).

    Items, each given for every phase as ``<phase>.<item>`` (a phase's items add up to its total,
    ``phase.<phase>``; ``peak`` is the largest total):

    * ``weights``, ``gradients``, ``optimizer``: the state (``gradients``: the output layer's in the
      backward of the last block, all of them at the end of backward);
    * ``activations``: what L blocks keep for backward (:func:`layer_items`; under ``u_cpu`` the
      CPU's, :func:`block_items`); with ``r_off`` full recomputation's checkpoints go to the host;
    * ``logits``: the output layer and the loss, ``l_loss`` bytes per logit at the loss (B N
      ``n_vocab`` logits, split over TP by vocabulary and over CP by tokens), the final norm and the
      head's input;
    * ``buffers``: ZeRO-3's gathered blocks (as stored: bf16, or a LoRA base in b bytes with its QLoRA
      matrices quantized; at the loss the last block, kept unsharded for its backward; in the backward two
      blocks and one block's unsharded gradient, unless the base is frozen) and its root unit (the input and
      output layers, gathered from the forward to the end of the backward, their gradients whole until
      then), autocast's bf16 copies of float32 weights (``c_cast``, without ZeRO-3), the block a
      recomputation rebuilds, a QLoRA matrix dequantized in b bytes, the
      optimizer step's temporaries (foreach's copy of the trained parameters; quantized moments, ``u_q``,
      dequantized to float32 one parameter at a time, the largest being the n_vocab x d embedding).

    Phases (:data:`PHASES`): ``forward``, the loss on the first pipeline stage (state, activations,
    logits unless a pipeline puts them on the last stage, buffers); ``forward_last``, the loss on the
    last stage (its L / pp blocks' activations and the logits; the same as ``forward`` without a
    pipeline); ``backward``, the last block's backward (state, activations, the output layer's
    gradient, the rebuilt block, buffers); ``backward_end``, the first block's backward (state, every
    gradient, the rebuilt block, buffers);
    ``step`` (state, gradients, the optimizer's temporaries; stepping inside the backward, ``o_bwd``,
    the embedding's own gradient at its step).
    """
    tp = _ratio(1, t)
    sp = 1 + s_sp * (tp - 1)  # 1/t with sequence parallelism, else 1
    stage_blocks = _ratio(P_w - P_io, pp)  # the busiest, first stage's blocks (it holds P_io too)
    trained = (f_lora * P_lora + (1 - f_lora) * (stage_blocks + P_io)) * tp
    frozen = f_lora * ((stage_blocks + P_io) * b - f_quant * _ratio(P_lin, pp) * (b - q_w)) * tp
    ranks = N_d * c

    def share(z):
        return 1 - z + _ratio(z, ranks)

    weights = trained * w_b * share(z_3) + frozen * share(z_3)
    grads = (1 - o_bwd) * trained * g_b * share(z_2)
    moment = (1 - u_q) * m_b + u_q * m_q
    optimizer = trained * (o_master + n_opt * moment) * share(z_1)

    # activations: one block's items on this rank, times L (the first stage's L / pp blocks x pp
    # micro-batches under 1F1B), or the CPU's ledger
    n_rank = _ratio(N, c)
    args = dict(B=B, N=n_rank, N_k=N, d=d, H=H, H_kv=H_kv, D=D, F=F, b=b, n_py=n_py, n_rms=n_rms, kr=kr,
                sl=sl, g_swiglu=g_swiglu, e_fused=e_fused, k_drop=k_drop, f_lora=f_lora, a_qkv=a_qkv, a_o=a_o,
                a_up=a_up, a_down=a_down, n_lora=n_lora, r_lora=r_lora, q_in=q_in, k_ldrop=k_ldrop)
    items = layer_items(**args, r_sel=r_sel, r_op=r_op, r_full=r_full)
    gpu_layer = sum(v * (sp if name in REPLICATED_ITEMS else tp) for name, v in items.items())
    cpu_layer = sum(block_items(B=B, N=N, d=d, H=H, H_kv=H_kv, F=F, b=b, k_drop=k_drop, u_mask=u_mask,
                                n_rms=n_rms, g_swiglu=g_swiglu, e_fused=e_fused, r_sel=r_sel,
                                r_full=r_full).values())
    per_layer = u_cpu * cpu_layer + (1 - u_cpu) * gpu_layer
    offloaded = r_off * r_full * B * n_rank * d * b * sp  # full recomputation's checkpoints, on the host
    activations = L * (per_layer - offloaded)
    last_stage = _ratio(L, pp) * (per_layer - offloaded)

    tok = B * n_rank
    # the loss's bytes per logit; the final norm as a block's (a Python norm's normalized output only for
    # a trained weight) and the head's input, kept for the head's weight gradient (not for a frozen head)
    final_norm = d * b * (1 - n_py) + n_py * d * (4 + b * (1 - f_lora)) + 4 + (1 - f_lora) * d * b
    logits = tok * n_vocab * tp * l_loss + tok * sp * final_norm
    # the output layer's gradient, made first in the backward; FSDP (ZeRO-3) reduces the root unit's
    # gradients (embeddings, final norm, output layer) only at the end of the backward
    # (torch/distributed/fsdp/_fully_shard/_fsdp_state.py, _root_post_backward_final_callback), so until
    # then they are whole
    out_grad = (1 - o_bwd) * (1 - f_lora) * n_vocab * d * tp * g_b * (share(z_2) + z_3 * (1 - share(z_2)))
    root_grads = z_3 * (1 - o_bwd) * (1 - f_lora) * P_io * tp * g_b * (1 - share(z_2))
    rebuilt = rebuilt_bytes(**args, r_sel=r_sel, r_op=r_op, r_full=r_full) * tp
    # ZeRO-3 gathers two blocks as they are stored (bf16 to compute in; a frozen base in b bytes, its
    # QLoRA matrices quantized) and, in the backward only, one block's unsharded gradient before its
    # reduce-scatter (FSDP's post-backward hook), which a frozen base has none of
    stored = (1 - f_lora) * 2 * P_layer + f_lora * (P_layer * b - f_quant * _ratio(P_lin, L) * (b - q_w))
    gathered_fwd = z_3 * tp * stored  # at the loss: the last block, kept unsharded for its backward
    gathered = z_3 * tp * (2 * stored + (1 - f_lora) * P_layer * g_b)
    # the root unit (input and output layers) is gathered in bf16 for the forward and, FSDP2 keeping the
    # root unsharded after its forward (it is not resharded: its post-forward mesh is None), stays whole
    # through the backward
    io_layers = z_3 * P_io * tp * 2
    # torch.autocast's bf16 copies of float32 weights (c_cast): cached through the forward and saved by the
    # matmuls for the backward (the block matrices and the output head); FSDP2's gathered bf16 blocks
    # (ZeRO-3) take their place
    casts = c_cast * (1 - z_3) * 2 * (stage_blocks + n_vocab * d) * tp
    dequant = f_quant * d * F * tp * b  # one QLoRA matrix dequantized for its matmul
    # the optimizer step: foreach's copy of the trained parameters (of one at a time when the step runs
    # inside the backward); quantized moments (torchao's AdamW8bit, AdamW4bit) are stepped one parameter
    # at a time, each dequantized to float32 (torchao/prototype/low_bit_optim/adam.py, single_param_adam:
    # ``exp_avg_f32 = exp_avg.float().lerp(...)``, the same for exp_avg_sq), so the largest parameter, the
    # token embedding (n_vocab x d), has two float32 copies of its moments, and under optimizer_in_backward
    # its own gradient, at its step
    largest = (1 - f_lora) * n_vocab * d * tp
    temporaries = (f_temp * maximum(moment, o_master) * ((1 - o_bwd) * trained + o_bwd * largest)
                   + u_q * 2 * 4 * largest) * share(z_1)
    step_grads = grads + o_bwd * largest * g_b * share(z_2)

    first_logits = logits * maximum(0, 2 - pp)  # 1 without a pipeline, else 0: the last stage has them
    phases = {
        "forward": {"gradients": 0, "activations": activations, "logits": first_logits,
                    "buffers": gathered_fwd + io_layers + dequant + casts},
        "forward_last": {"gradients": 0, "activations": last_stage, "logits": logits,
                         "buffers": gathered_fwd + io_layers + dequant + casts},
        "backward": {"gradients": out_grad, "activations": activations, "logits": 0,
                     "buffers": gathered + io_layers + rebuilt + dequant + casts},
        "backward_end": {"gradients": grads, "activations": 0, "logits": 0,
                         "buffers": gathered + io_layers + root_grads + rebuilt + dequant},
        "step": {"gradients": step_grads, "activations": 0, "logits": 0, "buffers": temporaries},
    }
    out = {}
    for name, items in phases.items():
        parts = {"weights": weights, "optimizer": optimizer, **items}
        out.update({f"{name}.{k}": parts[k] for k in STEP_TOTAL_ITEMS})
        out[f"phase.{name}"] = sum(parts.values())
    peak = out["phase.forward"]
    for name in PHASES[1:]:
        peak = maximum(peak, out[f"phase.{name}"])
    out["peak"] = peak
    return out
