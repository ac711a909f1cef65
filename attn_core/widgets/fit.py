"""The training-step chapter's widget: does one rank's share of a training step fit on its accelerator?"""

from __future__ import annotations

import traitlets

from .. import kv_cache, ledger, training
from ..symbols import SWITCHES
from ._base import _LedgerWidget
from ._spec import fit_traits

#: the presets the widget offers: models whose blocks the block ledger describes (per-head K and V,
#: D = d / H, one dense FFN); DeepSeek-V2 (MLA, mixture of experts) is not one of them
FIT_MODELS = {name: m for name, m in kv_cache.MODELS.items() if not m.is_mla}
DEFAULT_FIT_MODEL = "Llama 3 8B"
_ARCH = ("params", "L", "d", "H", "H_kv", "F", "norm", "ffn")


class FitWidget(_LedgerWidget):
    """Does it fit? One rank's memory for a training step, against the accelerator's.

    ``FitWidget(model="Llama 3 8B", N=4096, B=1, precision="bf16_mixed", optimizer="adamw",
    zero_stage=1, dp_ranks=8, tp=1, sequence_parallel=False, cp=1, recompute="selective",
    attention="fused", dropout=False, mem_gib=80)``

    The rank is one of ``dp_ranks`` x ``tp`` x ``cp`` ranks. ZeRO shards the training state over
    the ``dp_ranks`` x ``cp`` ranks that hold the same weights (context-parallel ranks hold the
    whole model, as data-parallel ones do, and Megatron-Core's distributed optimizer shards over
    both). Tensor parallelism of degree ``tp`` splits every matrix and the activations of the
    rank's H/tp heads and F/tp FFN columns (``tp`` must divide H, H_kv and F, as Megatron-Core
    requires), and with ``sequence_parallel`` the norms' and residual activations along N as well;
    context parallelism of degree ``cp`` gives the rank N/cp tokens (every activation item / cp;
    with eager attention that keeps N/cp rows of each N x N item and K and V of all N tokens, where
    a ring with a fused kernel keeps none and only its own keys and values). The formulas are
    :func:`attn_core.formulas.per_rank_items` and :func:`~attn_core.formulas.per_rank_params`, the
    rule of :func:`attn_core.parallel.per_rank_activations`: the one of
    :func:`attn_core.parallel.tp_ledger`, which real TP and TP+SP ranks of a bias-free MHA block
    match byte for byte, and for CP the one of the ring's ledger (tests/test_parallel.py).
    When tp (with sequence parallelism) or cp does not divide N, the values are the average over
    the ranks (their shares differ by a token). Not modelled: pipeline parallelism.

    A preset menu (the models of :data:`attn_core.kv_cache.MODELS` whose blocks
    :func:`attn_core.ledger.block_ledger` describes) sets the parameter count
    (:meth:`~attn_core.kv_cache.ModelConfig.num_params`), L, d, H, H_kv, the FFN width F and kind
    and the norm. Sliders: N (log scale), the micro-batch B, the data-parallel ranks (log scale)
    and the accelerator's memory in GiB; menus: the TP degree (the divisors of H, H_kv and F),
    sequence parallelism, the CP degree, precision, optimizer, ZeRO stage, recomputation,
    eager or fused attention, dropout (masks of 1 byte, as on a CUDA accelerator).

    It shows a stacked bar (weights, gradients, optimizer state, activations of L blocks) against
    the memory, the activations of one block item by item, and the longest N that fits
    (``n_max``). Not counted: the embeddings' and the loss's activations, temporary buffers,
    the framework's own memory and fragmentation (chapter: "peak, not just saved").

    ``values`` (read-only): ``item.<name>`` for each item of :data:`attn_core.ledger.BLOCK_ITEMS`
    (one block), ``layer_bytes``, ``weights_bytes``, ``gradients_bytes``, ``optimizer_bytes``,
    ``activations_bytes`` (L blocks), ``total_bytes``, ``mem_bytes``, ``fits`` (1 or 0),
    ``n_max``, ``params_per_rank``, ``devices`` (dp_ranks x tp x cp); all per rank. ``figure()``
    draws the same figure with matplotlib.
    """

    _kind = "fit"
    _inputs = ("B", "N", "params", "params_replicated", "L", "d", "H", "H_kv", "F", "dp_ranks", "tp",
               "cp", "sequence_parallel", "mem_gib", "precision", "optimizer", "zero_stage", "recompute",
               "attention", "dropout", "norm", "ffn")

    model = traitlets.Enum(list(FIT_MODELS), default_value=DEFAULT_FIT_MODEL).tag(sync=True)
    N = traitlets.Int(4096, min=1).tag(sync=True)
    B = traitlets.Int(1, min=1).tag(sync=True)
    params = traitlets.Int(1, min=1).tag(sync=True)
    params_replicated = traitlets.Int(0, min=0).tag(sync=True)
    L = traitlets.Int(1, min=1).tag(sync=True)
    d = traitlets.Int(1, min=1).tag(sync=True)
    H = traitlets.Int(1, min=1).tag(sync=True)
    H_kv = traitlets.Int(1, min=1).tag(sync=True)
    F = traitlets.Int(1, min=1).tag(sync=True)
    norm = traitlets.Enum(list(ledger.NORMS), default_value="rmsnorm").tag(sync=True)
    ffn = traitlets.Enum(list(ledger.FFN_KINDS), default_value="swiglu").tag(sync=True)
    dp_ranks = traitlets.Int(8, min=1).tag(sync=True)
    tp = traitlets.Int(1, min=1).tag(sync=True)
    cp = traitlets.Int(1, min=1).tag(sync=True)
    sequence_parallel = traitlets.Bool(False).tag(sync=True)
    mem_gib = traitlets.Float(80.0, min=1.0).tag(sync=True)
    precision = traitlets.Enum(list(training.PRECISIONS), default_value="bf16_mixed").tag(sync=True)
    optimizer = traitlets.Enum(list(training.OPTIMIZERS), default_value="adamw").tag(sync=True)
    zero_stage = traitlets.Int(1, min=0, max=3).tag(sync=True)
    recompute = traitlets.Enum(list(ledger.RECOMPUTE_POLICIES), default_value="selective").tag(sync=True)
    attention = traitlets.Enum(list(SWITCHES["attention"]), default_value="fused").tag(sync=True)
    dropout = traitlets.Bool(False).tag(sync=True)

    def __init__(self, model: str = DEFAULT_FIT_MODEL, **kwargs):
        if model not in FIT_MODELS:
            raise ValueError(f"model must be one of {list(FIT_MODELS)} (DeepSeek-V2's MLA and mixture of "
                             f"experts are not a block the ledger describes), got {model!r}")
        kwargs = {**fit_traits(FIT_MODELS[model]), **kwargs}
        self._applying = True
        super().__init__(model=model, **kwargs)
        self._applying = False

    @classmethod
    def compute_values(cls, **traits) -> dict:
        """As :meth:`_LedgerWidget.compute_values`, with the preset's architecture for missing traits."""
        model = traits.get("model", DEFAULT_FIT_MODEL)
        preset = fit_traits(FIT_MODELS[model]) if model in FIT_MODELS else {}
        return super().compute_values(**{**preset, **traits})

    @traitlets.validate("H")
    def _valid_H(self, proposal):
        if self.d % proposal["value"] or proposal["value"] % self.H_kv:
            raise traitlets.TraitError(f"H ({proposal['value']}) must divide d ({self.d}) and be "
                                       f"divisible by H_kv ({self.H_kv})")
        self._check_tp(self.tp, H=proposal["value"])
        return proposal["value"]

    def _check_tp(self, tp: int, **arch) -> None:
        arch = {"H": self.H, "H_kv": self.H_kv, "F": self.F, **arch}
        bad = [f"{k} ({v})" for k, v in arch.items() if v % tp]
        if bad:
            raise traitlets.TraitError(f"tp ({tp}) must divide H, H_kv and F: it does not divide "
                                       f"{', '.join(bad)}")

    @traitlets.validate("tp")
    def _valid_tp(self, proposal):
        self._check_tp(proposal["value"])
        return proposal["value"]

    @traitlets.validate("H_kv")
    def _valid_H_kv(self, proposal):
        self._check_tp(self.tp, H_kv=proposal["value"])
        return proposal["value"]

    @traitlets.validate("F")
    def _valid_F(self, proposal):
        self._check_tp(self.tp, F=proposal["value"])
        return proposal["value"]

    @traitlets.observe("model")
    def _on_model(self, change) -> None:
        if getattr(self, "_applying", True):
            return
        preset = fit_traits(FIT_MODELS[change["new"]])
        tp = self.tp if all(preset[k] % self.tp == 0 for k in ("H", "H_kv", "F")) else 1
        with self.hold_trait_notifications():
            self.tp = 1  # the preset's H, H_kv and F are valid against tp = 1 while they arrive
            self.H_kv = 1  # any H is valid against H_kv = 1 while the preset's values arrive
            for name, value in preset.items():
                setattr(self, name, value)
            self.tp = tp  # kept when it divides the new preset's H, H_kv and F, else 1
        self._update_values()
