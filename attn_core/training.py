"""The training step's memory beyond activations: weights, gradients, optimizer state, ZeRO.

Per parameter (Psi parameters), in bytes:

==========================  =======  =========  =================================================
precision, optimizer        weights  gradients  optimizer state
==========================  =======  =========  =================================================
fp32, AdamW                 4        4          8  (two moments m, v)
bf16_mixed, AdamW           2        2          12 (fp32 master weights, m, v): 16 in all (ZeRO)
megatron, AdamW             2        4          12 (fp32 gradients, as Megatron-LM keeps them): 18
fp32_params, AdamW          4        4          8  (FSDP2's MixedPrecisionPolicy, torch.autocast): 16
bf16_pure, AdamW            2        2          4  (bf16 moments, no master copy): 8
bf16_pure, AdamW 8-bit      2        2          2.03 (torchao's AdamW8bit, a scale per 256 values)
bf16_mixed, SGD + momentum  2        2          8  (fp32 master weights, momentum)
bf16_mixed, SGD             2        2          4  (fp32 master weights)
==========================  =======  =========  =================================================

ZeRO (Rajbhandari et al., 2020) shards these over ``dp_ranks`` data-parallel ranks: stage 1
the optimizer state, stage 2 also the gradients, stage 3 also the weights. Per rank, with
K optimizer bytes per parameter and 16-bit weights and gradients:

    stage 0: (2 + 2 + K) Psi,   1: (2 + 2) Psi + K Psi / N_d,
    stage 2: 2 Psi + (2 + K) Psi / N_d,   3: (2 + 2 + K) Psi / N_d.

The paper's Figure 1 (7.5B parameters, 64 ranks, K = 12): 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
Written once in :func:`attn_core.formulas.training_state`.

:func:`training_memory` answers "does it fit" for a whole training step on an accelerator: the
state above, the activations, the logits and loss, the buffers, each phase of the step and its
peak, for any :class:`~attn_core.models.ModelConfig` (:meth:`~attn_core.models.ModelConfig.from_hf_config`
reads one from a config.json). It is written once, in :func:`attn_core.formulas.step.step_items`,
which the "does it fit" widget evaluates too; the calibration page sets it beside published
measurements.
"""

from __future__ import annotations

import inspect
import math
from fractions import Fraction

from . import _checks, formulas
from .formulas import step
from .models import ModelConfig
from .symbols import SWITCHES

__all__ = [
    "PRECISIONS",
    "OPTIMIZERS",
    "ZERO_STAGES",
    "bytes_per_param",
    "training_state_bytes",
    "training_memory",
    "LORA_MODULES",
    "TRAINING_OPTIONS",
]

#: precision -> (weight bytes, gradient bytes, master-weight bytes kept by the optimizer)
PRECISIONS: dict[str, tuple[int, int, int]] = {
    name: (v["w_b"], v["g_b"], v["o_master"]) for name, v in SWITCHES["precision"].items()}
#: optimizer -> fp32 state values per parameter (AdamW: m and v; SGD with momentum: one buffer)
OPTIMIZERS: dict[str, int] = {name: v["n_opt"] for name, v in SWITCHES["optimizer"].items()}
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)


def bytes_per_param(precision: str = "bf16_mixed", optimizer: str = "adamw") -> dict[str, int]:
    """{"weights", "gradients", "optimizer"}: bytes per parameter before any sharding."""
    return training_state_bytes(1, precision=precision, optimizer=optimizer)


def _exact(x: Fraction) -> int | Fraction:
    return int(x) if x.denominator == 1 else x


def training_state_bytes(num_params: int, *, precision: str = "bf16_mixed", optimizer: str = "adamw",
                         zero_stage: int = 0, dp_ranks: int = 1) -> dict[str, int | Fraction]:
    """Bytes one data-parallel rank holds for weights, gradients and optimizer state.

    ZeRO ``zero_stage`` 0-3 shards, over ``dp_ranks`` ranks: 1 the optimizer state, 2 also the
    gradients, 3 also the weights (an exact share Psi / N_d: an int when it divides, else a
    Fraction). Activations and temporary buffers are not included.
    """
    num_params = _checks.positive_int("num_params", num_params)
    dp_ranks = _checks.positive_int("dp_ranks", dp_ranks)
    if isinstance(zero_stage, bool) or zero_stage not in ZERO_STAGES:
        raise ValueError(f"zero_stage must be one of {list(ZERO_STAGES)}, got {zero_stage!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {list(OPTIMIZERS)}, got {optimizer!r}")
    switches = {**SWITCHES["precision"][precision], **SWITCHES["optimizer"][optimizer],
                **SWITCHES["zero"][str(zero_stage)]}
    for sym in ("b", "c_cast"):  # the activations' bytes and autocast's copies: not the training state
        switches.pop(sym)
    state = formulas.training_state(P_w=num_params, N_d=dp_ranks, **switches)
    return {k: _exact(Fraction(state[k])) for k in ("weights", "gradients", "optimizer")}


# ------------------------------------------------------------------------ a whole training step
#: LoRA's target projections, named as Hugging Face's Llama names them (``q_proj`` ... ``down_proj``)
LORA_MODULES: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")

#: option -> (menu of :data:`attn_core.symbols.SWITCHES`, default): the switches of training_memory
TRAINING_OPTIONS: dict[str, tuple[str, object]] = {
    "precision": ("precision", "bf16_mixed"),
    "optimizer": ("optimizer", "adamw"),
    "optimizer_impl": ("optimizer_impl", "fused"),
    "optimizer_in_backward": ("optimizer_in_backward", False),
    "recompute": ("recompute", "none"),
    "offload": ("offload", False),
    "attention": ("attention", "fused"),
    "kernels": ("kernels", "eager"),
    "loss": ("loss", "fp32"),
    "finetune": ("finetune", "full"),
    "sequence_parallel": ("sequence_parallel", False),
    "lora_dropout": ("lora_dropout", False),
    "dropout": ("dropout", False),
    "device": ("device", "cuda"),
}


def _switch(option: str, value) -> dict:
    menu = SWITCHES[TRAINING_OPTIONS[option][0]]
    key = str(value).lower() if isinstance(value, bool) else value
    if not isinstance(key, str) or key not in menu:
        shown = [k if k not in ("true", "false") else k == "true" for k in menu]
        raise ValueError(f"{option} must be one of {shown}, got {value!r}")
    return dict(menu[key])


def training_memory(model: ModelConfig, N: int, *, B: int = 1, zero: int = 0, dp: int = 1, tp: int = 1,
                    cp: int = 1, pp: int = 1, lora_rank: int = 16, lora_modules=LORA_MODULES,
                    quantize: str = "adapted", **options) -> dict:
    """Bytes on the busiest rank of one training step of ``model`` on B sequences of N tokens.

    Items (each as it is at the step's peak; they add up to ``peak``): ``weights``, ``gradients``,
    ``optimizer`` (the state), ``activations`` (what the blocks keep for backward), ``logits`` (the
    output layer and the loss), ``buffers`` (ZeRO-3's gathered blocks and their gradient, the block a
    recomputation rebuilds, a dequantized QLoRA matrix, the optimizer step's temporaries) and
    ``peak``, the largest total over the phases of the step, each also given as ``phase.<name>``:
    ``forward`` (at the loss: state, activations, logits, gathered layers; with a pipeline, on the
    first stage), ``forward_last`` (the loss on a pipeline's last stage, with the logits),
    ``backward`` (the last block's backward: state, activations, the output layer's gradient, the
    rebuilt block), ``backward_end`` (the first block's backward: state, every gradient, the block
    rebuilt; an upper bound, the embedding's gradient coming last) and ``step`` (state, gradients, the
    step's temporaries); ``peak_phase`` names the first phase that reaches the peak. Values are
    bytes (ints), rounded up. The formula, term by term, is :func:`attn_core.formulas.step.step_items`.

    Parallelism: ZeRO stage ``zero`` (0-3) over the ``dp`` x ``cp`` ranks, ``tp``-way tensor
    parallelism (``sequence_parallel``: the norms and residual too), ``cp``-way context parallelism
    (each rank N / cp tokens), ``pp`` pipeline stages (1F1B: the first stage holds pp micro-batches
    of B sequences). Fine-tuning: ``finetune`` "full", "lora" (rank ``lora_rank`` on
    ``lora_modules``, a subset of :data:`LORA_MODULES`) or "qlora" (as LoRA on a base whose block
    matrices are NF4: those of the adapted projections, ``quantize="adapted"``, as torchtune
    quantizes, or all, ``"all"``, as bitsandbytes' ``Linear4bit`` replacing every linear does);
    "qlora_bnb" and "qlora_bnb_nf4" are bitsandbytes' 4-bit layers up to bitsandbytes 0.43.1, whose
    matmul keeps its input for backward (with double-quantized scales, its default, or a float32 scale
    per 64 weights); from 0.43.2 it keeps only the weight, as "qlora" counts.

    ``options`` (default first; the symbols they set are in :data:`attn_core.symbols.SWITCHES`):

    * ``precision``: "bf16_mixed" (ZeRO's 2 + 2 + 12 bytes a parameter), "megatron" (fp32
      gradients: 2 + 4 + 12), "fp32_params" (FSDP2 and autocast: 4 + 4 + 8), "bf16_pure" (2 + 2 + 4),
      "fp32" (activations in fp32 too);
    * ``optimizer``: "adamw", "adamw_8bit", "adamw_4bit", "sgd_momentum", "sgd";
      ``optimizer_impl``: "fused" or "foreach" (its step makes a copy of the parameters);
      ``optimizer_in_backward``: False or True (no full set of gradients); the 8- and 4-bit
      moments are stepped one parameter at a time in float32 (the embedding's: two float32 copies);
    * ``recompute``: "none", "selective" (Korthikanti et al.: the attention core), "per_op"
      (torchtitan's: every other matmul's output and attention's are saved), "full" (the block's
      input); ``offload``: False or True (full recomputation's checkpoints to the host);
    * ``attention``: "fused" (FlashAttention's kernels) or "eager" (the N x N weights kept);
    * ``kernels``: "eager" (Python code upcasting to float32: Hugging Face's, torchtune's),
      "eager_repeat_kv" (the same, K and V repeated to every head), "compiled" (torch.compile,
      PyTorch's fused RMSNorm);
    * ``loss``, bytes a logit at the loss (measured, tests/test_step.py): "fp32" (float32 logits
      deleted before backward: 12), "fp32_kept" (bf16 logits kept by the caller: 14), "fp32_shifted"
      (float32 logits kept and a shifted copy, transformers 4.38: 16), "fp32_parallel" (PyTorch's
      loss_parallel: 16), "compiled" (bf16 logits into a compiled cross-entropy: 4), "chunked"
      (torchtune's 8 chunks: 6.5), "chunked_compiled" (2.25), "bf16_chunked" (LitGPT's: 4.5), "fused"
      (no logits kept: 0);
    * ``finetune``: "full", "lora", "qlora", "qlora_bnb", "qlora_bnb_nf4"; ``sequence_parallel``,
      ``dropout``, ``lora_dropout`` (dropout on each adapter's input, as PEFT's): False or True;
    * ``device``: "cuda" (what PyTorch's CUDA kernels save) or "cpu" (the block as measured on this
      CPU, :func:`attn_core.ledger.block_ledger`; full fine-tuning without per-op recomputation).

    A model with MLA (DeepSeek-V2/V3) is counted with its decompressed per-head keys and values.
    Not counted: the CUDA context and the allocator's cache (``torch.cuda.max_memory_reserved`` -
    ``max_memory_allocated``), communication libraries' own buffers.
    """
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig (ModelConfig.from_hf_config reads one), got {model!r}")
    N, B = _checks.positive_int("N", N), _checks.positive_int("B", B)
    dp, tp, cp, pp = (_checks.positive_int(n, v) for n, v in (("dp", dp), ("tp", tp), ("cp", cp), ("pp", pp)))
    if isinstance(zero, bool) or zero not in ZERO_STAGES:
        raise ValueError(f"zero must be one of {list(ZERO_STAGES)}, got {zero!r}")
    unknown = set(options) - set(TRAINING_OPTIONS)
    if unknown:
        raise ValueError(f"unknown option {sorted(unknown)[0]!r}; options: {sorted(TRAINING_OPTIONS)}")
    chosen = {name: options.get(name, default) for name, (_, default) in TRAINING_OPTIONS.items()}
    env = {}
    for name, value in chosen.items():
        env.update(_switch(name, value))
    env.update(SWITCHES["zero"][str(zero)])
    if not model.vocab_size:
        raise ValueError(f"{model.name}: vocab_size is needed for the logits")
    for name, value in (("num_heads", model.num_heads), ("num_kv_heads", model.num_kv_heads)):
        _checks.divisible(name, value, "tp", tp)
    _checks.divisible("N", N, "cp", cp)
    _checks.divisible("num_layers", model.num_layers, "pp", pp)

    lora = chosen["finetune"] != "full"
    modules = tuple(lora_modules)
    if lora:
        lora_rank = _checks.positive_int("lora_rank", lora_rank)
        bad = [m for m in modules if m not in LORA_MODULES]
        if bad or not modules:
            raise ValueError(f"lora_modules must be a non-empty subset of {list(LORA_MODULES)}, "
                             f"got {modules!r}")
        if model.num_experts and set(modules) & {"gate", "up", "down"}:
            raise ValueError(f"{model.name}: LoRA on a mixture of experts' FFN is not modelled; "
                             "adapt the attention projections")
        if quantize not in ("adapted", "all"):
            raise ValueError(f"quantize must be 'adapted' or 'all', got {quantize!r}")
    if chosen["device"] == "cpu":
        if chosen["recompute"] == "per_op" or lora or model.d_model != model.num_heads * model.d_head:
            raise ValueError("device='cpu' counts the measured CPU block: full fine-tuning, recompute in "
                             "none/selective/full, d_head = d_model / num_heads")

    adapted = set(modules) if lora else set()
    env.update(model.symbol_values())
    env.update(formulas.step_model(
        **model.symbol_values(), **{sym: int(m in adapted) for m, sym in formulas.LORA_SYMBOLS.items()},
        r_lora=lora_rank if lora else 0, q_all=int(quantize == "all")))
    env.update(B=B, N=N, r_lora=lora_rank if lora else 0, N_d=dp, t=tp, c=cp, pp=pp)
    values = step.step_items(**{k: env[k] for k in _STEP_ARGS})
    totals = [values[f"phase.{p}"] for p in step.PHASES]
    phase = step.PHASES[totals.index(max(totals))]  # the first phase whose total is the peak
    out = {k: math.ceil(values[f"{phase}.{k}"]) for k in step.STEP_TOTAL_ITEMS}
    out["peak"] = math.ceil(values["peak"])
    out.update({f"phase.{p}": math.ceil(values[f"phase.{p}"]) for p in step.PHASES})
    out["peak_phase"] = phase
    return out


_STEP_ARGS = tuple(inspect.signature(step.step_items.__wrapped__).parameters)
