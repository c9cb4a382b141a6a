#!/usr/bin/env python3
r"""Faithfulness and plausibility metrics for token attributions, in the manner of
:mod:`captum.metrics`.

Faithfulness (perturbation curves): :func:`aopc`, :func:`log_odds`,
:func:`sufficiency`, :func:`hiding_revealing`. Class sensitivity:
:func:`kendall_tau`, :func:`token_overlap`. Plausibility against known evidence:
:func:`average_precision`, :func:`dot_product`. Each has one clean default,
documented in its docstring, and presets reproducing the papers' protocols
(``preset="attcat"``, ``"normxlogit"``, ``"decoded"``, ``"ferret"``), all in
one typed table (:func:`get_protocol`). The tokenizer's ids go in one
:class:`TokenOptions` (``tokens=TokenOptions.from_tokenizer(tokenizer)``).

.. _metric-arguments:

.. rubric:: Arguments every metric shares

Every metric takes Captum's leading arguments in Captum's order, its options
keyword-only. A metric's docstring documents its own arguments (``target``,
``preset``, ...) and names the ones below, which mean the same wherever they are
taken:

forward_func (Callable)
    ``forward_func(input_ids, attention_mask, *rest) -> logits [batch, C]``,
    e.g. :func:`captum_ext.classifier_forward`; a module runs in eval mode. Run
    on the inputs (for the predicted class and the number of classes) and, by
    the perturbation-curve metrics, on every perturbed level.
inputs (Tensor)
    token ids ``[batch, pos]``, padded left or right.
attributions (Tensor)
    one score per token ``[batch, pos]``; higher = more important for
    ``target``, where the metric has one. Sum embedding-level attributions over
    their last dimension first.
additional_forward_args (Tensor or tuple, optional)
    ``attention_mask`` or ``(attention_mask, *rest)``, passed to
    ``forward_func`` after the ids (the plausibility metrics read only the
    mask); ``[batch, pos]`` tensors follow their tokens when tokens are
    deleted. Default: None (no padding)
tokens (TokenOptions, optional)
    the [MASK], [PAD] and special ids (:class:`TokenOptions`). Special
    positions are never perturbed, ranked or counted, unless a preset says
    otherwise. Default: None (no special position)
internal_batch_size (int, optional)
    most rows per forward pass: examples, or (example, level) pairs of every
    curve; results do not depend on it. Default: None (the batch size)
show_progress (bool, optional)
    a tqdm progress bar. Default: False
"""

from captum_ext.metrics._core.aopc import aopc
from captum_ext.metrics._core.average_precision import average_precision
from captum_ext.metrics._core.dot_product import dot_product
from captum_ext.metrics._core.generation_aopc import generation_aopc
from captum_ext.metrics._core.generation_log_odds import generation_log_odds
from captum_ext.metrics._core.generation_soft_nc import generation_soft_nc
from captum_ext.metrics._core.generation_soft_ns import generation_soft_ns
from captum_ext.metrics._core.generation_sufficiency import generation_sufficiency
from captum_ext.metrics._core.hiding_revealing import hiding_revealing
from captum_ext.metrics._core.kendall_tau import kendall_tau
from captum_ext.metrics._core.log_odds import log_odds
from captum_ext.metrics._core.sufficiency import sufficiency
from captum_ext.metrics._core.token_overlap import token_overlap
from captum_ext.metrics._utils.generation import GenerationMetricResult
from captum_ext.metrics._utils.inputs import TokenOptions
from captum_ext.metrics._utils.protocols import (
    get_protocol,
    KendallProtocol,
    PerturbationProtocol,
)
from captum_ext.metrics._utils.results import (
    HidingRevealingResult,
    MetricResult,
    TokenOverlapResult,
)

__all__ = [
    "GenerationMetricResult",
    "HidingRevealingResult",
    "KendallProtocol",
    "MetricResult",
    "PerturbationProtocol",
    "TokenOptions",
    "TokenOverlapResult",
    "aopc",
    "average_precision",
    "dot_product",
    "generation_aopc",
    "generation_log_odds",
    "generation_soft_nc",
    "generation_soft_ns",
    "generation_sufficiency",
    "get_protocol",
    "hiding_revealing",
    "kendall_tau",
    "log_odds",
    "sufficiency",
    "token_overlap",
]
