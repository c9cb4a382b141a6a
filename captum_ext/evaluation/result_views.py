#!/usr/bin/env python3
r"""How a result's rows show themselves, without drawing: the table cells of a
task (with the best value per metric marked and flagged timings), the table as
HTML, the faithfulness-cost front in words and as an HTML section, the kept
examples as HTML, and the file names of the figures embedded in a page.

Both the report's files (:mod:`captum_ext.evaluation.report`) and a result's
own ``repr`` and notebook view
(:class:`~captum_ext.evaluation.results.BenchmarkResult`) are built from
these; the figures themselves are drawn by
:mod:`captum_ext.evaluation.figures`.
"""

import base64
import math
import re
from pathlib import Path
from typing import List, NamedTuple, Sequence

from captum_ext.evaluation.frontier import (
    budget_front,
    control_value,
    frontier_metrics,
    frontier_points,
)
from captum_ext.evaluation.result_rows import MethodResult, SUSPECT_RATIO, TaskRows
from captum_ext.evaluation.timing import SPREAD_BOUND, TIMING_PROTOCOL
from captum_ext.visualization import (
    Explanation,
    explanation_html,
    generation_html,
    GenerationExplanation,
    html_safe,
)

__all__ = [
    "Cell",
    "column_header",
    "curve_path",
    "examples_html",
    "figure_html",
    "frontier_html",
    "frontier_path",
    "frontier_sentence",
    "html_table",
    "layer_path",
    "patch_path",
    "table_cells",
]

TIME_COLUMN = "time (x forward)"
NO_SIGNAL_COLUMN = "no signal"
NOT_APPLICABLE = "n/a (class-agnostic)"
UNSCORED = "n/a"  # examples a metric cannot score (NaN), left out of means
TIMING_FLAG = "⚠"
NO_SIGNAL_NOTE = (
    "with a constant explanation (no signal: every token scored the same, so "
    "any ranking would be the tie-break's)"
)
TIME_DEFINITION = (
    f"attribution time divided by one inference forward pass: {TIMING_PROTOCOL} "
    "(median over batches). Every method but the random control runs a forward "
    f"pass, so a ratio below {SUSPECT_RATIO} is impossible; such a ratio, or "
    f"repetitions more than {SPREAD_BOUND:g}x apart, is flagged {TIMING_FLAG} "
    "(disturbed timing; rerun on a quieter machine)."
)


class Cell(NamedTuple):
    r"""A table cell; ``note`` (a tooltip) explains a cell of ``kind``
    ``"flag"`` (suspect value) or ``"na"`` (metric not applicable)."""

    text: str
    note: str = ""
    kind: str = ""


def column_header(name: str, higher_is_better: bool) -> str:
    r"""A metric's column name with its better direction, ``↑`` or ``↓``."""
    return f"{name} {'↑' if higher_is_better else '↓'}"


def _best(rows: Sequence[MethodResult], metric: str, higher: bool) -> float:
    r"""The best value among the methods, NaN when none beats the random
    control (a floor to compare against, not a contender)."""
    values = [
        row.metrics.get(metric, math.nan)
        for row in rows
        if row.family != "control"
        and row.applies(metric)
        and math.isfinite(row.metrics.get(metric, math.nan))
    ]
    if not values:
        return math.nan
    best = max(values) if higher else min(values)
    floor = control_value(rows, metric)
    beaten = math.isnan(floor) or (best > floor if higher else best < floor)
    return best if beaten else math.nan


def _metric_cell(row: MethodResult, metric: str, best: float) -> Cell:
    if not row.applies(metric):
        return Cell(NOT_APPLICABLE, "the scores do not depend on the class", "na")
    value = row.metrics.get(metric, math.nan)
    flat = len(row.constant)
    if math.isnan(value):
        why = f"; {flat} {NO_SIGNAL_NOTE}" if flat else ""
        return Cell(
            UNSCORED, f"none of the {row.n} examples could be scored{why}", "na"
        )
    text = f"{value:.3f}{'*' if value == best else ''}"
    left_out = sum(math.isnan(v) for v in row.per_example.get(metric, []))
    if not left_out:
        return Cell(text)
    reasons = [f"{flat} {NO_SIGNAL_NOTE}"] if flat else []
    if left_out > flat:
        reasons.append(
            f"{left_out - flat} have no token the metric can perturb (only "
            "special or unknown tokens)"
        )
    return Cell(
        f"{text} ({left_out} {UNSCORED})",
        f"{left_out} of {row.n} examples left out of the mean: " + "; ".join(reasons),
        "na",
    )


def _time_cell(row: MethodResult) -> Cell:
    if row.timing_suspect:
        return Cell(f"{TIMING_FLAG} {row.time_ratio:.1f}", TIME_DEFINITION, "flag")
    return Cell(f"{row.time_ratio:.1f}")


def table_cells(table: TaskRows) -> List[List[Cell]]:
    r"""Header row then one row per method; the best value per metric among the
    non-control methods is marked with ``*`` (direction from the metric's
    registry entry) where it beats the random control. Where some method's
    explanation was constant on some examples, a ``no signal`` column counts
    them per method."""
    best = {m: _best(table.rows, m, up) for m, up in table.columns.items()}
    header = ["method", "family"]
    header += [column_header(m, up) for m, up in table.columns.items()]
    # Shown only where some explanation was constant: a column of zeros is noise.
    flat = any(row.constant for row in table.rows)
    cells = [
        [Cell(text) for text in header + [NO_SIGNAL_COLUMN] * flat + [TIME_COLUMN]]
    ]
    for row in table.rows:
        line = [Cell(row.method), Cell(row.family)]
        line += [_metric_cell(row, m, best[m]) for m in table.columns]
        line += [_no_signal_cell(row)] * flat
        cells.append(line + [_time_cell(row)])
    return cells


def _no_signal_cell(row: MethodResult) -> Cell:
    if not row.constant:
        return Cell("0")
    return Cell(
        f"{len(row.constant)}/{row.n}",
        f"{len(row.constant)} of {row.n} examples {NO_SIGNAL_NOTE}; every "
        "metric leaves them out",
        "na",
    )


def _html_cell(cell: Cell, numeric: bool, tag: str = "td") -> str:
    classes = " ".join(name for name in ("num" if numeric else "", cell.kind) if name)
    attributes = f' class="{classes}"' if classes else ""
    if cell.note:
        attributes += f' title="{html_safe(cell.note)}"'
    return f"<{tag}{attributes}>{html_safe(cell.text)}</{tag}>"


def html_table(cells: List[List[Cell]]) -> str:
    r""":func:`table_cells` as an HTML table, the notes as tooltips."""
    head = "".join(_html_cell(cell, False, "th") for cell in cells[0])
    body = [
        "<tr>"
        + "".join(_html_cell(cell, index >= 2) for index, cell in enumerate(line))
        + "</tr>"
        for line in cells[1:]
    ]
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


# --------------------------------------------------------------- figure files
def _slug(name: str) -> str:
    r"""A file-name-safe form of a method or metric name."""
    return re.sub(r"[^A-Za-z0-9.-]+", "-", name).strip("-")


def curve_path(out_dir: Path, task: str, metric: str) -> Path:
    r"""Where the per-level curves of ``metric`` on ``task`` are drawn."""
    return out_dir / f"{_slug(task)}_{_slug(metric)}_curve.png"


def frontier_path(out_dir: Path, task: str) -> Path:
    r"""Where the faithfulness-cost panels of ``task`` are drawn."""
    return out_dir / f"{_slug(task)}_frontier.png"


def layer_path(out_dir: Path, task: str, name: str) -> Path:
    r"""Where the per-layer map of method ``name`` on ``task`` is drawn."""
    return out_dir / f"{_slug(task)}_{_slug(name)}_layers.png"


def patch_path(out_dir: Path, task: str) -> Path:
    r"""Where an image task's patch scores on its images are drawn."""
    return out_dir / f"{_slug(task)}_patches.png"


def figure_html(path: Path, caption: str) -> str:
    r"""The PNG embedded (base64) with an HTML ``caption``; its file name is
    the image's alternative text."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    alt = html_safe(path.stem)
    return (
        f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


# ------------------------------------------------------------------- frontier
def frontier_sentence(table: TaskRows, metric: str) -> str:
    r"""One sentence: which method is the best on ``metric`` from which budget
    (in forward passes) on the task, one method per budget the timings can
    tell apart (:func:`~captum_ext.evaluation.frontier.budget_front`); a
    method not better than the random control is never named."""
    up = table.columns[metric]
    floor = control_value(table.rows, metric)
    points = frontier_points(table.rows, metric)
    front = budget_front(points, up, floor)
    direction = "higher" if up else "lower"
    task = table.task
    floor_note = "" if math.isnan(floor) else f"Random ({floor:.3f})"
    if not points:
        return f"On {task}, no method has both a measured cost and a {metric} value."
    if not front:
        return (
            f"On {task}, no method with a measured cost beats {floor_note} on {metric}."
        )
    steps = [f"{p.method} ({p.value:.3f}) from {p.cost:.1f}×" for p in front]
    listed = (
        steps[0] if len(steps) == 1 else ", ".join(steps[:-1]) + " and " + steps[-1]
    )
    spread = max(p.spread for p in points)
    rules = (
        f"costs within the timings' own spread, up to {spread:.2f}×, count as "
        "one budget"
    )
    if floor_note:
        rules += f"; a method must beat {floor_note} to be named"
    return (
        f"On {task}, the best {metric} ({direction} is better) for a budget in "
        f"forward passes: {listed} ({rules})."
    )


_FRONTIER_CAPTION = html_safe(
    "Each method at its time ratio (x, log scale) and metric value (y; a "
    "lower-is-better axis is inverted, so up and left is better everywhere); "
    "the black line joins the front: per budget the timings can tell apart "
    "(costs within their repetitions' spread count as one), the best method, "
    "where it beats every cheaper budget's and the random control (dotted "
    "line). Hollow markers: flagged timings (cost not trusted, never on the "
    "front)."
)


def frontier_html(tables: Sequence[TaskRows], out_dir: Path) -> List[str]:
    r"""The report's first section: per task, each metric against cost (the
    PNG at :func:`frontier_path` in ``out_dir``) and which method is on the
    front at which budget (:func:`frontier_sentence`, for the first metric)."""
    body = ["<h2>faithfulness against cost</h2>"]
    for table in tables:
        metric = list(table.columns)[0]
        body.append(f"<p>{html_safe(frontier_sentence(table, metric))}</p>")
        if frontier_metrics(table):  # what was drawn, not old files
            path = frontier_path(out_dir, table.task)
            body.append(figure_html(path, _FRONTIER_CAPTION))
    return body


# ------------------------------------------------------------------- examples
def examples_html(
    examples: Sequence[Explanation],
    generations: Sequence[GenerationExplanation],
    heading: int,
) -> List[str]:
    r"""A task's kept examples: highlighted texts of a classifier task, target
    x prompt heatmaps of every method for a generation task, each method's
    name an ``<h{heading}>`` (one level below the examples' own heading)."""
    body = [explanation_html(example) for example in examples]
    return body + [generation_html(example, heading) for example in generations]
