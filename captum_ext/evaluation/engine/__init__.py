#!/usr/bin/env python3
r"""The benchmark engine: chosen methods scored by chosen metrics on any model
and data, each method timed against forward passes on the same batch, in one
process or across ranks under ``torchrun``.

- :mod:`~captum_ext.evaluation.engine.skeleton`: the one shard -> score ->
  gather -> merge run, the per-example records every kind of model fills, and
  the :class:`EngineStrategy` a kind of model supplies;
- :mod:`~captum_ext.evaluation.engine.classifier`: a sequence classifier's
  strategy, :func:`benchmark` and :func:`run_benchmark`;
- :mod:`~captum_ext.evaluation.engine.causal_lm`: a causal LM's strategy (what
  it generates) and :func:`run_generation_benchmark`;
- :mod:`~captum_ext.evaluation.engine.classifier_metrics`: a classifier's
  metrics on one batch with one forward per distinct row (shared with dataset
  attribution).
"""

from captum_ext.evaluation.engine.causal_lm import (
    evidence_column,
    evidence_set_column,
    EVIDENCE_TOP_K,
    run_generation_benchmark,
)
from captum_ext.evaluation.engine.classifier import benchmark, run_benchmark
from captum_ext.evaluation.engine.classifier_metrics import metric_values, SharedForward
from captum_ext.evaluation.engine.skeleton import (
    check_run_sizes,
    checked_max_length,
    default_max_length,
    EngineStrategy,
    Examples,
    kept_scores,
    merge_method,
    MethodShard,
    no_signal,
    ranked_tokens,
    run_config,
    run_engine,
)

__all__ = [
    "EVIDENCE_TOP_K",
    "EngineStrategy",
    "Examples",
    "MethodShard",
    "SharedForward",
    "benchmark",
    "check_run_sizes",
    "checked_max_length",
    "default_max_length",
    "evidence_column",
    "evidence_set_column",
    "kept_scores",
    "merge_method",
    "metric_values",
    "no_signal",
    "ranked_tokens",
    "run_benchmark",
    "run_config",
    "run_engine",
    "run_generation_benchmark",
]
