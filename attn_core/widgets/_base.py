"""The machinery every ledger widget shares: the spec trait, the ``values`` observer, the front end."""

from __future__ import annotations

import copy

import anywidget
import traitlets

from ._spec import _STATIC, _log_grid, compute_values, widget_spec

#: the files of the widgets' one ES module, in order (the "does it fit" widget's adds the page's reader of
#: a config.json, static/hf_config.js, before the views: the other widgets' saved states stay without it)
ESM_FILES = ("formulas.js", "ledger_widgets.js")


def esm(*files: str) -> str:
    """The widgets' ES module: the generated formulas, ``files``, then the views."""
    return "\n".join((_STATIC / f).read_text() for f in (ESM_FILES[0], *files, ESM_FILES[1]))


class _LedgerWidget(anywidget.AnyWidget):
    """Shared machinery: the spec trait, the ``values`` observer, the front end."""

    # the formulas SymPy printed (static/formulas.js), then the views that use them: one module
    _esm = esm()
    _css = _STATIC / "ledger_widgets.css"
    _kind = ""
    _inputs: tuple[str, ...] = ()

    kind = traitlets.Unicode("", read_only=True).tag(sync=True)
    spec = traitlets.Dict(read_only=True).tag(sync=True)
    values = traitlets.Dict(read_only=True, help="the numbers shown, computed in Python from spec")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
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
