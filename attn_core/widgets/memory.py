"""Chapter 5's widget: the activation ledger of one attention layer."""

from __future__ import annotations

import traitlets

from .. import ledger
from ..symbols import SWITCHES
from ._base import _HeadsDivideWidth, _LedgerWidget, esm


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
    _esm = esm("memory")
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
