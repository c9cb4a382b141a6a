#!/usr/bin/env python3
r"""Benchmark reports: a Markdown table for the terminal, CSV and JSON files, PNG
plots and one self-contained HTML page (inline CSS, images embedded as base64)."""

import base64
import csv
import html
import json
import math
import re
from pathlib import Path
from typing import Any, Dict, List, Sequence

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display

import matplotlib.pyplot as plt  # noqa: E402

from captum_ext.evaluation.results import BenchmarkResult, MethodResult  # noqa: E402
from captum_ext.visualization import explanation_html, html_page  # noqa: E402

__all__ = [
    "markdown_table",
    "plot_all",
    "to_json",
    "write_csv",
    "write_html",
    "write_report",
]

TIME_COLUMN = "time (x forward)"


def _header(name: str, higher_is_better: bool) -> str:
    return f"{name} {'↑' if higher_is_better else '↓'}"


def _tasks(result: BenchmarkResult) -> List[str]:
    return list(dict.fromkeys(row.task for row in result.rows))


def _rows(result: BenchmarkResult, task: str) -> List[MethodResult]:
    return [row for row in result.rows if row.task == task]


def _best(rows: Sequence[MethodResult], metric: str, higher: bool) -> float:
    # The random control is a floor to compare against, not a contender.
    values = [
        row.metrics[metric]
        for row in rows
        if row.family != "control" and math.isfinite(row.metrics[metric])
    ]
    if not values:
        return math.nan
    return max(values) if higher else min(values)


def _cells(result: BenchmarkResult, task: str) -> List[List[str]]:
    r"""Header row then one row per method; the best value per metric among the
    non-control methods is marked with ``*`` (direction from the metric's
    registry entry)."""
    rows = _rows(result, task)
    best = {m: _best(rows, m, up) for m, up in result.metrics.items()}
    header = ["method", "family"] + [_header(m, up) for m, up in result.metrics.items()]
    table = [header + [TIME_COLUMN]]
    for row in rows:
        cells = [row.method, row.family]
        for metric in result.metrics:
            value = row.metrics[metric]
            mark = "*" if value == best[metric] else ""
            cells.append(f"{value:.3f}{mark}")
        table.append(cells + [f"{row.time_ratio:.1f}"])
    return table


def markdown_table(result: BenchmarkResult) -> str:
    r"""One Markdown table per task; ``*`` marks each metric's best method."""
    parts = []
    for task in _tasks(result):
        n = _rows(result, task)[0].n
        table = _cells(result, task)
        lines = [f"### {task} (n={n})", ""]
        lines.append("| " + " | ".join(table[0]) + " |")
        lines.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(table[0]) - 2)) + "|")
        lines += ["| " + " | ".join(cells) + " |" for cells in table[1:]]
        parts.append("\n".join(lines))
    note = (
        "\n\n`*` best per column (Random excluded); arrows give the better "
        "direction; time is "
        "attribution time divided by one inference forward pass over the same "
        "examples, measured in the same run."
    )
    return "\n\n".join(parts) + note


def write_csv(result: BenchmarkResult, path: Path) -> None:
    r"""One row per (task, method): metric means, time ratio and seconds."""
    metrics = list(result.metrics)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["task", "method", "family", "n"]
            + metrics
            + ["time_ratio", "seconds", "forward_seconds"]
        )
        for row in result.rows:
            writer.writerow(
                [row.task, row.method, row.family, row.n]
                + [repr(row.metrics[m]) for m in metrics]
                + [repr(row.time_ratio), repr(row.seconds), repr(row.forward_seconds)]
            )


def _finite(value: float) -> Any:
    r"""JSON has no NaN/Infinity; they become null."""
    return value if math.isfinite(value) else None


def to_json(result: BenchmarkResult) -> Dict[str, Any]:
    r"""Everything in the result as plain JSON types."""
    return {
        "config": result.config,
        "wall_seconds": result.wall_seconds,
        "metrics": {
            name: {"higher_is_better": up} for name, up in result.metrics.items()
        },
        "rows": [
            {
                "task": row.task,
                "method": row.method,
                "family": row.family,
                "n": row.n,
                "metrics": {k: _finite(v) for k, v in row.metrics.items()},
                "time_ratio": _finite(row.time_ratio),
                "seconds": row.seconds,
                "forward_seconds": row.forward_seconds,
                "curves": {
                    name: {"grid": grid, "mean": [_finite(v) for v in values]}
                    for name, (grid, values) in row.curves.items()
                },
            }
            for row in result.rows
        ],
        "layer_maps": {
            task: {
                name: {"tokens": tokens, "scores": scores.tolist()}
                for name, (tokens, scores) in maps.items()
            }
            for task, maps in result.layer_maps.items()
        },
        "examples": {
            task: [
                {
                    "tokens": ex.tokens,
                    "label_names": ex.label_names,
                    "pred_class": ex.pred_class,
                    "pred_prob": ex.pred_prob,
                    "true_class": ex.true_class,
                    "scores": {k: v.tolist() for k, v in ex.scores.items()},
                }
                for ex in examples
            ]
            for task, examples in result.examples.items()
        },
    }


# ----------------------------------------------------------------------- plots
def _curve_plot(result: BenchmarkResult, task: str, metric: str, path: Path) -> bool:
    rows = [row for row in _rows(result, task) if metric in row.curves]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(8, 4))
    # 20 distinct colours: the default cycle repeats after 10 methods.
    colours = plt.get_cmap("tab20").colors
    for index, row in enumerate(rows):
        grid, values = row.curves[metric]
        style = "--" if row.family != "captum_ext" else "-"
        colour = colours[index % len(colours)]
        ax.plot(grid, values, style, color=colour, marker=".", label=row.method)
    ax.set_xlabel("fraction of tokens")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} curve, {task} (n={rows[0].n})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _layer_plot(tokens: List[str], scores: Any, title: str, path: Path) -> None:
    r"""Heatmap of ``scores`` ``[layers, tokens]``, each layer scaled by its own
    largest magnitude so every layer's pattern is visible."""
    matrix = scores.detach().float().cpu()
    peak = matrix.abs().amax(-1, keepdim=True).clamp_min(1e-12)
    matrix = (matrix / peak).numpy()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.35 * len(tokens) + 1.5), 3.5))
    image = ax.imshow(matrix, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(range(len(tokens)), tokens, rotation=70, fontsize=7)
    ax.set_yticks(range(matrix.shape[0]))
    ax.set_ylabel("hidden_states index")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.03)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _slug(name: str) -> str:
    r"""A file-name-safe form of a method or metric name."""
    return re.sub(r"[^A-Za-z0-9.-]+", "-", name).strip("-")


def plot_all(result: BenchmarkResult, out_dir: Path) -> List[Path]:
    r"""One PNG per (task, metric with a curve) and per layer map."""
    paths = []
    for task in _tasks(result):
        for metric in result.metrics:
            path = out_dir / f"{_slug(task)}_{_slug(metric)}_curve.png"
            if _curve_plot(result, task, metric, path):
                paths.append(path)
        for name, (tokens, scores) in result.layer_maps.get(task, {}).items():
            path = out_dir / f"{_slug(task)}_{_slug(name)}_layers.png"
            _layer_plot(tokens, scores, f"{name} per layer, {task}", path)
            paths.append(path)
    return paths


# ------------------------------------------------------------------------ html
def _html_table(table: List[List[str]]) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in table[0])
    body = []
    for cells in table[1:]:
        tds = [f"<td>{html.escape(c)}</td>" for c in cells[:2]]
        tds += [f'<td class="num">{html.escape(c)}</td>' for c in cells[2:]]
        body.append("<tr>" + "".join(tds) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _embedded(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    alt = html.escape(path.stem)
    return f'<p><img alt="{alt}" src="data:image/png;base64,{data}"></p>'


def write_html(result: BenchmarkResult, path: Path, images: Sequence[Path]) -> None:
    r"""The self-contained report page."""
    config = html.escape(json.dumps(result.config, sort_keys=True))
    body = [
        f'<p class="note">wall time {result.wall_seconds:.0f} s; config: '
        f"{config}</p>",
        '<p class="note">* best per column (Random excluded); arrows give the '
        "better direction; time = attribution time / one inference forward pass, "
        "same run.</p>",
    ]
    for task in _tasks(result):
        body.append(f"<h2>{html.escape(task)}</h2>")
        body.append(_html_table(_cells(result, task)))
        prefix = f"{_slug(task)}_"
        body += [_embedded(image) for image in images if image.name.startswith(prefix)]
        body.append("<h3>examples</h3>")
        body += [explanation_html(ex) for ex in result.examples.get(task, [])]
    path.write_text(html_page("captum_ext benchmark", "\n".join(body)))


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
    write_csv(result, paths["csv"])
    paths["json"].write_text(json.dumps(to_json(result), indent=1))
    paths["markdown"].write_text(markdown_table(result) + "\n")
    images = plot_all(result, out_dir)
    write_html(result, paths["html"], images)
    return paths
