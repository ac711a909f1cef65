"""attn_core.widgets: the generated formulas equal the library, the widgets show them, the page computes them.

* The widgets' values (attn_core.formulas.widget_values) equal the library's public functions
  (ledger, flops, kv_cache, training) over a grid of inputs.
* Each widget's ``values`` follow its traits and equal the library; bad traits are rejected
  with an error naming the trait.
* The front end is one local ES module with no network access; with Node.js, its evaluator
  (static/formulas.js and the block between the evaluator markers) gives Python's numbers over the grid.
"""

import itertools
import json
import math
import re
import shutil
import subprocess
import time
from fractions import Fraction

import pytest
import traitlets

from attn_core import flops, formulas, inference, kv_cache, ledger, training
from attn_core import widgets as W

STATIC = formulas.GENERATED_JS.parent
JS = STATIC / "ledger_widgets.js"


def memory_state(B=1, N=4096, d=3072, H=24, dtype="bf16", dropout=True, saved="teaching", mask="dtype"):
    return {"B": B, "N": N, "d": d, "H": H, "dtype": dtype, "dropout": dropout, "saved": saved, "mask": mask}


def flops_state(N=4096, d=3072, H=24, ffn="mlp", causal=False, F=None, H_kv=None):
    return {"N": N, "d": d, "H": H, "H_kv": H if H_kv is None else H_kv, "F": 4 * d if F is None else F,
            "ffn": ffn, "causal": causal}


def explorer_state(model=None, N=4096, dtype="bf16", causal=False, dropout=True, B=1, saved="teaching",
                   mask="dtype", mem=80, mem_unit="GB", base=None, allowance=10, **arch):
    preset = W.model_traits(kv_cache.MODELS[model or W.DEFAULT_MODEL])
    return {**preset, **arch, "N": N, "dtype": dtype, "causal": causal, "dropout": dropout, "B": B,
            "saved": saved, "mask": mask, "base": base or model or W.DEFAULT_MODEL, "mem": mem,
            "mem_unit": mem_unit, "allowance": allowance}


UNIT_BYTES = {"GB": 10**9, "GiB": 2**30, "MiB": 2**20}
#: the unit the page writes bytes in for a memory typed in each unit (nvidia-smi's MiB: GiB)
SHOWN_UNIT = {"GB": "GB", "GiB": "GiB", "MiB": "GiB"}


def usable_of(state) -> Fraction:
    """The memory a state's step or server must fit in: the accelerator's less the allowance, exactly."""
    mem = Fraction(state["mem"]) * UNIT_BYTES[state["mem_unit"]]
    return mem * (1 - Fraction(state["allowance"]) / 100)


def config_of(state) -> kv_cache.ModelConfig:
    """The ModelConfig an Explorer state describes (the inverse of model_traits)."""
    mla = state["kv_latent"] > 0
    return kv_cache.ModelConfig(
        "state", state["L"], state["d"], state["H"], state["H_kv"], state["D"], state["F"], ffn=state["ffn"],
        window=state["window"] or None, d_v=state["D_v"],
        kv_lora_rank=state["kv_latent"] - state["rope_dim"] if mla else None,
        rope_dim=state["rope_dim"] if mla else None, q_lora_rank=state["q_lora"] or None)


def whole_model_of(state) -> kv_cache.ModelConfig:
    """The whole model whose weights an Explorer state holds: its base preset (vocabulary, norms, biases,
    experts) with the state's shape; a dense FFN (and the dense blocks of a mixture of experts) F wide."""
    shape = config_of(state)
    fields = ("num_layers", "d_model", "num_heads", "num_kv_heads", "d_head", "ffn_dim", "ffn", "window",
              "d_v", "kv_lora_rank", "rope_dim", "q_lora_rank")
    return kv_cache.MODELS[state["base"]].with_(**{f: getattr(shape, f) for f in fields}, dense_ffn_dim=0)


# ------------------------------------------------------------------------- grids (readable ids)
MEMORY_GRID = [
    memory_state(B, N, d, H, dtype, dropout, saved, mask)
    for B, N, (d, H), dtype, dropout, (saved, mask) in itertools.product(
        (1, 3), (1, 63, 256, 4096, 131072), ((64, 4), (60, 5), (3072, 24), (8192, 64)),
        ("fp32", "bf16", "fp8"), (True, False),
        (("teaching", "dtype"), ("autograd", "dtype"), ("autograd", "bool")))
]
FLOPS_GRID = [
    flops_state(N, d, H, ffn, causal, F=round(mult * d), H_kv=H // g)
    for N, (d, H), ffn, causal, mult, g in itertools.product(
        (1, 63, 4096, 18432, 1048576), ((64, 4), (768, 12), (3072, 24), (5120, 128)),
        ("mlp", "swiglu"), (False, True), (4.0, 3.5, 2.6875), (1, 4))
]
EXPLORER_GRID = [
    explorer_state(model, N, dtype, causal, dropout, saved=saved)
    for model, N, dtype, causal, (dropout, saved) in itertools.product(
        kv_cache.MODELS, (1, 256, 4096, 131072, 1048576), ("fp32", "bf16"), (False, True),
        ((True, "teaching"), (False, "autograd")))
] + [  # custom shapes: GQA, MQA, windows, odd sizes, batches
    explorer_state(None, N, "fp8", False, False, B=B, d=d, H=H, H_kv=H_kv, L=L, D=d // H, D_v=d // H,
                   F=F, ffn=ffn, window=window, kv_latent=0, rope_dim=0, q_lora=0, mask="bool")
    for N, B, (d, H, H_kv), L, F, ffn, window in [
        (63, 1, (60, 5, 1), 3, 240, "mlp", 0),
        (5000, 2, (4096, 32, 8), 32, 11008, "swiglu", 4096),
        (100, 4, (2048, 16, 4), 24, 5632, "swiglu", 4096),
        (1048576, 1, (16384, 128, 8), 126, 53248, "swiglu", 0),
    ]
] + [  # serving: users, memory in GB and GiB, weights that do and do not fit, custom shapes on a base
    explorer_state(model, N, dtype, B=B, mem=mem, mem_unit=unit, allowance=allowance)
    for model, N, dtype, B, mem, unit, allowance in [
        ("Llama 3 8B", 8192, "bf16", 32, 80, "GB", 0), ("Llama 3 8B", 8192, "bf16", 64, 80, "GB", 10),
        ("Llama 3 70B", 131072, "fp8", 3, 141, "GB", 10), ("Llama 2 70B", 4096, "bf16", 1, 80, "GiB", 5),
        ("DeepSeek-V2", 32768, "fp8", 100, 640, "GB", 0), ("GPT-2 small", 1024, "fp32", 256, 24, "GiB", 10),
        ("Mistral 7B", 65536, "bf16", 16, 74.5, "GiB", 12.5), (None, 4096, "bf16", 7, 40, "GB", 10),
        ("Llama 3 8B", 1048576, "fp32", 2, 0.5, "GB", 10), ("Llama 3 8B", 8192, "bf16", 40, 81559, "MiB", 10),
        ("Llama 3 70B", 8192, "fp8", 8, 24564, "MiB", 0),
    ]
] + [
    explorer_state(None, 32768, "bf16", B=B, mem=80, base=base, d=d, H=H, H_kv=H_kv, L=L, D=d // H,
                   D_v=d // H, F=F, ffn="swiglu", window=0, kv_latent=0, rope_dim=0, q_lora=0)
    for base, B, (d, H, H_kv), L, F in [("Llama 3 8B", 4, (2048, 16, 4), 16, 7168),
                                        ("GPT-2 small", 9, (1024, 16, 16), 24, 4096),
                                        ("DeepSeek-V2", 2, (4096, 32, 8), 30, 11008)]
]


# the "does it fit" widget: its defaults, and states over presets, pasted config.json files of every
# family (tests/test_models.py's, counted by transformers) and every option of training_memory
FIT_DEFAULTS = {name: trait.default() for name, trait in W.FitWidget.class_traits().items()
                if name in W.FitWidget._inputs}
PASTED = W._spec.PASTED


def fit_state(model="Llama 3 8B", config=None, **changes):
    return {**FIT_DEFAULTS, "model": PASTED if config else model, "config": config or {}, **changes}


def _pasted(case):
    from test_models import CASES

    return CASES[case][0]


FIT_MODELS = [("Llama 3 8B", None), ("Llama 2 70B", None), ("Mistral 7B", None), ("GPT-2 small", None),
              ("DeepSeek-V2", None)] + [(case, _pasted(case)) for case in (
    "qwen2-7b", "gemma-2-9b", "mixtral-8x7b", "phi-3-mini-4k", "gpt2-xl", "deepseek-v3-small",
    "llama-3.2-1b-tied", "qwen2-small-window-tied")]
FIT_OPTIONS = [
    {},
    {"N": 1, "B": 3},
    {"N": 32768, "recompute": "full", "zero": 3, "dp": 64, "loss": "chunked"},
    {"N": 2048, "precision": "megatron", "optimizer": "adamw_8bit", "optimizer_impl": "foreach",
     "recompute": "selective", "attention": "eager", "dropout": True, "kernels": "eager_repeat_kv"},
    {"N": 8192, "precision": "bf16_pure", "finetune": "lora", "lora_modules": ["q", "v"], "lora_rank": 8,
     "zero": 0, "dp": 1},
    {"finetune": "qlora", "quantize": "all", "recompute": "per_op", "mem": 24, "mem_unit": "GiB",
     "kernels": "compiled"},
    {"N": 16384, "tp": 2, "sequence_parallel": True, "cp": 2, "pp": 2, "zero": 2, "dp": 4,
     "optimizer_in_backward": True},
    {"N": 65536, "tp": 4, "cp": 4, "recompute": "full", "offload": True, "loss": "fused", "precision": "fp32",
     "zero": 3, "dp": 8},
    {"N": 512, "B": 4, "precision": "fp32_params", "optimizer": "sgd_momentum", "finetune": "lora",
     "lora_dropout": True, "mem": 141.5, "mem_unit": "GB", "allowance": 0},
    {"N": 8192, "finetune": "qlora_bnb", "quantize": "all", "mem": 40960, "mem_unit": "MiB", "allowance": 25,
     "zero": 0, "dp": 1},
]


def _fit_model(state):
    return W._spec.fit_model(state["model"], state["config"])


def _valid(state):
    """tp and pp where the model allows them (they must divide its heads and layers), else 1."""
    m = _fit_model(state)
    tp = state["tp"] if m.num_heads % state["tp"] == 0 and m.num_kv_heads % state["tp"] == 0 else 1
    pp = state["pp"] if m.num_layers % state["pp"] == 0 else 1
    return {**state, "tp": tp, "pp": pp}


FIT_GRID = [_valid(fit_state(name if config is None else PASTED, config,
                             **{k: v for k, v in options.items() if k in FIT_DEFAULTS}))
            for name, config in FIT_MODELS for options in FIT_OPTIONS]


def training_memory_of(state) -> dict:
    """training_memory's answer for a widget state (LoRA on a mixture of experts: its attention only)."""
    m = _fit_model(state)
    modules = state["lora_modules"]
    if m.num_experts:
        modules = [x for x in modules if x in ("q", "k", "v", "o")] or ["q"]
    options = {k: state[k] for k in W.fit.OPTIONS}
    return training.training_memory(m, state["N"], B=state["B"], zero=state["zero"], dp=state["dp"],
                                    tp=state["tp"], cp=state["cp"], pp=state["pp"],
                                    lora_rank=state["lora_rank"], lora_modules=modules,
                                    quantize=state["quantize"], **options)


def _id(state):
    return ",".join(f"{k}={v}" for k, v in state.items() if k in ("B", "N", "d", "H", "H_kv", "L", "dtype",
                                                                    "dropout", "ffn", "causal", "F",
                                                                    "window", "saved", "mask", "base",
                                                                    "mem", "mem_unit", "allowance"))


# ------------------------------------------------------------------------- values == library
def test_spec_is_json_and_names_every_symbol():
    spec = W.formula_spec()
    assert json.loads(json.dumps(spec)) == spec  # JSON-able as it is
    assert spec["format"] == W.SPEC_FORMAT
    assert spec["dtype_bytes"] == ledger.DTYPE_BYTES
    assert {k: v["b"] for k, v in spec["switches"]["dtype"].items()} == ledger.DTYPE_BYTES
    for kind in ("memory", "flops", "explorer", "fit"):
        recipe = spec["widgets"][kind]
        set_by_page = set(recipe["inputs"]) | {s for sw in recipe["switches"]
                                               for opt in spec["switches"][sw].values() for s in opt}
        members = recipe.get("members", {}).values()
        set_by_page |= set(recipe["constants"]) | {s for m in members for s in m.values()}
        if "model" in recipe:  # the model's fields set its symbols
            fit = spec["fit"]
            menus = [spec["switches"][menu] for menu in fit["model_menus"].values()]
            set_by_page |= set(fit["model_symbols"]) | {s for m in menus for opt in m.values() for s in opt}
        if "base" in recipe:  # a preset's symbols, the same set for every preset
            base = [set(m["symbols"]) for m in spec["models"].values()]
            assert all(b == base[0] for b in base)
            set_by_page |= base[0]
        env = {name: Fraction(2) for name in set_by_page}
        formulas.widget_values(kind, env)  # every symbol the formulas need is set by a slider or a menu
        assert set_by_page <= set(spec["symbols"]), "every symbol is documented"


@pytest.mark.parametrize("state", MEMORY_GRID, ids=_id)
def test_memory_values_equal_ledger(state):
    """Each item, the total, the fused side and N* equal attn_core.ledger for the same inputs."""
    v = W.compute_values("memory", state, exact=True)
    B, N, d, H, dtype, dropout = (state[k] for k in ("B", "N", "d", "H", "dtype", "dropout"))
    autograd = state["saved"] == "autograd"
    mask_bytes = 1 if state["mask"] == "bool" else None
    items = ledger.activation_ledger(B, N, d, H, dtype, dropout=dropout, saved=state["saved"],
                                     mask_bytes=mask_bytes)
    for name, nbytes in items.items():
        assert v[f"item.{name}"] == nbytes, name
    for name in set(ledger.ITEM_SHAPES) - set(items):
        assert v[f"item.{name}"] == 0, name
    assert v["total_bytes"] == sum(items.values())
    quad = sum(items[k] for k in ("S", "P", "dropout", "P_drop") if k in items)
    assert v["quadratic_bytes"] == quad
    if not autograd:
        fused = ledger.fused_activation_bytes(B, N, d, dtype)
        assert v["fused_bytes"] == fused
        assert v["eager_over_fused"] == Fraction(sum(items.values()), fused)
    crossover = ledger.memory_crossover(d, H, saved=state["saved"], dropout=dropout, dtype=dtype,
                                        mask_bytes=mask_bytes)
    assert float(v["n_star"]) == pytest.approx(crossover, rel=1e-15)
    # at N* the two parts are equal (exactly, the crossover is rational)
    at = W.compute_values("memory", {**state, "N": 1}, exact=True)
    assert at["linear_bytes"] * v["n_star"] == at["quadratic_bytes"] * v["n_star"] ** 2


@pytest.mark.parametrize("state", FLOPS_GRID, ids=_id)
def test_flops_values_equal_layer_flops(state):
    """The widget's numbers are those of a model of the same shape (flops.model_layer_flops), and for
    MHA those of the 24 N d^2 + 4 N^2 d ledger (flops.layer_flops)."""
    v = W.compute_values("flops", state, exact=True)
    N, d, H, H_kv, F_, ffn, causal = (state[k] for k in ("N", "d", "H", "H_kv", "F", "ffn", "causal"))
    model = kv_cache.ModelConfig("state", 1, d, H, H_kv, d // H, F_, ffn=ffn)
    linear, quadratic = flops.model_layer_flops(model, N, causal=causal)
    assert (v["linear_flops"], v["quadratic_flops"]) == (linear, quadratic)
    lin_attn, quad_attn = flops.model_layer_flops(model, N, causal=causal, with_ffn=False)
    assert v["linear_flops_attention"] == lin_attn
    assert v["total_flops_attention"] == lin_attn + quad_attn
    assert float(v["n_star"]) == flops.model_flops_crossover(model, causal=causal)
    assert float(v["n_star_attention"]) == flops.model_flops_crossover(model, causal=causal, with_ffn=False)
    assert v["d_head"] == Fraction(d, H)
    if H_kv == H and F_ == 4 * d and ffn == "mlp":
        assert (linear, quadratic) == flops.layer_flops(N, d, causal=causal)


@pytest.mark.parametrize("state", EXPLORER_GRID, ids=_id)
def test_explorer_values_equal_library(state):
    v = W.compute_values("explorer", state, exact=True)
    N, H, L, D, dtype = (state[k] for k in ("N", "H", "L", "D", "dtype"))
    b = ledger.DTYPE_BYTES[dtype]
    B = state["B"]
    model = config_of(state)
    # FLOPs of one layer of the model as built (GQA, MLA, its FFN)
    linear, quadratic = flops.model_layer_flops(model, N, causal=state["causal"])
    assert (v["linear_flops"], v["quadratic_flops"]) == (linear, quadratic)
    assert float(v["n_star_flops"]) == flops.model_flops_crossover(model, causal=state["causal"])
    assert float(v["n_star_flops_attention"]) == flops.model_flops_crossover(
        model, causal=state["causal"], with_ffn=False)
    # activations: one layer and L layers, with the model's head dims
    d_qk = D + state["rope_dim"]
    items = ledger.activation_ledger(B, N, state["d"], H, dtype, dropout=state["dropout"],
                                     saved=state["saved"], num_kv_heads=state["H_kv"], d_head=d_qk,
                                     d_v=state["D_v"], mask_bytes=1 if state["mask"] == "bool" else None)
    eager = sum(items.values())
    assert v["act_layer_eager"] == eager and v["act_eager"] == L * eager
    # KV cache and the linear-attention state
    assert v["kv_cache_bytes"] == model.kv_bytes(N, batch=B, bytes_per_value=b)
    assert v["kv_bytes_per_token"] == model.kv_bytes_per_token(b)
    # one state per key/value head: query heads that share K and V share the state sum k v^T
    assert v["linear_state_bytes"] == kv_cache.linear_state_bytes(L, state["H_kv"], D, state["D_v"], batch=B,
                                                                  bytes_per_value=b)
    # the KV cache (without a window) equals the state at n_star_kv_state
    assert v["n_star_kv_state"] * v["kv_bytes_per_token"] * B == v["linear_state_bytes"]
    # serving: every weight of the whole model (ModelConfig.num_params, counted by transformers for the
    # presets in test_models.py) + B users' caches, as inference.serving_memory counts them
    whole = whole_model_of(state)
    assert v["params"] == whole.num_params()
    held = inference.serving_memory(whole, N, users=B, bytes_per_value=b)
    assert v["weights_bytes"] == held["weight_bytes"]
    assert v["kv_bytes_per_user"] == held["kv_bytes_per_user"] and v["kv_cache_bytes"] == held["kv_bytes"]
    assert v["serving_bytes"] == held["total_bytes"]
    mem = Fraction(state["mem"]) * UNIT_BYTES[state["mem_unit"]]
    usable = usable_of(state)  # less the allowance for the allocator
    assert v["mem_bytes"] == mem and v["usable_bytes"] == usable
    assert v["serving_fits"] == (held["total_bytes"] <= usable)
    assert v["weights_fit"] == (held["weight_bytes"] <= usable)
    # the most users: they fit, and one more does not (none when the weights alone do not fit)
    k, per_user = v["users_max"], held["kv_bytes_per_user"]
    if held["weight_bytes"] > usable:
        assert k == 0
    else:
        assert held["weight_bytes"] + k * per_user <= usable < held["weight_bytes"] + (k + 1) * per_user


def _fit_id(state):
    name = state["config"].get("model_type") if state["config"] else state["model"]
    changed = {k: v for k, v in state.items() if k not in ("model", "config") and FIT_DEFAULTS.get(k) != v}
    return f"{name}:" + ",".join(f"{k}={v}" for k, v in changed.items())


@pytest.mark.parametrize("state", FIT_GRID, ids=_fit_id)
def test_fit_values_equal_training_memory(state):
    """The "does it fit" widget's items at the peak, each phase, the peak and its phase are
    training_memory's (which rounds bytes up); its parameters are the model's (counted by transformers
    for every family in tests/test_models.py); the memory is in GB, GiB or MiB, exactly, and the step fits
    when its peak is at most the memory less the allowance for the allocator."""
    v = W.compute_values("fit", state, exact=True)
    tm = training_memory_of(state)
    for item in formulas.step.STEP_TOTAL_ITEMS:
        assert math.ceil(v[f"{item}_bytes"]) == tm[item], item
    assert math.ceil(v["total_bytes"]) == tm["peak"]
    for phase in formulas.PHASES:
        assert math.ceil(v[f"phase.{phase}"]) == tm[f"phase.{phase}"], phase
    assert formulas.PHASES[int(v["peak_phase"])] == tm["peak_phase"]
    m = _fit_model(state)
    assert v["params"] == m.num_params()
    assert v["mem_bytes"] == Fraction(state["mem"]) * UNIT_BYTES[state["mem_unit"]]
    assert v["usable_bytes"] == usable_of(state) <= v["mem_bytes"]
    assert v["fits"] == (v["total_bytes"] <= v["usable_bytes"]) == (tm["peak"] <= v["usable_bytes"])
    assert v["spare_bytes"] == v["usable_bytes"] - v["total_bytes"]
    assert v["devices"] == state["dp"] * state["tp"] * state["cp"] * state["pp"]
    # the state alone: the peak of a step with no token (every phase at N -> 0)
    at_zero = W.compute_values("fit", {**state, "N": 0}, exact=True)
    assert v["state_bytes"] == at_zero["total_bytes"] == max(at_zero[f"phase.{p}"] for p in formulas.PHASES)


def test_fit_n_max_is_the_longest_n():
    """The longest N fits and one more token does not (Python's exact evaluation); when the state alone
    does not fit, no N does."""
    checked = 0
    for state in FIT_GRID:
        v = W.compute_values("fit", state)
        if v["state_bytes"] > v["usable_bytes"]:
            assert v["n_max"] == 0 and not W.compute_values("fit", {**state, "N": 1})["fits"]
            continue
        n = int(v["n_max"])
        if not 1 <= n < 10**8:
            continue
        assert W.compute_values("fit", {**state, "N": n})["fits"] == 1, _fit_id(state)
        assert W.compute_values("fit", {**state, "N": n + 1})["fits"] == 0, _fit_id(state)
        checked += 1
    assert checked >= 20


def test_fit_widget_presets_pasted_configs_and_traits():
    w = W.FitWidget()
    llama = kv_cache.MODELS["Llama 3 8B"]
    assert w.model == "Llama 3 8B" and w.values["params"] == llama.num_params()
    assert w.values["total_bytes"] == training.training_memory(llama, 4096, zero=1, dp=8)["peak"]
    # an H100 80GB HBM3, as nvidia-smi reports it (81,559 MiB), less 10% for the allocator
    assert (w.accelerator, w.mem, w.mem_unit, w.allowance) == ("H100 80GB HBM3", 81559, "MiB", 10)
    assert w.values["mem_bytes"] == 81559 * 2**20 == 85_520_809_984
    assert w.values["usable_bytes"] == 85_520_809_984 * 0.9
    w.accelerator = "A100 40GB"  # the menu sets the memory
    assert (w.mem, w.mem_unit, w.values["mem_bytes"]) == (40960, "MiB", 40 * 2**30)
    w.mem_unit = "GiB"  # a unit chosen: the memory is typed, no longer the menu's GPU
    assert w.accelerator == "" and w.values["mem_bytes"] == 40960 * 2**30
    w.mem, w.mem_unit = 74.5, "GiB"  # any memory, exactly as a reader enters it
    assert w.values["mem_bytes"] == 74.5 * 2**30
    w.mem, w.mem_unit = 81920, "MiB"  # a typed memory that is a GPU of the menu names it
    assert w.accelerator == "A100 80GB"
    before = w.values["total_bytes"]
    w.recompute = "full"
    assert w.values["total_bytes"] < before
    # a pasted config.json: the model becomes the config's; a preset clears it
    from test_models import CASES

    qwen = CASES["qwen2-7b"][0]
    w.config = qwen
    w.model = PASTED
    assert w.values["params"] == CASES["qwen2-7b"][1]
    assert W.FitWidget(config=qwen).values == W.FitWidget.compute_values(config=qwen)
    w.tp = 4  # 28 heads, 4 key/value heads
    w.model = "GPT-2 small"  # 12 heads: tp = 4 stays; a preset clears the config
    assert w.config == {} and w.tp == 4 and w.values["params"] == kv_cache.MODELS["GPT-2 small"].num_params()
    w.model = "Llama 3 8B"
    w.tp = 8
    w.config, w.model = CASES["gpt2-xl"][0], PASTED  # 25 heads: tp = 8 does not divide them, it becomes 1
    assert w.tp == 1
    # the old names of the traits still build the widget; a memory given alone is in GB, as before the menu
    old = W.FitWidget(zero_stage=3, dp_ranks=16, mem_gib=80)
    assert (old.zero, old.dp, old.mem, old.mem_unit, old.accelerator) == (3, 16, 80, "GiB", "")
    assert W.FitWidget.compute_values(zero_stage=3, dp_ranks=16, mem_gib=80) == old.values
    typed = W.FitWidget(mem=80, zero=3, recompute="full", dp=8, tp=2, cp=2)
    assert (typed.mem, typed.mem_unit, typed.accelerator) == (80, "GB", "")
    assert typed.values["mem_bytes"] == 80 * 10**9
    assert W.FitWidget(mem_unit="GiB").values["mem_bytes"] == 80 * 2**30
    assert W.FitWidget.compute_values(mem=80) == W.FitWidget(mem=80, mem_unit="GB").values
    a100 = W.FitWidget(accelerator="A100 80GB")
    assert (a100.mem, a100.mem_unit) == (81920, "MiB") and a100.values["mem_bytes"] == 80 * 2**30
    assert W.FitWidget.compute_values(accelerator="A100 80GB") == a100.values
    # every option of training_memory is a trait, with its default
    for name, (_, default) in training.TRAINING_OPTIONS.items():
        if name != "device":
            assert getattr(w, name) is not None and W.FitWidget.class_traits()[name].default() == default


def test_fit_widget_parallel_degrees():
    """TP, SP, CP and PP shrink the busiest rank's share; ZeRO-3 shards the parameters per rank."""
    w = W.FitWidget(model="Llama 3 70B", N=32768, recompute="full")
    one = w.values
    w.tp = 8
    tp = w.values
    assert tp["weights_bytes"] < one["weights_bytes"] / 7
    assert tp["params_per_rank"] == one["params_per_rank"] / 8
    w.sequence_parallel = True
    assert w.values["weights_bytes"] == tp["weights_bytes"]  # SP splits activations, not weights
    w.zero = 3
    assert w.values["params_per_rank"] == one["params_per_rank"] / 8 / 8  # over the 8 data-parallel ranks
    w.cp = 4
    assert w.values["devices"] == 8 * 8 * 4 and w.values["params_per_rank"] == one["params_per_rank"] / 8 / 32
    w.pp = 4
    assert w.values["devices"] == 8 * 8 * 4 * 4
    with pytest.raises(traitlets.TraitError, match="tp"):
        w.tp = 16  # 8 key/value heads
    with pytest.raises(traitlets.TraitError, match="pp"):
        w.pp = 3  # 80 layers


@pytest.mark.parametrize("name", list(kv_cache.MODELS))
def test_presets_match_model_configs(name):
    """Each preset's KV cache and FLOPs equal its ModelConfig (window, GQA and MLA included)."""
    m = kv_cache.MODELS[name]
    assert config_of(explorer_state(name)).attention_params() == m.attention_params()
    for N in (1, 4096, 131072):
        v = W.compute_values("explorer", explorer_state(name, N))
        assert v["kv_cache_bytes"] == m.kv_bytes(N)
        assert v["kv_bytes_per_token"] == m.kv_bytes_per_token()
        assert (v["linear_flops"], v["quadratic_flops"]) == flops.model_layer_flops(m, N)


def test_worked_example_through_the_widgets():
    """The 3.6B worked example: 2,566,914,048 bytes at N = 4096, 17x fused, N* = 256; FLOPs N* 18432, 6144."""
    v = W.MemoryLedgerWidget().values
    assert (v["total_bytes"], v["eager_over_fused"], v["n_star"]) == (2_566_914_048, 17, 256)
    assert round(100 * v["quadratic_share"], 1) == 94.1
    f = W.FlopsWidget().values
    assert (f["n_star"], f["n_star_attention"]) == (18432, 6144)
    assert round(100 * f["quadratic_share"], 1) == 18.2
    # as autograd saves it, without dropout: one N x N tensor against five linear ones, N* = 5d/H
    a = W.MemoryLedgerWidget(saved="autograd", dropout=False).values
    assert a["n_star"] == 640


# ------------------------------------------------------------------------- widgets: traits -> values
def test_memory_widget_values_follow_traits():
    w = W.MemoryLedgerWidget()
    seen = []
    w.observe(lambda ch: seen.append(ch["new"]["total_bytes"]), names="values")
    w.N = 8192
    assert w.values["total_bytes"] == sum(ledger.activation_ledger(1, 8192, 3072, 24).values())
    with w.hold_trait_notifications():  # d and H together: 4096 / 24 alone would be rejected
        w.d, w.H = 4096, 32
    w.dtype, w.dropout = "fp32", False
    items = ledger.activation_ledger(1, 8192, 4096, 32, "fp32", dropout=False)
    assert w.values == W.compute_values("memory", w.state())
    shown = {k[5:]: v for k, v in w.values.items() if k.startswith("item.")}
    assert {k: v for k, v in shown.items() if k in items} == items
    assert all(v == 0 for k, v in shown.items() if k not in items)  # the autograd-only items
    assert w.values["n_star"] == 3 * 4096 / 32  # without dropout: 4 B N d b... 6 B N d = 2 B H N^2
    assert len(seen) >= 4
    with pytest.raises(traitlets.TraitError):
        w.values = {}  # read-only


def test_flops_widget_values_follow_traits():
    w = W.FlopsWidget(model="custom", d=4096, H=32, H_kv=32, F=16384, ffn="swiglu", causal=True, N=131072)
    lin, quad = flops.layer_flops(131072, 4096, ffn="swiglu", causal=True)
    assert (w.values["linear_flops"], w.values["quadratic_flops"]) == (lin, quad)
    w.causal = False
    assert w.values["n_star"] == flops.flops_crossover(4096, ffn="swiglu")
    w.ffn = "mlp"
    assert w.values["n_star"] == 6 * 4096
    w.H_kv = 8
    w.H = 8  # H changes D, not the FLOPs
    assert w.values["d_head"] == 512 and w.values["n_star"] == 6 * 4096
    with pytest.raises(traitlets.TraitError, match="H_kv"):
        w.H = 4  # H_kv = 8 key/value heads cannot serve 4 query heads


def test_flops_widget_presets_give_the_models_crossover():
    """Llama 3 8B's preset (GQA, a SwiGLU FFN of 14,336) gives its N* = 26,624, not 6d."""
    w = W.FlopsWidget(model="Llama 3 8B")
    assert (w.d, w.H, w.H_kv, w.F, w.ffn) == (4096, 32, 8, 14336, "swiglu")
    assert w.values["n_star"] == flops.model_flops_crossover(kv_cache.MODELS["Llama 3 8B"]) == 26624
    w.H_kv = 32  # a slider move makes it custom
    assert w.model == "custom" and w.values["n_star"] > 26624
    w.model = "GPT-2 small"
    assert (w.d, w.H, w.H_kv, w.F, w.ffn) == (768, 12, 12, 3072, "mlp") and w.model == "GPT-2 small"
    assert W.FlopsWidget.compute_values(model="Llama 3 8B")["n_star"] == 26624


def test_explorer_serving_readouts():
    """The users' total and the users that fit follow B and the memory; a preset's weights are its
    num_params at b bytes; a custom shape keeps the last preset's vocabulary (base); the worked example
    (no vocabulary) holds its blocks' weights only."""
    m = kv_cache.MODELS["Llama 3 8B"]
    e = W.Explorer(model="Llama 3 8B", N=8192)  # an H100 80GB HBM3, less 10% for the allocator
    assert (e.base, e.B, e.accelerator, e.mem, e.mem_unit, e.allowance) == (
        "Llama 3 8B", 1, "H100 80GB HBM3", 81559, "MiB", 10)
    usable = 81559 * 2**20 * Fraction(9, 10)
    assert e.values["users_max"] == (usable - 2 * m.num_params()) // m.kv_bytes(8192)
    e = W.Explorer(model="Llama 3 8B", N=8192, mem=80, allowance=0)  # 80 GB typed (GB: as before the menu)
    assert (e.accelerator, e.mem, e.mem_unit) == ("", 80, "GB")
    assert e.values["weights_bytes"] == 2 * m.num_params() == 2 * 8_030_261_248
    for users in (1, 32, 128):
        e.B = users
        assert e.values["serving_bytes"] == inference.serving_memory(m, 8192, users=users)["total_bytes"]
    fit80 = e.values["users_max"]
    assert fit80 == (80 * 10**9 - 2 * m.num_params()) // m.kv_bytes(8192)
    e.mem_unit = "GiB"  # as 90_sizing_recipes counts it: 80 GiB
    assert e.values["users_max"] == (80 * 2**30 - 2 * m.num_params()) // m.kv_bytes(8192) > fit80
    e.allowance = 10  # 10% held back for the allocator: fewer users
    assert e.values["users_max"] == (80 * 2**30 * Fraction(9, 10) - 2 * m.num_params()) // m.kv_bytes(8192)
    e.dtype = "fp8"  # weights and caches at 1 byte
    assert e.values["weights_bytes"] == m.num_params()
    e.L = 16  # a slider: custom, with Llama 3 8B's vocabulary
    assert (e.model, e.base) == ("custom", "Llama 3 8B")
    assert e.values["params"] == m.with_(num_layers=16).num_params()
    e.model = "GPT-2 small"
    assert e.base == "GPT-2 small" and e.values["params"] == kv_cache.MODELS["GPT-2 small"].num_params()
    e.base = "Llama 3 8B"  # another preset's weights: no longer the preset itself
    assert e.model == "custom"
    w = W.Explorer()  # the worked example: its blocks (and final norm), the "3.6B" of its name
    worked = kv_cache.MODELS[W.DEFAULT_MODEL]
    assert worked.vocab_size == 0 and w.values["params"] == worked.num_params() == 3_624_278_016
    with pytest.raises(traitlets.TraitError, match="mem"):
        w.mem = 0


def test_explorer_presets_and_custom():
    e = W.Explorer()
    assert e.model == W.DEFAULT_MODEL and e.values["n_star_flops"] == 18432
    e.model = "Llama 3 70B"
    m = kv_cache.MODELS["Llama 3 70B"]
    assert (e.d, e.H, e.H_kv, e.L, e.D, e.F, e.ffn) == (8192, 64, 8, 80, 128, 28672, "swiglu")
    e.N = 131072
    assert e.values["kv_cache_bytes"] == m.kv_bytes(131072) == 40 * 1024**3
    e.L = 40  # an architecture slider: the model becomes custom, the rest stays
    assert e.model == "custom" and e.values["kv_cache_bytes"] == m.with_(num_layers=40).kv_bytes(131072)
    with e.hold_trait_notifications():
        e.d, e.H, e.H_kv = 4096, 16, 4
    assert e.D == 256  # D follows d / H for a custom model
    e.model = "DeepSeek-V2"  # MLA: D = 128 although d / H = 40
    assert (e.D, e.kv_latent) == (128, 576)
    assert e.values["kv_bytes_per_token"] == kv_cache.MODELS["DeepSeek-V2"].kv_bytes_per_token()
    e2 = W.Explorer(model="Mistral 7B", N=65536)
    assert e2.model == "Mistral 7B" and e2.window == 4096
    assert e2.values["kv_cache_bytes"] == kv_cache.MODELS["Mistral 7B"].kv_bytes(65536)
    e3 = W.Explorer(model="Llama 3 8B", d=2048)  # a preset changed at construction is custom
    assert e3.model == "custom" and e3.D == 2048 // 32


@pytest.mark.parametrize("cls", [W.MemoryLedgerWidget, W.FlopsWidget, W.Explorer, W.FitWidget],
                         ids=lambda c: c.__name__)
def test_classmethod_compute_values_from_synced_state(cls):
    """cls.compute_values(**synced state) is what the page of a built book must show (browser test)."""
    w = cls(N=65536)
    state = json.loads(json.dumps(w.get_state(), default=str))  # as embedded in the page
    assert state["_anywidget_id"] == f"{cls.__module__}.{cls.__name__}"
    assert cls.__module__.startswith("attn_core.widgets.")
    assert cls.compute_values(**state) == w.values
    assert cls.compute_values() == cls().values  # defaults
    assert cls.compute_values(N=1024, layout="IPY_MODEL_x") == cls(N=1024).values


def test_presets_cover_models():
    spec = W.formula_spec()
    assert list(spec["models"]) == list(kv_cache.MODELS)
    assert list(W.Explorer.model.values) == [*kv_cache.MODELS, "custom"]
    for name, m in kv_cache.MODELS.items():
        e = W.Explorer(model=name)
        assert e.model == name
        assert {k: getattr(e, k) for k in W.model_traits(m)} == W.model_traits(m)
        assert {k: spec["models"][name][k] for k in W.model_traits(m)} == W.model_traits(m)


@pytest.mark.parametrize(
    "make, trait",
    [
        (lambda: W.MemoryLedgerWidget(N=0), "N"),
        (lambda: W.MemoryLedgerWidget(N=16.5), "N"),
        (lambda: W.MemoryLedgerWidget(dtype="int3"), "dtype"),
        (lambda: W.MemoryLedgerWidget(H=7), "H"),
        (lambda: W.MemoryLedgerWidget(d=3010), "d"),
        (lambda: W.FlopsWidget(ffn="moe"), "ffn"),
        (lambda: W.FlopsWidget(d=-1), "d"),
        (lambda: W.FlopsWidget(F=0), "F"),
        (lambda: W.Explorer(model="GPT-5"), "model"),
        (lambda: W.Explorer(H_kv=5), "H_kv"),
        (lambda: W.Explorer(L=0), "L"),
        (lambda: W.Explorer(window=-1), "window"),
        (lambda: W.FitWidget(zero=4), "zero"),
        (lambda: W.FitWidget(model="GPT-5"), "model"),
        (lambda: W.FitWidget(model="3.6B worked example (d=3072, H=24)"), "model"),  # no vocabulary
        (lambda: W.FitWidget(precision="fp8"), "precision"),
        (lambda: W.FitWidget(dp=0), "dp"),
        (lambda: W.FitWidget(recompute="half"), "recompute"),
        (lambda: W.FitWidget(tp=3), "tp"),
        (lambda: W.FitWidget(pp=5), "pp"),
        (lambda: W.FitWidget(cp=0), "cp"),
        (lambda: W.FitWidget(mem=0), "mem"),
        (lambda: W.FitWidget(mem_unit="TB"), "mem_unit"),
        (lambda: W.FitWidget(lora_modules=["q_proj"]), "lora_modules"),
        (lambda: W.FitWidget(config={"model_type": "bert"}), "config"),
        (lambda: W.FitWidget(model=PASTED), "model"),
    ],
    ids=["N=0", "N float", "dtype", "H does not divide d", "d not divisible", "ffn", "d<0", "F=0",
         "model", "H_kv does not divide H", "L=0", "window<0", "zero=4", "fit model", "fit model no vocab",
         "precision", "dp=0", "recompute", "tp does not divide H", "pp does not divide L", "cp=0", "mem=0",
         "mem_unit", "lora_modules", "config", "pasted without config"],
)
def test_bad_traits_rejected(make, trait):
    with pytest.raises((ValueError, traitlets.TraitError), match=rf"\b{trait}\b"):
        make()


def test_bad_trait_on_a_live_widget_keeps_the_old_values():
    w = W.MemoryLedgerWidget()
    before = dict(w.values)
    with pytest.raises(traitlets.TraitError, match="H"):
        w.H = 7
    assert w.H == 24 and w.values == before


def test_observer_latency():
    """A slider move costs the kernel well under a millisecond (no torch in observers)."""
    e = W.Explorer()
    t0 = time.perf_counter()
    for i in range(200):
        e.N = 1000 + i
    per_move = (time.perf_counter() - t0) / 200
    assert per_move < 0.01, f"{per_move * 1e3:.2f} ms per trait change"


def test_explorer_figure_has_labelled_axes():
    """The one figure a chapter draws with matplotlib (chapter 7's static view of the Explorer)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for w in (W.Explorer(model="Mistral 7B"), W.Explorer(causal=True)):
        fig = w.figure()
        for ax in fig.axes:
            assert ax.get_title() and ax.get_ylabel()
            assert ax.get_xlabel() or ax.get_xticklabels()
        assert any("N (tokens" in ax.get_xlabel() for ax in fig.axes)
        plt.close(fig)


def test_time_crossover_helper():
    ns = [256, 512, 1024, 2048]
    # ratios 0.8 then 4/3 around N = 512..1024: interpolated on log N and log ratio
    expected = 2 ** (9 + math.log(1.25) / math.log(1.25 * 4 / 3))
    assert W.time_crossover(ns, [1, 2, 4, 8], [2, 2.5, 3, 4]) == pytest.approx(expected)
    assert W.time_crossover(ns, [3, 3, 3, 3], [1, 1, 1, 1]) == 256.0
    assert W.time_crossover(ns, [1, 1, 1, 1], [2, 2, 2, 2]) is None
    # noisy: the last crossing from below counts
    last = 2 ** (10 + math.log(2) / math.log(3))
    assert W.time_crossover(ns, [1, 3, 1, 3], [2, 2, 2, 2]) == pytest.approx(last)


def test_measure_time_crossover_small():
    e = W.Explorer(model="GPT-2 small")
    out = e.measure_time_crossover(ns=(32, 64), heads=1, repeats=1)
    assert out["N"] == [32, 64] and len(out["softmax_s"]) == len(out["linear_s"]) == 2
    assert out["D"] == 64 and e.measured == out
    assert out["crossover_N"] is None or 32 <= out["crossover_N"] <= 64


def test_measure_message_from_the_page(monkeypatch):
    e = W.Explorer()
    statuses = []
    e.observe(lambda ch: statuses.append(ch["new"]), names="measure_status")
    monkeypatch.setattr(e, "measure_time_crossover", lambda: {"N": [1]})
    e._on_msg(e, {"type": "measure"}, [])
    assert statuses == ["running", "done"]
    e._on_msg(e, {"type": "something else"}, [])
    assert statuses == ["running", "done"]


# ------------------------------------------------------------------------- the front end
def test_front_end_is_local():
    """One ES module and one stylesheet, shipped as package data, that load nothing from the network."""
    assert JS.is_file() and (STATIC / "ledger_widgets.css").is_file()
    for path in STATIC.iterdir():
        text = path.read_text()
        assert not re.search(r"https?://", text), f"{path.name} names a URL"
        for call in ("fetch(", "XMLHttpRequest", "import(", "WebSocket", "<script"):
            assert call not in text, f"{path.name} uses {call}"
        assert not re.search(r"^\s*import\s", text, re.M), f"{path.name} imports a module"
    formulas = (STATIC / "formulas.js").read_text()
    source = JS.read_text().split("\n")
    # the views' copy in a module drops comment lines and indentation: safe while no string spans lines
    assert all(line.count("`") % 2 == 0 and not line.endswith("\\") for line in source)
    views = [line.lstrip() for line in source if not line.lstrip().startswith("//")]
    for cls, kind in ((W.MemoryLedgerWidget, "memory"), (W.FlopsWidget, "flops"), (W.Explorer, "explorer"),
                      (W.FitWidget, "fit")):
        code = cls()._esm
        assert "export default" in code and code.endswith("\n".join(views))  # the views, comments left out
        # its own generated function, exactly as formulas.js has it, and no other kind's
        start = formulas.index(f"function {kind}Values(env)")
        assert formulas[start:formulas.index("\n}\n", start) + 3] in code
        others = [k for k in ("memory", "flops", "explorer", "fit") if k != kind]
        assert not any(f"function {k}Values(" in code for k in others)
        assert f"const GENERATED = {{ {kind}: {kind}Values }};" in code
        # the page's reader of a config.json only in the widget that reads one
        assert ((STATIC / "hf_config.js").read_text() in code) == (kind == "fit")
    # the rules of a config.json travel only with the widget that reads one (every saved state holds its spec)
    assert "fit" in W.FitWidget().spec and "fit" not in W.Explorer().spec


def _evaluator_source() -> str:
    """The generated formulas and the hand-written lookup of inputs and menus (the evaluator block)."""
    text = JS.read_text()
    m = re.search(r"// <evaluator>\n(.*?)// </evaluator>", text, re.S)
    assert m, "evaluator markers missing"
    return formulas.GENERATED_JS.read_text() + (STATIC / "hf_config.js").read_text() + m.group(1)


def test_hand_written_js_has_no_formulas():
    """The page's hand-written module only looks up inputs and menus; every formula is generated."""
    hand = JS.read_text() + (STATIC / "hf_config.js").read_text()
    for pattern in (r"Math\.pow", r"\* b \*", r"\b24 \*", r"(?<![\d.])6 \*", r"\b3072\b"):
        assert not re.search(pattern, hand), pattern


NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed: the page's evaluator is not run here")
def test_js_evaluator_equals_python():
    """The page's evaluator (run in Node.js) gives Python's numbers for every grid point; report its speed."""
    cases = ([("memory", s) for s in MEMORY_GRID] + [("flops", s) for s in FLOPS_GRID]
             + [("explorer", s) for s in EXPLORER_GRID] + [("fit", s) for s in FIT_GRID])
    script = _evaluator_source() + """
const fs = require("fs");
const input = JSON.parse(fs.readFileSync(0, "utf8"));
const out = input.cases.map(([kind, state]) => computeValues(input.spec, kind, state));
// latency: one slider move recomputes the values and a 97-point curve of the explorer
const st = input.cases.filter((c) => c[0] === "explorer").pop()[1];
const t0 = process.hrtime.bigint();
const reps = 50;
for (let r = 0; r < reps; r++) {
  for (let i = 0; i < 97; i++) {
    computeValues(input.spec, "explorer", { ...st, N: Math.round(2 ** (8 + i / 8)) });
  }
}
const ms = Number(process.hrtime.bigint() - t0) / 1e6 / reps;
process.stdout.write(JSON.stringify({ out, ms }));
"""
    spec = W.formula_spec()
    proc = subprocess.run([NODE, "-e", script], input=json.dumps({"spec": spec, "cases": cases}),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    worst = 0.0
    for (kind, state), js in zip(cases, result["out"]):
        py = W.compute_values(kind, state, spec)
        assert set(js) == set(py), kind
        for key, pv in py.items():
            jv = js[key]
            if key == "peak_phase":  # where two phases tie exactly, float64 may pick the other one
                assert py[f"phase.{formulas.PHASES[jv]}"] == pytest.approx(py["total_bytes"], rel=1e-12)
                continue
            if pv is None:
                assert jv is None, (kind, key, state)
                continue
            rel = abs(jv - pv) / max(abs(pv), 1e-300)
            worst = max(worst, rel)
            assert rel < 1e-12, (kind, key, state, pv, jv)
    print(f"\nJS evaluator: {len(cases)} states, max relative difference {worst:.1e}; "
          f"values + a 97-point curve in {result['ms']:.2f} ms")


# ------------------------------------------------------------------------- the page's advice
# (written once, in ledger_widgets.js; tests/js_fit.py runs it in Node.js and Python checks what it says)
def card80(model="Llama 3 8B", config=None, **changes):
    """A state on a card of 80 GB typed (80 x 10^9 bytes), with no allowance: the memory these examples
    were first written for."""
    return fit_state(model, config, **{"mem": 80, "mem_unit": "GB", "allowance": 0, **changes})


FIT_OVER = [
    card80(N=131072),  # no single change is enough
    card80(N=16384),  # the activations: full recomputation (per op is not enough)
    card80(N=4096, B=4, zero=3),  # per-op recomputation
    card80(N=8192, B=8, zero=3, recompute="per_op", kernels="compiled", loss="chunked"),  # micro-batch
    card80(N=65536, zero=3, recompute="full"),  # the logits: a fused loss (chunked is not enough)
    card80(N=2048, zero=0, dp=1, mem=24, mem_unit="GiB"),  # a 24 GiB card: QLoRA
    card80(N=4096, zero=0, dp=1, mem=48, precision="fp32", loss="fp32_kept", optimizer_impl="foreach"),
    card80(config=_pasted("gemma-2-9b"), N=8192, zero=3),
    card80(config=_pasted("qwen2-7b"), N=32768, dp=2, kernels="eager_repeat_kv"),
    card80(config=_pasted("mixtral-8x7b"), N=4096),
    # the default card, an H100 80GB HBM3 less 10%: 71.7 GiB usable
    fit_state(N=16384),  # full recomputation
    fit_state(N=2048, zero=0, dp=1, accelerator="RTX 4090", mem=24564),  # QLoRA
]
FIT_BEST = [None, {"recompute": "full"}, {"recompute": "per_op"}, {"B": 2}, {"loss": "fused"},
            {"finetune": "qlora"}, None, {"recompute": "per_op"}, None, None, {"recompute": "full"},
            {"finetune": "qlora"}]


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed: the page's advice is not run here")
@pytest.mark.parametrize("state", FIT_OVER + FIT_GRID[::9], ids=_fit_id)
def test_page_advice_is_what_training_memory_says(state):
    """Every single change the page tries, Python evaluates: it fits exactly when the page says so (the
    widget's values and training_memory's peak), the first that fits is the one the page proposes, and
    a state that fits needs none. The verdict's words name Python's numbers."""
    import js_fit

    v = W.compute_values("fit", state)
    said = js_fit.verdict(state)
    kind = js_fit.verdict_kind(v)
    assert said["kind"] == kind
    js_fit.assert_verdict_names(state, v, said["text"])
    n = js_fit.longest_n(state)
    assert n == (0 if kind == "state" else int(v["n_max"] // state["cp"]) * state["cp"])
    advice = js_fit.cheapest_change(state)
    if v["fits"]:
        assert advice == {"tried": [], "best": None}
        return
    assert advice["tried"], "nothing tried"
    for k, t in enumerate(advice["tried"]):
        changed = _valid({**state, **t["change"]})
        assert changed == {**state, **t["change"]}, f"the page tried an invalid change {t['change']}"
        after = W.compute_values("fit", changed)
        assert bool(after["fits"]) == t["fits"]
        assert t["peak"] == pytest.approx(after["total_bytes"], rel=1e-12)
        peak = training_memory_of(changed)["peak"]
        assert (peak <= after["usable_bytes"]) == t["fits"] or abs(peak - after["usable_bytes"]) <= 1, t
        assert t["fits"] == (k == len(advice["tried"]) - 1 and advice["best"] is not None)
    assert advice["best"] in (None, advice["tried"][-1])


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed: the page's advice is not run here")
def test_page_advice_examples():
    """Where the answer is known: each state's cheapest change, and the order of the first ones tried."""
    import js_fit

    for state, best in zip(FIT_OVER, FIT_BEST):
        got = js_fit.cheapest_change(state)["best"]
        assert (got and got["change"]) == best, _fit_id(state)
    tried = [t["change"] for t in js_fit.cheapest_change(FIT_OVER[6])["tried"]]
    assert tried[:3] == [{"precision": "bf16_mixed"}, {"loss": "chunked"}, {"optimizer_impl": "fused"}]


def test_explorer_d_slider_keeps_the_ffn_ratio_as_the_page_does():
    """Moving d rescales F to keep F / d (the page's onArch does the same), and sets D = D_v = d / H."""
    e = W.Explorer(model="Llama 3 8B")
    e.d = 2048
    assert e.model == "custom" and e.F == 14336 // 2 and e.D == e.D_v == 2048 // 32
    e.d = 3072
    assert e.F == math.floor(7168 / 2048 * 3072 + 0.5)


# ------------------------------------------------------------------------- memory, allowance, menus
def test_accelerators_are_exact_and_sourced():
    """The menu's GPUs fill in the memory nvidia-smi reports, in MiB: exact bytes. A GPU sold as "80 GB"
    holds 80 GiB (the A100 80GB: 81,920 MiB); the H100 80GB HBM3 shows 81,559 MiB, 85.52 x 10^9 bytes."""
    from attn_core.symbols import ACCELERATORS, DEFAULT_ACCELERATOR

    spec = W.formula_spec()
    assert spec["accelerators"] == {k: {"mem": v, "mem_unit": "MiB"} for k, v in ACCELERATORS.items()}
    assert spec["default_accelerator"] == DEFAULT_ACCELERATOR == "H100 80GB HBM3"
    assert ACCELERATORS["A100 80GB"] * 2**20 == 80 * 2**30 and ACCELERATORS["A100 40GB"] * 2**20 == 40 * 2**30
    assert round(ACCELERATORS["H100 80GB HBM3"] * 2**20 / 1e9, 2) == 85.52
    source = (formulas.GENERATED_JS.parents[1] / "symbols.py").read_text()
    for name, mib in ACCELERATORS.items():  # each total is quoted from its source in a comment
        assert f"{mib}MiB" in source, name
    for name, mib in ACCELERATORS.items():
        w = W.FitWidget(accelerator=name)
        assert (w.mem, w.mem_unit, w.values["mem_bytes"]) == (mib, "MiB", mib * 2**20)
        e = W.Explorer(accelerator=name)
        assert e.values["mem_bytes"] == mib * 2**20
    with pytest.raises(traitlets.TraitError, match="accelerator"):
        W.FitWidget(accelerator="H200")


def test_allowance_changes_the_verdict():
    """The step fits when its peak is at most the memory less the allowance: Llama 3 8B at N = 6,144 fits an
    H100's whole 79.6 GiB, not the 71.7 GiB left after 10%; the longest N follows the usable memory."""
    import js_fit

    state = fit_state(N=6144)
    v10, v0 = (W.compute_values("fit", {**state, "allowance": a}, exact=True) for a in (10, 0))
    assert v10["usable_bytes"] == v10["mem_bytes"] * Fraction(9, 10) and v0["usable_bytes"] == v0["mem_bytes"]
    assert v10["total_bytes"] == v0["total_bytes"]  # the tensors are the same
    assert (v10["fits"], v0["fits"]) == (0, 1)
    assert v10["n_max"] < 6144 <= v0["n_max"]
    said = js_fit.verdict(state)
    assert said["kind"] == "over" and "71.7 GiB usable after a 10% allowance" in said["text"]
    assert js_fit.verdict({**state, "allowance": 0})["text"].startswith(
        "Fits: 71.9 GiB at the peak, of the 79.6 GiB")
    with pytest.raises(traitlets.TraitError, match="allowance"):
        W.FitWidget(allowance=100)
    with pytest.raises(traitlets.TraitError, match="allowance"):
        W.Explorer(allowance=-1)


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed: the page's greying is not run here")
def test_greyed_settings_change_nothing():
    """What the page greys (LoRA's settings under full training, QLoRA's base under LoRA, offloading
    without full recomputation, sequence parallelism without TP), no value of it changes a number."""
    import js_fit

    options = {"lora_rank": [4, 64], "lora_modules": [["q"], ["q", "v"], list(training.LORA_MODULES)],
               "lora_dropout": [True, False], "quantize": ["adapted", "all"], "offload": [True, False],
               "sequence_parallel": [True, False]}
    seen = set()
    for state in FIT_GRID[::3]:
        for extra in ({}, {"finetune": "lora"}, {"finetune": "qlora_bnb"}, {"recompute": "full"}):
            s = {**state, **extra}
            base = W.compute_values("fit", s)
            off = js_fit.off(s)
            assert set(off) <= set(options)
            for trait, reason in off.items():
                assert reason and len(reason) < 40
                seen.add(trait)
                for value in options[trait]:
                    assert W.compute_values("fit", {**s, trait: value}) == base, (trait, value, _fit_id(s))
    assert seen == set(options)
    assert js_fit.off(fit_state(finetune="lora", recompute="full", tp=2)) == {
        "quantize": "LoRA: the base is not quantized"}


def test_menus_show_labels_from_one_table():
    """Every option of the menus the widgets show has a label and a tooltip (attn_core.symbols.OPTION_LABELS,
    sent in the spec); the loss's bytes a logit in its tooltip are the menu's own l_loss; the page's
    hand-written module names no option's label."""
    from attn_core.symbols import OPTION_LABELS, SWITCHES

    spec = W.formula_spec()
    shown = ["precision", "optimizer", "optimizer_impl", "recompute", "attention", "kernels", "loss",
             "finetune", "quantize", "zero", "saved", "mask"]
    for menu in shown:
        assert set(OPTION_LABELS[menu]) == set(SWITCHES[menu]), menu
        for option, (label, tip) in OPTION_LABELS[menu].items():
            assert label and tip and label != tip, (menu, option)
            assert spec["labels"][menu][option] == [label, tip]
    for option, (_, tip) in OPTION_LABELS["loss"].items():
        per_logit = float(SWITCHES["loss"][option]["l_loss"])
        if per_logit:
            assert tip.startswith(f"{per_logit:g} bytes a logit"), option
    assert OPTION_LABELS["finetune"]["qlora_bnb"][0] == "QLoRA, bitsandbytes ≤ 0.43.1 (double-quantized)"
    assert OPTION_LABELS["loss"]["fp32_parallel"][0] == "fp32 logits, vocabulary-parallel (loss_parallel)"
    hand = JS.read_text()  # no table of its own: no option as the key of an object of words
    for key in ("bf16_mixed", "megatron", "fp32_params", "bf16_pure", "adamw_8bit", "sgd_momentum", "foreach",
                "selective", "per_op", "eager_repeat_kv", "fp32_kept", "chunked_compiled", "qlora", "adapted",
                "teaching", "autograd"):
        assert not re.search(rf"\b{key}:\s*\"", hand), key
