"""The symbols the formulas are written in, and the menus that set them (plain data, no SymPy).

* :data:`SYMBOLS`: each symbol of :mod:`attn_core.formulas` and what it means (book/notation.md
  has the book's notation; switches are 0/1 indicators or the value a menu sets);
* :data:`ASSUMPTIONS`: what SymPy may assume of each (positive integers, non-negative, ...);
* :data:`SWITCHES`: menu -> option -> symbol values. The public functions (``block_ledger(norm=
  "rmsnorm")``), the widgets' menus in Python and the page's menus all read this one table.
"""

from __future__ import annotations

from fractions import Fraction

SYMBOLS: dict[str, str] = {
    "B": "batch size (sequences)",
    "N": "sequence length, tokens",
    "d": "model width d_model",
    "H": "query heads",
    "H_kv": "key/value heads",
    "D": "head dimension of queries and keys (without MLA's RoPE part)",
    "D_v": "head dimension of values",
    "D_r": "MLA: the RoPE part of each query/key head (0 without MLA)",
    "R": "MLA: latent values cached per token and layer (0 = per-head K and V)",
    "Q_r": "MLA: rank of the low-rank query projection (0 = a direct d x H D projection)",
    "D_k": "key dimension of linear attention",
    "L": "layers",
    "F": "FFN hidden width",
    "W": "sliding window in tokens, 0 = full attention",
    "b": "bytes per value (switch: dtype)",
    "k_drop": "1 with attention dropout, 0 without (switch: dropout)",
    "a_saved": "0: the teaching ledger, 1: what autograd saves (switch: saved)",
    "u_mask": "0: the dropout mask in the dtype (CPU), 1: a bool mask (CUDA) (switch: mask)",
    "c_mask": "1 if a dense (N, N) causal mask is materialized and saved",
    "m_ffn": "matrices in the FFN (switch: ffn; 2 mlp, 3 swiglu)",
    "w_ffn": "1 with the FFN, 0 for the attention block alone",
    "c_causal": "share of the N x N work done (switch: causal; 1 or 1/2)",
    # the whole block and the training step (the "does it fit" widget)
    "n_rms": "0: LayerNorm, 1: RMSNorm (switch: norm)",
    "g_swiglu": "0: GeLU MLP, 1: SwiGLU FFN (switch: ffn_kind)",
    "e_fused": "0: eager attention, 1: fused (FlashAttention) (switch: attention)",
    "r_sel": "1 if the attention core is recomputed (switch: recompute; selective)",
    "r_full": "1 if only the block's input is kept (switch: recompute; full)",
    "P_w": "parameters of the model (Psi)",
    "N_d": "data-parallel ranks",
    "w_b": "bytes per weight (switch: precision)",
    "g_b": "bytes per gradient (switch: precision)",
    "o_master": "bytes of fp32 master weights per parameter (switch: precision; 0 or 4)",
    "n_opt": "optimizer moments per parameter (switch: optimizer; AdamW 2, SGD momentum 1)",
    "z_1": "1 if ZeRO shards the optimizer state (switch: zero; stage >= 1)",
    "z_2": "1 if ZeRO shards the gradients (switch: zero; stage >= 2)",
    "z_3": "1 if ZeRO shards the weights (switch: zero; stage 3)",
    # one training step on an accelerator (attn_core.formulas.step, training.training_memory)
    "N_k": "keys each query attends to, where it differs from N (context parallelism: all N)",
    "n_vocab": "vocabulary size: logits per token",
    "P_io": "parameters of the input and output layers (embeddings, output head, final norm)",
    "P_layer": "parameters of one block",
    "P_lin": "parameters of the block matrices a QLoRA base quantizes",
    "P_lora": "parameters of LoRA's adapters",
    "n_py": "1 for Python code that upcasts to float32 (norms, softmax), 0 for fused kernels "
            "(switch: kernels)",
    "kr": "1 if K and V are repeated to H heads before attention (switch: kernels)",
    "sl": "1 if SwiGLU keeps SiLU's output, 0 if a compiled kernel recomputes it (switch: kernels)",
    "u_cpu": "1: the block as the CPU keeps it (the measured ledger), 0: CUDA's kernels (switch: device)",
    "r_op": "1 with torchtitan's per-op recomputation (switch: recompute; per_op)",
    "r_off": "1 if full recomputation's checkpoints are offloaded to the host (switch: offload)",
    "f_lora": "1 if only LoRA's adapters train on a frozen base (switch: finetune)",
    "f_quant": "1 if the base's block matrices are quantized, QLoRA (switch: finetune)",
    "q_w": "bytes per quantized base weight, scales included (switch: finetune; NF4 ~ 0.516)",
    "a_qkv": "LoRA: 1 if a Q, K or V projection is adapted (their input is kept)",
    "a_o": "LoRA: 1 if the output projection is adapted",
    "a_up": "LoRA: 1 if the FFN's gate or up projection is adapted",
    "a_down": "LoRA: 1 if the FFN's down projection is adapted",
    "n_lora": "LoRA: adapted projections per block",
    "r_lora": "LoRA: rank r",
    "m_b": "bytes per optimizer moment in the precision's dtype (switch: precision)",
    "u_q": "1 if the optimizer keeps its moments quantized (switch: optimizer)",
    "m_q": "bytes per quantized moment, scales included (switch: optimizer)",
    "f_temp": "copies of the trained parameters the optimizer step makes (switch: optimizer_impl; "
              "foreach 1, fused 0)",
    "o_bwd": "1 if the optimizer steps inside the backward, one parameter at a time (switch: "
             "optimizer_in_backward)",
    "l_loss": "bytes per logit at the loss (switch: loss); under tensor parallelism the output layer "
              "and the loss are taken as vocabulary-parallel (Megatron-LM's cross-entropy, PyTorch's "
              "loss_parallel): each rank holds 1/t of the logits",
    "c_cast": "1 if float32 weights are cast to bf16 for compute by torch.autocast, which keeps the "
              "casts through the forward (switch: precision; fp32_params)",
    "q_in": "QLoRA: 1 if every quantized projection keeps its input for backward (bitsandbytes up to "
            "0.43.1), 0 if none does (torchao's NF4; bitsandbytes from 0.43.2) (switch: finetune)",
    "k_ldrop": "LoRA: 1 with dropout on the adapters' inputs, PEFT's lora_dropout > 0 (switch: lora_dropout)",
    "pp": "pipeline stages (1F1B)",
    # several devices (the chapter "beyond one device")
    "t": "tensor-parallel degree: ranks that split each layer's heads and FFN columns",
    "s_sp": "1 with sequence parallelism: the norms' and residual activations split along N over t",
    "c": "context-parallel degree: ranks that split the sequence (ring attention)",
    "P_rep": "parameters every tensor-parallel rank holds whole (norms, row-parallel biases, positions)",
    # the time of a transfer (attn_core.formulas.parallel)
    "alpha": "latency of one message over a link, seconds (the time model's fixed cost)",
    "beta_l": "bandwidth of a link in one direction, bytes per second",
    "pi": "compute rate, FLOP/s (a roofline's peak, or what a kernel achieves)",
    # a whole model from its config (attn_core.formulas.model; ModelConfig.symbol_values, MODEL_SYMBOLS)
    "R_kv": "MLA: rank of the key/value latent, kv_lora_rank (0 without MLA; the cached R = R_kv + D_r)",
    "n_norm": "norms per block (2; Gemma 2: 4)",
    "k_tie": "1 if the output head is the token embedding matrix (tied), else 0",
    "n_pos": "learned position embeddings (GPT-2: 1024; 0 = none)",
    "k_bias": "1 if every matrix has a bias (GPT-2)",
    "k_qkv_b": "1 if the Q, K, V projections (MLA: its down projections) have biases",
    "k_out_b": "1 if the attention's output projection has a bias",
    "k_ffn_b": "1 if the FFN's matrices have biases",
    "n_exp": "routed experts of a mixture of experts (0: a dense FFN)",
    "n_shared": "shared experts of a mixture of experts, always on",
    "F_e": "hidden width of one expert",
    "L_dense": "mixture of experts: the first L_dense blocks keep a dense FFN",
    "F_dense": "hidden width of those blocks' dense FFN",
    # the "does it fit" widget: LoRA's targets, QLoRA's quantized matrices, the accelerator's memory
    "l_q": "LoRA: 1 if the query projection is adapted (switch: lora_modules)",
    "l_k": "LoRA: 1 if the key projection is adapted",
    "l_v": "LoRA: 1 if the value projection is adapted",
    "l_o": "LoRA: 1 if the output projection is adapted",
    "l_gate": "LoRA: 1 if the FFN's gate projection is adapted (a gated FFN's)",
    "l_up": "LoRA: 1 if the FFN's up projection is adapted",
    "l_down": "LoRA: 1 if the FFN's down projection is adapted",
    "q_all": "QLoRA: 1 if every block matrix is quantized, 0 only the adapted projections (switch: quantize)",
    "M_mem": "accelerator memory, in units of u_mem bytes",
    "u_mem": "bytes per unit of memory (switch: mem_unit; GB 10^9, GiB 2^30, MiB 2^20 as nvidia-smi "
             "writes it)",
    "p_alloc": "allowance for the allocator: percent of the accelerator's memory held back for PyTorch's "
               "cache of freed blocks, which no count of tensors predicts (the widgets' setting, default 10: "
               "the calibration page compares a reserved reading less 10% with the prediction)",
}

_POS_INT = {"positive": True, "integer": True}
_NONNEG_INT = {"nonnegative": True, "integer": True}
#: symbol -> SymPy assumptions (every symbol of SYMBOLS has an entry)
ASSUMPTIONS: dict[str, dict] = {
    **dict.fromkeys(("B", "N", "d", "H", "H_kv", "D", "L", "F", "D_v", "D_k", "t", "c"), _POS_INT),
    **dict.fromkeys(("D_r", "R", "Q_r", "W", "P_rep"), _NONNEG_INT),
    **dict.fromkeys(("P_w", "N_d"), _POS_INT),
    **dict.fromkeys(("b", "m_ffn", "c_causal", "w_b", "g_b"), {"positive": True}),
    **dict.fromkeys(("N_k", "n_vocab", "pp"), _POS_INT),
    **dict.fromkeys(("beta_l", "pi"), {"positive": True}),
    "alpha": {"nonnegative": True},
    **dict.fromkeys(("R_kv", "n_norm", "n_pos", "n_exp", "n_shared", "F_e", "L_dense", "F_dense"),
                    _NONNEG_INT),
    **dict.fromkeys(("k_tie", "k_bias", "k_qkv_b", "k_out_b", "k_ffn_b", "l_q", "l_k", "l_v", "l_o", "l_gate",
                     "l_up", "l_down", "q_all"), _NONNEG_INT),
    **dict.fromkeys(("M_mem", "u_mem"), {"positive": True}),
    "p_alloc": {"nonnegative": True},
    **dict.fromkeys(("P_io", "P_layer", "P_lin", "P_lora", "n_lora", "r_lora"), _NONNEG_INT),
    **dict.fromkeys(("n_py", "kr", "sl", "u_cpu", "r_op", "r_off", "f_lora", "f_quant", "q_w", "a_qkv",
                     "a_o", "a_up", "a_down", "m_b", "u_q", "m_q", "f_temp", "o_bwd", "l_loss", "q_in",
                     "k_ldrop", "c_cast"),
                    {"nonnegative": True}),
    **dict.fromkeys(("k_drop", "a_saved", "u_mask", "c_mask", "w_ffn", "n_rms", "g_swiglu", "e_fused",
                     "r_sel", "r_full", "z_1", "z_2", "z_3", "o_master", "n_opt", "s_sp"),
                    {"nonnegative": True}),
}

#: menu -> option -> symbol values (the page and Python use the same table)
SWITCHES: dict[str, dict[str, dict[str, int | Fraction]]] = {
    "dtype": {"fp32": {"b": 4}, "fp16": {"b": 2}, "bf16": {"b": 2}, "fp8": {"b": 1}},
    "dropout": {"true": {"k_drop": 1}, "false": {"k_drop": 0}},
    "saved": {"teaching": {"a_saved": 0}, "autograd": {"a_saved": 1}},
    "mask": {"dtype": {"u_mask": 0}, "bool": {"u_mask": 1}},
    "ffn": {"mlp": {"m_ffn": 2}, "swiglu": {"m_ffn": 3}},
    "causal": {"false": {"c_causal": 1}, "true": {"c_causal": Fraction(1, 2)}},
    "norm": {"layernorm": {"n_rms": 0}, "rmsnorm": {"n_rms": 1}},
    "ffn_kind": {"gelu": {"g_swiglu": 0}, "swiglu": {"g_swiglu": 1}},
    "attention": {"eager": {"e_fused": 0}, "fused": {"e_fused": 1}},
    # per_op: torchtitan's selective_ac_option = "op" (a training step only; block_ledger has no such)
    "recompute": {"none": {"r_sel": 0, "r_op": 0, "r_full": 0},
                  "selective": {"r_sel": 1, "r_op": 0, "r_full": 0},
                  "per_op": {"r_sel": 0, "r_op": 1, "r_full": 0},
                  "full": {"r_sel": 0, "r_op": 0, "r_full": 1}},
    # precision conventions: weights, gradients, master copy, moments (bytes each); b the activations'.
    # bf16_mixed: ZeRO's mixed precision (16 bytes a parameter with AdamW); megatron: Megatron-LM's bf16
    # with float32 gradients (18); fp32_params: float32 parameters and gradients computed in bf16, as
    # FSDP2's MixedPrecisionPolicy and torch.autocast keep them (16); bf16_pure: no master copy, bf16
    # moments (8: torchtune, LitGPT "bf16-true"); fp32: everything in float32 (16, activations 4).
    "precision": {"fp32": {"w_b": 4, "g_b": 4, "o_master": 0, "m_b": 4, "b": 4, "c_cast": 0},
                  "bf16_mixed": {"w_b": 2, "g_b": 2, "o_master": 4, "m_b": 4, "b": 2, "c_cast": 0},
                  "megatron": {"w_b": 2, "g_b": 4, "o_master": 4, "m_b": 4, "b": 2, "c_cast": 0},
                  "fp32_params": {"w_b": 4, "g_b": 4, "o_master": 0, "m_b": 4, "b": 2, "c_cast": 1},
                  "bf16_pure": {"w_b": 2, "g_b": 2, "o_master": 0, "m_b": 2, "b": 2, "c_cast": 0}},
    # the 8- and 4-bit moments of torchao's AdamW8bit and AdamW4bit: blocks of 256 and 128 values
    # with one float32 scale each
    "optimizer": {"adamw": {"n_opt": 2, "u_q": 0, "m_q": 0},
                  "adamw_8bit": {"n_opt": 2, "u_q": 1, "m_q": 1 + Fraction(4, 256)},
                  "adamw_4bit": {"n_opt": 2, "u_q": 1, "m_q": Fraction(1, 2) + Fraction(4, 128)},
                  "sgd_momentum": {"n_opt": 1, "u_q": 0, "m_q": 0}, "sgd": {"n_opt": 0, "u_q": 0, "m_q": 0}},
    "optimizer_impl": {"foreach": {"f_temp": 1}, "fused": {"f_temp": 0}},
    "optimizer_in_backward": {"false": {"o_bwd": 0}, "true": {"o_bwd": 1}},
    # kernels: compiled (torch.compile; PyTorch's fused RMSNorm), eager Python code upcasting to float32
    # (Hugging Face, torchtune), the same repeating K and V to every head (torchtitan, torchtune 2024)
    "kernels": {"compiled": {"n_py": 0, "kr": 0, "sl": 0}, "eager": {"n_py": 1, "kr": 0, "sl": 1},
                "eager_repeat_kv": {"n_py": 1, "kr": 1, "sl": 1}},
    "device": {"cuda": {"u_cpu": 0, "u_mask": 1}, "cpu": {"u_cpu": 1, "u_mask": 0}},
    "offload": {"false": {"r_off": 0}, "true": {"r_off": 1}},
    # bytes per logit at the loss: the largest total over the loss's forward and backward, as the CPU
    # allocator measures them (tests/test_step.py::test_loss_options_are_measured; autograd frees the same
    # tensors on a GPU). fp32: float32 logits deleted before backward (torchtitan 2024's train.py ``del
    # pred``, torchtune's ``del logits``): the log-softmax's output and the two gradients of its backward,
    # 4 bytes each; fp32_kept: the bf16 logits kept by the caller too (Hugging Face's loss functions);
    # chunked: torchtune's CEWithChunkedOutputLoss in 8 chunks (bf16 chunks, float32 log-softmax outputs,
    # one chunk's float32 copy); chunked_compiled: the same with its upcast and cross-entropy compiled
    # (the bf16 chunks, and one chunk's gradient before its logits are freed);
    # fused: no logits. Added, measured the same way: fp32_shifted, Hugging Face's LlamaForCausalLM of
    # early 2024 (transformers 4.38: ``logits = logits.float()`` kept by the output and
    # ``logits[..., :-1, :].contiguous()`` for the loss); fp32_parallel, PyTorch's loss_parallel (its
    # log-softmax and backward in DTensor ops, torch/distributed/tensor/parallel/loss.py); compiled, bf16
    # logits into a compiled upcast and cross-entropy (torchtitan since 2025, components/loss.py);
    # bf16_chunked, LitGPT's cross-entropy of 128-token bf16 chunks, no upcast, the logits kept by the
    # caller (lit_gpt/utils.py chunked_cross_entropy)
    "loss": {"fp32_kept": {"l_loss": 14}, "fp32": {"l_loss": 12}, "chunked": {"l_loss": Fraction(13, 2)},
             "chunked_compiled": {"l_loss": Fraction(9, 4)}, "fused": {"l_loss": 0},
             "fp32_shifted": {"l_loss": 16}, "fp32_parallel": {"l_loss": 16}, "compiled": {"l_loss": 4},
             "bf16_chunked": {"l_loss": Fraction(9, 2)}},
    # QLoRA's NF4: 4 bits a weight, an 8-bit scale per 64, a float32 scale per 256 x 64 (double quantized).
    # qlora: torchao's NF4Tensor (torchtune), whose LinearNF4 keeps only the weight for backward
    # (torchao/dtypes/nf4tensor.py); qlora_bnb: bitsandbytes' Linear4bit (double-quantized scales, its
    # default compress_statistics=True), whose MatMul4Bit keeps its input A whenever A needs a gradient
    # (bitsandbytes/autograd/_functions.py up to 0.43.1: ``if any(ctx.needs_input_grad[:2]):
    # ctx.tensors = (A, B)``; from 0.43.2 it keeps (None, B): choose "qlora" for a newer bitsandbytes);
    # qlora_bnb_nf4: the same with a float32 scale per 64 weights ("nf4" without "-dq")
    "finetune": {"full": {"f_lora": 0, "f_quant": 0, "q_w": 0, "q_in": 0},
                 "lora": {"f_lora": 1, "f_quant": 0, "q_w": 0, "q_in": 0},
                 "qlora": {"f_lora": 1, "f_quant": 1,
                           "q_w": Fraction(1, 2) + Fraction(1, 64) + Fraction(4, 64 * 256), "q_in": 0},
                 "qlora_bnb": {"f_lora": 1, "f_quant": 1,
                               "q_w": Fraction(1, 2) + Fraction(1, 64) + Fraction(4, 64 * 256), "q_in": 1},
                 "qlora_bnb_nf4": {"f_lora": 1, "f_quant": 1, "q_w": Fraction(1, 2) + Fraction(4, 64),
                                   "q_in": 1}},
    "sequence_parallel": {"true": {"s_sp": 1}, "false": {"s_sp": 0}},
    # LoRA's dropout on the adapters' inputs (PEFT's and LitGPT's lora_dropout > 0; torchtune's configs: 0)
    "lora_dropout": {"false": {"k_ldrop": 0}, "true": {"k_ldrop": 1}},
    "zero": {"0": {"z_1": 0, "z_2": 0, "z_3": 0}, "1": {"z_1": 1, "z_2": 0, "z_3": 0},
             "2": {"z_1": 1, "z_2": 1, "z_3": 0}, "3": {"z_1": 1, "z_2": 1, "z_3": 1}},
    # QLoRA: quantize the adapted projections' matrices (torchtune) or every block matrix (bitsandbytes'
    # Linear4bit replacing every linear layer)
    "quantize": {"adapted": {"q_all": 0}, "all": {"q_all": 1}},
    # an accelerator's memory in decimal GB (10^9 bytes), in GiB, or in MiB as nvidia-smi writes it (a GPU
    # sold as "80 GB" has 80 GiB of memory: see ACCELERATORS)
    "mem_unit": {"GB": {"u_mem": 10**9}, "GiB": {"u_mem": 2**30}, "MiB": {"u_mem": 2**20}},
}

#: the widgets' menu of accelerators -> one GPU's memory in MiB, the total nvidia-smi reports (exact bytes:
#: MiB x 2^20). A GPU sold as "80 GB" has 80 GiB of memory, of which nvidia-smi shows 79.6 GiB on an H100,
#: not 80 x 10^9 bytes (74.5 GiB). CUDA's own total (torch.cuda.mem_get_info()[1]) is a few hundred MiB
#: less: 81,106 MiB (85,045,477,376 bytes) on the same H100 (deviceQuery's "Total amount of global memory",
#: thamada/nvidia-smi, nvsim/H100SXMx8_deviceQuery.py).
ACCELERATORS: dict[str, int] = {
    # "NVIDIA H100 80GB HBM3 ... 0MiB /  81559MiB": NVIDIA/nccl issue 1264
    # (https://github.com/NVIDIA/nccl/issues/1264); "H100: 81559MiB (85.52 GB)" in modal-labs/modal-client
    # pull request 2797 (https://github.com/modal-labs/modal-client/pull/2797, "nvidia quotes GB on their
    # GPUs not GiB"), which lists nvidia-smi's totals of its GPUs
    "H100 80GB HBM3": 81559,
    # modal-labs/modal-client pull request 2797: "A100 80GB: 81920MiB (85.89 GB)"
    "A100 80GB": 81920,
    # the same: "A100 40GB: 40960MiB (42.94 GB)"
    "A100 40GB": 40960,
    # the same: "L40S: 46068MiB (48.30 GB)"
    "L40S": 46068,
    # "NVIDIA GeForce RTX 4090 ... 507MiB /  24564MiB": RLinf/RLinf issue 255
    # (https://github.com/RLinf/RLinf/issues/255); "23859MiB / 24564MiB" in vllm-project/vllm issue 7553
    "RTX 4090": 24564,
    # modal-labs/modal-client pull request 2797: "A10: 23028MiB (24.15 GB)", "L4: 23034MiB (24.15 GB)"
    "A10": 23028,
    "L4": 23034,
    # (the H200 141GB is left out: no published nvidia-smi total was found to cite)
}
#: the accelerator the widgets open with
DEFAULT_ACCELERATOR = "H100 80GB HBM3"

#: menu -> option -> (the label a widget's menu shows, what it means: the option's tooltip). The widgets' one
#: table of labels (sent to the page in the spec); an option without a label shows its key.
OPTION_LABELS: dict[str, dict[str, tuple[str, str]]] = {
    "precision": {
        "bf16_mixed": ("bf16 mixed, fp32 master copy (ZeRO: 16 B a parameter)",
                       "bf16 weights and gradients; a float32 master copy and AdamW's moments in the "
                       "optimizer"),
        "megatron": ("bf16, fp32 gradients (Megatron-LM: 18 B)",
                     "bf16 weights, float32 gradients, a float32 master copy and moments (Megatron-LM's "
                     "bf16)"),
        "fp32_params": ("fp32 parameters, bf16 compute (FSDP2, autocast: 16 B)",
                        "float32 parameters and gradients, computed in bf16 (FSDP2's MixedPrecisionPolicy, "
                        "torch.autocast, which keeps its casts through the forward)"),
        "bf16_pure": ("pure bf16, no master copy (torchtune, LitGPT: 8 B)",
                      "bf16 weights, gradients and moments, no master copy (torchtune's dtype: bf16, "
                      "LitGPT's bf16-true)"),
        "fp32": ("fp32 throughout (16 B, fp32 activations)", "everything in float32, activations included"),
    },
    "optimizer": {
        "adamw": ("AdamW", "two moments a parameter, in the precision's dtype"),
        "adamw_8bit": ("AdamW, 8-bit moments (torchao AdamW8bit)",
                       "moments in 8 bits, a float32 scale per 256 values"),
        "adamw_4bit": ("AdamW, 4-bit moments (torchao AdamW4bit)",
                       "moments in 4 bits, a float32 scale per 128 values"),
        "sgd_momentum": ("SGD with momentum", "one moment a parameter"),
        "sgd": ("SGD, no state", "no optimizer state"),
    },
    "optimizer_impl": {
        "fused": ("fused (fused=True)", "PyTorch's fused kernels: no temporary copy of the parameters"),
        "foreach": ("foreach (PyTorch's default: a copy)",
                    "updates every parameter of a group at once, holding one copy of the parameters"),
    },
    "recompute": {
        "none": ("none", "every block keeps its tensors for the backward"),
        "selective": ("selective: the attention core (Korthikanti et al.)",
                      "recomputes QK^T, the softmax, dropout and PV"),
        "per_op": ("per op (torchtitan's selective_ac_option = \"op\")",
                   "keeps every other matmul's output and attention's; recomputes norms, RoPE, SiLU and the "
                   "other matmuls"),
        "full": ("full: each block's input only",
                 "keeps each block's input and reruns the whole block during its backward"),
    },
    "attention": {
        "fused": ("fused (FlashAttention, SDPA)", "a fused kernel: no N x N tensor kept"),
        "eager": ("eager (N x N kept)", "transformers' attn_implementation=\"eager\": the scores and "
                                        "probabilities kept, in float32"),
    },
    "kernels": {
        "eager": ("eager Python (Hugging Face, torchtune)",
                  "RMSNorm upcasts to float32 and keeps the copy; SwiGLU keeps SiLU's output"),
        "eager_repeat_kv": ("eager, K and V repeated to every head (torchtitan, torchtune 2024)",
                            "as eager, with K and V repeated to the query heads before attention"),
        "compiled": ("compiled (torch.compile)", "fused RMSNorm (its input and 1/rms kept); SiLU recomputed"),
    },
    "loss": {
        "fp32": ("fp32 logits, deleted before backward (torchtitan 2024, torchtune)",
                 "12 bytes a logit at the loss's backward"),
        "fp32_kept": ("fp32 logits, bf16 logits kept too (Hugging Face)",
                      "14 bytes a logit: a transformers model returns its logits"),
        "fp32_shifted": ("fp32 logits and a shifted copy (transformers 4.38)",
                         "16 bytes a logit: logits.float() kept by the output, a shifted copy for the loss"),
        "fp32_parallel": ("fp32 logits, vocabulary-parallel (loss_parallel)",
                          "16 bytes a logit, each tensor-parallel rank holding 1/t of them (PyTorch's "
                          "loss_parallel)"),
        "chunked": ("chunked, 8 chunks (torchtune CEWithChunkedOutputLoss)", "6.5 bytes a logit"),
        "chunked_compiled": ("chunked and compiled (torchtune)", "2.25 bytes a logit"),
        "compiled": ("bf16 logits, compiled loss (torchtitan 2025)", "4 bytes a logit"),
        "bf16_chunked": ("bf16 chunks of 128 tokens (LitGPT)", "4.5 bytes a logit, no upcast"),
        "fused": ("fused: no logits (Liger Kernel, Cut Cross-Entropy)",
                  "the loss and its gradient computed block by block: no logits kept"),
    },
    "finetune": {
        "full": ("full training", "every parameter trains"),
        "lora": ("LoRA", "low-rank adapters train on a frozen base"),
        "qlora": ("QLoRA, torchao NF4 or bitsandbytes ≥ 0.43.2",
                  "a 4-bit NF4 base (double-quantized scales); a quantized projection keeps no input"),
        "qlora_bnb": ("QLoRA, bitsandbytes ≤ 0.43.1 (double-quantized)",
                      "Linear4bit with compress_statistics=True; each quantized projection keeps its input"),
        "qlora_bnb_nf4": ("QLoRA, bitsandbytes ≤ 0.43.1 (nf4, scales not quantized)",
                          "a float32 scale per 64 weights; each quantized projection keeps its input"),
    },
    "quantize": {
        "adapted": ("the adapted matrices in 4 bits (torchtune)", "only the projections LoRA adapts are NF4"),
        "all": ("every block matrix in 4 bits (bitsandbytes)", "Linear4bit replaces every linear layer"),
    },
    "zero": {
        "0": ("none (DDP)", "every data-parallel rank holds the whole state"),
        "1": ("1: optimizer state", "the optimizer state shared out over the dp x cp ranks"),
        "2": ("2: + gradients", "the gradients shared out too"),
        "3": ("3: + weights (FSDP)", "the weights shared out too, each block gathered before it runs"),
    },
    "saved": {
        "teaching": ("teaching ledger (S, P, dropout, O)",
                     "the chapter's count: S, P and the dropout multiplier kept"),
        "autograd": ("as autograd saves it", "what PyTorch's autograd keeps for the backward"),
    },
    "mask": {
        "dtype": ("in the dtype (CPU)", "the dropout mask in the activations' dtype"),
        "bool": ("1 byte (CUDA)", "the dropout mask as one byte a value"),
    },
}

#: symbol -> the :class:`attn_core.models.ModelConfig` field it is read from (a list: the first of
#: these fields that is set), for the formulas of a whole model (:func:`attn_core.formulas.model_params`,
#: :func:`attn_core.formulas.step_model`). A field's value counts as a number: null and false are 0,
#: true is 1. ``ModelConfig.symbol_values()`` and the page (static/hf_config.js) apply this table.
MODEL_SYMBOLS: dict[str, str | list[str]] = {
    "L": "num_layers", "d": "d_model", "H": "num_heads", "H_kv": "num_kv_heads", "D": "d_head",
    "D_v": ["d_v", "d_head"], "D_r": "rope_dim", "R_kv": "kv_lora_rank", "Q_r": "q_lora_rank",
    "F": "ffn_dim", "n_vocab": "vocab_size", "k_tie": "tie_embeddings", "n_pos": "positions",
    "n_norm": "norms_per_layer", "k_bias": "bias", "k_qkv_b": "qkv_bias", "k_out_b": "out_bias",
    "k_ffn_b": "ffn_bias", "n_exp": "num_experts", "n_shared": "shared_experts", "F_e": "expert_dim",
    "L_dense": "dense_layers", "F_dense": ["dense_ffn_dim", "ffn_dim"],
}
#: ModelConfig field -> the menu of SWITCHES its value picks an option of ("swiglu" -> m_ffn = 3)
MODEL_MENUS: dict[str, str] = {"ffn": "ffn", "norm": "norm"}
