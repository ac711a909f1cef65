"""The training-step chapter's widget: does a training step fit on its accelerators, and if not, what is
the cheapest change that makes it fit?"""

from __future__ import annotations

import traitlets

from .. import models, training
from ..symbols import SWITCHES
from ._base import _LedgerWidget, _MemoryTraits, esm
from ._spec import FIT_MODELS, PASTED, fit_model

DEFAULT_FIT_MODEL = "Llama 3 8B"
#: the names the widget's traits had before it followed training_memory's options
_RENAMED = {"zero_stage": "zero", "dp_ranks": "dp"}


#: training_memory's options the widget has as traits of the same name (its device is CUDA's)
OPTIONS = tuple(name for name in training.TRAINING_OPTIONS if name != "device")


def _option_trait(name: str):
    menu, default = training.TRAINING_OPTIONS[name]
    if isinstance(default, bool):
        return traitlets.Bool(default).tag(sync=True)
    return traitlets.Enum(list(SWITCHES[menu]), default_value=default).tag(sync=True)


#: one trait per option of training_memory (precision, optimizer, ..., with its default): a new option
#: there is a trait here, a menu on the page, a symbol in the formula
_OptionTraits = type("_OptionTraits", (traitlets.HasTraits,), {name: _option_trait(name) for name in OPTIONS})


def _renamed(traits: dict) -> dict:
    """Traits under their old names (zero_stage, dp_ranks, mem_gib) under the new ones."""
    out = {_RENAMED.get(k, k): v for k, v in traits.items()}
    if "mem_gib" in out:
        out.setdefault("mem", out.pop("mem_gib"))
        out.setdefault("mem_unit", "GiB")
    return out


class FitWidget(_MemoryTraits, _LedgerWidget, _OptionTraits):
    """Does it fit? The busiest rank's memory over a training step, against the accelerator's.

    ``FitWidget(model="Llama 3 8B", N=4096, B=1, accelerator="A100 80GB", dp=8, zero=1, ...)``,
    ``FitWidget(mem=80, mem_unit="GB", ...)`` or ``FitWidget(config=...)`` for any model a ``config.json``
    describes (a dict, a path, or a ``transformers`` config; the families
    :meth:`attn_core.models.ModelConfig.from_hf_config` reads).

    Every number is :func:`attn_core.training.training_memory`'s, through its formula
    (:func:`attn_core.formulas.step.step_items`; the parameters :func:`attn_core.formulas.model_params`):
    the traits are its keywords. ``B``, ``N``; one GPU's memory: ``accelerator``, a GPU of the menu
    (:data:`attn_core.symbols.ACCELERATORS`, default "H100 80GB HBM3") whose total as nvidia-smi reports it
    sets ``mem`` in ``mem_unit`` "MiB", or "" for a memory typed in "GB" (10^9 bytes), "GiB" or "MiB" (a
    ``mem`` given alone is in GB, as before the menu); ``allowance``, the percent of the memory held back
    for the allocator's cache (10: the step fits when its peak is at most ``usable_bytes``, the rest; 0
    compares the peak with the whole memory); ``dp`` data-parallel ranks, ZeRO stage
    ``zero`` (over the dp x cp ranks), ``tp`` (it must divide the heads and key/value heads),
    ``sequence_parallel``, ``cp`` (values are the ranks' average where it does not divide N), ``pp``
    (it must divide the layers); ``precision``, ``optimizer``, ``optimizer_impl``,
    ``optimizer_in_backward``, ``recompute``, ``offload``, ``attention``, ``kernels``, ``loss``,
    ``finetune`` with ``lora_rank``, ``lora_modules`` and ``quantize``, ``dropout`` (the options of
    training_memory; its device, "cuda"). LoRA on a mixture of experts adapts its attention only.
    The old names ``zero_stage``, ``dp_ranks`` and ``mem_gib`` are accepted by the constructor and by
    :meth:`compute_values`.

    The page draws the items as a stacked bar against the memory, says in words whether it fits,
    searches the cheapest single change that makes it fit (each evaluated by the same formula; the
    search is the page's, static/ledger_widgets.js, tested in Node.js) and gives the longest N that fits.

    ``values`` (read-only, all per rank, bytes): ``weights_bytes``, ``gradients_bytes``,
    ``optimizer_bytes``, ``activations_bytes``, ``logits_bytes``, ``buffers_bytes`` (the items at the
    peak, as training_memory gives them, exact), ``total_bytes`` (the peak), ``phase.<name>`` (each
    phase's total), ``peak_phase`` (the index in :data:`attn_core.formulas.PHASES` of the first phase
    at the peak), ``mem_bytes``, ``usable_bytes`` (the memory less the allowance), ``spare_bytes``
    (usable - peak), ``fits`` (1 or 0: the peak is at most the usable memory), ``state_bytes``
    (the peak with no token: the training state and its buffers), ``n_max`` (the longest N that fits,
    real-valued; 0 when the state alone does not), ``params``, ``params_per_rank`` (the busiest rank's,
    sharded under ZeRO-3), ``devices`` (dp x tp x cp x pp).
    """

    _kind = "fit"
    _esm = esm("fit", "hf_config.js")  # its formulas, the page's reader of a config.json, the views
    _inputs = ("model", "config", "N", "B", "mem", "mem_unit", "allowance", "dp", "zero", "tp", "cp", "pp",
               "lora_rank", "lora_modules", "quantize", *OPTIONS)

    model = traitlets.Unicode(DEFAULT_FIT_MODEL, help=f"a preset, or {PASTED!r}: the config").tag(sync=True)
    config = traitlets.Dict(help="a pasted config.json (parsed); empty: the preset").tag(sync=True)
    N = traitlets.Int(4096, min=1).tag(sync=True)
    B = traitlets.Int(1, min=1).tag(sync=True)
    dp = traitlets.Int(8, min=1).tag(sync=True)
    zero = traitlets.Int(1, min=0, max=3).tag(sync=True)
    tp = traitlets.Int(1, min=1).tag(sync=True)
    cp = traitlets.Int(1, min=1).tag(sync=True)
    pp = traitlets.Int(1, min=1).tag(sync=True)
    lora_rank = traitlets.Int(16, min=1).tag(sync=True)
    lora_modules = traitlets.List(traitlets.Unicode(),
                                  default_value=list(training.LORA_MODULES)).tag(sync=True)
    quantize = traitlets.Enum(list(SWITCHES["quantize"]), default_value="adapted").tag(sync=True)

    def __init__(self, model: str | None = None, config=None, **kwargs):
        kwargs = self._given(kwargs)
        if config is not None and not isinstance(config, dict):
            config = models._config_dict(config)  # a path or a transformers config
        if config:
            kwargs.update(config=config, model=PASTED)
        elif model is not None:
            kwargs["model"] = model
        super().__init__(**kwargs)
        self.observe(self._on_model, names=["model", "config"])

    @classmethod
    def _given(cls, traits: dict) -> dict:
        """The old trait names read as the new ones; the memory traits made consistent."""
        return super()._given(_renamed(traits))

    @classmethod
    def compute_values(cls, **traits) -> dict:
        """As :meth:`_LedgerWidget.compute_values`; the old trait names are read too."""
        traits = _renamed(traits)
        if traits.get("config"):
            traits.setdefault("model", PASTED)
        return super().compute_values(**traits)

    def fit_model(self) -> models.ModelConfig:
        """The model the widget counts: the pasted config's, or the preset's."""
        return fit_model(self.model, self.config)

    # ------------------------------------------------------------------ checks
    @traitlets.validate("model")
    def _valid_model(self, proposal):
        name = proposal["value"]
        if name not in FIT_MODELS and name != PASTED:
            raise traitlets.TraitError(f"model must be one of {list(FIT_MODELS)} or {PASTED!r} (with a "
                                       f"config), got {name!r}")
        if name == PASTED and not self.config:
            raise traitlets.TraitError(f"model {PASTED!r} needs a config (a parsed config.json)")
        return name

    @traitlets.validate("config")
    def _valid_config(self, proposal):
        if proposal["value"]:
            try:
                models.ModelConfig.from_hf_config(proposal["value"])
            except ValueError as e:
                raise traitlets.TraitError(f"config: {e}") from e
        return proposal["value"]

    @traitlets.validate("lora_modules")
    def _valid_modules(self, proposal):
        modules = list(proposal["value"])
        bad = [m for m in modules if m not in training.LORA_MODULES]
        if bad or not modules or len(set(modules)) != len(modules):
            raise traitlets.TraitError(f"lora_modules must be a non-empty subset of "
                                       f"{list(training.LORA_MODULES)}, got {modules!r}")
        return modules

    def _degrees_fit(self, tp: int, pp: int, model=None) -> str | None:
        m = model or self.fit_model()
        if m.num_heads % tp or m.num_kv_heads % tp:
            return f"tp ({tp}) must divide the heads ({m.num_heads}) and key/value heads ({m.num_kv_heads})"
        if m.num_layers % pp:
            return f"pp ({pp}) must divide the layers ({m.num_layers})"
        return None

    @traitlets.validate("tp")
    def _valid_tp(self, proposal):
        error = self._degrees_fit(proposal["value"], self.pp)
        if error:
            raise traitlets.TraitError(error)
        return proposal["value"]

    @traitlets.validate("pp")
    def _valid_pp(self, proposal):
        error = self._degrees_fit(self.tp, proposal["value"])
        if error:
            raise traitlets.TraitError(error)
        return proposal["value"]

    def _on_model(self, change) -> None:
        # a preset clears a pasted config; tp and pp stay where they divide the new model, else 1
        if change["name"] == "model" and change["new"] != PASTED and self.config:
            self.config = {}
            return
        m = self.fit_model()
        with self.hold_trait_notifications():
            if self._degrees_fit(self.tp, 1, m):
                self.tp = 1
            if self._degrees_fit(1, self.pp, m):
                self.pp = 1
