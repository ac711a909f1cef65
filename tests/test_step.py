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


def _hf_layer_saved(attn_impl: str, B=2, N=32, d=64, H=4, H_kv=2, F=176) -> int:
    """Bytes a real LlamaDecoderLayer (bf16, training mode) saves for backward, weights and the RoPE
    tables (computed once per model, shared by every layer) left out."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=d, num_attention_heads=H, num_key_value_heads=H_kv, intermediate_size=F,
                      num_hidden_layers=1, vocab_size=128, attention_dropout=0.0)
    cfg._attn_implementation = attn_impl
    layer = LlamaDecoderLayer(cfg, 0).to(torch.bfloat16).train()
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

    for loss, per_logit in (("fp32", 12), ("fp32_kept", 14), ("chunked", 6), ("chunked_compiled", 4)):
        assert at_loss(loss) - at_loss("fused") == B * N * V * per_logit
        assert at_loss(loss, tp=2) - at_loss("fused", tp=2) == B * N * V * per_logit // 2


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
    assert sp.simplify(items["norm1.saved"].subs({s["r_full"]: 0, s["r_op"]: 0, s["n_py"]: 1})
                       - s["B"] * s["N"] * s["d"] * (4 + s["b"])) == 0
