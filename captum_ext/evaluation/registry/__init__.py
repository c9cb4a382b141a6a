#!/usr/bin/env python3
r"""The registries of the evaluation engine: every attribution method and every
metric it can run, by name. Adding to the benchmark is one entry each:

- :data:`METHODS` (:mod:`~captum_ext.evaluation.registry.methods`): name ->
  :class:`MethodSpec`, whose ``factory(model, tokenizer)`` returns
  ``explain(input_ids, attention_mask, target, token_type_ids=None)
  -> [batch, pos]`` (the call convention:
  :mod:`~captum_ext.evaluation.registry.call_convention`); Captum's own
  baselines among them are wrapped in
  :mod:`~captum_ext.evaluation.registry.captum_baselines`;
- :data:`METRICS` and :data:`GENERATION_METRICS`
  (:mod:`~captum_ext.evaluation.registry.metrics`): name -> :class:`MetricSpec`
  (:class:`GenerationMetricSpec`), whose ``compute(context, scores)`` returns a
  :class:`MetricValue` (a value per example, optionally a curve) for each of its
  table columns.

Each entry states what it needs (gradients, attention weights, fitted decoders,
gold labels), whether its scores ignore the target class and whether it supports
causal language models. The names are also listed, without torch, in
:mod:`captum_ext.evaluation.names`; this package refuses to import when the two
differ.
"""

from captum_ext.evaluation.names import (
    GENERATION_METHOD_NAMES,
    GENERATION_METRIC_NAMES,
    IMAGE_METHOD_NAMES,
    METHOD_NAMES,
    METRIC_NAMES,
)
from captum_ext.evaluation.registry.call_convention import (
    GenerationFn,
    MethodFn,
    rows_of_examples,
)
from captum_ext.evaluation.registry.captum_baselines import (
    ABLATION_ROWS,
    baseline_token_id,
    IG_ROWS,
    IG_STEPS,
)
from captum_ext.evaluation.registry.captum_metrics import (
    INFIDELITY_SAMPLES,
    INFIDELITY_SHARE,
    SENSITIVITY_SAMPLES,
    SENSITIVITY_SHARE,
)
from captum_ext.evaluation.registry.methods import (
    decoded_layer,
    decoders_for,
    method_spec,
    METHOD_VARIANTS,
    METHODS,
    MethodSpec,
    needs_decoders,
    register_method,
)
from captum_ext.evaluation.registry.metrics import (
    GENERATION_METRICS,
    GenerationMetricContext,
    GenerationMetricSpec,
    METRIC_ROWS,
    MetricContext,
    METRICS,
    MetricSpec,
    MetricValue,
    register_generation_metric,
    register_metric,
)

__all__ = [
    "ABLATION_ROWS",
    "GENERATION_METRICS",
    "INFIDELITY_SAMPLES",
    "INFIDELITY_SHARE",
    "SENSITIVITY_SAMPLES",
    "SENSITIVITY_SHARE",
    "GenerationFn",
    "GenerationMetricContext",
    "GenerationMetricSpec",
    "IG_ROWS",
    "IG_STEPS",
    "METHODS",
    "METHOD_VARIANTS",
    "METRICS",
    "METRIC_ROWS",
    "MethodFn",
    "MethodSpec",
    "baseline_token_id",
    "MetricContext",
    "MetricSpec",
    "MetricValue",
    "decoded_layer",
    "decoders_for",
    "method_spec",
    "register_method",
    "register_generation_metric",
    "rows_of_examples",
    "register_metric",
    "needs_decoders",
]

_GENERATION = tuple(name for name, spec in METHODS.items() if spec.causal_lm)
_IMAGES = tuple(name for name, spec in METHODS.items() if spec.images)
if (
    tuple(METHODS),
    _GENERATION,
    _IMAGES,
    tuple(METRICS),
    tuple(GENERATION_METRICS),
) != (
    METHOD_NAMES,
    GENERATION_METHOD_NAMES,
    IMAGE_METHOD_NAMES,
    METRIC_NAMES,
    GENERATION_METRIC_NAMES,
):
    raise ImportError(
        "the registry's methods and metrics differ from the names of "
        "captum_ext/evaluation/names.py, from which the command line builds its "
        f"choices: {list(METHODS)}, {list(_GENERATION)}, {list(_IMAGES)}, "
        f"{list(METRICS)}, "
        f"{list(GENERATION_METRICS)}"
    )
