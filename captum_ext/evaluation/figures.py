#!/usr/bin/env python3
r"""The benchmark's figures, drawn from a task's rows and plain data: each
metric against cost with its front, the per-level curves of a metric, a
method's per-layer heatmap and an image task's patch scores on its images.
Each is drawn on a :class:`matplotlib.figure.Figure` (no pyplot, no backend
switch), so importing
this module changes no global state and figures are drawn headless; each PNG
is written atomically, under the names of
:mod:`captum_ext.evaluation.result_views`. This module does not import
:mod:`captum_ext.evaluation.results`: a result imports it when a notebook
shows it."""

import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from captum.attr import visualization as captum_visualization
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from matplotlib.transforms import Bbox
from torch import Tensor

from captum_ext.evaluation._utils.atomic import atomic_path
from captum_ext.evaluation.frontier import (
    budget_front,
    control_value,
    flagged_points,
    frontier_metrics,
    frontier_points,
)
from captum_ext.evaluation.result_rows import MethodResult, TaskRows
from captum_ext.visualization import display_texts, normalize, patch_pixels, word_groups

__all__ = [
    "curve_figure",
    "curve_rows",
    "frontier_drawing",
    "frontier_figure",
    "layer_figure",
    "patch_figure",
]

_MARKERS = ("o", "s", "^", "D", "v", "P", "*")  # 7 is coprime with 10 colours
_LINESTYLES = {"captum_ext": "-", "captum": "--", "baseline": "-."}
# Joins a word's pieces on the heatmap axis: "hopeless·", "·ly".
PIECE_JOINER = "·"


def _styles(rows: Sequence[MethodResult]) -> List[Dict[str, Any]]:
    r"""One (colour, marker, line style) per row, all pairs distinct: strong
    tab10 colours with 7 markers (70 combinations); the control is black and
    dotted so it never looks like a method."""
    colours = colormaps["tab10"]
    styles: List[Dict[str, Any]] = []
    index = 0
    for row in rows:
        if row.family == "control":
            styles.append({"color": "black", "marker": "x", "linestyle": ":"})
            continue
        styles.append(
            {
                "color": colours(index % colours.N),
                "marker": _MARKERS[index % len(_MARKERS)],
                "linestyle": _LINESTYLES.get(row.family, "-"),
            }
        )
        index += 1
    return styles


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    with atomic_path(path) as temporary:
        fig.savefig(temporary, dpi=110, format="png")


def curve_rows(rows: Sequence[MethodResult], metric: str) -> List[MethodResult]:
    r"""The rows with a per-level curve of ``metric`` holding a number (none:
    no figure; a method with no signal on every example has none)."""
    return [
        row
        for row in rows
        if metric in row.curves and any(map(math.isfinite, row.curves[metric][1]))
    ]


def curve_figure(
    task: str,
    rows: Sequence[MethodResult],
    metric: str,
    axes: Tuple[str, str],
    path: Path,
) -> None:
    r"""The per-level curves of ``metric`` of ``rows`` (:func:`curve_rows`,
    not empty), one line per method; ``axes`` are the (y, x) labels."""
    fig = Figure(figsize=(8, 4.2))
    ax = fig.add_subplot()
    for row, style in zip(rows, _styles(rows)):
        grid, values = row.curves[metric]
        ax.plot(grid, values, label=row.method, markersize=5, **style)
    y_label, x_label = axes
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(f"{metric}: per-level values, {task} (n={rows[0].n})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    _save(fig, path)


def _ticks(tokens: List[str], specials: List[bool]) -> List[str]:
    r"""Each token's text; the pieces of a word of several carry
    :data:`PIECE_JOINER` on the sides where they join (the word grouping of
    the highlights)."""
    texts = display_texts(tokens, specials)
    for group in word_groups(tokens, specials):
        if len(group) > 1:
            for index in group[1:]:
                texts[index] = PIECE_JOINER + texts[index]
            for index in group[:-1]:
                texts[index] += PIECE_JOINER
    # "$" would start matplotlib mathtext.
    return [text.replace("$", r"\$") for text in texts]


def layer_figure(
    tokens: List[str], scores: Any, specials: List[bool], title: str, path: Path
) -> None:
    r"""Heatmap of ``scores`` ``[layers, tokens]``, each layer scaled by its own
    largest magnitude over the real tokens (as the highlights are), so every
    layer's pattern is visible; special tokens' columns are grey. Green
    supports the class, pink speaks against it, as in the highlights."""
    special = torch.tensor(specials, dtype=torch.bool)
    rows = torch.stack([normalize(layer, specials) for layer in scores])
    matrix = rows.masked_fill(special, math.nan).numpy()  # [layers, tokens]
    fig = Figure(figsize=(max(5.0, 0.35 * len(tokens) + 1.5), 3.8))
    ax = fig.add_subplot()
    colours = colormaps["PiYG"].with_extremes(bad="#dddddd")
    image = ax.imshow(matrix, cmap=colours, vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(range(len(tokens)), _ticks(tokens, specials), rotation=70, fontsize=7)
    ax.set_yticks(range(matrix.shape[0]))
    ax.set_ylabel("hidden_states index\n(0 = embeddings)")
    ax.set_title(title, fontsize=9)
    colorbar = fig.colorbar(image, ax=ax, fraction=0.03)
    colorbar.set_label("score / layer's peak |score|", fontsize=7)
    _save(fig, path)


def _overlap(box: Bbox, others: Sequence[Bbox]) -> float:
    r"""Area of ``box`` covered by ``others`` (pixels², overlaps counted once
    per other box)."""
    total = 0.0
    for other in others:
        inter = Bbox.intersection(box, other)
        if inter is not None:
            total += inter.width * inter.height
    return total


def _outside(box: Bbox, frame: Bbox) -> float:
    r"""Area of ``box`` outside ``frame``."""
    inside = Bbox.intersection(box, frame)
    kept = 0.0 if inside is None else inside.width * inside.height
    return box.width * box.height - kept


# Where a label may go around its point: unit directions (right/left,
# above/below, centred), tried at growing distances (points), nearest first.
_DIRECTIONS = ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1))
_DISTANCES = (2.0, 7.0, 13.0, 20.0, 30.0)
# Beyond this distance (points) a thin line joins the label to its point.
_LEADER = 8.0


def _label_offset(
    anchor: Tuple[float, float],
    size: Tuple[float, float],
    taken: List[Bbox],
    frame: Bbox,
    scale: float,
) -> Tuple[float, float, Bbox]:
    r"""The first offset (points) of a ``size`` (points) label at the display
    point ``anchor`` that neither covers ``taken`` nor leaves ``frame``; the
    least covering one where none is free. Deterministic: a fixed order of
    candidates, no randomness."""
    width, height = size
    best: Tuple[float, float, float, Bbox] = (math.inf, 0.0, 0.0, Bbox.unit())
    for distance in _DISTANCES:
        for sx, sy in _DIRECTIONS:
            dx = distance if sx > 0 else -distance - width if sx < 0 else -width / 2
            dy = distance if sy > 0 else -distance - height if sy < 0 else -height / 2
            box = Bbox.from_bounds(
                anchor[0] + dx * scale,
                anchor[1] + dy * scale,
                width * scale,
                height * scale,
            )
            cost = _overlap(box, taken) + 10 * _outside(box, frame)
            if cost < best[0]:
                best = (cost, dx, dy, box)
            if cost == 0:
                return dx, dy, box
    return best[1], best[2], best[3]


def _place_labels(
    fig: Figure, renderer: Any, ax: Any, labels: Sequence[Tuple[float, float, str]]
) -> None:
    r"""Writes each (x, y, text) label next to its point without covering
    another label, a point or the random control's line label: candidates
    around the point, nearest first (:func:`_label_offset`), in a fixed order,
    so the same table always gives the same figure. The axes' limits must be
    final."""
    scale = fig.dpi / 72.0  # pixels per point
    frame = ax.get_window_extent(renderer)
    anchors = [tuple(ax.transData.transform((x, y))) for x, y, _ in labels]
    marker = 4.0 * scale
    taken = [
        Bbox.from_bounds(px - marker, py - marker, 2 * marker, 2 * marker)
        for px, py in anchors
    ]
    taken += [t.get_window_extent(renderer) for t in ax.texts]
    for (x, y, text), anchor in zip(labels, anchors):
        probe = ax.text(0, 0, text, fontsize=6)
        extent = probe.get_window_extent(renderer)
        probe.remove()
        size = (extent.width / scale, extent.height / scale)
        dx, dy, box = _label_offset(anchor, size, taken, frame, scale)
        far = math.hypot(dx + size[0] / 2, dy + size[1] / 2) > _LEADER + max(size) / 2
        note = ax.annotate(
            text,
            (x, y),
            xytext=(dx, dy),
            textcoords="offset points",
            fontsize=6,
            ha="left",
            va="bottom",
            arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.5"} if far else None,
        )
        note.set_in_layout(False)
        taken.append(box)


def _draw_panel(
    ax: Any, table: TaskRows, metric: str, styles: Dict[str, Any]
) -> List[Tuple[float, float, str]]:
    r"""One metric's points (flagged timings hollow), the random control's
    value as a dotted line and the front; returns the labels to place."""
    up = table.columns[metric]
    points = frontier_points(table.rows, metric)
    flagged = flagged_points(table.rows, metric)
    for point, hollow in [(p, False) for p in points] + [(p, True) for p in flagged]:
        style = styles[point.method]
        ax.scatter(
            point.cost,
            point.value,
            facecolors="none" if hollow else style["color"],
            edgecolors=style["color"],
            marker=style["marker"],
            s=28,
            zorder=3,
        )
    floor = control_value(table.rows, metric)
    if math.isfinite(floor):
        ax.axhline(floor, color="black", linestyle=":", linewidth=1, zorder=1)
        ax.text(
            0.99,
            floor,
            "Random",
            transform=ax.get_yaxis_transform(),
            fontsize=6,
            ha="right",
            va="bottom",
        )
    front = budget_front(points, up, floor)
    costs, values = [p.cost for p in front], [p.value for p in front]
    ax.plot(costs, values, color="black", linewidth=1, zorder=2)
    # A ring marks the front's methods (visible also when the front is one).
    ax.scatter(costs, values, s=90, facecolors="none", edgecolors="black", zorder=2)
    label = {False: "{}", True: "{} (flagged)"}
    return [
        (p.cost, p.value, label[hollow].format(p.method).replace("$", r"\$"))
        for p, hollow in [(p, False) for p in points] + [(p, True) for p in flagged]
    ]


def frontier_drawing(table: TaskRows) -> Optional[Figure]:
    r"""One panel per metric of the task with a point
    (:func:`~captum_ext.evaluation.frontier.frontier_metrics`): every method at
    (time ratio, value), x on a log scale, a flagged timing as a hollow
    marker, the random control's value as a dotted line and the front
    (:func:`~captum_ext.evaluation.frontier.budget_front`) joined; labels
    placed so that none covers another. The y axis of a lower-is-better
    metric is inverted, so up and left is better in every panel. None where
    no metric has a point."""
    panels = frontier_metrics(table)
    if not panels:
        return None
    columns = min(3, len(panels))
    lines = -(-len(panels) // columns)
    fig = Figure(figsize=(4.2 * columns, 3.4 * lines))
    renderer = FigureCanvasAgg(fig).get_renderer()  # to measure the labels
    styles = dict(zip((row.method for row in table.rows), _styles(table.rows)))
    labelled = []
    for index, metric in enumerate(panels):
        ax = fig.add_subplot(lines, columns, index + 1)
        up = table.columns[metric]
        labelled.append((ax, _draw_panel(ax, table, metric, styles)))
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.margins(x=0.15, y=0.12)  # room for the labels at the edges
        if not up:
            ax.invert_yaxis()
        ax.set_xlabel("time (× one forward pass, log scale)", fontsize=8)
        ax.set_ylabel(f"{metric} ({'higher' if up else 'lower'} is better)", fontsize=8)
        ax.set_title(f"{metric}, {table.task}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.tick_params(labelsize=7)
    fig.tight_layout()  # final axes positions before measuring
    for ax, labels in labelled:
        _place_labels(fig, renderer, ax, labels)
    return fig


def frontier_figure(table: TaskRows, path: Path) -> bool:
    r""":func:`frontier_drawing` saved as a PNG at ``path``; False (and no
    file) where no metric has a point."""
    fig = frontier_drawing(table)
    if fig is None:
        return False
    _save(fig, path)
    return True


def patch_figure(
    images: Tensor,
    scores: Dict[str, Tensor],
    grid: Tuple[int, int],
    captions: Sequence[str],
    path: Path,
) -> None:
    r"""Each image ``[k, channels, height, width]`` (one row each) beside
    each method's patch scores ``[k, 1 + patches]`` laid on its pixels
    (:func:`~captum_ext.visualization.patch_pixels`) and blended over it by
    Captum's ``visualize_image_attr`` (green supports the class, red speaks
    against it, each panel scaled by its own largest magnitude)."""
    rows, cols = len(images), 1 + len(scores)
    fig = Figure(figsize=(1.9 * cols, 2.0 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for row, image in enumerate(images):
        low, high = image.min(), image.max()
        shown = ((image - low) / (high - low + 1e-12)).permute(1, 2, 0).numpy()
        axes[row, 0].imshow(shown.mean(2), cmap="gray")
        axes[row, 0].set_title(captions[row], fontsize=8)
        axes[row, 0].axis("off")
        for col, (name, values) in enumerate(scores.items(), start=1):
            heat = patch_pixels(values[row : row + 1], grid, tuple(image.shape[1:]))
            captum_visualization.visualize_image_attr(
                heat[0].numpy(),
                shown,
                method="blended_heat_map",
                sign="all",
                plt_fig_axis=(fig, axes[row, col]),
                alpha_overlay=0.5,
                title=name,
                use_pyplot=False,
            )
            axes[row, col].title.set_fontsize(8)
    _save(fig, path)
