"""Chapter 6's widget: linear against quadratic FLOPs of one layer."""

from __future__ import annotations

import math

import traitlets

from .. import flops
from ._base import _HeadsDivideWidth, _LedgerWidget


class FlopsWidget(_HeadsDivideWidth, _LedgerWidget):
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

    @traitlets.validate("ffn_mult")
    def _valid_ffn_mult(self, proposal):
        x = proposal["value"]
        if not (math.isfinite(x) and x > 0):
            raise traitlets.TraitError(f"ffn_mult must be a positive number, got {x!r}")
        return x
