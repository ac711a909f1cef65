"""attn_core.formulas.step and attn_core.training.training_memory: one training step on an accelerator.

The block's items are checked against what autograd saves for a real Hugging Face ``transformers``
Llama layer (bf16, on this CPU, where PyTorch runs the same Python norms and a fused attention kernel
as it would on a GPU); the state conventions against the bytes each framework documents; the
parameter counts of LoRA against the module shapes of a real model. The published measurements are
in tests/test_calibration.py.
"""

from fractions import Fraction

import pytest
import torch

from attn_core import formulas
from attn_core.formulas import step
from attn_core.measure import saved_tensor_bytes
from attn_core.models import MODELS, ModelConfig
from attn_core.training import LORA_MODULES, training_memory

transformers = pytest.importorskip("transformers")

GIB = 2**30
LLAMA3 = MODELS["Llama 3 8B"]


def _hf_layer_saved(attn_impl: str, B=2, N=32, d=64, H=4, H_kv=2, F=176, adapt=None) -> int:
    """Bytes a real LlamaDecoderLayer (bf16, training mode) saves for backward, weights and the RoPE
    tables (computed once per model, shared by every layer) left out; ``adapt(layer)``, if given,
    changes the layer first (LoRA's adapters on a frozen base)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=d, num_attention_heads=H, num_key_value_heads=H_kv, intermediate_size=F,
                      num_hidden_layers=1, vocab_size=128, attention_dropout=0.0)
    cfg._attn_implementation = attn_impl
    layer = LlamaDecoderLayer(cfg, 0).to(torch.bfloat16).train()
    if adapt is not None:
        adapt(layer)
    x = torch.randn(B, N, d, dtype=torch.bfloat16, requires_grad=True)
    pos = torch.arange(N)[None].expand(B, N)
    cos, sin = LlamaRotaryEmbedding(cfg)(x, pos)
    tables = {cos.untyped_storage()._cdata, sin.untyped_storage()._cdata}

    def run(x):
        out = layer(x, attention_mask=None, position_ids=pos, position_embeddings=(cos, sin))
        return out[0] if isinstance(out, tuple) else out

    params = {p.untyped_storage()._cdata for p in layer.parameters()}
    first = {}

    def pack(t):
        first.setdefault(t.untyped_storage()._cdata, t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run(x)
    return sum(t.untyped_storage().nbytes() for k, t in first.items() if k not in params | tables)


def _layer(kernels: str, attention: str, B=2, N=32, d=64, H=4, H_kv=2, F=176, **over) -> dict:
    from attn_core.symbols import SWITCHES

    env = dict(B=B, N=N, N_k=N, d=d, H=H, H_kv=H_kv, D=d // H, F=F, b=2, n_rms=1, g_swiglu=1, k_drop=0,
               f_lora=0, a_qkv=0, a_o=0, a_up=0, a_down=0, n_lora=0, r_lora=0)
    env.update(SWITCHES["kernels"][kernels])
    env.update(SWITCHES["attention"][attention])
    env.update(SWITCHES["recompute"]["none"])
    env.update(over)
    return step.layer_items(**env)


def test_selective_recomputation_with_fused_attention_frees_only_the_logsumexp():
    """Korthikanti's selective recomputation checkpoints the attention core; with a fused kernel that core
    keeps its output (also the output projection's input, which stays) and a float32 logsumexp: only the
    logsumexp goes (chapter 10 measures this on a real layer)."""
    from attn_core.symbols import SWITCHES

    for kernels in ("eager", "compiled"):
        none = _layer(kernels, "fused")
        sel = _layer(kernels, "fused", **SWITCHES["recompute"]["selective"])
        assert sum(none.values()) - sum(sel.values()) == none["attn.lse"] == 4 * 2 * 4 * 32


def test_rebuilt_block_is_what_recomputation_did_not_keep():
    """Full recomputation keeps the block's input; the backward rebuilds everything the block saves. With
    a Python norm the block itself never saved its input, so the whole block is rebuilt."""
    from attn_core.symbols import SWITCHES

    for kernels in ("eager", "compiled"):
        env = dict(B=2, N=32, N_k=32, d=64, H=4, H_kv=2, D=16, F=176, b=2, n_rms=1, g_swiglu=1, k_drop=0,
                   f_lora=0, a_qkv=0, a_o=0, a_up=0, a_down=0, n_lora=0, r_lora=0,
                   **SWITCHES["kernels"][kernels], **SWITCHES["attention"]["fused"])
        whole = sum(_layer(kernels, "fused").values())
        checkpoint = 2 * 32 * 64 * 2  # the block's input, B N d b
        rebuilt = step.rebuilt_bytes(**env, **SWITCHES["recompute"]["full"])
        assert rebuilt == (whole if kernels == "eager" else whole - checkpoint)


def test_saved_tensors_api_agrees():
    """The measurement above counts what attn_core.measure.saved_tensor_bytes counts (one storage once)."""
    x = torch.randn(3, 5, requires_grad=True)
    assert saved_tensor_bytes(lambda x: (x.float() * 2).exp(), x).activations == 3 * 5 * 4


@pytest.mark.parametrize("attn_impl, kernels, attention", [
    ("sdpa", "eager", "fused"),            # Python RMSNorm, SDPA's fused kernel (GQA without a copy)
    ("eager", "eager_repeat_kv", "eager"),  # Hugging Face's eager attention: repeat_kv, float32 softmax
])
def test_layer_items_equal_a_real_llama_layer(attn_impl, kernels, attention):
    """Every byte a transformers LlamaDecoderLayer saves, against the formula's profile for its code."""
    measured = _hf_layer_saved(attn_impl)
    predicted = sum(_layer(kernels, attention).values())
    assert measured == predicted


# ------------------------------------------------------------------------------- the state
@pytest.mark.parametrize("precision, per_param", [
    ("bf16_mixed", 16),   # ZeRO: 2 + 2 + (4 + 4 + 4)
    ("megatron", 18),     # Megatron-LM with bf16: float32 gradients (2 + 4 + 12)
    ("fp32_params", 16),  # FSDP2 MixedPrecisionPolicy / autocast: 4 + 4 + 8
    ("bf16_pure", 8),     # torchtune, LitGPT bf16-true: 2 + 2 + 2 + 2
    ("fp32", 16),
])
def test_state_bytes_per_parameter(precision, per_param):
    """At the end of backward the state and every gradient: the convention's bytes per parameter."""
    out = training_memory(LLAMA3, 1, precision=precision)
    assert out["phase.backward_end"] == per_param * LLAMA3.num_params()


def test_quantized_moments():
    """torchao's AdamW8bit: a byte a moment, a float32 scale per 256; AdamW4bit: half a byte, one per 128."""
    P = LLAMA3.num_params()
    for opt, moment in (("adamw_8bit", 1 + Fraction(4, 256)),
                        ("adamw_4bit", Fraction(1, 2) + Fraction(4, 128))):
        out = training_memory(LLAMA3, 1, precision="bf16_pure", optimizer=opt)
        assert out["optimizer"] == -(-2 * moment * P // 1)


def test_zero_shards_over_data_and_context_ranks():
    P = LLAMA3.num_params()
    z3 = training_memory(LLAMA3, 4096, zero=3, dp=4, cp=2, recompute="full", precision="bf16_mixed")
    assert z3["weights"] == -(-2 * P // 8) and z3["optimizer"] == -(-12 * P // 8)


# ------------------------------------------------------------------------------- the logits
def test_logits_are_counted_per_logit_and_split_by_tp():
    """Each loss option costs its bytes a logit at the loss (B N V logits); TP splits them by vocabulary."""
    B, N, V = 2, 1024, LLAMA3.vocab_size

    def at_loss(loss, **kw):
        return training_memory(LLAMA3, N, B=B, loss=loss, kernels="compiled", **kw)["phase.forward"]

    # the bytes a logit that test_loss_options_are_measured finds
    for loss, per_logit in (("fp32", 12), ("fp32_kept", 14), ("fp32_shifted", 16), ("fp32_parallel", 16),
                            ("compiled", 4), ("chunked", Fraction(13, 2)),
                            ("chunked_compiled", Fraction(9, 4)), ("bf16_chunked", Fraction(9, 2))):
        assert at_loss(loss) - at_loss("fused") == B * N * V * per_logit
        assert at_loss(loss, tp=2) - at_loss("fused", tp=2) == B * N * V * per_logit / 2


def _peak_bytes(fn) -> int:
    """The highest total of bytes the CPU allocator held above its start while ``fn`` ran (the profiler's
    record of every allocation and free, in order)."""
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.load(open(f.name))["traceEvents"]
    mem = sorted((e for e in events if e.get("name") == "[memory]"),
                 key=lambda e: (e["ts"], e["args"]["Ev Idx"]))
    now = peak = 0
    for e in mem:
        now += e["args"]["Bytes"]
        peak = max(peak, now)
    return peak


def _loss_step(kind: str, h, W, labels, compiled):
    """One loss's forward and backward from the hidden states h, as each framework's code runs it: the
    logits h W^T in bf16 (T x V), then the loss, then backward."""
    import torch.nn.functional as F

    hh = h * 1  # a hidden state made inside the step, as the last block's output is
    if kind == "fp32":  # torchtitan 2024 (train.py: loss_fn(pred, labels); del pred), torchtune unchunked
        pred = hh @ W.t()
        loss = F.cross_entropy(pred.float(), labels)
        del pred
    elif kind == "fp32_kept":  # the bf16 logits returned to the caller, upcast inside the loss
        logits = hh @ W.t()
        loss = F.cross_entropy(logits.float(), labels)
    elif kind == "fp32_shifted":  # transformers 4.38's LlamaForCausalLM: float32 logits kept, shifted copy
        logits = (hh @ W.t()).float()
        loss = F.cross_entropy(logits[:-1].contiguous(), labels[1:])
    elif kind == "compiled":  # torchtitan 2025: the loss function compiled, bf16 logits in
        pred = hh @ W.t()
        loss = compiled["ce"](pred, labels)
        del pred
    elif kind in ("chunked", "chunked_compiled"):  # torchtune's CEWithChunkedOutputLoss, 8 chunks
        ce = compiled["chunk"] if kind == "chunked_compiled" else compiled["chunk_eager"]
        logits = [c @ W.t() for c in hh.chunk(8, dim=0)]
        loss = sum(ce(c, l) for c, l in zip(logits, labels.chunk(8))) / len(labels)
        del logits
    elif kind == "bf16_chunked":  # LitGPT: 128-token bf16 chunks, kept by the caller, no upcast
        logits = [c @ W.t() for c in hh.split(128, dim=0)]
        loss = torch.cat([F.cross_entropy(c, l, reduction="none")
                          for c, l in zip(logits, labels.split(128))]).mean()
    loss.backward()


@pytest.mark.parametrize("kinds", [("fp32", "fp32_kept", "fp32_shifted", "chunked", "bf16_chunked"),
                                   ("compiled", "chunked_compiled")], ids=["eager", "compiled"])
def test_loss_options_are_measured(kinds):
    """Each loss option's bytes a logit are the CPU allocator's peak over the loss's forward and backward,
    for the code each framework runs (autograd saves and frees the same tensors on a GPU): the logits of
    1,024 tokens x 8,192 classes, with a hidden width of 8 so the rest is negligible. The compiled ones
    need torch.compile's C++ toolchain (skipped without it)."""
    import torch.nn.functional as F

    from attn_core.symbols import SWITCHES

    torch.manual_seed(0)
    T, V, d = 1024, 8192, 8
    W = torch.randn(V, d, dtype=torch.bfloat16, requires_grad=True)
    h = torch.randn(T, d, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, V, (T,))

    def chunk_ce(c, l):  # torchtune's compute_cross_entropy: the upcast and cross-entropy of one chunk
        return F.cross_entropy(c.float(), l, reduction="sum")

    compiled = {"ce": torch.compile(lambda p, l: F.cross_entropy(p.float(), l)),
                "chunk": torch.compile(chunk_ce), "chunk_eager": chunk_ce}
    for kind in kinds:
        try:
            _loss_step(kind, h, W, labels, compiled)  # compiles once, outside the measurement
        except Exception as e:  # noqa: BLE001 - inductor without a compiler raises its own errors
            if "compiled" not in kind:
                raise
            pytest.skip(f"torch.compile does not run here: {type(e).__name__}")
        W.grad = h.grad = None
        measured = _peak_bytes(lambda kind=kind: _loss_step(kind, h, W, labels, compiled)) / (T * V)
        W.grad = h.grad = None
        assert abs(measured - SWITCHES["loss"][kind]["l_loss"]) < 0.05, (kind, measured)


def test_loss_parallel_is_measured():
    """loss_parallel (torchtitan's default with TP): the log-softmax and its backward run as DTensor ops
    (torch/distributed/tensor/parallel/loss.py), with a float32 copy, the shifted logits and exp of them
    alive together: 16 bytes a logit of the local shard, measured on a one-rank gloo group."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import loss_parallel

    from attn_core.symbols import SWITCHES

    if dist.is_initialized():
        pytest.skip("a process group is already running in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        T, V, d = 1024, 8192, 8
        mesh = init_device_mesh("cpu", (1,))
        W = distribute_tensor(torch.randn(V, d, dtype=torch.bfloat16), mesh, [Shard(0)]).requires_grad_()
        h = torch.randn(T, d, dtype=torch.bfloat16, requires_grad=True)
        labels = torch.randint(0, V, (T,))

        def step():
            pred = DTensor.from_local(h * 1, mesh, [Replicate()]) @ W.t()  # (T, V), sharded by vocabulary
            with loss_parallel():
                loss = F.cross_entropy(pred.float(), labels)
                del pred
                loss.backward()

        step()
        measured = _peak_bytes(step) / (T * V)
    finally:
        dist.destroy_process_group()
    assert abs(measured - SWITCHES["loss"]["fp32_parallel"]["l_loss"]) < 0.05, measured


# ------------------------------------------------------------------------------- LoRA
def test_lora_parameters_match_the_model_shapes():
    """r (in + out) per adapted projection and layer, in + out read off a real transformers model."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    m = ModelConfig.from_hf_config({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8,
                                    "num_key_value_heads": 2, "intermediate_size": 688,
                                    "num_hidden_layers": 3, "vocab_size": 1000})
    with torch.device("meta"):
        hf = AutoModelForCausalLM.from_config(LlamaConfig(hidden_size=256, num_attention_heads=8,
                                                          num_key_value_heads=2, intermediate_size=688,
                                                          num_hidden_layers=3, vocab_size=1000))
    names = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
             "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}
    r = 8
    for modules in (("q", "v"), LORA_MODULES):
        expected = 0
        for layer in hf.model.layers:
            for mod in modules:
                lin = layer.get_submodule(names[mod])
                expected += r * (lin.in_features + lin.out_features)
        out = training_memory(m, 16, finetune="lora", lora_rank=r, lora_modules=modules,
                              precision="bf16_pure", optimizer="adamw")
        assert out["optimizer"] == 2 * 2 * expected  # two bf16 moments per adapter parameter


class _Base4bit(torch.autograd.Function):
    """A frozen linear that keeps its input for backward whenever the input needs a gradient, as
    bitsandbytes' MatMul4Bit does (bitsandbytes/autograd/_functions.py: ``if
    any(ctx.needs_input_grad[:2]): ctx.tensors = (A, B)``); the weight stays as it is here."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x @ weight.t()

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight, None


class _LoRA(torch.nn.Module):
    """LoRA as PEFT writes it (peft/tuners/lora/layer.py): base(x) + B(A(dropout(x))) * alpha / r, the
    base frozen, a dropout of its own on each adapted projection (PEFT's nn.Identity without one)."""

    def __init__(self, base, r, keeps_input=False, dropout=0.0):
        super().__init__()
        self.base, self.keeps_input = base.requires_grad_(False), keeps_input
        self.A = torch.nn.Linear(base.in_features, r, bias=False, dtype=torch.bfloat16)
        self.B = torch.nn.Linear(r, base.out_features, bias=False, dtype=torch.bfloat16)
        self.drop = torch.nn.Dropout(dropout) if dropout else torch.nn.Identity()

    def forward(self, x):
        out = _Base4bit.apply(x, self.base.weight) if self.keeps_input else self.base(x)
        return out + self.B(self.A(self.drop(x))) * 2.0


_HF_NAMES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
             "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


def _adapter(modules, r, keeps_input=False, dropout=0.0):
    def adapt(layer):
        layer.requires_grad_(False)
        for name in _HF_NAMES.values():  # every projection a 4-bit one, or only the adapted ones LoRA
            short = next(m for m, n in _HF_NAMES.items() if n == name)
            parent, attr = name.rsplit(".", 1)
            base = layer.get_submodule(name)
            if short in modules:
                setattr(layer.get_submodule(parent), attr, _LoRA(base, r, keeps_input, dropout))
            elif keeps_input:
                lin = _LoRA(base, 1, True)
                lin.forward = lambda x, lin=lin: _Base4bit.apply(x, lin.base.weight)
                setattr(layer.get_submodule(parent), attr, lin)
    return adapt


@pytest.mark.parametrize("modules, keeps_input, dropout", [
    (("q", "v"), False, 0.0),            # torchtune's and LitGPT's default targets, a bf16 base
    (("q", "k", "v", "o", "gate", "up", "down"), False, 0.0),
    (("q", "k", "v", "gate", "up", "down"), False, 0.0),  # Answer.AI's: all but o_proj
    (("q", "v"), True, 0.0),             # a 4-bit base whose matmul keeps its input (bitsandbytes)
    (("q", "v"), False, 0.05),           # LoRA's dropout (PEFT's, LitGPT's lora_dropout)
    (("q", "k", "v", "o", "gate", "up", "down"), True, 0.1),
])
def test_lora_layer_items_equal_a_real_llama_layer(modules, keeps_input, dropout):
    """A frozen base keeps only what backward needs: an adapted projection's input, each adapter's
    rank-r intermediate, (bitsandbytes) every 4-bit projection's input, (dropout) each adapter's
    dropped-out input and mask, against a real layer. On the CPU a dropout mask is kept in the dtype,
    on CUDA as bool, 1 byte a value: the formula counts CUDA's."""
    r, B, N, d, F = 8, 2, 32, 64, 176
    measured = _hf_layer_saved("sdpa", adapt=_adapter(modules, r, keeps_input, dropout))
    flags = dict(a_qkv=int(bool({"q", "k", "v"} & set(modules))), a_o=int("o" in modules),
                 a_up=int(bool({"gate", "up"} & set(modules))), a_down=int("down" in modules))
    predicted = sum(_layer("eager", "fused", f_lora=1, n_lora=len(modules), r_lora=r, q_in=int(keeps_input),
                           k_ldrop=int(dropout > 0), **flags).values())
    mask_values = (dropout > 0) * B * N * sum(F if m == "down" else d for m in modules)  # H D = d here
    assert measured == predicted + mask_values * (2 - 1)  # the CPU's bf16 mask, 2 bytes a value


# ------------------------------------------------------------------------------- ZeRO-3 and the step
def test_zero3_gathers_a_frozen_base_as_stored():
    """Fine-tuning under ZeRO-3 (FSDP), the gathered blocks are as stored (a bf16 base; a QLoRA base with
    its matrices in NF4) and no block's gradient is gathered: the base is frozen."""
    m, dp, r = MODELS["Llama 2 7B"], 2, 8
    d, F, L = m.d_model, m.ffn_dim, m.num_layers
    block = 4 * d * d + 3 * d * F + 2 * d  # Llama 2 7B: four d x d projections, three FFN matrices, 2 norms
    matrices = 4 * d * d + 3 * d * F
    lora = L * r * ((d + d) + (d + d))  # q and v
    io = m.num_params() - L * block
    nf4 = Fraction(1, 2) + Fraction(1, 64) + Fraction(4, 64 * 256)
    for finetune, stored in (("lora", 2 * block), ("qlora", 2 * block - (2 - nf4) * matrices)):
        out = training_memory(m, 128, finetune=finetune, quantize="all", zero=3, dp=dp, lora_rank=r,
                              lora_modules=("q", "v"), precision="bf16_pure", optimizer_impl="fused")
        weights = (L * stored + 2 * io + 2 * lora) / dp
        grads, moments = 2 * lora / dp, 4 * lora / dp
        # two blocks, the root unit (input and output layers, whole through the backward), a dequantized
        # QLoRA matrix
        gathered = 2 * stored + 2 * io + (finetune == "qlora") * 2 * d * F
        assert out["phase.backward_end"] == -(-(weights + grads + moments + gathered) // 1)


def test_zero3_keeps_the_root_unit_whole_through_the_backward():
    """FSDP2 does not reshard its root unit (embeddings, final norm, output layer) after the forward and
    reduces its gradients only at the end of the backward: the last block's backward holds the root's bf16
    weights and the output layer's whole gradient; the end of backward all of the root's gradients."""
    m, dp = LLAMA3, 8
    P_io, V, d = m.io_params(), m.vocab_size, m.d_model
    kw = dict(B=1, precision="fp32_params", recompute="full", optimizer_impl="fused", dp=dp)
    z2, z3 = (training_memory(m, 4096, zero=z, **kw) for z in (2, 3))
    # ZeRO-3 against ZeRO-2 at the end of backward: weights sharded, gathered blocks, the root whole
    block = (m.num_params() - P_io) / m.num_layers
    extra = -m.num_params() * 4 * (1 - Fraction(1, dp)) + 2 * 2 * block + 4 * block \
        + 2 * P_io + P_io * 4 * (1 - Fraction(1, dp))
    assert abs(z3["phase.backward_end"] - z2["phase.backward_end"] - extra) <= 2
    # the last block's backward: the output layer's gradient whole (fp32), not its shard
    out_grad_whole = V * d * 4
    casts = 2 * (m.num_params() - P_io + V * d)  # autocast copies (ZeRO-2); ZeRO-3 gathers instead
    assert abs(z3["phase.backward"] - z2["phase.backward"] - (
        -m.num_params() * 4 * (1 - Fraction(1, dp)) + 2 * 2 * block + 4 * block + 2 * P_io
        + out_grad_whole - out_grad_whole / dp - casts)) <= 2


def test_autocast_keeps_bf16_copies_of_float32_weights(monkeypatch):
    from attn_core.symbols import SWITCHES

    """torch.autocast casts each float32 weight to bf16 for a matmul and the matmul saves the cast for the
    backward (measured here on the CPU's autocast): 2 bytes a parameter of the block matrices and the
    output head, counted (c_cast, precision "fp32_params") unless ZeRO-3 gathers bf16 blocks instead."""
    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(64, 96, bias=False), torch.nn.Linear(96, 64, bias=False))
    x = torch.randn(8, 64, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        saved = saved_tensor_bytes(layers, x)
    casts = [t for t in saved if t.dtype == torch.bfloat16 and t.shape in ((96, 64), (64, 96))]
    assert sum(t.nbytes for t in casts) == 2 * sum(p.numel() for p in layers.parameters())

    m, kw = LLAMA3, dict(B=1, recompute="full", optimizer_impl="fused", dp=8)
    expected = 2 * (m.num_params() - m.io_params() + m.vocab_size * m.d_model)
    for zero, counted in ((0, expected), (3, 0)):
        with_casts = training_memory(m, 4096, precision="fp32_params", zero=zero, **kw)
        with monkeypatch.context() as mp:  # the same step, autocast's copies switched off
            mp.setitem(SWITCHES["precision"]["fp32_params"], "c_cast", 0)
            without = training_memory(m, 4096, precision="fp32_params", zero=zero, **kw)
        assert with_casts["phase.forward"] - without["phase.forward"] == counted
        assert with_casts["phase.backward_end"] == without["phase.backward_end"]  # freed by then


def test_quantized_moments_are_stepped_in_float32_one_parameter_at_a_time():
    """torchao's AdamW8bit steps each parameter in a compiled single_param_adam that dequantizes both
    moments to float32 (torchao/prototype/low_bit_optim/adam.py): the embedding's, 8 bytes a value, at the
    step; with the step inside the backward, the embedding's gradient is there too."""
    V, d = LLAMA3.vocab_size, LLAMA3.d_model
    base = dict(precision="bf16_pure", optimizer="adamw_8bit", optimizer_impl="fused")
    out = training_memory(LLAMA3, 1, **base)
    state = out["phase.step"] - out["phase.backward_end"]
    assert state == 2 * 4 * V * d
    bwd = training_memory(LLAMA3, 1, **base, optimizer_in_backward=True)
    P = LLAMA3.num_params()
    moments = 2 * (1 + Fraction(4, 256)) * P
    assert bwd["phase.step"] == -(-(2 * P + moments + 2 * V * d + 2 * 4 * V * d) // 1)


def test_quantized_moments_step_is_measured():
    """The 8 bytes a value of the step's float32 moments, measured on the CPU with torchao's AdamW8bit
    (skipped without torchao)."""
    torchao_optim = pytest.importorskip("torchao.optim")
    n = 4096 * 1024
    p = torch.nn.Parameter(torch.randn(4096, 1024, dtype=torch.bfloat16))
    opt = torchao_optim.AdamW8bit([p], lr=1e-3)
    p.grad = torch.randn_like(p)
    opt.step()  # the state made and the step compiled
    assert abs(_peak_bytes(opt.step) / n - 8) < 0.1


# ------------------------------------------------------------------------------- checks
def test_options_are_checked():
    with pytest.raises(ValueError, match="recompute must be one of"):
        training_memory(LLAMA3, 128, recompute="some")
    with pytest.raises(ValueError, match="unknown option 'zero_stage'"):
        training_memory(LLAMA3, 128, zero_stage=3)
    with pytest.raises(ValueError, match="tp"):
        training_memory(LLAMA3, 128, tp=3)
    with pytest.raises(ValueError, match="device='cpu'"):
        training_memory(LLAMA3, 128, device="cpu", finetune="lora")
    with pytest.raises(ValueError, match="lora_modules"):
        training_memory(LLAMA3, 128, finetune="lora", lora_modules=("q_proj",))


def test_cpu_device_is_the_measured_block_ledger():
    """device="cpu": L times the block ledger (measured against autograd on the CPU in test_ledger.py)."""
    from attn_core.ledger import block_ledger

    m = MODELS["3.6B worked example (d=3072, H=24)"].with_(vocab_size=32000)
    out = training_memory(m, 2048, B=16, device="cpu", precision="bf16_mixed", attention="eager")
    assert out["peak_phase"] == "forward"
    per_layer = sum(block_ledger(16, 2048, m.d_model, m.num_heads, num_kv_heads=m.num_kv_heads, ffn=(
        "swiglu" if m.ffn == "swiglu" else "gelu"), ffn_dim=m.ffn_dim, norm=m.norm, dropout=False,
        attention="eager").values())
    assert out["activations"] == m.num_layers * per_layer


def test_peak_is_the_largest_phase():
    for kw in ({}, {"recompute": "full"}, {"zero": 3, "dp": 8}, {"optimizer_impl": "foreach"},
               {"finetune": "qlora", "lora_modules": ("q", "v")}):
        out = training_memory(LLAMA3, 4096, **kw)
        phases = [out[f"phase.{p}"] for p in step.PHASES]
        assert out["peak"] == max(phases)
        assert out["peak"] == out[f"phase.{out['peak_phase']}"]
        # the items add up to the peak (each is rounded up to a whole byte)
        assert 0 <= sum(out[k] for k in step.STEP_TOTAL_ITEMS) - out["peak"] < len(step.STEP_TOTAL_ITEMS)


def test_formula_is_symbolic_too():
    """One definition serves SymPy: the per-token bytes of the eager profile, in the book's symbols."""
    import sympy as sp

    items = step.layer_items()
    s = formulas.symbols()
    assert sp.simplify(items["norm1.saved"].subs({s["r_full"]: 0, s["r_op"]: 0, s["n_py"]: 1, s["f_lora"]: 0})
                       - s["B"] * s["N"] * s["d"] * (4 + s["b"])) == 0
