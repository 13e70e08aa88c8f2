"""What every figure shares: matplotlib, loaded once and quietly, and the helpers the figures of
`plots` and of the views (`fit/<view>.py`, their `figures`) draw with. Figures are built without
pyplot, so any backend, Agg included, works. matplotlib is loaded by the first figure drawn, not
on import, so the views import this module and `import eagle_probe.fit` still never loads it.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D


def load_matplotlib() -> ModuleType:
    """matplotlib, imported once without its notices on stderr. An MPLCONFIGDIR it cannot use
    (a file, a path under a file, a read-only directory) would make it fall back to a temporary
    directory with 2-4 lines about it and about the font cache it then builds: the fallback is
    made here instead, before matplotlib is imported (so it has nothing to say about its
    configuration directory), and one warning of ours says what happened and what to do (the
    command line prints it as one line). The font cache's notice is held back while it loads."""
    import logging
    import os
    import sys
    import warnings

    if "matplotlib" in sys.modules:
        return sys.modules["matplotlib"]
    chosen = os.environ.get("MPLCONFIGDIR")
    if chosen and not _usable_directory(chosen):
        os.environ["MPLCONFIGDIR"] = _temporary_config_dir()
        warnings.warn(
            f"MPLCONFIGDIR={chosen} is not a writable directory, so matplotlib used a temporary "
            "one (its font cache rebuilt each run); point MPLCONFIGDIR at a writable directory, "
            "or unset it",
            UserWarning,
            stacklevel=2,
        )
    logger = logging.getLogger("matplotlib")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        import matplotlib
        import matplotlib.font_manager  # noqa: F401 - reads or builds the font cache now
    finally:
        logger.setLevel(level)
    return matplotlib


def _usable_directory(path: str) -> bool:
    """Whether matplotlib can keep its configuration in `path`: a writable directory, made if
    missing (as matplotlib makes it)."""
    import os
    from pathlib import Path

    try:
        folder = Path(path).resolve()
        folder.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError):
        return False
    return folder.is_dir() and os.access(folder, os.W_OK)


def _temporary_config_dir() -> str:
    """A fresh directory for matplotlib's configuration and font cache, removed at exit."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="eagle-probe-matplotlib-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


DPI = 110
TEXT_BOX = {"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8}


def figure(width: float, height: float, layout: str | None = "constrained") -> Figure:
    """An empty figure, `width` × `height` inches, laid out by matplotlib (None: a fixed grid)."""
    load_matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout=layout)


def mark(**style) -> Line2D:
    """A legend entry drawn in `style` that stands for no data."""
    from matplotlib.lines import Line2D

    return Line2D([], [], **style)


def positive(values, floor: float) -> np.ndarray:
    """Values for a log axis: non-finite stays NaN (not drawn), zero and below go to `floor`."""
    v = np.asarray(values, dtype=float)
    return np.where(np.isfinite(v), np.maximum(v, floor), np.nan)


def floor(*arrays) -> float:
    """A floor one decade below the smallest positive finite value (1e-12 if there is none)."""
    v = np.concatenate([np.asarray(a, dtype=float).reshape(-1) for a in arrays])
    v = v[np.isfinite(v) & (v > 0)]
    return float(v.min()) / 10 if v.size else 1e-12


def note(ax, text: str, xy: tuple, offset: tuple, fontsize: float = 7, **kwargs) -> None:
    """`text` at `xy` (data coordinates) moved by `offset` points."""
    ax.annotate(text, xy, xytext=offset, textcoords="offset points", fontsize=fontsize, **kwargs)


def diverging(ax, W: np.ndarray, **kwargs):
    """`W` as an image in diverging colours centred at 0 (blue below, red above); returns it."""
    lim = max(float(np.nanmax(np.abs(W))) if W.size else 0.0, 1e-12)
    return ax.imshow(W, cmap="RdBu_r", vmin=-lim, vmax=lim, **kwargs)


def fraction_map(ax, values: np.ndarray, cmap: str, texts) -> Any:
    """`values` in [0, 1] as an image in `cmap`, each ((row, column), text) of `texts` written
    in its cell (white on the dark cells); returns the image."""
    im = ax.imshow(values, cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    for (i, j), text in texts:
        colour = "w" if values[i, j] > 0.6 else "k"
        ax.text(j, i, text, ha="center", va="center", fontsize=7, color=colour)
    return im


def layer_axis(ax, layers, axis: str = "x") -> None:
    """Tick the layers `layers` (0-based numbers) at positions 0, 1, … along `axis`."""
    ticks, label = (ax.set_xticks, ax.set_xlabel) if axis == "x" else (ax.set_yticks, ax.set_ylabel)
    ticks(range(len(layers)), [str(layer) for layer in layers])
    label("layer (0-based)")


def layer_colour(layer: int) -> str:
    """The colour of layer (or head) `layer` in every per-layer line plot."""
    return f"C{layer % 10}"


def handles(*axes) -> tuple[list, list[str]]:
    """The legend entries of `axes`, each label once, in order of appearance."""
    found, labels = [], []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                found.append(handle)
                labels.append(label)
    return found, labels


def family_word(ex: Any) -> str:
    """The algorithm family a figure of `ex` names: GD++ in the sample layout (von Oswald et al.'s
    family, of which GD is the γ = 0 case), EAGLE in the feature layout."""
    return "GD++" if ex.geometry.samples else "EAGLE"


def tex(name: str) -> str:
    """A family's name inside mathtext: GD++ as GD{+}{+} (a bare + is an operator there)."""
    return name.replace("+", "{+}")


def readable(x: float) -> str:
    """A number for a figure: 3 significant digits, a power of ten written out (3×10³³, not
    3e+33) where they need one."""
    if not np.isfinite(x):
        return "not finite"
    text = f"{x:.3g}"
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    power = str(int(exponent)).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{mantissa}×10{power}"


def without_minor_log_ticks(fig: Figure, decades: float = 2.0) -> Figure:
    """`fig` with no minor ticks on its log axes that span at least `decades` decades (those
    carry labelled decade ticks; the unlabelled minor ticks are most of a figure's drawing time,
    laid out twice under constrained layout). Returns `fig`."""
    from matplotlib.ticker import NullLocator

    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim), (ax.yaxis, ax.get_ylim)):
            if axis.get_scale() != "log":
                continue
            lo, hi = sorted(limits())
            if lo > 0 and np.log10(hi / lo) >= decades:
                axis.set_minor_locator(NullLocator())
    return fig
