"""matplotlib helpers for :meth:`attn_core.widgets.Explorer.figure`: byte and token axes, marks."""

from __future__ import annotations

from ..display import fmt_bytes, fmt_tokens


def _bytes_axis(ax) -> None:
    """Ticks at powers of 1024 (KiB, MiB, GiB, TiB, PiB) on a log bytes axis."""
    import matplotlib.ticker as mticker

    ax.yaxis.set_major_locator(mticker.LogLocator(base=1024, numticks=12))
    ax.yaxis.set_minor_locator(mticker.NullLocator())
    ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda y, _: fmt_bytes(y).replace(".00", "")))


def _tokens_axis(ax) -> None:
    """Log base-2 N axis labelled 256, 1K, 4K, ... (every factor of 4), with its title."""
    import matplotlib.ticker as mticker

    ax.set_xlabel("sequence length N (tokens, log scale)")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(mticker.LogLocator(base=4, numticks=12))
    ax.xaxis.set_minor_locator(mticker.NullLocator())
    ax.xaxis.set_major_formatter(mticker.FuncFormatter(lambda x, _: fmt_tokens(x)))


def _share_axis(ax) -> None:
    """Axes of a quadratic-share panel: N on a log axis, 0..100 %, the 50 % line where N* sits."""
    ax.axhline(50, color="grey", linewidth=0.8, linestyle=":")
    _tokens_axis(ax)
    ax.set_ylim(0, 100)
    ax.set_ylabel("quadratic share of forward FLOPs (%)")


def _mark(ax, x, label, color, dotted=False, y=0.92) -> None:
    if x is None:
        return
    ax.axvline(x, color=color, linestyle=":" if dotted else "--", linewidth=1)
    ax.text(x * 1.08, y, label, color=color, fontsize=8, transform=ax.get_xaxis_transform())
