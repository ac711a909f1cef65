"""Chapter 6's widget: linear against quadratic FLOPs of one layer, for a preset or any shape."""

from __future__ import annotations

import traitlets

from .. import flops, kv_cache
from ._base import _HeadsDivideWidth, _LedgerWidget, esm

#: the presets the widget offers: models with per-head K and V and D = d / H (not MLA)
FLOPS_MODELS = {name: m for name, m in kv_cache.MODELS.items() if not m.is_mla}
DEFAULT_FLOPS_MODEL = "3.6B worked example (d=3072, H=24)"
_ARCH = ("d", "H", "H_kv", "F", "ffn")


def flops_traits(model: kv_cache.ModelConfig) -> dict:
    """The FLOPs widget's traits a preset sets."""
    return {"d": model.d_model, "H": model.num_heads, "H_kv": model.num_kv_heads, "F": model.ffn_dim,
            "ffn": model.ffn}


class FlopsWidget(_HeadsDivideWidth, _LedgerWidget):
    """Chapter 6: linear against quadratic FLOPs of one layer, with sliders and presets.

    ``FlopsWidget(model="3.6B worked example (d=3072, H=24)", causal=False)`` (and ``N=4096``, the
    marked length, or any architecture trait)

    A preset menu (the models of :data:`attn_core.kv_cache.MODELS` with per-head keys and values,
    or ``"custom"``) sets d, H, H_kv, the FFN's width F and kind (``"mlp"``: two matrices,
    ``"swiglu"``: three); sliders move them, and causal halves the quadratic work (a kernel that
    skips the masked half). Moving an architecture slider turns the model into ``"custom"``. It
    shows the quadratic share of the forward FLOPs against N with the crossovers N* marked (whole
    layer, and the attention block alone), and the linear and quadratic FLOPs at N, counted as the
    model is built (:func:`attn_core.flops.model_layer_flops`: GQA's smaller K and V projections).
    H does not change the quadratic FLOPs (H N^2 D = N^2 d); with H_kv < H the K and V projections
    shrink, so N* comes earlier than 6d.

    Traits (synced): ``model``, ``d``, ``H``, ``H_kv``, ``F``, ``ffn``, ``causal``, ``N``.
    ``values`` (read-only): ``linear_flops``, ``quadratic_flops``, ``total_flops``,
    ``quadratic_share``, ``n_star``, ``linear_flops_attention``, ``total_flops_attention``,
    ``quadratic_share_attention``, ``n_star_attention``, ``d_head``. In Colab, run
    ``from google.colab import output; output.enable_custom_widget_manager()`` once if the widget
    does not appear.
    """

    _kind = "flops"
    _esm = esm("flops")
    _inputs = ("N", "d", "H", "H_kv", "F", "ffn", "causal")

    model = traitlets.Enum([*FLOPS_MODELS, "custom"], default_value=DEFAULT_FLOPS_MODEL).tag(sync=True)
    N = traitlets.Int(4096, min=1).tag(sync=True)
    d = traitlets.Int(3072, min=1).tag(sync=True)
    H = traitlets.Int(24, min=1).tag(sync=True)
    H_kv = traitlets.Int(24, min=1).tag(sync=True)
    F = traitlets.Int(12288, min=1).tag(sync=True)
    ffn = traitlets.Enum(list(flops.FFN_MATRICES), default_value="mlp").tag(sync=True)
    causal = traitlets.Bool(False).tag(sync=True)

    def __init__(self, model: str = DEFAULT_FLOPS_MODEL, **kwargs):
        preset = flops_traits(FLOPS_MODELS[model]) if model in FLOPS_MODELS else {}
        if model not in FLOPS_MODELS and model != "custom":
            raise ValueError(f"model must be one of {[*FLOPS_MODELS, 'custom']}, got {model!r}")
        self._applying = True
        super().__init__(model=model, **{**preset, **kwargs})
        self._applying = False

    @classmethod
    def compute_values(cls, **traits) -> dict:
        """As :meth:`_LedgerWidget.compute_values`, with the preset's architecture for missing traits."""
        model = traits.get("model", DEFAULT_FLOPS_MODEL)
        preset = flops_traits(FLOPS_MODELS[model]) if model in FLOPS_MODELS else {}
        return super().compute_values(**{**preset, **traits})

    @traitlets.validate("H")
    def _valid_H(self, proposal):
        H = proposal["value"]
        if self.d % H or H % self.H_kv:
            raise traitlets.TraitError(
                f"H ({H}) must divide d ({self.d}) and be divisible by H_kv ({self.H_kv})")
        return H

    @traitlets.validate("H_kv")
    def _valid_H_kv(self, proposal):
        if self.H % proposal["value"]:
            raise traitlets.TraitError(f"H_kv ({proposal['value']}) must divide H ({self.H})")
        return proposal["value"]

    @traitlets.observe("model")
    def _on_model(self, change) -> None:
        if getattr(self, "_applying", True) or change["new"] == "custom":
            return
        self._applying = True
        try:
            with self.hold_trait_notifications():
                self.H_kv = 1  # any H is valid against H_kv = 1 while the preset's values arrive
                for name, value in flops_traits(FLOPS_MODELS[change["new"]]).items():
                    setattr(self, name, value)
        finally:
            self._applying = False
        self._update_values()

    @traitlets.observe(*_ARCH)
    def _to_custom(self, change) -> None:
        if getattr(self, "_applying", True) or self.model == "custom":
            return
        if change["new"] != flops_traits(FLOPS_MODELS[self.model])[change["name"]]:
            self.model = "custom"
