#!/usr/bin/env python3
r"""What a benchmark run returns: one row per (task, method) with mean metric
values, per-example values, mean curves and paired timings, plus the examples and
per-layer maps the report draws. A task of the generation benchmark (a causal
LM) has its own columns and keeps :class:`GenerationExplanation` examples.

A result shows itself: its ``repr`` is each task's faithfulness-cost front in
a few terminal lines, and in a notebook it is the report's frontier, tables
and highlighted examples (built by :mod:`~captum_ext.evaluation.result_views`
and :mod:`~captum_ext.evaluation.figures`, which the report's files share)."""

import csv
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple, Union

from torch import Tensor

from captum_ext.evaluation._utils.atomic import write_text_atomically
from captum_ext.evaluation.frontier import budget_front, control_value, frontier_points
from captum_ext.evaluation.result_rows import MethodResult, TaskRows
from captum_ext.evaluation.result_views import (
    column_header,
    examples_html,
    frontier_html,
    frontier_path,
    html_table,
    table_cells,
)
from captum_ext.visualization import (
    Explanation,
    fit_line,
    GenerationExplanation,
    html_safe,
    notebook_html,
    terminal_safe,
)

__all__ = ["BenchmarkResult"]


@dataclass
class BenchmarkResult:
    r"""Everything the report needs, and the per-example values."""

    rows: List[MethodResult]
    metrics: Dict[str, bool]  # column -> higher is better
    examples: Dict[str, List[Explanation]]
    config: Dict[str, Any]
    wall_seconds: float = 0.0
    layer_maps: Dict[str, Dict[str, Tuple[List[str], Tensor]]] = field(
        default_factory=dict
    )
    # task -> its metric columns, in order (a task missing here has them all)
    columns: Dict[str, List[str]] = field(default_factory=dict)
    # task -> the first examples of a generation task, every method's [T, P]
    generation_examples: Dict[str, List[GenerationExplanation]] = field(
        default_factory=dict
    )

    def task_columns(self, task: str) -> List[str]:
        r"""The metric columns of ``task``, in order."""
        return self.columns.get(task, list(self.metrics))

    @property
    def tasks(self) -> List[str]:
        r"""The tasks of the rows, in the order they first appear."""
        return list(dict.fromkeys(row.task for row in self.rows))

    def task_rows(self, task: str) -> TaskRows:
        r"""``task``'s rows with its metric columns and their directions."""
        rows = [row for row in self.rows if row.task == task]
        columns = {m: self.metrics[m] for m in self.task_columns(task)}
        return TaskRows(task, rows, columns)

    @property
    def generation_tasks(self) -> List[str]:
        r"""The tasks that explain what a causal LM generates."""
        return list(self.generation_examples)

    def __repr__(self) -> str:
        r"""A few lines of at most 100 columns for a terminal: the run, then per
        task the faithfulness-cost front of its first metric (value @ time
        ratio, cheapest first)."""
        methods = len(dict.fromkeys(row.method for row in self.rows))
        columns = " ".join(column_header(m, up) for m, up in self.metrics.items())
        lines = [
            f"BenchmarkResult: {len(self.tasks)} task(s), {methods} method(s), "
            f"{columns}; {self.wall_seconds:.0f} s"
        ]
        for table in map(self.task_rows, self.tasks):
            if not table.columns:  # no metric: no front to show
                continue
            metric, up = next(iter(table.columns.items()))
            floor = control_value(table.rows, metric)
            front = budget_front(frontier_points(table.rows, metric), up, floor)
            points = ", ".join(
                f"{p.method} {p.value:.3f} @{p.cost:.1f}x" for p in front
            )
            lines.append(
                f"  {table.task} (n={table.rows[0].n}) {metric} front: "
                f"{points or 'none'}"
            )
        lines.append("  .table(), .to_csv(path); report.write_report(result, dir)")
        return "\n".join(fit_line(terminal_safe(line)) for line in lines)

    def _repr_html_(self) -> str:
        r"""In a notebook: the report's frontier, tables and highlighted
        examples as one HTML fragment with the figures embedded and the styles
        scoped."""
        # Drawing needs matplotlib: imported when a notebook shows a result.
        from captum_ext.evaluation.figures import frontier_figure

        tables = [self.task_rows(task) for task in self.tasks]
        with tempfile.TemporaryDirectory(prefix="captum_ext_report_") as scratch:
            out = Path(scratch)
            for table in tables:
                frontier_figure(table, frontier_path(out, table.task))
            body = frontier_html(tables, out)
        for table in tables:
            body += [
                f"<h2>{html_safe(table.task)}</h2>",
                html_table(table_cells(table)),
            ]
            body += examples_html(
                self.examples.get(table.task, []),
                self.generation_examples.get(table.task, []),
                heading=3,
            )
        return notebook_html("\n".join(body))

    @classmethod
    def combine(cls, results: Sequence["BenchmarkResult"]) -> "BenchmarkResult":
        r"""One result from several tasks' results: the union of their metric
        columns, each task keeping its own (a classifier task and the
        generation task share AOPC, LOdds and Sufficiency, whose better
        direction is the same)."""
        if not results:
            raise ValueError("no results to combine")
        config = dict(results[0].config)
        for key in ("tasks", "data", "model", "truncated", "max_length", "generation"):
            config[key] = _merged(r.config.get(key) for r in results)
        return cls(
            rows=[row for r in results for row in r.rows],
            metrics={k: v for r in results for k, v in r.metrics.items()},
            examples={k: v for r in results for k, v in r.examples.items()},
            config=config,
            wall_seconds=sum(r.wall_seconds for r in results),
            layer_maps={k: v for r in results for k, v in r.layer_maps.items()},
            columns={
                row.task: r.task_columns(row.task) for r in results for row in r.rows
            },
            generation_examples={
                k: v for r in results for k, v in r.generation_examples.items()
            },
        )

    def table(self) -> List[Dict[str, Any]]:
        r"""One dict per (task, method): metric means, ``class_agnostic`` (where
        Kendall-τ does not apply), ``no_signal`` (how many examples' scores
        were constant, left out of every metric), the time ratio with its
        ``timing_suspect`` flag, and the seconds behind it."""
        return [
            {
                "task": row.task,
                "method": row.method,
                "family": row.family,
                "n": row.n,
                **{c: row.metrics.get(c, math.nan) for c in self.metrics},
                "class_agnostic": row.class_agnostic,
                "no_signal": len(row.constant),
                "time_ratio": row.time_ratio,
                "timing_suspect": row.timing_suspect,
                "seconds": row.seconds,
                "forward_seconds": row.forward_seconds,
            }
            for row in self.rows
        ]

    def per_example(self) -> List[Dict[str, Any]]:
        r"""One dict per (task, method, example row) with every metric value
        and ``no_signal`` (the explanation was constant: every value NaN)."""
        records = []
        for row in self.rows:
            constant = set(row.constant)
            for i, data_row in enumerate(row.rows):
                values = {c: v[i] for c, v in row.per_example.items()}
                records.append(
                    {
                        "task": row.task,
                        "method": row.method,
                        "row": data_row,
                        **values,
                        "no_signal": data_row in constant,
                    }
                )
        return records

    def to_dict(self) -> Dict[str, Any]:
        r"""Everything in the result as plain JSON types, NaN and inf as None
        (strict JSON has neither): the configuration, each metric's better
        direction, :meth:`table`, each row's mean curves, :meth:`per_example`,
        the layer maps and the kept examples."""
        document = {
            "config": self.config,
            "wall_seconds": self.wall_seconds,
            "metrics": {
                name: {"higher_is_better": up} for name, up in self.metrics.items()
            },
            "table": self.table(),
            "curves": [_curves_json(row) for row in self.rows],
            "per_example": self.per_example(),
            "layer_maps": {
                task: {
                    name: {"tokens": tokens, "scores": scores.tolist()}
                    for name, (tokens, scores) in maps.items()
                }
                for task, maps in self.layer_maps.items()
            },
            "examples": {
                task: [_example_json(example) for example in examples]
                for task, examples in self.examples.items()
            },
        }
        if self.generation_examples:
            document["generation_examples"] = {
                task: [_generation_json(example) for example in examples]
                for task, examples in self.generation_examples.items()
            }
        return _finite(document)

    def to_csv(self, path: Union[str, Path], per_example: bool = False) -> Path:
        r"""Writes :meth:`table` (or :meth:`per_example`) as CSV."""
        records = self.per_example() if per_example else self.table()
        columns = list(records[0]) if records else ["task", "method"]
        for record in records:
            columns += [c for c in record if c not in columns]
        return write_text_atomically(path, lambda f: _csv(f, columns, records))

    def to_json(self, path: Union[str, Path]) -> Path:
        r"""Writes :meth:`to_dict` as strict JSON."""
        document = self.to_dict()
        return write_text_atomically(
            path,
            lambda f: json.dump(document, f, indent=1, allow_nan=False, default=str),
        )


def _curves_json(row: MethodResult) -> Dict[str, Any]:
    return {
        "task": row.task,
        "method": row.method,
        **{
            name: {"grid": grid, "mean": values}
            for name, (grid, values) in row.curves.items()
        },
    }


def _example_json(example: Explanation) -> Dict[str, Any]:
    return {
        "text": example.text,
        "tokens": example.tokens,
        "special_mask": example.specials(),
        "label_names": example.label_names,
        "pred_class": example.pred_class,
        "pred_prob": example.pred_prob,
        "target": example.target,
        "true_class": example.true_class,
        "scores": {k: v.tolist() for k, v in example.scores.items()},
    }


def _generation_json(example: GenerationExplanation) -> Dict[str, Any]:
    return {
        "prompt": example.prompt,
        "continuation": example.continuation,
        "generated": example.generated,
        "prompt_tokens": example.prompt_tokens,
        "target_tokens": example.target_tokens,
        "special_mask": example.specials(),
        "evidence": example.evidence,
        "scores": {k: v.tolist() for k, v in example.scores.items()},
    }


def _finite(value: Any) -> Any:
    r"""``value`` with every non-finite float inside it replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _merged(values: Any) -> Any:
    out: Dict[str, Any] = {}
    for value in values:
        if isinstance(value, dict):
            out.update(value)
    return out


def _csv(handle: Any, columns: List[str], records: List[Dict[str, Any]]) -> None:
    writer = csv.DictWriter(handle, fieldnames=columns)
    writer.writeheader()
    writer.writerows(records)
