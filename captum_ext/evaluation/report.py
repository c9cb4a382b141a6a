#!/usr/bin/env python3
r"""Benchmark reports: a Markdown table for the terminal, PNG plots and one
self-contained HTML page (inline CSS, images embedded as base64), written next
to the result's own CSV and JSON files (:meth:`BenchmarkResult.to_csv
<captum_ext.evaluation.BenchmarkResult.to_csv>`, ``to_json``).

The page explains itself: each metric's definition and better direction, what
the time ratio measures, why class-agnostic methods show no Kendall-τ, and
captions on every figure. Plots are drawn on a :class:`matplotlib.figure.Figure`
(no pyplot, no backend switch), so importing this module changes no global
state and the report works headless.
"""

import base64
import math
import re
import tempfile
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from captum_ext._utils.atomic import atomic_path, write_text_atomically
from captum_ext.evaluation.results import BenchmarkResult, MethodResult, SUSPECT_RATIO
from captum_ext.evaluation.timing import SPREAD_BOUND, TIMING_PROTOCOL
from captum_ext.visualization import (
    display_texts,
    Explanation,
    explanation_caption,
    explanation_html,
    fit_line,
    generation_html,
    html_page,
    html_safe,
    normalize,
    notebook_html,
    terminal_safe,
    word_groups,
)

__all__ = [
    "FrontPoint",
    "frontier_points",
    "frontier_sentence",
    "markdown_table",
    "metric_definitions",
    "pareto_front",
    "plot_all",
    "result_html",
    "result_text",
    "write_html",
    "write_report",
]

TIME_COLUMN = "time (x forward)"
KENDALL = "Kendall-tau"
NOT_APPLICABLE = "n/a (class-agnostic)"
UNSCORED = "n/a"  # examples a metric cannot score (NaN), left out of means
TIMING_FLAG = "⚠"

# What each metric column measures; the better direction comes from the
# benchmark's metric registry (``BenchmarkResult.metrics``).
DEFINITIONS = {
    "AOPC": "area over the perturbation curve (comprehensiveness): the drop in "
    "the explained class's probability when the top-ranked tokens are deleted, "
    "averaged over deleting 10 %, 20 %, ..., 100 % of the real tokens.",
    "LOdds": "log-odds: log p(class | top-ranked tokens deleted) / p(class | "
    "input), averaged over the same levels; more negative means the deleted "
    "tokens mattered more.",
    KENDALL: "Kendall's τ between the token ranking for the explained class and "
    "for each other class (mean over the other classes): a class-specific "
    f"explanation ranks tokens differently per class. {NOT_APPLICABLE} for "
    "methods whose scores do not depend on the class: their τ is 1 by "
    "construction, not a measurement.",
    "Hide": "area under the accuracy curve (against the model's prediction) as "
    "the top-ranked 0 %, 10 %, ..., 100 % of the real tokens are hidden.",
    "Reveal": "area under the accuracy curve as only the top-ranked 0 %, "
    "10 %, ..., 100 % of the real tokens are revealed, the rest hidden.",
    "Sufficiency": "the drop in the explained class's probability when only "
    "the top-ranked tokens are kept, averaged over keeping 10 %, ..., 100 % "
    "of the real tokens.",
}
# The columns of a generation task (a causal LM explaining its continuation):
# every metric is the mean over each example's target tokens y_t.
GENERATION_DEFINITIONS = {
    "Evidence@1": "planted-evidence accuracy: how often the top-scored prompt "
    "token of a target token is the one prompt token known to decide it (the "
    "key-value recall task's copied value); ties count in expectation (e "
    "tokens tied with the evidence share the remaining top places, so constant "
    "scores score like a random ranking).",
    "Evidence@3": "as Evidence@1, with the evidence among the top 3 prompt tokens.",
    "AOPC": "comprehensiveness: the drop in p(y_t | prompt, y_<t) when the "
    "top-ranked prompt tokens are deleted, averaged over deleting 10 %, ..., "
    "100 % of the non-special prompt tokens (positions recomputed).",
    "Sufficiency": "the drop in p(y_t | prompt, y_<t) when only the top-ranked "
    "prompt tokens are kept, averaged over keeping 10 %, ..., 100 %.",
    "LOdds": "log p(y_t | top-ranked prompt tokens deleted) - log p(y_t | "
    "prompt), averaged over the same levels.",
    "Soft-NC": "normalised soft comprehensiveness (Zhao & Aletras 2023): each "
    "prompt token's embedding elements zeroed with probability its min-max "
    "normalised score; the drop in p(y_t), divided by the drop when the "
    "whole prompt is erased (NaN where erasing the prompt does not lower p).",
    "Soft-NS": "normalised soft sufficiency (Zhao & Aletras 2023): elements "
    "kept with probability the token's normalised score, 1 - the drop in "
    "p(y_t), normalised by the empty prompt's sufficiency.",
}
TIME_DEFINITION = (
    f"attribution time divided by one inference forward pass: {TIMING_PROTOCOL} "
    "(median over batches). Every method but the random control runs a forward "
    f"pass, so a ratio below {SUSPECT_RATIO} is impossible; such a ratio, or "
    f"repetitions more than {SPREAD_BOUND:g}x apart, is flagged {TIMING_FLAG} "
    "(disturbed timing; rerun on a quieter machine)."
)
# The y axis of each metric's per-level curve, and its x axis.
CURVE_AXES = {
    "AOPC": ("drop in p(class) at this level", "fraction of tokens deleted"),
    "LOdds": ("log p(class | deleted) / p(class)", "fraction of tokens deleted"),
    "Sufficiency": ("drop in p(class) at this level", "fraction of tokens kept"),
    "Hide": ("accuracy", "fraction of tokens hidden"),
    "Reveal": ("accuracy", "fraction of tokens revealed"),
}
AREAS = ("Hide", "Reveal")  # summarised by the area under the curve
_MARKERS = ("o", "s", "^", "D", "v", "P", "*")  # 7 is coprime with 10 colours
_LINESTYLES = {"captum_ext": "-", "captum": "--", "baseline": "-."}


class Cell(NamedTuple):
    r"""A table cell; ``note`` (a tooltip) explains a cell of ``kind``
    ``"flag"`` (suspect value) or ``"na"`` (metric not applicable)."""

    text: str
    note: str = ""
    kind: str = ""


def _applies(row: MethodResult, metric: str) -> bool:
    return not (metric == KENDALL and row.class_agnostic)


def _header(name: str, higher_is_better: bool) -> str:
    return f"{name} {'↑' if higher_is_better else '↓'}"


def _tasks(result: BenchmarkResult) -> List[str]:
    return list(dict.fromkeys(row.task for row in result.rows))


def _rows(result: BenchmarkResult, task: str) -> List[MethodResult]:
    return [row for row in result.rows if row.task == task]


def _best(rows: Sequence[MethodResult], metric: str, higher: bool) -> float:
    # The random control is a floor to compare against, not a contender.
    values = [
        row.metrics.get(metric, math.nan)
        for row in rows
        if row.family != "control"
        and _applies(row, metric)
        and math.isfinite(row.metrics.get(metric, math.nan))
    ]
    if not values:
        return math.nan
    return max(values) if higher else min(values)


def _metric_cell(row: MethodResult, metric: str, best: float) -> Cell:
    if not _applies(row, metric):
        return Cell(NOT_APPLICABLE, "the scores do not depend on the class", "na")
    value = row.metrics.get(metric, math.nan)
    if math.isnan(value):
        return Cell(UNSCORED, f"none of the {row.n} examples could be scored", "na")
    text = f"{value:.3f}{'*' if value == best else ''}"
    left_out = sum(math.isnan(v) for v in row.per_example.get(metric, []))
    if not left_out:
        return Cell(text)
    return Cell(
        f"{text} ({left_out} {UNSCORED})",
        f"{left_out} of {row.n} examples have no token the metric can perturb "
        "(only special or unknown tokens); the mean leaves them out",
        "na",
    )


def _time_cell(row: MethodResult) -> Cell:
    if row.timing_suspect:
        return Cell(f"{TIMING_FLAG} {row.time_ratio:.1f}", TIME_DEFINITION, "flag")
    return Cell(f"{row.time_ratio:.1f}")


def _cells(result: BenchmarkResult, task: str) -> List[List[Cell]]:
    r"""Header row then one row per method; the best value per metric among the
    non-control methods is marked with ``*`` (direction from the metric's
    registry entry)."""
    rows = _rows(result, task)
    columns = {m: result.metrics[m] for m in result.task_columns(task)}
    best = {m: _best(rows, m, up) for m, up in columns.items()}
    header = ["method", "family"] + [_header(m, up) for m, up in columns.items()]
    table = [[Cell(text) for text in header + [TIME_COLUMN]]]
    for row in rows:
        cells = [Cell(row.method), Cell(row.family)]
        cells += [_metric_cell(row, m, best[m]) for m in columns]
        table.append(cells + [_time_cell(row)])
    return table


def _md(text: str) -> str:
    r"""Markdown-safe and terminal-safe: the characters Markdown would read as
    HTML, code or a table's column break backslash-escaped (results.md is
    rendered; read as text it holds no HTML entities), control characters
    replaced."""
    return re.sub(r"([\\`<>&|])", r"\\\1", terminal_safe(text))


def markdown_table(result: BenchmarkResult) -> str:
    r"""One Markdown table per task; ``*`` marks each metric's best method."""
    parts = []
    for task in _tasks(result):
        n = _rows(result, task)[0].n
        table = _cells(result, task)
        rows = ["| " + " | ".join(_md(c.text) for c in cells) + " |" for cells in table]
        rule = "|" + "|".join(["---"] * 2 + ["---:"] * (len(table[0]) - 2)) + "|"
        lines = [f"### {_md(task)} (n={n})", "", rows[0], rule] + rows[1:]
        parts.append("\n".join(lines))
    note = (
        "\n\n`*` best per column (Random excluded); arrows give the better "
        f"direction; time: {TIME_DEFINITION}"
    )
    return "\n\n".join(parts) + note


def metric_definitions(result: BenchmarkResult) -> List[Tuple[str, str]]:
    r"""(column, "definition + direction") for every metric column of the run,
    then the time column."""
    entries = []
    for metric, up in result.metrics.items():
        direction = "Higher is better." if up else "Lower is better."
        entries.append((metric, f"{_definition(result, metric)} {direction}".strip()))
    return entries + [(TIME_COLUMN, TIME_DEFINITION)]


def _definition(result: BenchmarkResult, metric: str) -> str:
    r"""The column's definition for the kinds of task that have it: a
    classifier's, generated text's, or both, labelled."""
    generation = set(result.generation_tasks)
    kinds = {
        t in generation for t in _tasks(result) if metric in result.task_columns(t)
    }
    classifier = DEFINITIONS.get(metric, "")
    generated = GENERATION_DEFINITIONS.get(metric, "")
    if kinds == {True}:
        return generated
    if kinds == {True, False}:
        return f"Classifiers: {classifier} Generated text: {generated}"
    return classifier


def _markdown_definitions(result: BenchmarkResult) -> str:
    lines = ["### What the columns mean", ""]
    lines += [
        f"- **{_md(name)}**: {_md(text)}" for name, text in metric_definitions(result)
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------ frontier
class FrontPoint(NamedTuple):
    r"""A method as a point of the faithfulness-cost plane: ``cost`` in
    forward passes, ``value`` of one metric."""

    method: str
    cost: float
    value: float


def pareto_front(
    points: Sequence[FrontPoint], higher_is_better: bool
) -> List[FrontPoint]:
    r"""The points no other point beats: no other costs at most as much and
    scores at least as well, strictly better in one of the two. Ties (same
    cost, same value) are all on the front. Sorted by cost, cheapest first;
    a point with a non-finite cost or value is never on it.

    Args:
        points (Sequence[FrontPoint]): the candidates.
        higher_is_better (bool): the metric's direction.

    Returns:
        list[FrontPoint]: the front, by increasing cost (and so by improving
        value).
    """
    sign = 1.0 if higher_is_better else -1.0
    finite = [p for p in points if math.isfinite(p.cost) and math.isfinite(p.value)]

    def beats(q: FrontPoint, p: FrontPoint) -> bool:
        no_worse = q.cost <= p.cost and sign * q.value >= sign * p.value
        return no_worse and (q.cost < p.cost or sign * q.value > sign * p.value)

    front = [p for p in finite if not any(beats(q, p) for q in finite)]
    return sorted(front, key=lambda p: (p.cost, -sign * p.value))


def frontier_points(
    result: BenchmarkResult, task: str, metric: str
) -> List[FrontPoint]:
    r"""The task's methods with a measured cost and a value of ``metric``: the
    random control (a floor, not a choice), flagged timings and rows where the
    metric does not apply are left out."""
    return [
        FrontPoint(row.method, row.time_ratio, row.metrics.get(metric, math.nan))
        for row in _rows(result, task)
        if row.family != "control"
        and not row.timing_suspect
        and _applies(row, metric)
        and math.isfinite(row.metrics.get(metric, math.nan))
    ]


def frontier_sentence(result: BenchmarkResult, task: str, metric: str) -> str:
    r"""One sentence: which method is on the ``metric``-cost front from which
    budget (in forward passes) on ``task``."""
    up = result.metrics[metric]
    front = pareto_front(frontier_points(result, task, metric), up)
    direction = "higher" if up else "lower"
    if not front:
        return f"On {task}, no method has both a measured cost and a {metric} value."
    steps = [f"{p.method} ({p.value:.3f}) from {p.cost:.1f}×" for p in front]
    listed = (
        steps[0] if len(steps) == 1 else ", ".join(steps[:-1]) + " and " + steps[-1]
    )
    return (
        f"On {task}, the best {metric} ({direction} is better) for a budget in "
        f"forward passes: {listed}."
    )


def _markdown_frontier(result: BenchmarkResult) -> str:
    lines = ["### Faithfulness against cost", ""]
    for task in _tasks(result):
        metric = result.task_columns(task)[0]
        if _frontier_panels(result, task):
            image = _frontier_path(Path(), task).name
            lines += [f"![{_md(task)}: each metric against cost]({image})", ""]
        lines += [_md(frontier_sentence(result, task, metric)), ""]
    return "\n".join(lines).rstrip()


def _example_for(
    result: BenchmarkResult, task: str, tokens: Sequence[str]
) -> Optional[Explanation]:
    r"""The kept example a layer map was computed on (same tokens)."""
    matches = [ex for ex in result.examples.get(task, []) if ex.tokens == list(tokens)]
    return matches[0] if matches else None


# ----------------------------------------------------------------------- plots
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


def _curve_rows(result: BenchmarkResult, task: str, metric: str) -> List[MethodResult]:
    r"""The task's rows with a per-level curve of ``metric`` (none: no plot)."""
    return [row for row in _rows(result, task) if metric in row.curves]


def _curve_plot(result: BenchmarkResult, task: str, metric: str, path: Path) -> bool:
    rows = _curve_rows(result, task, metric)
    if not rows:
        return False
    fig = Figure(figsize=(8, 4.2))
    ax = fig.add_subplot()
    for row, style in zip(rows, _styles(rows)):
        grid, values = row.curves[metric]
        ax.plot(grid, values, label=row.method, markersize=5, **style)
    y_label, x_label = CURVE_AXES.get(metric, (metric, "fraction of tokens"))
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(f"{metric}: per-level values, {task} (n={rows[0].n})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    _save(fig, path)
    return True


# Joins a word's pieces on the heatmap axis: "hopeless·", "·ly".
PIECE_JOINER = "·"


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


def _layer_plot(
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


def _frontier_panels(result: BenchmarkResult, task: str) -> List[str]:
    r"""The metrics with at least one point to draw (none: no figure)."""
    return [m for m in result.task_columns(task) if frontier_points(result, task, m)]


def _frontier_plot(result: BenchmarkResult, task: str, path: Path) -> bool:
    r"""One panel per metric: every method at (time ratio, value), x on a log
    scale, the Pareto front joined; the y axis of a lower-is-better metric is
    inverted, so up and left is better in every panel."""
    panels = _frontier_panels(result, task)
    if not panels:
        return False
    columns = min(3, len(panels))
    lines = -(-len(panels) // columns)
    fig = Figure(figsize=(4.2 * columns, 3.4 * lines))
    styles = dict(
        zip((r.method for r in _rows(result, task)), _styles(_rows(result, task)))
    )
    for index, metric in enumerate(panels):
        ax = fig.add_subplot(lines, columns, index + 1)
        up = result.metrics[metric]
        points = frontier_points(result, task, metric)
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
        ax.set_title(f"{metric}, {task}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.tick_params(labelsize=7)
    _save(fig, path)
    return True


def _slug(name: str) -> str:
    r"""A file-name-safe form of a method or metric name."""
    return re.sub(r"[^A-Za-z0-9.-]+", "-", name).strip("-")


def _curve_path(out_dir: Path, task: str, metric: str) -> Path:
    return out_dir / f"{_slug(task)}_{_slug(metric)}_curve.png"


def _frontier_path(out_dir: Path, task: str) -> Path:
    return out_dir / f"{_slug(task)}_frontier.png"


def _layer_path(out_dir: Path, task: str, name: str) -> Path:
    return out_dir / f"{_slug(task)}_{_slug(name)}_layers.png"


def plot_all(result: BenchmarkResult, out_dir: Path) -> List[Path]:
    r"""One PNG per (task, metric with a curve) and per layer map."""
    paths = []
    for task in _tasks(result):
        if _frontier_plot(result, task, _frontier_path(out_dir, task)):
            paths.append(_frontier_path(out_dir, task))
        for metric in result.task_columns(task):
            path = _curve_path(out_dir, task, metric)
            if _curve_plot(result, task, metric, path):
                paths.append(path)
        for name, (tokens, scores) in result.layer_maps.get(task, {}).items():
            example = _example_for(result, task, tokens)
            specials = example.specials() if example else [False] * len(tokens)
            path = _layer_path(out_dir, task, name)
            _layer_plot(tokens, scores, specials, f"{name} per layer, {task}", path)
            paths.append(path)
    return paths


# ------------------------------------------------------------------------ html
def _html_cell(cell: Cell, numeric: bool, tag: str = "td") -> str:
    classes = " ".join(name for name in ("num" if numeric else "", cell.kind) if name)
    attributes = f' class="{classes}"' if classes else ""
    if cell.note:
        attributes += f' title="{html_safe(cell.note)}"'
    return f"<{tag}{attributes}>{html_safe(cell.text)}</{tag}>"


def _html_table(table: List[List[Cell]]) -> str:
    head = "".join(_html_cell(cell, False, "th") for cell in table[0])
    body = [
        "<tr>"
        + "".join(_html_cell(cell, index >= 2) for index, cell in enumerate(cells))
        + "</tr>"
        for cells in table[1:]
    ]
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _figure(path: Path, caption: str) -> str:
    r"""The PNG embedded (base64) with an HTML ``caption``."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    alt = html_safe(path.stem)
    return (
        f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def _config_value(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_config_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_config_value(v) for v in value)
    return str(value)


def _config_html(result: BenchmarkResult) -> str:
    r"""The run's configuration as a two-column list, one setting a line."""
    items = dict(result.config, **{"wall time": f"{result.wall_seconds:.0f} s"})
    rows = "".join(
        f"<dt>{html_safe(str(key))}</dt><dd>{html_safe(_config_value(value))}</dd>"
        for key, value in items.items()
    )
    return f'<h2>configuration</h2><dl class="config">{rows}</dl>'


def _definitions_html(result: BenchmarkResult) -> str:
    items = "".join(
        f"<dt>{html_safe(name)}</dt><dd>{html_safe(text)}</dd>"
        for name, text in metric_definitions(result)
    )
    return (
        '<h2>how to read this page</h2><dl class="config">'
        f'{items}</dl><p class="note">* best per column (Random excluded); '
        "↑/↓ give the better direction. Scores explain the model's predicted "
        f"class{_GENERATED_NOTE if result.generation_tasks else ''}.</p>"
    )


_GENERATED_NOTE = (
    "; for generated text, each continuation token's log-probability given the "
    "prompt and the tokens before it (one heatmap row per token)"
)


def _example_text(example: Explanation) -> str:
    if example.text is not None:
        return example.text
    specials = example.specials()
    texts = display_texts(example.tokens, specials)
    real = [g for g in word_groups(example.tokens, specials) if not specials[g[0]]]
    return " ".join("".join(texts[i] for i in group) for group in real)


def _layer_caption(result: BenchmarkResult, task: str, name: str) -> str:
    tokens, _ = result.layer_maps[task][name]
    example = _example_for(result, task, tokens)
    what = (
        f"{html_safe(name)} per layer (rows: hidden_states index, 0 = "
        "embeddings; each row scaled by its own peak |score| over the real "
        "tokens; special tokens grey)"
    )
    if example is None:
        return what + "."
    return (
        f"{what} on “{html_safe(_example_text(example))}”: "
        f"{explanation_caption(example)}."
    )


def _curve_caption(metric: str) -> str:
    y_label, x_label = CURVE_AXES.get(metric, (metric, "fraction of tokens"))
    summary = "area under this curve" if metric in AREAS else "mean over the levels"
    return html_safe(
        f"{metric} per level: {y_label} (y) against the {x_label} (x), mean "
        f"over the examples; the table's value is the {summary}."
    )


def frontier_html(result: BenchmarkResult, out_dir: Path) -> List[str]:
    r"""The report's first section: per task, each metric against cost (the
    PNG of :func:`plot_all` in ``out_dir``) and which method is on the front
    at which budget (:func:`frontier_sentence`, for the first metric)."""
    body = ["<h2>faithfulness against cost</h2>"]
    for task in _tasks(result):
        metric = result.task_columns(task)[0]
        body.append(f"<p>{html_safe(frontier_sentence(result, task, metric))}</p>")
        if _frontier_panels(result, task):  # what plot_all drew, not old files
            body.append(_figure(_frontier_path(out_dir, task), _FRONTIER_CAPTION))
    return body


_FRONTIER_CAPTION = html_safe(
    "Each method at its time ratio (x, log scale) and metric value (y; a "
    "lower-is-better axis is inverted, so up and left is better everywhere); "
    "the black line joins the Pareto front: the methods no other method beats "
    "at the same or lower cost. The random control and flagged timings are "
    "left out."
)


def _task_html(result: BenchmarkResult, task: str, out_dir: Path) -> List[str]:
    body = [f"<h2>{html_safe(task)}</h2>", _html_table(_cells(result, task))]
    for metric in result.task_columns(task):
        # The rule plot_all drew by, not the files in out_dir: an earlier run's
        # plot of a metric without a curve now must not be shown.
        if _curve_rows(result, task, metric):
            path = _curve_path(out_dir, task, metric)
            body.append(_figure(path, _curve_caption(metric)))
    for name in result.layer_maps.get(task, {}):
        path = _layer_path(out_dir, task, name)
        body.append(_figure(path, _layer_caption(result, task, name)))
    body.append("<h3>examples</h3>")
    body += _examples_html(result, task)
    return body


def _examples_html(result: BenchmarkResult, task: str) -> List[str]:
    r"""The task's kept examples: highlighted texts of a classifier task,
    target x prompt heatmaps of every method for a generation task."""
    body = [explanation_html(ex) for ex in result.examples.get(task, [])]
    body += [generation_html(ex) for ex in result.generation_examples.get(task, [])]
    return body


def result_text(result: BenchmarkResult) -> str:
    r"""A few lines of at most 100 columns for a terminal: the run, then per
    task the front of the first metric (value @ time ratio, cheapest first)."""
    methods = len(dict.fromkeys(row.method for row in result.rows))
    columns = " ".join(_header(m, up) for m, up in result.metrics.items())
    lines = [
        f"BenchmarkResult: {len(_tasks(result))} task(s), {methods} method(s), "
        f"{columns}; {result.wall_seconds:.0f} s"
    ]
    # Each task's first column (none: no front to show).
    for task in _tasks(result):
        metric = next(iter(result.task_columns(task)), None)
        if metric is None:
            continue
        up = result.metrics[metric]
        front = pareto_front(frontier_points(result, task, metric), up)
        points = ", ".join(f"{p.method} {p.value:.3f} @{p.cost:.1f}x" for p in front)
        n = _rows(result, task)[0].n
        lines.append(f"  {task} (n={n}) {metric} front: {points or 'none'}")
    lines.append("  .table(), .to_csv(path); report.write_report(result, dir)")
    return "\n".join(fit_line(terminal_safe(line)) for line in lines)


def result_html(result: BenchmarkResult) -> str:
    r"""The report's frontier, tables and highlighted examples as one HTML
    fragment with the figures embedded and the styles scoped, for a
    notebook's ``_repr_html_``."""
    with tempfile.TemporaryDirectory(prefix="captum_ext_report_") as scratch:
        out = Path(scratch)
        for task in _tasks(result):
            _frontier_plot(result, task, _frontier_path(out, task))
        body = frontier_html(result, out)
    for task in _tasks(result):
        body += [f"<h2>{html_safe(task)}</h2>", _html_table(_cells(result, task))]
        body += _examples_html(result, task)
    return notebook_html("\n".join(body))


def write_html(result: BenchmarkResult, path: Path) -> None:
    r"""The self-contained report page; the PNGs of :func:`plot_all` must already
    be in ``path``'s directory."""
    body = frontier_html(result, path.parent)
    body += [_definitions_html(result), _config_html(result)]
    for task in _tasks(result):
        body += _task_html(result, task, path.parent)
    page = html_page("captum_ext benchmark", "\n".join(body))
    write_text_atomically(path, lambda handle: handle.write(page))


def write_report(result: BenchmarkResult, out_dir: Path) -> Dict[str, Path]:
    r"""Writes ``results.csv``, ``results.json``, ``results.md``, the PNG plots and
    ``report.html`` into ``out_dir``; returns the paths by kind."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "csv": out_dir / "results.csv",
        "json": out_dir / "results.json",
        "markdown": out_dir / "results.md",
        "html": out_dir / "report.html",
    }
    result.to_csv(paths["csv"])
    result.to_json(paths["json"])
    markdown = "\n\n".join(
        [
            markdown_table(result),
            _markdown_frontier(result),
            _markdown_definitions(result),
        ]
    )
    write_text_atomically(
        paths["markdown"], lambda handle: handle.write(markdown + "\n")
    )
    plot_all(result, out_dir)
    write_html(result, paths["html"])
    return paths
