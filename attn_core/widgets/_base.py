"""The machinery every ledger widget shares: the spec trait, the ``values`` observer, the front end."""

from __future__ import annotations

import copy

import anywidget
import traitlets

from ..symbols import ACCELERATORS, SWITCHES
from ._spec import (
    _STATIC,
    MEMORY_DEFAULTS,
    _log_grid,
    accelerator_of,
    compute_values,
    memory_traits,
    widget_spec,
)

#: the files of the widgets' ES modules, in order (the "does it fit" widget's adds the page's reader of
#: a config.json, static/hf_config.js, before the views: the other widgets' saved states stay without it)
ESM_FILES = ("formulas.js", "ledger_widgets.js")


def _formulas_of(kind: str) -> str:
    """Of static/formulas.js, the header and the one generated function a widget of ``kind`` runs, and
    the ``GENERATED`` table the views read (each view computes only its own kind)."""
    text = (_STATIC / ESM_FILES[0]).read_text()
    start = text.index(f"function {kind}Values(env) {{")
    end = text.index("\n}\n", start) + 3
    return (text[:text.index("\nfunction ") + 1] + text[start:end]
            + f"\nconst GENERATED = {{ {kind}: {kind}Values }};\n")


def _views() -> str:
    """static/ledger_widgets.js without its comment lines and indentation: every widget's saved state in
    a notebook holds its module, so the copy it carries is kept small (the file keeps both; it has no
    string that spans lines, which tests/test_widgets.py checks)."""
    text = (_STATIC / ESM_FILES[1]).read_text()
    return "\n".join(line.lstrip() for line in text.split("\n") if not line.lstrip().startswith("//"))


def esm(kind: str, *files: str) -> str:
    """The ES module of a widget of ``kind``: its generated formulas, ``files``, then the views."""
    return "\n".join([_formulas_of(kind), *((_STATIC / f).read_text() for f in files), _views()])


class _LedgerWidget(anywidget.AnyWidget):
    """Shared machinery: the spec trait, the ``values`` observer, the front end."""

    # each widget class sets _esm = esm(its kind): the formulas SymPy printed for it, then the views
    _esm = ""
    _css = _STATIC / "ledger_widgets.css"
    _kind = ""
    _inputs: tuple[str, ...] = ()

    kind = traitlets.Unicode("", read_only=True).tag(sync=True)
    spec = traitlets.Dict(read_only=True).tag(sync=True)
    values = traitlets.Dict(read_only=True, help="the numbers shown, computed in Python from spec")

    def __init__(self, **kwargs):
        super().__init__(**self._given(kwargs))
        self.set_trait("kind", self._kind)
        self.set_trait("spec", copy.deepcopy(widget_spec(self._kind)))
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
        traits = cls._given(traits)
        defaults = cls.class_traits()
        state = {name: traits[name] if name in traits else defaults[name].default() for name in cls._inputs}
        return compute_values(cls._kind, state)

    @classmethod
    def _given(cls, traits: dict) -> dict:
        """The traits given to the constructor or to :meth:`compute_values`, as the widget reads them."""
        return traits

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


class _HeadsDivideWidth(traitlets.HasTraits):
    """Validators for widgets with traits d and H: H must divide d.

    To change both at once, set them inside ``hold_trait_notifications()``.
    """

    @traitlets.validate("H")
    def _valid_H(self, proposal):
        _check_divides(self, "H", "d", proposal["value"], self.d, "H")
        return proposal["value"]

    @traitlets.validate("d")
    def _valid_d(self, proposal):
        _check_divides(self, "H", "d", self.H, proposal["value"], "d")
        return proposal["value"]


class _MemoryTraits(traitlets.HasTraits):
    """One accelerator's memory and the allowance for the allocator (the Explorer, the "does it fit" widget).

    ``accelerator``: a GPU of :data:`attn_core.symbols.ACCELERATORS`, whose memory as nvidia-smi reports it
    (MiB) sets ``mem`` and ``mem_unit``, or "" for a memory typed as ``mem`` in ``mem_unit`` ("GB", 10^9
    bytes; "GiB"; "MiB", as nvidia-smi writes it). A ``mem`` given without ``mem_unit`` is in GB, and a
    ``mem_unit`` without ``mem`` reads 80, as before the menu. ``allowance``: the percent of the memory held
    back for the allocator's cache (0 to below 100; 10 by default): a step or a server fits when it needs
    at most the rest, ``usable_bytes``.
    """

    accelerator = traitlets.Enum(["", *ACCELERATORS], default_value=MEMORY_DEFAULTS["accelerator"],
                                 help="a GPU of the menu, or '' (the memory typed)").tag(sync=True)
    mem = traitlets.Float(MEMORY_DEFAULTS["mem"], help="one accelerator's memory, in mem_unit").tag(sync=True)
    mem_unit = traitlets.Enum(list(SWITCHES["mem_unit"]),
                              default_value=MEMORY_DEFAULTS["mem_unit"]).tag(sync=True)
    allowance = traitlets.Float(MEMORY_DEFAULTS["allowance"],
                                help="percent of the memory held back for the allocator's cache"
                                ).tag(sync=True)

    @classmethod
    def _given(cls, traits: dict) -> dict:
        return memory_traits(super()._given(traits))

    @traitlets.validate("mem")
    def _valid_mem(self, proposal):
        if not proposal["value"] > 0:
            raise traitlets.TraitError(f"mem must be > 0, got {proposal['value']}")
        return proposal["value"]

    @traitlets.validate("allowance")
    def _valid_allowance(self, proposal):
        if not 0 <= proposal["value"] < 100:
            raise traitlets.TraitError(f"allowance must be a percent from 0 to below 100, "
                                       f"got {proposal['value']}")
        return proposal["value"]

    @traitlets.observe("accelerator")
    def _on_accelerator(self, change) -> None:
        name = change["new"]
        if name and accelerator_of(self.mem, self.mem_unit) != name:
            with self.hold_trait_notifications():
                self.mem, self.mem_unit = float(ACCELERATORS[name]), "MiB"

    @traitlets.observe("mem", "mem_unit")
    def _on_memory(self, change) -> None:
        # a memory typed (or a unit chosen) names the GPU whose memory it is, if any (as the page does)
        name = accelerator_of(self.mem, self.mem_unit)
        if name != self.accelerator:
            self.accelerator = name
