#!/usr/bin/env python3
r"""Evaluation jobs on users' models and data: loading, the benchmark engine and
dataset attribution, in one process or across ranks under ``torchrun``.

>>> from captum_ext.evaluation import benchmark, load_classifier
>>> model, tokenizer = load_classifier("my-finetuned-model/")
>>> result = benchmark(model, tokenizer, data, methods=["AttCAT", "Saliency"])
>>> result.to_csv("results.csv")

This floor sits above :mod:`captum_ext.attr` and :mod:`captum_ext.metrics`:
it imports them, never the other way round. Names are imported on first use.
"""

import importlib
from typing import Any, List

__all__ = [
    "BenchmarkResult",
    "DataError",
    "ManifestMismatchError",
    "MethodResult",
    "TextData",
    "attribute_dataset",
    "benchmark",
    "benchmark_default_tasks",
    "load_classifier",
    "load_data",
]

_WHERE = {
    "BenchmarkResult": "results",
    "DataError": "data",
    "ManifestMismatchError": "attribute",
    "MethodResult": "results",
    "TextData": "data",
    "attribute_dataset": "attribute",
    "benchmark": "engine",
    "benchmark_default_tasks": "tasks",
    "load_classifier": "models",
    "load_data": "data",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_WHERE[name]}")
    return getattr(module, name)


def __dir__() -> List[str]:
    return sorted(list(globals()) + __all__)
