#!/usr/bin/env python3
r"""The benchmark's figures, drawn from a task's rows and plain data: each
metric against cost with the Pareto front, the per-level curves of a metric,
and a method's per-layer heatmap. Each is drawn on a
:class:`matplotlib.figure.Figure` (no pyplot, no backend switch), so importing
this module changes no global state and figures are drawn headless; each PNG
is written atomically, under the names of
:mod:`captum_ext.evaluation.result_views`. This module does not import
:mod:`captum_ext.evaluation.results`: a result imports it when a notebook
shows it."""

import math
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import torch
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from captum_ext._utils.atomic import atomic_path
from captum_ext.evaluation.frontier import (
    frontier_metrics,
    frontier_points,
    pareto_front,
)
from captum_ext.evaluation.result_rows import MethodResult, TaskRows
from captum_ext.visualization import display_texts, normalize, word_groups

__all__ = ["curve_figure", "curve_rows", "frontier_figure", "layer_figure"]

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
    r"""The rows with a per-level curve of ``metric`` (none: no figure)."""
    return [row for row in rows if metric in row.curves]


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


def frontier_figure(table: TaskRows, path: Path) -> bool:
    r"""One panel per metric of the task with a point
    (:func:`~captum_ext.evaluation.frontier.frontier_metrics`): every method at
    (time ratio, value), x on a log scale, the Pareto front joined; the y axis
    of a lower-is-better metric is inverted, so up and left is better in every
    panel. False (and no file) where no metric has a point."""
    panels = frontier_metrics(table)
    if not panels:
        return False
    columns = min(3, len(panels))
    lines = -(-len(panels) // columns)
    fig = Figure(figsize=(4.2 * columns, 3.4 * lines))
    styles = dict(zip((row.method for row in table.rows), _styles(table.rows)))
    for index, metric in enumerate(panels):
        ax = fig.add_subplot(lines, columns, index + 1)
        up = table.columns[metric]
        points = frontier_points(table.rows, metric)
        for point in points:
            style = styles[point.method]
            ax.scatter(
                point.cost,
                point.value,
                color=style["color"],
                marker=style["marker"],
                s=28,
                zorder=3,
            )
            ax.annotate(
                point.method.replace("$", r"\$"),
                (point.cost, point.value),
                fontsize=6,
                xytext=(3, 3),
                textcoords="offset points",
            )
        front = pareto_front(points, up)
        ax.plot(
            [p.cost for p in front],
            [p.value for p in front],
            color="black",
            linewidth=1,
            zorder=2,
            label="Pareto front",
        )
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        if not up:
            ax.invert_yaxis()
        ax.set_xlabel("time (× one forward pass, log scale)", fontsize=8)
        ax.set_ylabel(f"{metric} ({'higher' if up else 'lower'} is better)", fontsize=8)
        ax.set_title(f"{metric}, {table.task}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.tick_params(labelsize=7)
    _save(fig, path)
    return True
