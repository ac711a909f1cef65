"""Slider explorers for the chapters; they evaluate the formulas of :mod:`attn_core.formulas`.

Three ``anywidget`` widgets (they work in JupyterLab and in Colab; in Colab a notebook
may first need ``from google.colab import output; output.enable_custom_widget_manager()``):

* :class:`MemoryLedgerWidget` (chapter 5): the activation ledger of one attention layer,
  item by item (the teaching model or as autograd saves it), eager against fused, and the
  memory crossover.
* :class:`FlopsWidget` (chapter 6): linear against quadratic FLOPs of one layer, the
  quadratic share against N, and the crossovers N* = 6d (with the FFN) and 2d (without).
* :class:`FitWidget` (the training step): does a training step of a preset, or of any model whose
  config.json is pasted into the page, fit on its accelerators (every term of
  :func:`attn_core.training.training_memory`, whose options are its traits), and if not, which single
  change, cheapest first, makes it fit?
* :class:`Explorer` (chapter 7): one model (presets of real ones from
  :data:`attn_core.kv_cache.MODELS`) at N tokens: both crossovers, activations per layer
  and for L layers, the KV cache, the state of linear attention, serving (the weights held once
  + the KV caches of B users, and the users that fit in an accelerator's memory), and a time
  crossover measured on the reader's machine.

The package has one module per widget (``memory``, ``flops_widget``, ``explorer``, ``fit``) beside
what they share (``_spec``: the spec and the exact evaluation; ``_base``; ``_plot``).

**One formula, evaluated twice.** Nothing is computed from formulas typed again in
JavaScript. Every value a widget shows comes from :func:`attn_core.formulas.widget_values`, which
calls the library's one definition of each formula: Python calls it with exact Fractions, and
``make formulas`` calls it with SymPy symbols and prints the
result, with SymPy's JavaScript printer, into ``static/formulas.js``, which the page loads with
the widgets' module (and ``static/hf_config.js``, the page's reader of a config.json, which applies
the rules of ``static/hf_families.json`` as :meth:`attn_core.models.ModelConfig.from_hf_config`
does). :func:`formula_spec` only says which symbol each slider and menu sets. The tests check
that the generated file is current and (with Node.js) that the page's numbers equal
Python's over a grid of inputs.

The front end draws its own controls and an inline SVG figure (no CDN, no build step) and
writes every number it shows into the page as ``<span data-key="total_bytes"
data-value="...">``. On the Python side every widget keeps the same numbers in its read-only
``values`` dict, recomputed by a traitlets observer (no torch, well under a millisecond).
``figure()`` draws the widget's figure with matplotlib, so a static page is never empty.
"""

from __future__ import annotations

from ..symbols import SYMBOLS
from ._spec import (
    DEFAULT_MODEL,
    SPEC_FORMAT,
    build_env,
    compute_values,
    fmt_bytes,
    fmt_flops,
    fmt_tokens,
    formula_spec,
    model_traits,
)
from .answer import AnswerBox
from .explorer import Explorer, time_crossover
from .fit import FitWidget
from .flops_widget import FlopsWidget
from .memory import MemoryLedgerWidget

__all__ = [
    "SPEC_FORMAT",
    "SYMBOLS",
    "MemoryLedgerWidget",
    "FlopsWidget",
    "Explorer",
    "FitWidget",
    "AnswerBox",
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
