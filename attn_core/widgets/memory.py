"""Chapter 5's widget: the activation ledger of one attention layer."""

from __future__ import annotations

import traitlets

from .. import ledger
from ..symbols import SWITCHES
from ._base import _HeadsDivideWidth, _LedgerWidget
from ._plot import _ITEM_COLORS, _byte_unit, _bytes_axis, _mark, _tokens_axis
from ._spec import fmt_bytes, fmt_tokens


class MemoryLedgerWidget(_HeadsDivideWidth, _LedgerWidget):
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
    saved = traitlets.Enum(list(SWITCHES["saved"]), default_value="teaching").tag(sync=True)
    mask = traitlets.Enum(list(SWITCHES["mask"]), default_value="dtype").tag(sync=True)

    def __init__(self, N: int = 4096, d: int = 3072, H: int = 24, dtype: str = "bf16",
                 dropout: bool = True, saved: str = "teaching", mask: str = "dtype", **kwargs):
        super().__init__(N=N, d=d, H=H, dtype=dtype, dropout=dropout, saved=saved, mask=mask, **kwargs)

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
