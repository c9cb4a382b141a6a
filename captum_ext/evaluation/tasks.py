#!/usr/bin/env python3
r"""The two built-in tasks as plain inputs of the engine: a default fine-tuned
model (:mod:`captum_ext.defaults.models`) and the first examples of its held-out
split (:mod:`captum_ext.defaults.data`). Nothing about them is special to the engine.
"""

from dataclasses import dataclass, replace
from typing import Any, List, Optional, Sequence

from torch import nn

from captum_ext.defaults.data import load_split, TaskExamples, TASKS
from captum_ext.defaults.models import load_default_model, MAX_LENGTH
from captum_ext.evaluation.engine import run_benchmark
from captum_ext.evaluation.names import check_names
from captum_ext.evaluation.options import BenchmarkOptions
from captum_ext.evaluation.registry import METHODS, needs_decoders
from captum_ext.evaluation.results import BenchmarkResult

__all__ = [
    "DefaultTask",
    "benchmark_default_tasks",
    "default_decoder_texts",
    "default_task",
    "run_default_tasks",
]

# The decoders of both default models are fitted on the sentiment training
# texts (the fitted-decoder cache is keyed by them).
DECODER_TASK = "sentiment"


@dataclass
class DefaultTask:
    r"""A default model, its tokenizer, ``n`` held-out examples and the texts
    its decoders are fitted on."""

    name: str
    model: nn.Module
    tokenizer: Any
    data: TaskExamples
    max_length: int = MAX_LENGTH


def default_decoder_texts() -> List[str]:
    r"""The texts the default models' decoders are fitted on."""
    return list(load_split(DECODER_TASK, "train").texts)


def default_task(name: str, n: int, device: Any = None) -> DefaultTask:
    r"""Task ``name`` (``"sentiment"`` or ``"source"``) with its first ``n``
    held-out examples."""
    if name not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {name!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    model, tokenizer = load_default_model(name, device=device)
    return DefaultTask(name, model, tokenizer, load_split(name).head(n))


def benchmark_default_tasks(
    n: int,
    tasks: Sequence[str] = TASKS,
    methods: Optional[Sequence[str]] = None,
    metrics: Optional[Sequence[str]] = None,
    **options: Any,
) -> BenchmarkResult:
    r""":func:`~captum_ext.evaluation.benchmark` on each built-in task, one
    result (see :func:`run_default_tasks`); ``options`` are fields of
    :class:`~captum_ext.evaluation.options.BenchmarkOptions` (``batch_size``,
    ``device``, ``progress``)."""
    chosen = BenchmarkOptions(methods=methods, metrics=metrics, **options)
    return run_default_tasks(n, tasks, chosen)


def run_default_tasks(
    n: int, tasks: Sequence[str], options: BenchmarkOptions
) -> BenchmarkResult:
    r""":func:`~captum_ext.evaluation.engine.run_benchmark` on the first ``n``
    held-out examples of each built-in task in ``tasks``, one result;
    ``options``' ``task``, ``max_length`` and ``decoder_texts`` are the task's."""
    chosen = check_names(options.methods, METHODS, "method")
    decoder_texts = default_decoder_texts() if needs_decoders(chosen) else None
    results = []
    for name in tasks:
        task = default_task(name, n, device=options.device)
        for_task = replace(
            options,
            task=name,
            max_length=task.max_length,
            decoder_texts=decoder_texts,
        )
        results.append(run_benchmark(task.model, task.tokenizer, task.data, for_task))
    return BenchmarkResult.combine(results)
