#!/usr/bin/env python3
r"""The registries of metrics: :data:`METRICS` (classifiers): name ->
:class:`MetricSpec`, whose ``compute(context, scores)`` returns a
:class:`MetricValue` (a value per example, optionally a curve) for each of its
table columns; :data:`GENERATION_METRICS` (what a causal LM generates): name
-> :class:`GenerationMetricSpec`, the same on scores ``[batch, T, P]``. Each
entry states what it needs (gold labels, explanations of other classes)."""

import zlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence

import torch
from torch import Tensor

from captum_ext._utils.teacher_forcing import IGNORE_INDEX
from captum_ext._utils.token_batch import TokenBatch
from captum_ext.metrics import (
    aopc,
    generation_aopc,
    generation_log_odds,
    generation_soft_nc,
    generation_soft_ns,
    generation_sufficiency,
    GenerationMetricResult,
    hiding_revealing,
    kendall_tau,
    log_odds,
    MetricResult,
    sufficiency,
    TokenOptions,
)

__all__ = [
    "GENERATION_METRICS",
    "GenerationMetricContext",
    "GenerationMetricSpec",
    "METRICS",
    "METRIC_ROWS",
    "MetricContext",
    "MetricSpec",
    "MetricValue",
    "register_generation_metric",
    "register_metric",
]

# Perturbed inputs per forward pass of a metric: enough to keep the cores busy,
# far from memory limits at 64 tokens.
METRIC_ROWS = 128


# ---------------------------------------------------------------- classifiers
@dataclass
class MetricContext:
    r"""What a metric gets besides the scores: one padded batch, a way to
    explain other classes (Kendall-tau needs them) and the method itself
    (``method(input_ids, attention_mask, target, token_type_ids)``, which
    sensitivity_max re-runs on perturbed inputs)."""

    forward: Callable[..., Tensor]
    input_ids: Tensor  # [batch, pos]
    attention_mask: Tensor  # [batch, pos]
    target: Tensor  # [batch]
    tokenizer: Any
    explain: Callable[[Tensor], Tensor]
    token_type_ids: Optional[Tensor] = None  # [batch, pos], text pairs only
    labels: Optional[Tensor] = None  # [batch] gold labels, when the data has them
    method: Optional[Callable[..., Tensor]] = None

    @property
    def batch(self) -> TokenBatch:
        return TokenBatch.of(self.input_ids, self.attention_mask, self.token_type_ids)


@dataclass
class MetricValue:
    r"""``per_example`` ``[batch]``; ``curve`` ``[batch, len(grid)]`` when the
    metric is an area under a curve."""

    per_example: Tensor
    curve: Optional[Tensor] = None
    grid: Optional[Sequence[float]] = None


MetricCompute = Callable[[MetricContext, Tensor], Dict[str, MetricValue]]


@dataclass(frozen=True)
class MetricSpec:
    r"""A metric as the engine runs it; one call may fill several columns
    (hiding and revealing come from one pass).

    Args:
        name (str): registry name (what ``--metrics`` selects).
        compute (Callable): ``compute(context, scores)`` returns a
            :class:`MetricValue` per column.
        columns (dict[str, bool]): column label -> higher is better.
        needs_labels (bool): True when the metric scores against gold labels
            (the engine refuses it on data without labels).
        explains_other_classes (bool): True when it runs the method again for
            other classes (``context.explain``); it does not apply to a
            class-agnostic method (the engine leaves its values out: NaN in
            the table, null in JSON).
        causal_lm (bool): True when it supports causal language models.
    """

    name: str
    compute: MetricCompute
    columns: Dict[str, bool]
    needs_labels: bool = False
    explains_other_classes: bool = False
    causal_lm: bool = False


METRICS: Dict[str, MetricSpec] = {}


def register_metric(
    name: str, compute: MetricCompute, columns: Dict[str, bool], **needs: Any
) -> None:
    r"""Adds a metric to :data:`METRICS`; the keywords ``needs`` are the other
    fields of :class:`MetricSpec` (``needs_labels=True``, ...)."""
    if name in METRICS:
        raise ValueError(f"metric {name!r} is already registered")
    METRICS[name] = MetricSpec(name, compute, dict(columns), **needs)


def _call_metric(
    metric: Callable[..., Any], context: MetricContext, explanation: Any
) -> Any:
    r"""THE one place the engine calls a captum_ext metric: ``explanation`` is
    the scores, or the explain function for Kendall-tau. Every metric runs
    with its default protocol against the explained target."""
    return metric(
        context.forward,
        context.input_ids,
        explanation,
        target=context.target,
        additional_forward_args=context.batch.forward_args(),
        tokens=TokenOptions.from_tokenizer(context.tokenizer),
        internal_batch_size=METRIC_ROWS,
    )


def _value(result: MetricResult) -> MetricValue:
    return MetricValue(result.score, result.curve, result.levels.tolist())


def _curve_metric(metric: Callable[..., MetricResult], column: str) -> MetricCompute:
    r"""AOPC, LOdds and sufficiency share a signature and a result type."""

    def compute(context: MetricContext, scores: Tensor) -> Dict[str, MetricValue]:
        return {column: _value(_call_metric(metric, context, scores))}

    return compute


def _kendall_tau(context: MetricContext, scores: Tensor) -> Dict[str, MetricValue]:
    # Re-explains the batch for every class: part of the metric, not timed.
    return {
        "Kendall-tau": MetricValue(_call_metric(kendall_tau, context, context.explain))
    }


def _hiding_revealing(context: MetricContext, scores: Tensor) -> Dict[str, MetricValue]:
    # Default protocol: accuracy against the unperturbed prediction, which is
    # what the explained target is; the "decoded" preset uses gold labels.
    result = _call_metric(hiding_revealing, context, scores)
    return {"Hide": _value(result.hiding), "Reveal": _value(result.revealing)}


register_metric("aopc", _curve_metric(aopc, "AOPC"), {"AOPC": True})
register_metric("log_odds", _curve_metric(log_odds, "LOdds"), {"LOdds": False})
register_metric(
    "kendall_tau", _kendall_tau, {"Kendall-tau": False}, explains_other_classes=True
)
register_metric("hiding_revealing", _hiding_revealing, {"Hide": False, "Reveal": True})
register_metric(
    "sufficiency", _curve_metric(sufficiency, "Sufficiency"), {"Sufficiency": False}
)


# ------------------------------------------------------ metrics of generated text
@dataclass
class GenerationMetricContext:
    r"""What a metric of generated text gets besides the scores ``[batch, T,
    P]``: the prompts, their continuations, the causal LM's forward pass and
    the method itself (``method(prompt_ids, attention_mask, target_ids)``,
    which sensitivity_max re-runs on perturbed prompts) and the tokenizer."""

    forward: Callable[..., Tensor]  # causal_lm_forward(model)
    input_ids: Tensor  # [batch, P], left-padded prompts
    attention_mask: Tensor  # [batch, P]
    target: Tensor  # [batch, T], right-padded with -100
    tokens: TokenOptions  # the special ids: never perturbed
    method: Optional[Callable[..., Tensor]] = None
    tokenizer: Any = None


GenerationMetricCompute = Callable[
    [GenerationMetricContext, Tensor], Dict[str, MetricValue]
]


@dataclass(frozen=True)
class GenerationMetricSpec:
    r"""A metric of explanations of generated text as the generation benchmark
    runs it (the counterpart of :class:`MetricSpec` for causal LMs).

    Args:
        name (str): registry name (what ``--metrics`` selects with
            ``--prompt-column`` or on the built-in task ``recall``).
        compute (Callable): ``compute(context, scores)`` returns a
            :class:`MetricValue` per column: one value per example, the mean
            over its target tokens.
        columns (dict[str, bool]): column label -> higher is better.
    """

    name: str
    compute: GenerationMetricCompute
    columns: Dict[str, bool]


GENERATION_METRICS: Dict[str, GenerationMetricSpec] = {}


def register_generation_metric(
    name: str, compute: GenerationMetricCompute, columns: Dict[str, bool]
) -> None:
    r"""Adds a metric of generated text to :data:`GENERATION_METRICS`."""
    if name in GENERATION_METRICS:
        raise ValueError(f"metric {name!r} of generated text is already registered")
    GENERATION_METRICS[name] = GenerationMetricSpec(name, compute, dict(columns))


def _generation_metric(
    metric: Callable[..., GenerationMetricResult], column: str
) -> GenerationMetricCompute:
    r"""THE one place the engine calls a metric of generated text: its default
    protocol on the teacher-forced continuation; each example's value (and
    per-level curve) is the mean of ``score`` (``curve``) over its target
    tokens (NaN ones, which the protocol skips, left out), so prompts with
    longer continuations weigh the same."""

    def compute(
        context: GenerationMetricContext, scores: Tensor
    ) -> Dict[str, MetricValue]:
        result = metric(
            context.forward,
            context.input_ids,
            scores,
            context.target,
            (context.attention_mask,),
            tokens=context.tokens,
            internal_batch_size=METRIC_ROWS,
        )
        value = MetricValue(result.score.double().nanmean(1))
        if result.levels is not None:  # a curve over the protocol's levels
            value.curve = result.curve.double().nanmean(1)  # [batch, levels]
            value.grid = result.levels.tolist()
        return {column: value}

    return compute


def _soft_erasure_metric(
    metric: Callable[..., GenerationMetricResult], column: str
) -> GenerationMetricCompute:
    r"""Soft-NC / Soft-NS, one example at a time with draws seeded by its
    prompt and continuation: the library seeds draws by row position in the
    batch, and an example's value must not depend on its batch or rank."""

    def compute(
        context: GenerationMetricContext, scores: Tensor
    ) -> Dict[str, MetricValue]:
        values = []
        for row in range(len(scores)):
            prompt = context.input_ids[row][context.attention_mask[row].bool()]
            target = context.target[row][context.target[row] != IGNORE_INDEX]
            seed = zlib.crc32(repr([prompt.tolist(), target.tolist()]).encode())
            one = slice(row, row + 1)
            result = metric(
                context.forward,
                context.input_ids[one],
                scores[one],
                context.target[one],
                (context.attention_mask[one],),
                tokens=context.tokens,
                seed=seed,
            )
            values.append(result.score.double().nanmean(1))
        return {column: MetricValue(torch.cat(values))}

    return compute


for _name, _factory, _metric, _column, _higher in (
    ("aopc", _generation_metric, generation_aopc, "AOPC", True),
    ("sufficiency", _generation_metric, generation_sufficiency, "Sufficiency", False),
    ("log_odds", _generation_metric, generation_log_odds, "LOdds", False),
    ("soft_nc", _soft_erasure_metric, generation_soft_nc, "Soft-NC", True),
    ("soft_ns", _soft_erasure_metric, generation_soft_ns, "Soft-NS", True),
):
    register_generation_metric(_name, _factory(_metric, _column), {_column: _higher})
