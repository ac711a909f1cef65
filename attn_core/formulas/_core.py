"""The machinery of the formulas: the book's symbols, the ``formula`` decorator and the helpers that
work on numbers and on SymPy expressions alike (``where``, ``eq``, ``le``, ``maximum``, ``minimum``,
``sqrt``, ``floor``), and the few tools the crossovers need."""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from fractions import Fraction

from ..symbols import ASSUMPTIONS, SYMBOLS


# --------------------------------------------------------------------- numbers or symbols
def _is_number(*xs) -> bool:
    return all(isinstance(x, (numbers.Number, bool)) for x in xs)


@functools.cache
def symbols() -> dict:
    """name -> SymPy symbol, with the assumptions of :data:`attn_core.symbols.ASSUMPTIONS`."""
    import sympy as sp

    return {name: sp.Symbol(name, **ASSUMPTIONS[name]) for name in SYMBOLS}


def formula(fn):
    """A formula whose arguments are the book's symbols: called with none, it returns SymPy expressions.

    ``layer_flops(N=4096, d=3072, ...)`` (every argument) gives numbers, ``layer_flops()`` the expressions.
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not args and not kwargs:
            sym = symbols()
            return fn(**{p: sym[p] for p in inspect.signature(fn).parameters})
        return fn(*args, **kwargs)

    return wrapper


def where(condition, if_true, if_false):
    """``if_true`` where ``condition`` holds, else ``if_false`` (a SymPy Piecewise for symbols)."""
    if isinstance(condition, bool):
        return if_true if condition else if_false
    import sympy as sp

    return sp.Piecewise((if_true, condition), (if_false, True))


def eq(a, b):
    """a == b: a bool for numbers, a SymPy Eq for expressions."""
    if _is_number(a, b):
        return a == b
    import sympy as sp

    return sp.Eq(a, b)


def le(a, b):
    """a <= b: a bool for numbers, a SymPy relation for expressions."""
    if _is_number(a, b):
        return a <= b
    import sympy as sp

    return sp.Le(a, b)


def maximum(a, b):
    """max(a, b) for numbers; SymPy's Max for expressions, unevaluated: comparing two large sums (the
    phases of a training step) costs SymPy seconds and simplifies nothing here (a substitution of
    numbers still evaluates it)."""
    if _is_number(a, b):
        return max(a, b)
    import sympy as sp

    return sp.Max(a, b, evaluate=False)


def minimum(a, b):
    """min(a, b): as :func:`maximum`."""
    if _is_number(a, b):
        return min(a, b)
    import sympy as sp

    return sp.Min(a, b, evaluate=False)


def sqrt(x):
    """The square root: a float for a number (exact roots are not needed), SymPy's for symbols."""
    if _is_number(x):
        return math.sqrt(x)
    import sympy as sp

    return sp.sqrt(x)


def floor(x):
    """The largest integer <= x: an int for a number (exact for Fractions), SymPy's floor for symbols
    (printed as Math.floor)."""
    if _is_number(x):
        return math.floor(x)
    import sympy as sp

    return sp.floor(x)


def _ratio(a, b):
    """a / b, exact for integers (a Fraction), a float for floats, an expression for symbols."""
    if isinstance(a, numbers.Integral) and isinstance(b, numbers.Integral):
        return Fraction(a, b)
    return a / b


# ----------------------------------------------------------------------- linear vs quadratic
def linear_and_quadratic(f):
    """(a_1, a_2) of a function of N that is a_1 N + a_2 N^2, from its values at N = 1 and 2."""
    f1, f2 = f(1), f(2)
    a2 = (f2 - 2 * f1) / 2 if not _is_number(f1, f2) else Fraction(f2 - 2 * f1, 2)
    return f1 - a2, a2


def quadratic_coefficients(f, n):
    """(a_0, a_1, a_2) of a function of n that is a_0 + a_1 n + a_2 n^2.

    For a number n, exactly from f(0), f(1) and f(2); for a SymPy symbol n, from f(n)'s derivatives at
    n = 0, which keep the expression's shape (expanding a step's phases in n would multiply their size).
    """
    if _is_number(n):
        f0, f1, f2 = f(0), f(1), f(2)
        a2 = _ratio(f2 - 2 * f1 + f0, 2)
        return f0, f1 - f0 - a2, a2
    import sympy as sp

    e = f(n)
    return e.subs(n, 0), sp.diff(e, n).subs(n, 0), sp.diff(e, n, 2).subs(n, 0) / 2


def positive_root(a2, a1, z):
    """The N >= 0 with a_2 N^2 + a_1 N = z (a_1, a_2 >= 0, not both 0; z >= 0):
    2 z / (a_1 + sqrt(a_1^2 + 4 a_2 z)).

    This form of the root holds at a_2 = 0 too (N = z / a_1), with no division by zero, and at z = 0
    (N = 0, the denominator kept nonzero where a_1 = 0); a negative discriminant (coefficients outside
    that range) is read as 0, so the value stays real.
    """
    return 2 * z / (a1 + sqrt(maximum(0, a1 * a1 + 4 * a2 * z)) + where(le(z, 0), 1, 0))


# ----------------------------------------------------------------------------- SymPy tools
def crossover(low, high, var=None):
    """The positive ``var`` (default N) where ``low`` (linear in var) equals ``high`` (quadratic).

    Solved by sympy.solve: an independent derivation of the crossovers the widgets compute as a_1 / a_2.
    """
    import sympy as sp

    var = symbols()["N"] if var is None else var
    roots = [r for r in sp.solve(sp.Eq(low, high), var) if r != 0]
    if len(roots) != 1:
        raise ValueError(f"expected one nonzero crossover in {var}, got {roots}")
    return sp.simplify(roots[0])


def split_in(total, var=None):
    """(linear in var, quadratic in var) parts of a SymPy sum, e.g. of a ledger's items."""
    import sympy as sp

    var = symbols()["N"] if var is None else var
    total = sp.expand(total)
    quad = sp.expand(total.coeff(var, 2) * var**2)
    return sp.expand(total - quad), quad
