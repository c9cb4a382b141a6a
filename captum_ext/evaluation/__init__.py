#!/usr/bin/env python3
r"""Evaluation jobs on users' models and data: loading, the benchmark engines
(classifiers; what causal LMs generate) and dataset attribution, in one process
or across ranks under ``torchrun``.

>>> from captum_ext.evaluation import benchmark, load_classifier
>>> model, tokenizer = load_classifier("my-finetuned-model/")
>>> result = benchmark(model, tokenizer, data, methods=["AttCAT", "Saliency"])
>>> result.to_csv("results.csv")

This floor sits above :mod:`captum_ext.attr` and :mod:`captum_ext.metrics`:
it imports them, never the other way round. Names are imported on first use.
"""

from captum_ext._utils.lazy import lazy_attributes

_WHERE = {
    "BenchmarkResult": "results",
    "DataError": "user_data",
    "ManifestMismatchError": "attribute",
    "MethodResult": "result_rows",
    "OutputLockedError": "attribute",
    "LoadedExamples": "user_data",
    "attribute_dataset": "attribute",
    "benchmark": "engine",
    "benchmark_default_tasks": "tasks",
    "load_classifier": "user_models",
    "load_data": "user_data",
    "resolve_model_source": "user_models",
    "run_generation_benchmark": "engine",
}
__all__ = list(_WHERE)

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {name: f"{__name__}.{module}" for name, module in _WHERE.items()},
    globals(),
)
