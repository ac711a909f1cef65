"""Slider explorers for the chapters; they evaluate the formulas of :mod:`attn_core.formulas`.

Three ``anywidget`` widgets (they work in JupyterLab and in Colab; in Colab a notebook
may first need ``from google.colab import output; output.enable_custom_widget_manager()``):

* :class:`MemoryLedgerWidget` (chapter 5): the activation ledger of one attention layer,
  item by item (the teaching model or as autograd saves it), eager against fused, and the
  memory crossover.
* :class:`FlopsWidget` (chapter 6): linear against quadratic FLOPs of one layer, the
  quadratic share against N, and the crossovers N* = 6d (with the FFN) and 2d (without).
* :class:`Explorer` (chapter 7): one model (presets of real ones from
  :data:`attn_core.kv_cache.MODELS`) at N tokens: both crossovers, activations per layer
  and for L layers, the KV cache, the state of linear attention, and a time crossover
  measured on the reader's machine.

**One formula, evaluated twice.** Nothing is computed from formulas typed again in
JavaScript. Every value a widget shows is a SymPy expression of :mod:`attn_core.formulas`
(:func:`attn_core.formulas.widget_values`); ``python -m attn_core.formulas`` (``make formulas``)
prints each one as exact Python (``attn_core/_generated.py``) and, with SymPy's JavaScript
printer, into the generated block of ``static/ledger_widgets.js``. :func:`formula_spec` only
says which symbol each slider and menu sets. The tests check that the generated files are up to
date, that the expressions equal the library's plain functions, and (with Node.js) that the
page's numbers equal Python's over a grid of inputs.

The front end draws its own controls and an inline SVG figure (no CDN, no build step) and
writes every number it shows into the page as ``<span data-key="total_bytes"
data-value="...">``. On the Python side every widget keeps the same numbers in its read-only
``values`` dict, recomputed by a traitlets observer (no torch, well under a millisecond).
``figure()`` draws the widget's figure with matplotlib, so a static page is never empty.
"""

from __future__ import annotations

import copy
import math
import pathlib
import time
from fractions import Fraction

import anywidget
import traitlets

from . import _generated, flops, formulas, kv_cache, ledger

__all__ = [
    "MemoryLedgerWidget",
    "FlopsWidget",
    "Explorer",
    "formula_spec",
    "build_env",
    "compute_values",
    "model_traits",
    "time_crossover",
    "fmt_bytes",
    "fmt_flops",
    "fmt_tokens",
    "DEFAULT_MODEL",
]

_STATIC = pathlib.Path(__file__).parent / "static"
DEFAULT_MODEL = "3.6B worked example (d=3072, H=24)"
SPEC_FORMAT = "attn_core.formula_spec/2"

# ------------------------------------------------------------------------------------ the spec
SYMBOLS = formulas.SYMBOLS


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


def _ledger_items() -> list[list]:
    """[name, value key, label, 'linear' | 'quadratic'] for each ledger item, in order."""
    import sympy as sp  # noqa: F401 - only to classify the items by their power of N

    out = []
    for name, expr in formulas.memory_items().items():
        part = "quadratic" if sp.degree(expr, formulas.N) == 2 else "linear"
        out.append([name, f"item.{name}", ledger.ITEM_SHAPES[name], part])
    return out


_MEMORY_SWITCHES = {"dtype": "dtype", "dropout": "dropout", "saved": "saved", "mask": "mask"}


def _widget_recipes() -> dict:
    """kind -> which symbol each trait sets: inputs (symbol -> trait), switches (menu -> trait)."""
    memory = {
        "inputs": {"B": "B", "N": "N", "d": "d", "H": "H"},
        "switches": dict(_MEMORY_SWITCHES),
        "constants": {},
        "items": _ITEMS,
    }
    flops_w = {
        "inputs": {"N": "N", "d": "d", "H": "H", "f_ffn": "ffn_mult"},
        "switches": {"ffn": "ffn", "causal": "causal"},
        "constants": {},
    }
    explorer = {
        "inputs": {"B": "B", "N": "N", "d": "d", "H": "H", "H_kv": "H_kv", "L": "L", "D": "D",
                   "D_v": "D_v", "D_r": "rope_dim", "Q_r": "q_lora", "F": "F", "W": "window",
                   "R": "kv_latent"},
        "switches": {**_MEMORY_SWITCHES, "ffn": "ffn", "causal": "causal"},
        "constants": {},
    }
    return {"memory": memory, "flops": flops_w, "explorer": explorer}


_ITEMS = _ledger_items()


def formula_spec() -> dict:
    """What the page needs besides the generated formulas, as one JSON-able dict.

    Keys:

    * ``widgets``: kind -> ``inputs`` (symbol -> trait), ``switches`` (menu -> trait) and
      ``constants``; the memory widget also lists its ``items`` ([name, value key, label, part]).
    * ``switches``: menu -> option -> {symbol: value} (:data:`attn_core.formulas.SWITCHES`;
      options of booleans are the strings ``"true"`` / ``"false"``).
    * ``models``: the presets of :data:`attn_core.kv_cache.MODELS`, as Explorer traits.
    * ``dtype_bytes``, ``symbols`` (what each symbol means), ``format``.

    The formulas are not in the spec: the page runs the functions SymPy generated into
    ``static/ledger_widgets.js``, Python the same ones in ``attn_core/_generated.py``.
    """
    switches = {sw: {opt: {k: _number(v) for k, v in vals.items()} for opt, vals in options.items()}
                for sw, options in formulas.SWITCHES.items()}
    models = {name: {**model_traits(m), "source": m.source} for name, m in kv_cache.MODELS.items()}
    return {
        "format": SPEC_FORMAT,
        "symbols": dict(SYMBOLS),
        "dtype_bytes": dict(ledger.DTYPE_BYTES),
        "switches": switches,
        "widgets": _widget_recipes(),
        "models": models,
        "default_model": DEFAULT_MODEL,
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
    for sym, trait in recipe["inputs"].items():
        env[sym] = _exact(state[trait])
    for switch, trait in recipe["switches"].items():
        options = formulas.SWITCHES[switch]
        key = _switch_key(state[trait])
        if key not in options:
            raise ValueError(f"{trait} must be one of {sorted(options)}, got {state[trait]!r}")
        env.update({sym: _exact(v) for sym, v in options[key].items()})
    return env


def compute_values(kind: str, state: dict, spec: dict | None = None, exact: bool = False) -> dict:
    """The numbers a widget of ``kind`` ("memory", "flops", "explorer") shows for ``state``.

    ``state`` maps trait names to values (e.g. ``{"N": 4096, "d": 3072, ...}``). Values are
    ints when whole, floats otherwise (Fractions with ``exact=True``), None for a crossover
    that does not exist.
    """
    spec = _SPEC if spec is None else spec
    raw = _generated.FUNCTIONS[kind](build_env(spec["widgets"][kind], state, spec))
    raw = {k: (None if v is None else Fraction(v)) for k, v in raw.items()}
    if exact:
        return raw
    return {k: (None if v is None else int(v) if v.denominator == 1 else float(v)) for k, v in raw.items()}


_SPEC = formula_spec()


# ---------------------------------------------------------------------------- formatting
_BINARY_UNITS = (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024))

def fmt_bytes(x: float) -> str:
    """Binary units, as on the page: 2.39 GiB."""
    for unit, scale in _BINARY_UNITS:
        if x >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} B"


def fmt_flops(x: float) -> str:
    """Decimal units: 927.71 GFLOPs."""
    for unit, scale in (("PFLOPs", 1e15), ("TFLOPs", 1e12), ("GFLOPs", 1e9), ("MFLOPs", 1e6)):
        if x >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} FLOPs"


def fmt_tokens(n: float) -> str:
    """256, 4K, 128K, 1M (powers of 1024), else the integer with separators."""
    n = round(n)
    for suffix, scale in (("M", 1024**2), ("K", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return f"{n:,}"


def _log_grid(lo: float, hi: float, n: int = 121) -> list[float]:
    a, b = math.log2(lo), math.log2(hi)
    return [2 ** (a + (b - a) * i / (n - 1)) for i in range(n)]


# ------------------------------------------------------------------------------ the widgets
class _LedgerWidget(anywidget.AnyWidget):
    """Shared machinery: the spec trait, the ``values`` observer, the front end."""

    _esm = _STATIC / "ledger_widgets.js"
    _css = _STATIC / "ledger_widgets.css"
    _kind = ""
    _inputs: tuple[str, ...] = ()

    kind = traitlets.Unicode("", read_only=True).tag(sync=True)
    spec = traitlets.Dict(read_only=True).tag(sync=True)
    values = traitlets.Dict(read_only=True, help="the numbers shown, computed in Python from spec")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.set_trait("kind", self._kind)
        self.set_trait("spec", copy.deepcopy(_SPEC))
        self._update_values()
        self.observe(self._on_input, names=list(self._inputs))

    def state(self) -> dict:
        """The inputs of the formulas: trait name -> value."""
        return {name: getattr(self, name) for name in self._inputs}

    @classmethod
    def compute_values(cls, **traits) -> dict:
        """The ``values`` a widget of this class shows for these trait values, without making one.

        Traits not given take their defaults; other names (``layout``, ``spec``, ...) are ignored,
        so the synced state of a page's widget can be passed as it is. No preset is applied: the
        numbers follow the traits as given, as on the page.
        """
        defaults = cls.class_traits()
        state = {name: traits[name] if name in traits else defaults[name].default() for name in cls._inputs}
        return compute_values(cls._kind, state)

    def _update_values(self) -> None:
        self.set_trait("values", compute_values(self._kind, self.state(), self.spec))

    def _on_input(self, change) -> None:
        self._update_values()

    def _values_at(self, **overrides) -> dict:
        return compute_values(self._kind, {**self.state(), **overrides}, self.spec)

    def _sweep(self, n_range: tuple[int, int]) -> tuple[list[float], list[dict]]:
        """The figures' x axis: N on a log grid over n_range, and the widget's values at each N."""
        ns = _log_grid(*n_range)
        return ns, [self._values_at(N=round(n)) for n in ns]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.state().items())
        return f"{type(self).__name__}({args})"


def _check_divides(obj, small: str, big: str, value_small: int, value_big: int, trait: str):
    if value_small and value_big % value_small != 0:
        raise traitlets.TraitError(
            f"{trait}: {small} ({value_small}) must divide {big} ({value_big}) "
            f"in {type(obj).__name__}"
        )


class MemoryLedgerWidget(_LedgerWidget):
    """Chapter 5: the activation-memory ledger of one attention layer, with sliders.

    ``MemoryLedgerWidget(N=4096, d=3072, H=24, dtype="bf16", dropout=True, saved="teaching")``

    Sliders for N (log scale), d and H (H always divides d), a dtype menu, a dropout checkbox,
    and a menu between the teaching ledger and the ledger as autograd saves it (``saved``,
    with the dropout mask's bytes in the dtype, as on CPU, or 1 byte, as on CUDA: ``mask``).
    It shows the itemized ledger of :func:`attn_core.ledger.activation_ledger` as a stacked
    bar against the fused side, the total, the eager/fused ratio, and the total against N
    with the crossover of :func:`attn_core.ledger.memory_crossover` marked (2d/H for the
    teaching ledger with dropout, 5d/H as autograd saves it without dropout).

    Traits (synced): ``N``, ``d``, ``H``, ``dtype``, ``dropout``, ``saved``, ``mask``, ``B``
    (1, no slider).
    ``values`` (read-only): ``item.<name>`` for each ledger item, ``linear_bytes``,
    ``quadratic_bytes``, ``total_bytes``, ``fused_bytes``, ``eager_over_fused``,
    ``quadratic_share``, ``n_star``. ``figure()`` draws the same figure with matplotlib.
    In Colab, run ``from google.colab import output; output.enable_custom_widget_manager()`` once
    if the widget does not appear.
    """

    _kind = "memory"
    _inputs = ("B", "N", "d", "H", "dtype", "dropout", "saved", "mask")

    B = traitlets.Int(1, min=1).tag(sync=True)
    N = traitlets.Int(4096, min=1).tag(sync=True)
    d = traitlets.Int(3072, min=1).tag(sync=True)
    H = traitlets.Int(24, min=1).tag(sync=True)
    dtype = traitlets.Enum(list(ledger.DTYPE_BYTES), default_value="bf16").tag(sync=True)
    dropout = traitlets.Bool(True).tag(sync=True)
    saved = traitlets.Enum(list(formulas.SWITCHES["saved"]), default_value="teaching").tag(sync=True)
    mask = traitlets.Enum(list(formulas.SWITCHES["mask"]), default_value="dtype").tag(sync=True)

    def __init__(self, N: int = 4096, d: int = 3072, H: int = 24, dtype: str = "bf16",
                 dropout: bool = True, saved: str = "teaching", mask: str = "dtype", **kwargs):
        super().__init__(N=N, d=d, H=H, dtype=dtype, dropout=dropout, saved=saved, mask=mask, **kwargs)

    @traitlets.validate("H")
    def _valid_H(self, proposal):
        _check_divides(self, "H", "d", proposal["value"], self.d, "H")
        return proposal["value"]

    @traitlets.validate("d")
    def _valid_d(self, proposal):
        _check_divides(self, "H", "d", self.H, proposal["value"], "d")
        return proposal["value"]

    def figure(self, n_range: tuple[int, int] = (64, 131072)):
        """The widget's figure with matplotlib: the stacked ledger at N, and totals against N."""
        import matplotlib.pyplot as plt

        spec = self.spec
        v = self.values
        items = spec["widgets"]["memory"]["items"]
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1, 1.6]})
        unit, scale = _byte_unit(max(v["total_bytes"], 1))
        bottom_e = bottom_f = 0.0
        for name, _, label, part in items:
            val = v[f"item.{name}"] / scale
            color = _ITEM_COLORS[name]
            ax1.bar(0, val, bottom=bottom_e, color=color, label=label if val else None, width=0.6)
            bottom_e += val
            if part == "linear":
                ax1.bar(1, val, bottom=bottom_f, color=color, width=0.6)
                bottom_f += val
        ax1.set_xticks([0, 1], ["eager", "fused"])
        ax1.set_ylabel(f"activation memory ({unit})")
        ax1.set_title(f"one layer at N = {fmt_tokens(self.N)}: {fmt_bytes(v['total_bytes'])} vs "
                      f"{fmt_bytes(v['fused_bytes'])}", fontsize=10)
        ax1.legend(fontsize=7, frameon=False, loc="upper right")
        ns, pts = self._sweep(n_range)
        eager = [p["total_bytes"] for p in pts]
        fused = [p["fused_bytes"] for p in pts]
        ax2.loglog(ns, eager, color="#d1495b", label="eager (" + (
            "as autograd saves it" if self.saved == "autograd" else "teaching ledger") + ")")
        ax2.loglog(ns, fused, color="#2e86ab", label="fused (FlashAttention)")
        _mark(ax2, v["n_star"], f"N* = {v['n_star']:g}", "#6c757d")
        _mark(ax2, self.N, f"N = {fmt_tokens(self.N)}", "#111111", dotted=True)
        _tokens_axis(ax2)
        _bytes_axis(ax2)
        ax2.set_ylabel("activation memory, one layer (bytes, log scale)")
        ax2.set_title(f"d = {self.d}, H = {self.H}, {self.dtype}, B = {self.B}", fontsize=10)
        ax2.legend(fontsize=8, frameon=False)
        ax2.grid(True, which="major", alpha=0.3)
        fig.tight_layout()
        return fig


class FlopsWidget(_LedgerWidget):
    """Chapter 6: linear against quadratic FLOPs of one layer, with sliders.

    ``FlopsWidget(d=3072, H=24, ffn="mlp", causal=False)`` (and ``N=4096``, the marked length)

    Sliders for d and H, the FFN kind (``"mlp"``: two matrices, ``"swiglu"``: three, both of
    width ``ffn_mult * d``) and causal (a kernel that skips the masked half). It shows the
    quadratic share of the forward FLOPs against N with the crossovers N* of
    :func:`attn_core.flops.flops_crossover` marked (6d with the 4d MLP, 2d for the attention
    block alone), and the linear and quadratic FLOPs of :func:`attn_core.flops.layer_flops` at N.
    H does not change the FLOPs (H N^2 D = N^2 d); it sets the head dimension D = d/H.

    Traits (synced): ``d``, ``H``, ``ffn``, ``causal``, ``N``, ``ffn_mult`` (4, no slider).
    ``values`` (read-only): ``linear_flops``, ``quadratic_flops``, ``total_flops``,
    ``quadratic_share``, ``n_star``, ``linear_flops_attention``, ``total_flops_attention``,
    ``quadratic_share_attention``, ``n_star_attention``, ``d_head``. ``figure()`` draws the same
    figure with matplotlib. In Colab, run
    ``from google.colab import output; output.enable_custom_widget_manager()`` once if the widget
    does not appear.
    """

    _kind = "flops"
    _inputs = ("N", "d", "H", "ffn", "causal", "ffn_mult")

    N = traitlets.Int(4096, min=1).tag(sync=True)
    d = traitlets.Int(3072, min=1).tag(sync=True)
    H = traitlets.Int(24, min=1).tag(sync=True)
    ffn = traitlets.Enum(list(flops.FFN_MATRICES), default_value="mlp").tag(sync=True)
    causal = traitlets.Bool(False).tag(sync=True)
    ffn_mult = traitlets.Float(4.0).tag(sync=True)

    def __init__(self, d: int = 3072, H: int = 24, ffn: str = "mlp", causal: bool = False,
                 N: int = 4096, **kwargs):
        super().__init__(d=d, H=H, ffn=ffn, causal=causal, N=N, **kwargs)

    @traitlets.validate("H")
    def _valid_H(self, proposal):
        _check_divides(self, "H", "d", proposal["value"], self.d, "H")
        return proposal["value"]

    @traitlets.validate("d")
    def _valid_d(self, proposal):
        _check_divides(self, "H", "d", self.H, proposal["value"], "d")
        return proposal["value"]

    @traitlets.validate("ffn_mult")
    def _valid_ffn_mult(self, proposal):
        x = proposal["value"]
        if not (math.isfinite(x) and x > 0):
            raise traitlets.TraitError(f"ffn_mult must be a positive number, got {x!r}")
        return x

    def figure(self, n_range: tuple[int, int] = (256, 1048576)):
        """The widget's figure with matplotlib: FLOPs and the quadratic share against N."""
        import matplotlib.pyplot as plt

        v = self.values
        ns, pts = self._sweep(n_range)
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
        ax1.loglog(ns, [p["linear_flops"] for p in pts], color="#2e86ab",
                   label=f"linear: projections + {self.ffn} FFN")
        ax1.loglog(ns, [p["quadratic_flops"] for p in pts], color="#d1495b",
                   label="quadratic: QK^T and PV" + (" (causal)" if self.causal else ""))
        _mark(ax1, v["n_star"], f"N* = {v['n_star']:,.0f}", "#d1495b")
        _mark(ax1, self.N, f"N = {fmt_tokens(self.N)}", "#111111", dotted=True)
        _tokens_axis(ax1)
        ax1.set_ylabel("forward FLOPs, one layer (log scale)")
        ax1.set_title(f"d = {self.d}: {fmt_flops(v['linear_flops'])} linear, "
                      f"{fmt_flops(v['quadratic_flops'])} quadratic at N = {fmt_tokens(self.N)}",
                      fontsize=10)
        ax1.legend(fontsize=8, frameon=False)
        ax1.grid(True, which="major", alpha=0.3)
        ax2.semilogx(ns, [100 * p["quadratic_share"] for p in pts], color="#d1495b",
                     label="whole layer (with FFN)")
        ax2.semilogx(ns, [100 * p["quadratic_share_attention"] for p in pts], color="#f4a259",
                     linestyle="--", label="attention block alone")
        _mark(ax2, v["n_star"], f"N* = {v['n_star']:,.0f}", "#d1495b")
        _mark(ax2, v["n_star_attention"], f"N* = {v['n_star_attention']:,.0f}", "#f4a259", y=0.12)
        _share_axis(ax2)
        ax2.set_title(f"ffn = {self.ffn}, causal = {self.causal}, H = {self.H} (D = {v['d_head']:g})",
                      fontsize=10)
        ax2.legend(fontsize=8, frameon=False, loc="upper left")
        ax2.grid(True, which="major", alpha=0.3)
        fig.tight_layout()
        return fig


_ARCH = ("d", "H", "H_kv", "L", "D", "D_v", "rope_dim", "q_lora", "F", "ffn", "window", "kv_latent")


class Explorer(_LedgerWidget):
    """Chapter 7: every crossover of one model at N tokens, with sliders and presets.

    ``Explorer(model=DEFAULT_MODEL)`` (and any trait as a keyword, e.g. ``N=131072``)

    A preset menu (:data:`attn_core.kv_cache.MODELS`, or ``"custom"``) sets d, H, H_kv, L, the
    head dims D and D_v, MLA's RoPE part, query rank and latent, the FFN (kind and width F) and
    the sliding window; sliders then move N (log scale, 256 to 1M), d, H, H_kv, L, and menus the
    dtype, causal, dropout and the ledger (teaching, or as autograd saves it). Moving an
    architecture slider turns the model into ``"custom"`` (keeping the preset's FFN, window and
    MLA fields); moving d or H sets D = D_v = d / H. It shows:

    * the FLOPs crossover of the model as built (:func:`attn_core.flops.model_flops_crossover`:
      GQA's smaller K and V projections, MLA's low-rank ones, the real head dims) and the
      memory crossover of its activation ledger (with the same head dims),
    * the activation memory per layer and for L layers, eager against fused,
    * the KV cache per sequence (:meth:`attn_core.kv_cache.ModelConfig.kv_bytes`), and the fixed
      state of linear attention with the same L, H, D (:func:`attn_core.kv_cache.linear_state_bytes`),
    * a button "measure on this machine" that times causal softmax attention (torch SDPA) against
      chunked linear attention in the running kernel (:meth:`measure_time_crossover`); in a
      static page it says that it needs a running kernel.

    Traits (synced): ``model``, ``N``, ``d``, ``H``, ``H_kv``, ``L``, ``D``, ``D_v``,
    ``rope_dim``, ``q_lora``, ``F``, ``ffn``, ``window``, ``kv_latent``, ``dtype``, ``causal``,
    ``dropout``, ``saved``, ``mask``, ``B`` (1), ``measured``,
    ``measure_status``. ``values`` (read-only): ``linear_flops``, ``quadratic_flops``,
    ``total_flops``, ``quadratic_share``, ``n_star_flops``, ``n_star_flops_attention``,
    ``act_layer_eager``, ``act_layer_fused``, ``act_eager``, ``act_fused`` (times L),
    ``eager_over_fused``, ``n_star_memory``, ``kv_bytes_per_token``, ``kv_cache_bytes``,
    ``linear_state_bytes``, ``kv_over_state``, ``n_star_kv_state`` (the N at which the KV cache
    outgrows the linear state, ignoring the window). ``figure()`` draws the same figure with
    matplotlib. In Colab, run ``from google.colab import output; output.enable_custom_widget_manager()``
    once if the widget does not appear.
    """

    _kind = "explorer"
    _inputs = ("B", "N", "d", "H", "H_kv", "L", "D", "D_v", "rope_dim", "q_lora", "F", "ffn", "window",
               "kv_latent", "dtype", "causal", "dropout", "saved", "mask")

    model = traitlets.Enum([*kv_cache.MODELS, "custom"], default_value=DEFAULT_MODEL).tag(sync=True)
    B = traitlets.Int(1, min=1).tag(sync=True)
    N = traitlets.Int(4096, min=1).tag(sync=True)
    d = traitlets.Int(3072, min=1).tag(sync=True)
    H = traitlets.Int(24, min=1).tag(sync=True)
    H_kv = traitlets.Int(24, min=1).tag(sync=True)
    L = traitlets.Int(32, min=1).tag(sync=True)
    D = traitlets.Int(128, min=1).tag(sync=True)
    D_v = traitlets.Int(128, min=1).tag(sync=True)
    rope_dim = traitlets.Int(0, min=0).tag(sync=True)
    q_lora = traitlets.Int(0, min=0).tag(sync=True)
    F = traitlets.Int(12288, min=1).tag(sync=True)
    ffn = traitlets.Enum(list(flops.FFN_MATRICES), default_value="mlp").tag(sync=True)
    window = traitlets.Int(0, min=0).tag(sync=True)
    kv_latent = traitlets.Int(0, min=0).tag(sync=True)
    dtype = traitlets.Enum(list(ledger.DTYPE_BYTES), default_value="bf16").tag(sync=True)
    causal = traitlets.Bool(False).tag(sync=True)
    dropout = traitlets.Bool(True).tag(sync=True)
    saved = traitlets.Enum(list(formulas.SWITCHES["saved"]), default_value="teaching").tag(sync=True)
    mask = traitlets.Enum(list(formulas.SWITCHES["mask"]), default_value="dtype").tag(sync=True)
    measured = traitlets.Dict().tag(sync=True)
    measure_status = traitlets.Unicode("").tag(sync=True)

    def __init__(self, model: str = DEFAULT_MODEL, **kwargs):
        if model in kv_cache.MODELS:
            preset = model_traits(kv_cache.MODELS[model])
            if "D" not in kwargs and ("d" in kwargs or "H" in kwargs):
                kwargs["D"] = kwargs.get("d", preset["d"]) // kwargs.get("H", preset["H"])
                kwargs.setdefault("D_v", kwargs["D"])
            kwargs = {**preset, **kwargs}
        self._applying = True
        super().__init__(model=model, **kwargs)
        self._applying = False
        self._mark_custom()
        self.on_msg(self._on_msg)

    @traitlets.validate("H")
    def _valid_H(self, proposal):
        _check_divides(self, "H", "d", proposal["value"], self.d, "H")
        _check_divides(self, "H_kv", "H", self.H_kv, proposal["value"], "H")
        return proposal["value"]

    @traitlets.validate("d")
    def _valid_d(self, proposal):
        _check_divides(self, "H", "d", self.H, proposal["value"], "d")
        return proposal["value"]

    @traitlets.validate("H_kv")
    def _valid_H_kv(self, proposal):
        _check_divides(self, "H_kv", "H", proposal["value"], self.H, "H_kv")
        return proposal["value"]

    @traitlets.observe("model")
    def _on_model(self, change) -> None:
        if self._applying or change["new"] not in kv_cache.MODELS:
            return
        self._applying = True
        try:
            with self.hold_trait_notifications():
                for name, value in model_traits(kv_cache.MODELS[change["new"]]).items():
                    setattr(self, name, value)
        finally:
            self._applying = False
        self._update_values()

    def _mark_custom(self) -> None:
        preset = kv_cache.MODELS.get(self.model)
        if preset is not None and any(getattr(self, k) != v for k, v in model_traits(preset).items()):
            self.model = "custom"

    def _on_input(self, change) -> None:
        if not self._applying and change["name"] in _ARCH:
            if change["name"] in ("d", "H"):
                preset = kv_cache.MODELS.get(self.model)
                keeps = preset is not None and (self.d, self.H) == (preset.d_model, preset.num_heads)
                self.D = preset.d_head if keeps else self.d // self.H
                self.D_v = (preset.d_v or preset.d_head) if keeps else self.D
            self._mark_custom()
        self._update_values()

    # -------------------------------------------------------------- measuring on this machine
    def _on_msg(self, widget, content, buffers) -> None:
        if isinstance(content, dict) and content.get("type") == "measure":
            self.measure_status = "running"
            try:
                self.measure_time_crossover()
                self.measure_status = "done"
            except Exception as err:  # report on the page rather than lose it in the kernel log
                self.measure_status = f"error: {err}"

    def measure_time_crossover(self, ns: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192),
                               heads: int = 2, chunk: int = 64, repeats: int = 3,
                               budget_s: float = 30.0) -> dict:
        """Time causal softmax attention against chunked linear attention at each N; find the crossover.

        Softmax: ``torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)``;
        linear: :func:`attn_core.linear.causal_linear_attention_chunked` with ``chunk``. Both on
        q, k, v of shape (1, heads, N, D) in float32 with this model's D, median of ``repeats``
        (:func:`attn_core.measure.time_fn`). Stops early after ``budget_s`` seconds.

        Returns (and stores in ``measured``) ``{"N": [...], "softmax_s": [...], "linear_s":
        [...], "crossover_N": float or None, "D", "heads", "chunk"}``: crossover_N is the N from
        which softmax is slower at every larger measured N, interpolated on log N between the two
        measurements around it; ``ns[0]`` if softmax is always slower, None if never.
        """
        import torch
        import torch.nn.functional as F

        from .linear import causal_linear_attention_chunked
        from .measure import time_fn

        gen = torch.Generator().manual_seed(0)
        done_n, t_soft, t_lin = [], [], []
        t0 = time.perf_counter()
        for n in ns:
            q, k, v = (torch.randn(1, heads, n, self.D, generator=gen) for _ in range(3))  # (B, H, N, D)
            t_soft.append(time_fn(F.scaled_dot_product_attention, q, k, v, is_causal=True,
                                  repeats=repeats))
            t_lin.append(time_fn(causal_linear_attention_chunked, q, k, v, chunk, repeats=repeats))
            done_n.append(n)
            if time.perf_counter() - t0 > budget_s:
                break
        result = {"N": done_n, "softmax_s": t_soft, "linear_s": t_lin,
                  "crossover_N": time_crossover(done_n, t_soft, t_lin),
                  "D": self.D, "heads": heads, "chunk": chunk}
        self.measured = result
        return result

    def figure(self, n_range: tuple[int, int] = (256, 1048576)):
        """The widget's figure with matplotlib: memory of one sequence, and FLOPs share, against N."""
        import matplotlib.pyplot as plt

        v = self.values
        ns, pts = self._sweep(n_range)
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.4))
        ax1.loglog(ns, [p["act_eager"] for p in pts], color="#d1495b",
                   label=f"activations x {self.L} layers, eager")
        ax1.loglog(ns, [p["act_fused"] for p in pts], color="#2e86ab",
                   label=f"activations x {self.L} layers, fused")
        ax1.loglog(ns, [p["kv_cache_bytes"] for p in pts], color="#6a4c93", label="KV cache")
        ax1.loglog(ns, [p["linear_state_bytes"] for p in pts], color="#3a7d44", linestyle="--",
                   label="linear-attention state")
        _mark(ax1, v["n_star_memory"], f"N* = {v['n_star_memory']:,.0f}", "#d1495b")
        _mark(ax1, self.N, f"N = {fmt_tokens(self.N)}", "#111111", dotted=True, y=0.12)
        _tokens_axis(ax1)
        _bytes_axis(ax1)
        ax1.set_ylabel("bytes per sequence (log scale)")
        ax1.set_title(f"{self.model}: memory ({self.dtype})", fontsize=10)
        ax1.legend(fontsize=7, frameon=False, loc="upper left")
        ax1.grid(True, which="major", alpha=0.3)
        ax2.semilogx(ns, [100 * p["quadratic_share"] for p in pts], color="#d1495b",
                     label="quadratic share of layer FLOPs")
        _mark(ax2, v["n_star_flops"], f"N* = {v['n_star_flops']:,.0f}", "#d1495b")
        _mark(ax2, self.N, f"N = {fmt_tokens(self.N)}", "#111111", dotted=True, y=0.12)
        _share_axis(ax2)
        ax2.set_title(f"{self.model}: FLOPs ({self.ffn} FFN, F = {self.F}"
                      + (", causal)" if self.causal else ")"), fontsize=10)
        ax2.legend(fontsize=8, frameon=False, loc="upper left")
        ax2.grid(True, which="major", alpha=0.3)
        fig.tight_layout()
        return fig


def time_crossover(ns: list[int], t_softmax: list[float], t_linear: list[float]):
    """The N from which softmax is slower at every larger measured N (log-interpolated).

    ns[0] if softmax is slower everywhere, None if it is never slower at the largest N.
    """
    if not ns or t_softmax[-1] <= t_linear[-1]:
        return None
    i = len(ns) - 1
    while i > 0 and t_softmax[i - 1] > t_linear[i - 1]:
        i -= 1
    if i == 0:
        return float(ns[0])
    r0 = math.log(t_softmax[i - 1] / t_linear[i - 1])  # <= 0
    r1 = math.log(t_softmax[i] / t_linear[i])  # > 0
    a, b = math.log(ns[i - 1]), math.log(ns[i])
    return float(math.exp(a + (b - a) * (-r0) / (r1 - r0)))


# ------------------------------------------------------------------------- matplotlib helpers
_ITEM_COLORS = {"X": "#1b4965", "Q": "#2e86ab", "K": "#5fa8d3", "V": "#89c2d9", "ctx": "#62b6cb",
                "O": "#a9d6e5", "S": "#d1495b", "P": "#edae49", "dropout": "#f4a259",
                "P_drop": "#b5838d", "mask": "#6d597a"}


def _byte_unit(x: float) -> tuple[str, int]:
    for unit, scale in _BINARY_UNITS:
        if x >= scale:
            return unit, scale
    return "bytes", 1


def _bytes_axis(ax) -> None:
    """Ticks at powers of 1024 (KiB, MiB, GiB, TiB, PiB) on a log bytes axis."""
    import matplotlib.ticker as mticker

    ax.yaxis.set_major_locator(mticker.LogLocator(base=1024, numticks=12))
    ax.yaxis.set_minor_locator(mticker.NullLocator())
    ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda y, _: fmt_bytes(y).replace(".00", "")))


def _tokens_axis(ax) -> None:
    """Log base-2 N axis labelled 256, 1K, 4K, ... (every factor of 4), with its title."""
    import matplotlib.ticker as mticker

    ax.set_xlabel("sequence length N (tokens, log scale)")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(mticker.LogLocator(base=4, numticks=12))
    ax.xaxis.set_minor_locator(mticker.NullLocator())
    ax.xaxis.set_major_formatter(mticker.FuncFormatter(lambda x, _: fmt_tokens(x)))


def _share_axis(ax) -> None:
    """Axes of a quadratic-share panel: N on a log axis, 0..100 %, the 50 % line where N* sits."""
    ax.axhline(50, color="grey", linewidth=0.8, linestyle=":")
    _tokens_axis(ax)
    ax.set_ylim(0, 100)
    ax.set_ylabel("quadratic share of forward FLOPs (%)")


def _mark(ax, x, label, color, dotted=False, y=0.92) -> None:
    if x is None:
        return
    ax.axvline(x, color=color, linestyle=":" if dotted else "--", linewidth=1)
    ax.text(x * 1.08, y, label, color=color, fontsize=8, transform=ax.get_xaxis_transform())
