#!/usr/bin/env python3
r"""Benchmark reports: a Markdown table for the terminal, PNG plots and one
self-contained HTML page (inline CSS, images embedded as base64), written next
to the result's own CSV and JSON files (:meth:`BenchmarkResult.to_csv
<captum_ext.evaluation.BenchmarkResult.to_csv>`, ``to_json``).

The page explains itself: each metric's definition and better direction, what
the time ratio measures, why class-agnostic methods show no Kendall-τ, and
captions on every figure. The figures are drawn by
:mod:`captum_ext.evaluation.figures` (headless, no global state changed); the
table cells, the frontier in words and the HTML fragments a result also shows
in a notebook come from :mod:`captum_ext.evaluation.result_views`.
"""

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from captum_ext.evaluation._utils.atomic import write_text_atomically
from captum_ext.evaluation.figures import (
    curve_figure,
    curve_rows,
    frontier_figure,
    layer_figure,
    patch_figure,
)
from captum_ext.evaluation.frontier import frontier_metrics
from captum_ext.evaluation.result_rows import KENDALL
from captum_ext.evaluation.result_views import (
    curve_path,
    examples_html,
    figure_html,
    frontier_html,
    frontier_path,
    frontier_sentence,
    html_table,
    layer_path,
    NOT_APPLICABLE,
    patch_path,
    table_cells,
    TIME_COLUMN,
    TIME_DEFINITION,
)
from captum_ext.evaluation.results import BenchmarkResult
from captum_ext.evaluation.tasks import held_out_images, IMAGE_TASK
from captum_ext.visualization import (
    display_texts,
    Explanation,
    explanation_caption,
    html_page,
    html_safe,
    terminal_safe,
    word_groups,
)

__all__ = [
    "markdown_table",
    "metric_definitions",
    "plot_all",
    "write_html",
    "write_report",
]

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
    "Infidelity": "Captum's infidelity (Yeh et al. 2019, normalize=True): the "
    "mean squared error between the scores of a random subset of the "
    "non-special tokens (each with probability 1/2, replaced by [MASK], else "
    "the unknown token), "
    "best scaled, and the drop in the explained class's probability when "
    "that subset is replaced; 8 subsets per example, measured on one "
    "example in 8, the others left out.",
    "SensMax": "Captum's sensitivity_max: the largest relative change "
    "||scores(x') - scores(x)|| / ||scores(x)|| over 2 inputs x' with one "
    "random non-special token replaced (as for Infidelity; the method re-run "
    "each time); measured on one example in 32, the others left out.",
}
# The columns of a generation task (a causal LM explaining its continuation):
# every metric is the mean over each example's target tokens y_t.
GENERATION_DEFINITIONS = {
    "Evidence@1": "planted-evidence accuracy: how often the top-scored prompt "
    "token of a target token is the one prompt token known to decide it (the "
    "key-value recall task's copied value); partial ties count in expectation "
    "(e tokens tied with the evidence share the remaining top places). An "
    "example whose scores are constant (no signal) is left out of this and "
    "every other column (n/a), not scored as a tie.",
    "Evidence@3": "as Evidence@1, with the evidence among the top 3 prompt tokens.",
    "EvidenceSet@1": "as Evidence@1 on the set of prompt tokens a target token "
    "needs (recall: the queried pair's key and the copied value; flag sum: the "
    "two flags that decide a label found nowhere in the prompt): how often the "
    "top-scored prompt token is one of them.",
    "EvidenceSet@3": "the expected share of that set among the top 3 prompt "
    "tokens (of min(3, set size)): 1 when the whole set is there.",
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
    "Infidelity": "Captum's infidelity (Yeh et al. 2019, normalize=True) of "
    "the scores summed over target tokens against the drop in the "
    "continuation's log-probability sum_t log p(y_t | prompt, y_<t) when a "
    "random subset of the non-special prompt tokens (each with probability "
    "1/2) is replaced by [MASK], else the unknown token; 8 subsets per "
    "example, measured on one example in 8, the others left out.",
    "SensMax": "Captum's sensitivity_max: the largest relative change of the "
    "[T, P] scores (Frobenius norm) over 2 prompts with one random "
    "non-special token replaced (as for Infidelity; the method re-run each "
    "time); measured on one example in 32, the others left out.",
}
# The y axis of each metric's per-level curve, and its x axis.
CURVE_AXES = {
    "AOPC": ("drop in p(class) at this level", "fraction of tokens deleted"),
    "LOdds": ("log p(class | deleted) / p(class)", "fraction of tokens deleted"),
    "Sufficiency": ("drop in p(class) at this level", "fraction of tokens kept"),
    "Hide": ("accuracy", "fraction of tokens hidden"),
    "Reveal": ("accuracy", "fraction of tokens revealed"),
}
# A generation task's curves: the same levels over the prompt's non-special
# tokens, the probability of each target token y_t (mean over its targets).
GENERATION_CURVE_AXES = {
    "AOPC": ("drop in p(y_t) at this level", "fraction of prompt tokens deleted"),
    "LOdds": (
        "log p(y_t | deleted) - log p(y_t)",
        "fraction of prompt tokens deleted",
    ),
    "Sufficiency": ("drop in p(y_t) at this level", "fraction of prompt tokens kept"),
}
AREAS = ("Hide", "Reveal")  # summarised by the area under the curve
# The methods an image task's heatmaps show, where they ran.
PATCH_METHODS = ("AttCAT", "CAT", "NormXLogit")


def _md(text: str) -> str:
    r"""Markdown-safe and terminal-safe: the characters Markdown would read as
    HTML, code or a table's column break backslash-escaped (results.md is
    rendered; read as text it holds no HTML entities), control characters
    replaced."""
    return re.sub(r"([\\`<>&|])", r"\\\1", terminal_safe(text))


def markdown_table(result: BenchmarkResult) -> str:
    r"""One Markdown table per task; ``*`` marks each metric's best method."""
    parts = []
    for task in result.tasks:
        table = result.task_rows(task)
        cells = table_cells(table)
        rows = ["| " + " | ".join(_md(c.text) for c in line) + " |" for line in cells]
        rule = "|" + "|".join(["---"] * 2 + ["---:"] * (len(cells[0]) - 2)) + "|"
        n = table.rows[0].n
        lines = [f"### {_md(task)} (n={n})", "", rows[0], rule] + rows[1:]
        parts.append("\n".join(lines))
    note = (
        "\n\n`*` best per column, where it beats Random; arrows give the better "
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
    r"""The column's definition for the kinds of task that have it (text
    classifiers, images, generated text): one, or each labelled."""
    kinds = {_kind(result, t) for t in result.tasks if metric in result.task_columns(t)}
    classifier = DEFINITIONS.get(metric, "")
    texts = {
        "classifiers": classifier,
        "images": on_patches(classifier),
        "generated text": GENERATION_DEFINITIONS.get(metric, ""),
    }
    if len(kinds) == 1:
        return texts[kinds.pop()]
    labelled = [
        f"{kind.capitalize()}: {texts[kind]}" for kind in texts if kind in kinds
    ]
    return " ".join(labelled)


def _kind(result: BenchmarkResult, task: str) -> str:
    if task in result.generation_tasks:
        return "generated text"
    return "images" if task == IMAGE_TASK else "classifiers"


def on_patches(text: str) -> str:
    r"""A classifier's metric text said of an image task, whose tokens are its
    patches (:class:`~captum_ext.metrics.PatchTokens`: a removed patch is set
    to the baseline, the class token is never removed)."""
    for words, said_of_patches in _ON_PATCHES:
        text = text.replace(words, said_of_patches)
    return text


# How an image task's examples name its patches (their scores as text).
_PATCH_NAMES = (
    "Each patch is named by its row and column in the patch grid (0,0 at the "
    "top left), after the class token; the figure above lays the scores out "
    "on the images."
)
# In this order: the longer phrases first.
_ON_PATCHES = (
    ("by [MASK], else the unknown token", "by the baseline (0: the mean pixel)"),
    ("non-special tokens", "patches"),
    ("non-special token", "patch"),
    ("real tokens", "patches"),
    ("tokens", "patches"),
    ("token", "patch"),
    ("deleting", "masking"),
    ("deleted", "masked"),
)


def _markdown_definitions(result: BenchmarkResult) -> str:
    lines = ["### What the columns mean", ""]
    lines += [
        f"- **{_md(name)}**: {_md(text)}" for name, text in metric_definitions(result)
    ]
    return "\n".join(lines)


def _markdown_frontier(result: BenchmarkResult) -> str:
    lines = ["### Faithfulness against cost", ""]
    for task in result.tasks:
        table = result.task_rows(task)
        if frontier_metrics(table):
            image = frontier_path(Path(), task).name
            lines += [f"![{_md(task)}: each metric against cost]({image})", ""]
        lines += [_md(frontier_sentence(table, result.task_columns(task)[0])), ""]
    return "\n".join(lines).rstrip()


def _markdown_patches(result: BenchmarkResult) -> str:
    r"""Links to the image tasks' patch heatmaps (:func:`plot_all` draws
    them)."""
    lines = [
        f"![{_md(task)}: patch scores]({patch_path(Path(), task).name})"
        for task in result.tasks
        if _patch_methods(result, task)
    ]
    return "\n\n".join(["### Patch scores", *lines]) if lines else ""


def _patch_methods(result: BenchmarkResult, task: str) -> List[str]:
    r"""The :data:`PATCH_METHODS` an image task's kept examples have scores
    of (none for another task)."""
    examples = result.examples.get(task, [])
    if not examples or _kind(result, task) != "images":
        return []
    return [m for m in PATCH_METHODS if m in examples[0].scores]


def _example_for(
    result: BenchmarkResult, task: str, tokens: Sequence[str]
) -> Optional[Explanation]:
    r"""The kept example a layer map was computed on (same tokens)."""
    matches = [ex for ex in result.examples.get(task, []) if ex.tokens == list(tokens)]
    return matches[0] if matches else None


def plot_all(result: BenchmarkResult, out_dir: Path) -> List[Path]:
    r"""One PNG per (task, metric with a curve) and per layer map."""
    paths = []
    for task in result.tasks:
        table = result.task_rows(task)
        if frontier_figure(table, frontier_path(out_dir, task)):
            paths.append(frontier_path(out_dir, task))
        for metric in table.columns:
            rows = curve_rows(table.rows, metric)
            if rows:
                path = curve_path(out_dir, task, metric)
                axes = _curve_axes(result, task, metric)
                curve_figure(task, rows, metric, axes, path)
                paths.append(path)
        for name, (tokens, scores) in result.layer_maps.get(task, {}).items():
            example = _example_for(result, task, tokens)
            specials = example.specials() if example else [False] * len(tokens)
            path = layer_path(out_dir, task, name)
            layer_figure(tokens, scores, specials, f"{name} per layer, {task}", path)
            paths.append(path)
        if _patch_heatmaps(result, task, patch_path(out_dir, task)):
            paths.append(patch_path(out_dir, task))
    return paths


def _image_caption(example: Explanation) -> str:
    names = example.label_names
    caption = f"{example.text}: {names[example.pred_class]} ({example.pred_prob:.2f})"
    if example.true_class not in (None, example.pred_class):
        caption += f", true {names[example.true_class]}"
    return caption


def _patch_heatmaps(result: BenchmarkResult, task: str, path: Path) -> bool:
    r"""Draws an image task's kept examples with the patch scores of
    :data:`PATCH_METHODS`; False (nothing drawn) for another task."""
    methods = _patch_methods(result, task)
    held_out = held_out_images(task)
    if held_out is None or not methods:
        return False
    images, grid = held_out
    examples = result.examples[task]
    rows = [int(str(example.text).split()[-1]) for example in examples]
    scores = {
        m: torch.stack([torch.as_tensor(e.scores[m]) for e in examples])
        for m in methods
    }
    captions = [_image_caption(example) for example in examples]
    patch_figure(images[rows], scores, grid, captions, path)
    return True


def _config_value(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_config_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_config_value(v) for v in value)
    return str(value)


def _config_html(result: BenchmarkResult) -> str:
    r"""The run's configuration as a two-column list, one setting a line."""
    # The engines' own time: preparing and loading the models is not in it.
    benchmark = f"{result.wall_seconds:.0f} s (model preparation not included)"
    items = dict(result.config, **{"benchmark wall time": benchmark})
    rows = "".join(
        f"<dt>{html_safe(str(key))}</dt><dd>{html_safe(_config_value(value))}</dd>"
        for key, value in items.items()
    )
    return f'<h2 id="configuration">configuration</h2><dl class="config">{rows}</dl>'


def _definitions_html(result: BenchmarkResult) -> str:
    items = "".join(
        f"<dt>{html_safe(name)}</dt><dd>{html_safe(text)}</dd>"
        for name, text in metric_definitions(result)
    )
    return (
        '<h2 id="how-to-read">how to read this page</h2><dl class="config">'
        f'{items}</dl><p class="note">* best per column, where it beats Random; '
        "↑/↓ give the better direction. No signal: the examples on which a "
        "method's scores were constant over the ranked tokens (e.g. all zero "
        "after a ReLU); any ranking of them would be the tie-break's, so every "
        "metric leaves them out (n/a). Scores explain the model's predicted "
        f"class{_GENERATED_NOTE if result.generation_tasks else ''}.</p>"
    )


_PATCH_CAPTION = html_safe(
    "Each digit (left; its predicted class and probability) with each "
    "method's scores of its patches blended over it (Captum's "
    "visualize_image_attr, blended_heat_map): green supports the predicted "
    "class, red speaks against it, each panel scaled by its own peak. The "
    "metrics remove a patch by setting its pixels to 0, the training images' "
    "mean pixel."
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


def _curve_axes(result: BenchmarkResult, task: str, metric: str) -> Tuple[str, str]:
    r"""The (y, x) labels of ``metric``'s per-level curve on ``task``."""
    kind = _kind(result, task)
    axes = GENERATION_CURVE_AXES if kind == "generated text" else CURVE_AXES
    y_label, x_label = axes.get(metric, (metric, "fraction of tokens"))
    if kind == "images":
        return on_patches(y_label), on_patches(x_label)
    return y_label, x_label


def _curve_caption(result: BenchmarkResult, task: str, metric: str) -> str:
    y_label, x_label = _curve_axes(result, task, metric)
    summary = "area under this curve" if metric in AREAS else "mean over the levels"
    return html_safe(
        f"{metric} per level: {y_label} (y) against the {x_label} (x), mean "
        f"over the examples; the table's value is the {summary}."
    )


def _contents_html(result: BenchmarkResult) -> str:
    r"""Links to each task's section and to the definitions and configuration
    below them (the page is long: the frontier panels come first)."""
    links = [
        f'<a href="#task-{index}">{html_safe(task)}</a>'
        for index, task in enumerate(result.tasks)
    ]
    links += [
        '<a href="#how-to-read">how to read this page</a>',
        '<a href="#configuration">configuration</a>',
    ]
    return f'<p class="note">on this page: {" · ".join(links)}</p>'


def _task_html(
    result: BenchmarkResult, task: str, index: int, out_dir: Path
) -> List[str]:
    table = result.task_rows(task)
    body = [
        f'<h2 id="task-{index}">{html_safe(task)}</h2>',
        # Wide tables (a generation task has a dozen metrics) scroll, not clip.
        f'<div class="wide">{html_table(table_cells(table))}</div>',
    ]
    for metric in table.columns:
        # The rule plot_all drew by, not the files in out_dir: an earlier run's
        # plot of a metric without a curve now must not be shown.
        if curve_rows(table.rows, metric):
            path = curve_path(out_dir, task, metric)
            body.append(figure_html(path, _curve_caption(result, task, metric)))
    for name in result.layer_maps.get(task, {}):
        path = layer_path(out_dir, task, name)
        body.append(figure_html(path, _layer_caption(result, task, name)))
    if _patch_methods(result, task):
        body.append(figure_html(patch_path(out_dir, task), _PATCH_CAPTION))
    body.append("<h3>examples</h3>")
    if _kind(result, task) == "images":
        body.append(f'<p class="note">{_PATCH_NAMES}</p>')
    body += examples_html(
        result.examples.get(task, []),
        result.generation_examples.get(task, []),
        heading=4,
    )
    return body


def write_html(result: BenchmarkResult, path: Path) -> None:
    r"""The self-contained report page; the PNGs of :func:`plot_all` must already
    be in ``path``'s directory."""
    tables = [result.task_rows(task) for task in result.tasks]
    body = [_contents_html(result)] + frontier_html(tables, path.parent)
    for index, task in enumerate(result.tasks):
        body += _task_html(result, task, index, path.parent)
    # What the tables need to be read, after them: the results come first.
    body += [_definitions_html(result), _config_html(result)]
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
    parts = [
        markdown_table(result),
        _markdown_frontier(result),
        _markdown_patches(result),
        _markdown_definitions(result),
    ]
    markdown = "\n\n".join(part for part in parts if part)
    write_text_atomically(
        paths["markdown"], lambda handle: handle.write(markdown + "\n")
    )
    plot_all(result, out_dir)
    write_html(result, paths["html"])
    return paths
