"""Chapter 7's widget: every crossover of one model at N tokens, and a time crossover measured here."""

from __future__ import annotations

import math
import time

import traitlets

from .. import flops, kv_cache, ledger
from ..display import COLORS
from ..symbols import SWITCHES
from ._base import _check_divides, _LedgerWidget, _MemoryTraits, esm
from ._plot import _bytes_axis, _mark, _share_axis, _tokens_axis
from ._spec import DEFAULT_MODEL, fmt_tokens, model_traits, serving_defaults

_ARCH = ("d", "H", "H_kv", "L", "D", "D_v", "rope_dim", "q_lora", "F", "ffn", "window", "kv_latent")


class Explorer(_MemoryTraits, _LedgerWidget):
    """Chapter 7: every crossover of one model at N tokens, with sliders and presets.

    ``Explorer(model=DEFAULT_MODEL)`` (and any trait as a keyword, e.g. ``N=131072``)

    A preset menu (:data:`attn_core.kv_cache.MODELS`, or ``"custom"``) sets d, H, H_kv, L, the
    head dims D and D_v, MLA's RoPE part, query rank and latent, the FFN (kind and width F) and
    the sliding window; sliders then move N (log scale, 256 to 1M: powers of two and 1.5 times them),
    d, H, H_kv, L and the users B, and menus the dtype, causal, dropout and the ledger (teaching, or as
    autograd saves it); a box takes the accelerator's memory. Moving an
    architecture slider turns the model into ``"custom"`` (keeping the preset's FFN, window and
    MLA fields); moving d or H sets D = D_v = d / H, and moving d keeps the ratio F / d. It shows:

    * the FLOPs crossover of the model as built (:func:`attn_core.flops.model_flops_crossover`:
      GQA's smaller K and V projections, MLA's low-rank ones, the real head dims) and the
      memory crossover of its activation ledger (with the same head dims),
    * the activation memory per layer and for L layers, eager against fused,
    * the KV cache per sequence (:meth:`attn_core.kv_cache.ModelConfig.kv_bytes`), and the fixed
      state of linear attention with the same L, H_kv, D (one state per key/value head,
      :func:`attn_core.kv_cache.linear_state_bytes`),
    * serving: the weights held once (:func:`attn_core.formulas.model_params` of the sliders' shape
      with the vocabulary, norms, biases and experts of the preset ``base``, the last one chosen; at
      the dtype's bytes), the KV caches of ``B`` users (sequences) at N, their total, and how many
      users fit in one accelerator (``accelerator``, a GPU of the menu, or ``mem`` ``mem_unit``; less the
      ``allowance`` for the allocator, 10% by default: :class:`attn_core.widgets.FitWidget` says how), as
      :func:`attn_core.inference.serving_memory` counts them. A model without a vocabulary (the
      3.6B worked example, a teaching construction on image patches) has weights in its blocks only;
    * a button "measure on this machine" that times causal softmax attention (torch SDPA) against
      chunked linear attention in the running kernel (:meth:`measure_time_crossover`); in a
      static page it says that it needs a running kernel.

    Traits (synced): ``model``, ``base`` (the preset whose vocabulary, norms, biases and experts the
    weights count: the model when it is a preset, the last preset chosen when it is "custom"), ``N``,
    ``d``, ``H``, ``H_kv``, ``L``, ``D``, ``D_v``, ``rope_dim``, ``q_lora``, ``F``, ``ffn``, ``window``,
    ``kv_latent``, ``dtype``, ``causal``, ``dropout``, ``saved``, ``mask``, ``B`` (1: sequences, the
    users served), ``accelerator`` ("H100 80GB HBM3"), ``mem`` (81559) and ``mem_unit`` ("MiB"), ``allowance``
    (10, percent), ``measured``, ``measure_status``.
    ``values`` (read-only): ``linear_flops``, ``quadratic_flops``,
    ``total_flops``, ``quadratic_share``, ``n_star_flops``, ``n_star_flops_attention``,
    ``act_layer_eager``, ``act_layer_fused``, ``act_eager``, ``act_fused`` (times L),
    ``eager_over_fused``, ``n_star_memory``, ``kv_bytes_per_token``, ``kv_cache_bytes`` (the B
    sequences'), ``linear_state_bytes``, ``kv_over_state``, ``n_star_kv_state`` (the N at which the
    KV cache outgrows the linear state, ignoring the window), ``params``, ``weights_bytes``,
    ``kv_bytes_per_user``, ``serving_bytes`` (weights + KV caches), ``mem_bytes``, ``usable_bytes`` (less the
    allowance), ``serving_fits`` and ``weights_fit`` (1 or 0, against the usable memory), ``users_max`` (the
    most users whose caches fit beside the weights in the usable memory, 0 if
    the weights alone do not). ``figure()`` draws the same figure with
    matplotlib. In Colab, run ``from google.colab import output; output.enable_custom_widget_manager()``
    once if the widget does not appear.
    """

    _kind = "explorer"
    _esm = esm("explorer")
    _inputs = ("B", "N", "d", "H", "H_kv", "L", "D", "D_v", "rope_dim", "q_lora", "F", "ffn", "window",
               "kv_latent", "dtype", "causal", "dropout", "saved", "mask", "base", "mem", "mem_unit",
               "allowance")

    model = traitlets.Enum([*kv_cache.MODELS, "custom"], default_value=DEFAULT_MODEL).tag(sync=True)
    base = traitlets.Enum(list(kv_cache.MODELS), default_value=DEFAULT_MODEL,
                          help="the preset whose vocabulary, norms, biases and experts the weights count"
                          ).tag(sync=True)
    B = traitlets.Int(1, min=1, help="sequences at once: the users served").tag(sync=True)
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
    saved = traitlets.Enum(list(SWITCHES["saved"]), default_value="teaching").tag(sync=True)
    mask = traitlets.Enum(list(SWITCHES["mask"]), default_value="dtype").tag(sync=True)
    measured = traitlets.Dict().tag(sync=True)
    measure_status = traitlets.Unicode("").tag(sync=True)

    def __init__(self, model: str = DEFAULT_MODEL, **kwargs):
        if model in kv_cache.MODELS:
            preset = model_traits(kv_cache.MODELS[model])
            if "D" not in kwargs and ("d" in kwargs or "H" in kwargs):
                kwargs["D"] = kwargs.get("d", preset["d"]) // kwargs.get("H", preset["H"])
                kwargs.setdefault("D_v", kwargs["D"])
            kwargs = {**preset, **kwargs}
            kwargs.setdefault("base", model)
        self._applying = True
        super().__init__(model=model, **kwargs)
        self._applying = False
        self._mark_custom()
        self.on_msg(self._on_msg)

    @classmethod
    def compute_values(cls, **traits) -> dict:
        """As :meth:`_LedgerWidget.compute_values`; without ``base``, the weights are the ``model``'s when it
        is a preset (a state saved before the serving readouts)."""
        return super().compute_values(**{**traits, **serving_defaults(traits)})

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
                self.base = change["new"]
        finally:
            self._applying = False
        self._update_values()

    def _mark_custom(self) -> None:
        preset = kv_cache.MODELS.get(self.model)
        if preset is not None and (self.base != self.model
                                   or any(getattr(self, k) != v for k, v in model_traits(preset).items())):
            self.model = "custom"

    def _on_input(self, change) -> None:
        if not self._applying and change["name"] == "base":
            self._mark_custom()
        if not self._applying and change["name"] in _ARCH:
            if change["name"] in ("d", "H"):
                preset = kv_cache.MODELS.get(self.model)
                keeps = preset is not None and (self.d, self.H) == (preset.d_model, preset.num_heads)
                self.D = preset.d_head if keeps else self.d // self.H
                self.D_v = (preset.d_v or preset.d_head) if keeps else self.D
            if change["name"] == "d":  # keep the FFN's width ratio F / d, as the page does
                self.F = max(1, math.floor(self.F / change["old"] * change["new"] + 0.5))
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

        from ..linear import causal_linear_attention_chunked
        from ..measure import time_fn

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
        ax1.loglog(ns, [p["act_eager"] for p in pts], color=COLORS["eager"],
                   label=f"activations x {self.L} layers, eager")
        ax1.loglog(ns, [p["act_fused"] for p in pts], color=COLORS["fused"],
                   label=f"activations x {self.L} layers, fused")
        ax1.loglog(ns, [p["kv_cache_bytes"] for p in pts], color=COLORS["kv"], label="KV cache")
        ax1.loglog(ns, [p["linear_state_bytes"] for p in pts], color=COLORS["state"], linestyle="--",
                   label="linear-attention state")
        _mark(ax1, v["n_star_memory"], rf"$N^\star_{{\mathrm{{mem}}}}$ = {v['n_star_memory']:,.0f}",
              COLORS["eager"])
        _mark(ax1, self.N, f"N = {fmt_tokens(self.N)}", COLORS["now"], dotted=True, y=0.12)
        _tokens_axis(ax1)
        _bytes_axis(ax1)
        ax1.set_ylabel("bytes per sequence (log scale)")
        ledger_name = "as autograd saves it" if self.saved == "autograd" else "teaching ledger"
        ax1.set_title(f"{self.model}: memory ({self.dtype}, {ledger_name})", fontsize=10)
        ax1.legend(fontsize=7, frameon=False, loc="upper left")
        ax1.grid(True, which="major", alpha=0.3)
        ax2.semilogx(ns, [100 * p["quadratic_share"] for p in pts], color=COLORS["eager"],
                     label="quadratic share of layer FLOPs")
        _mark(ax2, v["n_star_flops"], rf"$N^\star_{{\mathrm{{FLOPs}}}}$ = {v['n_star_flops']:,.0f}",
              COLORS["eager"])
        _mark(ax2, self.N, f"N = {fmt_tokens(self.N)}", COLORS["now"], dotted=True, y=0.12)
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
