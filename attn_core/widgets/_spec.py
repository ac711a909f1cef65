"""What the widgets share: the spec the page receives and the exact Python evaluation.

The formulas themselves are in :mod:`attn_core.formulas`: Python calls them with exact Fractions
(:func:`compute_values`), the page runs the JavaScript SymPy prints from them (static/formulas.js).
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from fractions import Fraction

from .. import formulas, kv_cache, ledger, models, training
from ..display import COLORS, UNITS, fmt_bytes, fmt_flops, fmt_tokens  # noqa: F401 - the widgets' formats
from ..symbols import (
    ACCELERATORS,
    DEFAULT_ACCELERATOR,
    MODEL_MENUS,
    MODEL_SYMBOLS,
    OPTION_LABELS,
    SWITCHES,
    SYMBOLS,
)

_STATIC = pathlib.Path(__file__).parents[1] / "static"
DEFAULT_MODEL = "3.6B worked example (d=3072, H=24)"
SPEC_FORMAT = "attn_core.formula_spec/2"

# ------------------------------------------------------------------------------------ the spec


def _number(x):
    """A Fraction as a JSON number (int when whole)."""
    x = Fraction(x)
    return int(x) if x.denominator == 1 else float(x)


def model_traits(model: kv_cache.ModelConfig) -> dict:
    """The Explorer traits a preset sets: the architecture fields of a ModelConfig."""
    return {
        "d": model.d_model,
        "H": model.num_heads,
        "H_kv": model.num_kv_heads,
        "L": model.num_layers,
        "D": model.d_head,
        "D_v": model.d_v or model.d_head,
        "rope_dim": model.rope_dim or 0,
        "q_lora": model.q_lora_rank or 0,
        "F": model.ffn_dim,
        "ffn": model.ffn,
        "window": model.window or 0,
        "kv_latent": (model.kv_lora_rank + model.rope_dim) if model.is_mla else 0,
    }


#: the "does it fit" widget's presets: the models of MODELS with a vocabulary (the logits need one)
FIT_MODELS = {name: m for name, m in kv_cache.MODELS.items() if m.vocab_size}
#: the model menu's entry for a pasted config.json (the widget's ``config`` trait)
PASTED = "config.json"


def model_fields(model: kv_cache.ModelConfig) -> dict:
    """A ModelConfig's fields as JSON (what the page's reader of a config.json gives, and the name)."""
    return {k: v for k, v in dataclasses.asdict(model).items() if k != "source"}


def fit_model(preset: str, config: dict | None) -> kv_cache.ModelConfig:
    """The model of a "does it fit" state: the pasted config.json when there is one, else the preset."""
    if config:
        return kv_cache.ModelConfig.from_hf_config(config)
    if preset not in FIT_MODELS:
        raise ValueError(f"model must be one of {list(FIT_MODELS)} (or {PASTED!r} with a config), "
                         f"got {preset!r}")
    return FIT_MODELS[preset]


def _fit_spec() -> dict:
    """What the "does it fit" page needs besides the formulas: the presets' fields, the rules that read a
    config.json (static/hf_families.json, notes left out), ModelConfig's defaults and the fields it checks,
    the table from fields to symbols, LoRA's targets and the phases of a step."""
    families = {k: {f: r for f, r in v.items() if f != "_note"}
                for k, v in json.loads(models.HF_FAMILIES_FILE.read_text()).items() if not k.startswith("_")}
    defaults = {f.name: f.default for f in dataclasses.fields(kv_cache.ModelConfig)
                if f.default is not dataclasses.MISSING}
    return {
        "models": {name: model_fields(m) for name, m in FIT_MODELS.items()},
        "pasted": PASTED,
        "hf_families": families,
        "field_defaults": defaults,
        "required": list(models.REQUIRED_FIELDS),
        "expert_fields": list(models.EXPERT_FIELDS),
        "model_symbols": dict(MODEL_SYMBOLS),
        "model_menus": dict(MODEL_MENUS),
        "lora_modules": list(training.LORA_MODULES),
        "phases": list(formulas.PHASES),
    }


def _ledger_items() -> list[list]:
    """[name, value key, label, 'linear' | 'quadratic'] for each ledger item, in order (the power of N
    read off formulas.memory_items)."""
    import sympy as sp

    N = formulas.symbols()["N"]
    items = formulas.memory_items()
    part = {name: "quadratic" if sp.degree(e, N) == 2 else "linear" for name, e in items.items()}
    return [[name, f"item.{name}", ledger.ITEM_SHAPES[name], part[name]] for name in items]


_MEMORY_SWITCHES = {"dtype": "dtype", "dropout": "dropout", "saved": "saved", "mask": "mask"}


def _widget_recipes() -> dict:
    """kind -> which symbol each trait sets: inputs (symbol -> trait), switches (menu -> trait)."""
    memory = {
        "inputs": {"B": "B", "N": "N", "d": "d", "H": "H"},
        "switches": dict(_MEMORY_SWITCHES),
        "constants": {},
        "items": [it for it in _ITEMS if it[0] != "mask"],  # the widget's layer is not causal
    }
    flops_w = {
        "inputs": {"N": "N", "d": "d", "H": "H", "H_kv": "H_kv", "F": "F"},
        "switches": {"ffn": "ffn", "causal": "causal"},
        "constants": {},
    }
    # the explorer: the sliders' shape; its weights take the rest of a model (vocabulary, norms, biases,
    # experts) from the preset named by its ``base`` trait (spec["models"][base]["symbols"]); the
    # accelerator's memory for the serving readouts
    explorer = {
        "inputs": {"B": "B", "N": "N", "d": "d", "H": "H", "H_kv": "H_kv", "L": "L", "D": "D",
                   "D_v": "D_v", "D_r": "rope_dim", "Q_r": "q_lora", "F": "F", "W": "window",
                   "R": "kv_latent", "M_mem": "mem", "p_alloc": "allowance"},
        "switches": {**_MEMORY_SWITCHES, "ffn": "ffn", "causal": "causal", "mem_unit": "mem_unit"},
        "constants": {},
        "base": "base",
        "accelerator": "accelerator",
    }
    # the "does it fit" widget (fit.py): training_memory's options, a model (a preset or a pasted
    # config.json, whose fields set the model's symbols), LoRA's targets (members of a list), and the
    # CUDA device (training_memory's default)
    fit = {
        "inputs": {"B": "B", "N": "N", "M_mem": "mem", "p_alloc": "allowance", "N_d": "dp", "t": "tp",
                   "c": "cp", "pp": "pp", "r_lora": "lora_rank"},
        "switches": {**{menu: name for name, (menu, _) in training.TRAINING_OPTIONS.items()
                        if name != "device"},
                     "zero": "zero", "quantize": "quantize", "mem_unit": "mem_unit"},
        "constants": dict(SWITCHES["device"]["cuda"]),
        "members": {"lora_modules": dict(formulas.LORA_SYMBOLS)},
        "model": {"preset": "model", "config": "config"},
        "accelerator": "accelerator",
    }
    return {"memory": memory, "flops": flops_w, "explorer": explorer, "fit": fit}


_ITEMS = _ledger_items()


def formula_spec() -> dict:
    """What the page needs besides the generated formulas, as one JSON-able dict.

    Keys:

    * ``widgets``: kind -> ``inputs`` (symbol -> trait), ``switches`` (menu -> trait) and
      ``constants``; the memory widget also lists its ``items`` ([name, value key, label, part]); the
      "does it fit" widget its ``members`` (a list trait -> item -> the symbol that is 1 when the list
      holds the item) and its ``model`` (the traits of a preset and a pasted config.json); the
      Explorer its ``base`` (the trait naming the preset whose symbols are set first, the sliders'
      inputs over them); the Explorer and the "does it fit" widget their ``accelerator`` (the trait of the
      menu of ``accelerators``, which sets ``mem`` and ``mem_unit``; not an input of the formulas).
    * ``accelerators``: the menu's GPUs -> {``mem``, ``mem_unit``}: the memory nvidia-smi reports, in MiB
      (:data:`attn_core.symbols.ACCELERATORS`, with its sources), and ``default_accelerator``.
    * ``labels``: menu -> option -> [label, tooltip] (:data:`attn_core.symbols.OPTION_LABELS`: the one table
      of what the menus show).
    * ``switches``: menu -> option -> {symbol: value} (:data:`attn_core.symbols.SWITCHES`;
      options of booleans are the strings ``"true"`` / ``"false"``).
    * ``models``: the presets of :data:`attn_core.kv_cache.MODELS`, as Explorer traits, with their
      ``source`` and ``symbols`` (``ModelConfig.symbol_values()``: what the Explorer's weights take from
      the preset its ``base`` trait names, under the sliders' shape).
    * ``fit``: what the "does it fit" widget needs to read a model: its presets' fields, the rules of
      static/hf_families.json, the table of the model's symbols (:func:`_fit_spec`); only that widget's
      own spec carries it (:func:`widget_spec`).
    * ``dtype_bytes``, ``symbols`` (what each symbol means), ``format``;
    * ``colors`` and ``units``: the charts' colours and the byte and FLOP unit tables, from
      :mod:`attn_core.display` (one source for the page and for Python's figures and formats).

    The formulas are not in the spec: the page runs the functions SymPy printed into
    ``static/formulas.js`` from :func:`attn_core.formulas.widget_values`, which Python calls.
    """
    switches = {sw: {opt: {k: _number(v) for k, v in vals.items()} for opt, vals in options.items()}
                for sw, options in SWITCHES.items()}
    models = {name: {**model_traits(m), "source": m.source,
                     "symbols": {k: _number(v) for k, v in m.symbol_values().items()}}
              for name, m in kv_cache.MODELS.items()}
    return {
        "format": SPEC_FORMAT,
        "symbols": dict(SYMBOLS),
        "dtype_bytes": dict(ledger.DTYPE_BYTES),
        "switches": switches,
        "widgets": _widget_recipes(),
        "models": models,
        "default_model": DEFAULT_MODEL,
        "accelerators": {name: {"mem": mib, "mem_unit": "MiB"} for name, mib in ACCELERATORS.items()},
        "default_accelerator": DEFAULT_ACCELERATOR,
        "labels": {menu: {opt: list(pair) for opt, pair in options.items()}
                   for menu, options in OPTION_LABELS.items()},
        "fit": _fit_spec(),
        "colors": dict(COLORS),
        "units": {k: [list(u) for u in v] for k, v in UNITS.items()},
    }


# --------------------------------------------------------------------- the evaluator (Python)
# Python computes exactly (Fractions; a float input is taken at its exact binary value);
# the page computes the same generated expressions in float64.

def _exact(x) -> Fraction:
    if isinstance(x, bool):
        return Fraction(int(x))
    if isinstance(x, (int, Fraction)):
        return Fraction(x)
    if isinstance(x, float):
        if not math.isfinite(x):
            raise ValueError(f"symbol values must be finite, got {x!r}")
        return Fraction(x)
    raise ValueError(f"symbol values must be numbers, got {x!r}")


def _switch_key(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def build_env(recipe: dict, state: dict, spec: dict) -> dict:
    """Symbol values for a widget recipe and a state (trait name -> value)."""
    env = {sym: _exact(v) for sym, v in recipe["constants"].items()}
    if "model" in recipe:
        model = fit_model(state[recipe["model"]["preset"]], state.get(recipe["model"]["config"]))
        env.update({sym: _exact(v) for sym, v in model.symbol_values().items()})
    if "base" in recipe:  # a preset's symbols (its symbol_values, in the spec), under the inputs below
        base = state[recipe["base"]]
        if base not in spec["models"]:
            raise ValueError(f"{recipe['base']} must be one of {list(spec['models'])}, got {base!r}")
        env.update({sym: _exact(v) for sym, v in spec["models"][base]["symbols"].items()})
    for trait, members in recipe.get("members", {}).items():
        chosen = set(state[trait])
        env.update({sym: Fraction(int(item in chosen)) for item, sym in members.items()})
    for sym, trait in recipe["inputs"].items():
        env[sym] = _exact(state[trait])
    for switch, trait in recipe["switches"].items():
        options = SWITCHES[switch]
        key = _switch_key(state[trait])
        if key not in options:
            raise ValueError(f"{trait} must be one of {sorted(options)}, got {state[trait]!r}")
        env.update({sym: _exact(v) for sym, v in options[key].items()})
    return env


#: the memory traits' defaults (the Explorer and the "does it fit" widget): the default accelerator's memory
#: as nvidia-smi reports it (:data:`attn_core.symbols.ACCELERATORS`) and an allowance of 10% for the allocator
MEMORY_DEFAULTS = {"accelerator": DEFAULT_ACCELERATOR, "mem": float(ACCELERATORS[DEFAULT_ACCELERATOR]),
                   "mem_unit": "MiB", "allowance": 10.0}
#: the memory typed before the menu of accelerators: a ``mem`` given without ``mem_unit`` is in GB, and a
#: ``mem_unit`` given without ``mem`` reads 80 (the widgets' old defaults, 80 GB)
TYPED_MEMORY_DEFAULTS = {"mem": 80.0, "mem_unit": "GB"}
#: the Explorer's serving traits, for a state that does not name them (one written before they existed)
SERVING_DEFAULTS = {k: v for k, v in MEMORY_DEFAULTS.items() if k != "accelerator"}


def accelerator_of(mem, mem_unit) -> str:
    """The accelerator of the menu whose memory is ``mem`` ``mem_unit`` (its nvidia-smi total), else ""."""
    return next((name for name, mib in ACCELERATORS.items() if mem_unit == "MiB" and mem == mib), "")


def memory_traits(traits: dict) -> dict:
    """``traits`` with the memory traits made consistent: an ``accelerator`` of the menu sets ``mem`` and
    ``mem_unit`` that are not given; a typed memory (``mem`` or ``mem_unit`` without an accelerator) takes
    :data:`TYPED_MEMORY_DEFAULTS` for the other; ``accelerator`` names the GPU whose memory that is, or ""."""
    out = dict(traits)
    name = out.get("accelerator")
    if name and name in ACCELERATORS:
        out.setdefault("mem", float(ACCELERATORS[name]))
        out.setdefault("mem_unit", "MiB")
    elif name or "mem" in out or "mem_unit" in out:
        if name:  # not a GPU of the menu: the trait's check names it
            return out
        out = {**TYPED_MEMORY_DEFAULTS, **out}
    else:
        return out
    out["accelerator"] = accelerator_of(out["mem"], out["mem_unit"])
    return out


def serving_defaults(state: dict) -> dict:
    """The Explorer's serving traits a state leaves out, with their defaults (:data:`SERVING_DEFAULTS`; a
    ``mem`` without ``mem_unit`` is in GB, as before the menu of accelerators)."""
    model = state.get("model")
    base = model if model in kv_cache.MODELS else DEFAULT_MODEL
    defaults = {**SERVING_DEFAULTS, "mem_unit": "GB"} if "mem" in state else SERVING_DEFAULTS
    return {k: v for k, v in {**defaults, "base": base}.items() if k not in state}


def compute_values(kind: str, state: dict, spec: dict | None = None, exact: bool = False) -> dict:
    """The numbers a widget of ``kind`` ("memory", "flops", "explorer", "fit") shows for ``state``.

    ``state`` maps trait names to values (e.g. ``{"N": 4096, "d": 3072, ...}``). Values are
    ints when whole, floats otherwise (Fractions with ``exact=True``), None for a crossover
    that does not exist. An Explorer state without ``base``, ``mem``, ``mem_unit`` or ``allowance`` takes
    :func:`serving_defaults`.
    """
    spec = _SPEC if spec is None else spec
    if kind == "explorer":
        state = {**state, **serving_defaults(state)}
    raw = formulas.widget_values(kind, build_env(spec["widgets"][kind], state, spec))
    raw = {k: (None if v is None else Fraction(v)) for k, v in raw.items()}
    if exact:
        return raw
    return {k: (None if v is None else int(v) if v.denominator == 1 else float(v)) for k, v in raw.items()}


_SPEC = formula_spec()


def widget_spec(kind: str) -> dict:
    """The spec a widget of ``kind`` carries in its state: :func:`formula_spec` without the symbols'
    meanings (the page does not show them), the "fit" part only for the "does it fit" widget (every
    widget's saved state holds its spec: notebooks stay small)."""
    return {k: v for k, v in _SPEC.items() if k != "symbols" and (k != "fit" or kind == "fit")}


def _log_grid(lo: float, hi: float, n: int = 121) -> list[float]:
    a, b = math.log2(lo), math.log2(hi)
    return [2 ** (a + (b - a) * i / (n - 1)) for i in range(n)]
