"""The report's length x depth heatmaps, for suites whose task ids name both (`-L4096-d0.50-`).

A cell is the mean over the tasks at that length and depth of each task's mean score of the
suite's primary metric (accuracy for the `longctx-*` suites), as the suite's own mean is over
all its tasks. Private suites hash their task ids, so they get no heatmap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

from tempering.data.longctx import id_depth, id_length
from tempering.evals.results import SuiteResult


@dataclass(frozen=True)
class LengthDepthGrid:
    """Means (NaN where no task) and task counts, rows by length and columns by depth, both ascending."""

    lengths: list[int]
    depths: list[float]
    means: np.ndarray  # (len(lengths), len(depths))
    counts: np.ndarray  # (len(lengths), len(depths)), int


def length_depth_grid(suite: SuiteResult) -> LengthDepthGrid | None:
    """`suite`'s primary metric by length x depth; None when no task id names a length and a depth."""
    cells: dict[tuple[int, float], list[float]] = {}
    for task, scores in suite.task_scores.items():
        length, depth = id_length(task), id_depth(task)
        if length is not None and depth is not None:
            cells.setdefault((length, depth), []).append(float(np.mean(scores)))
    if not cells:
        return None
    lengths, depths = sorted({n for n, _ in cells}), sorted({d for _, d in cells})
    means = np.full((len(lengths), len(depths)), np.nan)
    counts = np.zeros((len(lengths), len(depths)), dtype=int)
    for (length, depth), values in cells.items():
        row, col = lengths.index(length), depths.index(depth)
        means[row, col], counts[row, col] = np.mean(values), len(values)
    return LengthDepthGrid(lengths, depths, means, counts)


def length_depth_figure(suite: SuiteResult, base: SuiteResult | None) -> Figure | None:
    """A heatmap of `suite` by length x depth, next to the base's when the base has one (one colour
    scale for both); None when `suite`'s task ids name no length and depth."""
    grid = length_depth_grid(suite)
    if grid is None:
        return None
    base_grid = length_depth_grid(base) if base is not None else None
    panels = [(f"base {base.model_id}", base_grid)] if base is not None and base_grid is not None else []
    panels.append((suite.model_id, grid))
    values = np.concatenate([g.means.ravel() for _, g in panels])
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    if low >= 0.0 and high <= 1.0:  # scores: the full 0..1 scale, so colours mean the same in every report
        low, high = 0.0, 1.0
    width = 0.75 * len(grid.depths) + 1.6
    fig = Figure(figsize=(width * len(panels) + 0.8, 0.45 * len(grid.lengths) + 1.8), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    images = [
        _panel(ax, g, f"{suite.suite}: {suite.primary_metric}\n{model}", low, high)
        for ax, (model, g) in zip(axes, panels)
    ]
    fig.colorbar(images[-1], ax=list(axes), shrink=0.8)
    return fig


def _panel(ax: Axes, grid: LengthDepthGrid, title: str, low: float, high: float) -> AxesImage:
    """One heatmap: each cell's mean and task count written on it (empty cells say so)."""
    image = ax.imshow(grid.means, cmap="Blues", aspect="auto", vmin=low, vmax=high)
    for row in range(len(grid.lengths)):
        for col in range(len(grid.depths)):
            value, n = grid.means[row, col], grid.counts[row, col]
            dark = n > 0 and value > low + 0.6 * (high - low)  # white text on the darker blues
            text = "–" if n == 0 else f"{value:.2f}\nn={n}"
            ax.text(col, row, text, ha="center", va="center", fontsize=7, color="white" if dark else "#1d232b")
    ax.set_xticks(range(len(grid.depths)), [f"{d:.2f}" for d in grid.depths], fontsize=8)
    ax.set_yticks(range(len(grid.lengths)), [str(n) for n in grid.lengths], fontsize=8)
    ax.set_xlabel("depth", fontsize=8)
    ax.set_ylabel("length (tokens)", fontsize=8)
    ax.set_title(title, fontsize=9)
    return image
