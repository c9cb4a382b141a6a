#!/usr/bin/env python3
r"""Captum's own metrics in the benchmark, beside the added ones:
:func:`captum.metrics.infidelity` (column ``Infidelity``) and
:func:`captum.metrics.sensitivity_max` (column ``SensMax``), registered in
``METRICS`` (classifiers) and ``GENERATION_METRICS`` (causal LMs). Both are
Captum's functions, called with a token ``perturb_func``,
:class:`~captum_ext.metrics.TokenSubsetPerturbation`: Captum's default
perturbations add noise to the inputs, which for token ids means other,
unrelated tokens. The replacement token is [MASK] where the tokenizer has
one, else what Captum's LLM baselines put in place of a token (the unknown
token, else the pad token; :func:`baseline_token_id`); special tokens and
padding are never replaced, the attention mask is kept.

**Infidelity** (lower is better): :math:`\mathbb{E}_I[(\beta\,\Phi^T I -
(f(x) - f(\tilde x)))^2]` over :data:`INFIDELITY_SAMPLES` draws of a random
subset :math:`I` of the non-special tokens (each replaced with probability
1/2: every subset equally likely), Captum's ``normalize=True`` (:math:`\beta`
the least-squares scale, so methods whose scores differ only in scale tie).
Classifiers: :math:`f` is the explained class's probability. Causal LMs:
:math:`f` is the continuation's teacher-forced log-probability
:math:`\sum_t \log p(y_t \mid x, y_{<t})` and :math:`\Phi` the scores summed
over target tokens (Captum's ``seq_attr`` of ``LLMAttribution``).

**Sensitivity-max** (lower is better): :math:`\max_j \|\Phi(\tilde x_j) -
\Phi(x)\|_F / \|\Phi(x)\|_F` over :data:`SENSITIVITY_SAMPLES` draws, each
replacing one random non-special token (the smallest change to a token
input); the method re-runs on every draw for the explained class
(classifiers) or the same continuation (causal LMs, the whole ``[T, P]``
scores compared).

Each draw costs a forward pass (infidelity) or a run of the method
(sensitivity-max), so each metric is measured on a share of the examples:
one in :data:`INFIDELITY_SHARE` and one in :data:`SENSITIVITY_SHARE`, those
whose attended token ids have a BLAKE2b hash divisible by it (the same
examples whatever the batches and ranks); the others are NaN, left out of
the mean.
"""

import hashlib
import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from captum.metrics import infidelity, sensitivity_max
from torch import Tensor

from captum_ext._utils.teacher_forcing import teacher_forced_batch
from captum_ext.attr._utils.continuations import prompt_pad_id
from captum_ext.evaluation.registry.captum_baselines import baseline_token_id
from captum_ext.evaluation.registry.metrics import (
    GenerationMetricContext,
    METRIC_ROWS,
    MetricContext,
    MetricValue,
    register_generation_metric,
    register_metric,
)
from captum_ext.metrics import TokenOptions, TokenSubsetPerturbation
from captum_ext.metrics._utils.teacher_forced_runner import probe_vocab_size

__all__ = [
    "INFIDELITY_SAMPLES",
    "INFIDELITY_SHARE",
    "SENSITIVITY_SAMPLES",
    "SENSITIVITY_SHARE",
    "replacement_id",
]

# Draws per example and the share of examples measured (one in SHARE, module
# docstring): infidelity costs a forward pass per draw, sensitivity-max a run
# of the method.
INFIDELITY_SAMPLES = 8
INFIDELITY_SHARE = 8
SENSITIVITY_SAMPLES = 2
SENSITIVITY_SHARE = 32


def replacement_id(tokenizer: Any) -> int:
    r"""The id the perturbations put in place of a token: [MASK], else
    :func:`baseline_token_id`."""
    mask = tokenizer.mask_token_id
    return int(mask) if mask is not None else baseline_token_id(tokenizer)


@dataclass(frozen=True)
class _Perturbed:
    r"""What both metrics read from a batch, classifier or causal LM."""

    input_ids: Tensor  # [batch, pos]
    forward_args: Tuple[Any, ...]  # (attention_mask, ...), expanded by Captum
    tokens: TokenOptions  # the replacement id as mask_token_id
    scores: Tensor  # [batch, pos] ([batch, T, P]: sensitivity of a causal LM)
    target: Optional[Tensor] = None  # [batch] explained classes

    def perturbation(self, **options: Any) -> TokenSubsetPerturbation:
        assert self.tokens.mask_token_id is not None
        return TokenSubsetPerturbation(
            self.tokens.mask_token_id, tokens=self.tokens, **options
        )

    def sampled(self, share: int) -> Tuple[Tensor, "_Perturbed"]:
        r"""The rows ``[k]`` whose attended ids hash to 0 modulo ``share``,
        and the batch of those rows."""
        mask = self.forward_args[0].bool()
        keys = [
            _digest(ids[kept].cpu().numpy().tobytes())
            for ids, kept in zip(self.input_ids, mask)
        ]
        rows = [r for r, key in enumerate(keys) if key % share == 0]
        index = torch.tensor(rows, dtype=torch.long, device=self.input_ids.device)
        return index, _Perturbed(
            self.input_ids[index],
            tuple(arg[index] for arg in self.forward_args),
            self.tokens,
            self.scores[index],
            None if self.target is None else self.target[index],
        )


def _digest(data: bytes) -> int:
    r"""A BLAKE2b hash as an integer (its low bits are as random as its high
    ones, unlike a CRC's)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _on_sampled(
    batch: _Perturbed, share: int, measure: Callable[[_Perturbed], Tensor]
) -> MetricValue:
    r"""``measure`` on the rows :meth:`_Perturbed.sampled` picks, NaN on the
    others (left out of the mean)."""
    out = torch.full((len(batch.input_ids),), math.nan, dtype=torch.float64)
    rows, sampled = batch.sampled(share)
    if len(rows):
        out[rows.cpu()] = measure(sampled).double().cpu()
    return MetricValue(out)


def _infidelity(batch: _Perturbed, forward: Callable[..., Tensor]) -> Tensor:
    rows = len(batch.input_ids)
    return infidelity(
        forward,
        batch.perturbation(),
        batch.input_ids,
        batch.scores,
        additional_forward_args=batch.forward_args,
        target=batch.target,
        n_perturb_samples=INFIDELITY_SAMPLES,
        # At most METRIC_ROWS perturbed rows a pass, one draw of each row.
        max_examples_per_batch=min(max(METRIC_ROWS, rows), rows * INFIDELITY_SAMPLES),
        normalize=True,
    )


def _sensitivity(batch: _Perturbed, method: Callable[..., Tensor]) -> Tensor:
    r"""``method(input_ids, forward_args, target)`` explains a batch."""
    input_ids, scores = batch.input_ids, batch.scores

    def explanation(inputs: Any, additional_forward_args: Any, target: Any) -> Any:
        ids = inputs[0] if isinstance(inputs, tuple) else inputs
        if isinstance(target, Tensor) and target.numel() == 1:
            target = target.reshape(1).expand(len(ids))  # Captum leaves it as one
        if ids.shape == input_ids.shape and torch.equal(ids, input_ids):
            result = scores  # the unperturbed inputs: scores already known
        else:
            result = method(ids, additional_forward_args, target).to(scores.dtype)
        return (result,) if isinstance(inputs, tuple) else result

    return sensitivity_max(
        explanation,
        input_ids,
        batch.perturbation(size=1, indicator=False),
        n_perturb_samples=SENSITIVITY_SAMPLES,
        max_examples_per_batch=len(input_ids) * SENSITIVITY_SAMPLES,
        additional_forward_args=batch.forward_args,
        target=batch.target,
    )


def _method(context: Any) -> Callable[..., Tensor]:
    if context.method is None:
        raise ValueError("sensitivity_max re-runs the method: context.method is None")
    method: Callable[..., Tensor] = context.method
    return method


@dataclass(frozen=True)
class _Kind:
    r"""What the two metrics need to know of a kind of model."""

    # (context, scores) -> the batch
    batch: Callable[[Any, Tensor], _Perturbed]
    # context -> infidelity's f(inputs, *forward_args) -> [rows] or [rows, C]
    function: Callable[[Any], Callable[..., Tensor]]
    # scores -> infidelity's attributions [batch, pos]
    attributions: Callable[[Tensor], Tensor]
    # method -> explain(input_ids, forward_args, target)
    explain: Callable[[Callable[..., Tensor]], Callable[..., Tensor]]


def _infidelity_metric(kind: _Kind) -> Callable[[Any, Tensor], Dict[str, MetricValue]]:
    def compute(context: Any, scores: Tensor) -> Dict[str, MetricValue]:
        batch = kind.batch(context, kind.attributions(scores))
        measure = partial(_infidelity, forward=kind.function(context))
        return {"Infidelity": _on_sampled(batch, INFIDELITY_SHARE, measure)}

    return compute


def _sensitivity_metric(kind: _Kind) -> Callable[[Any, Tensor], Dict[str, MetricValue]]:
    def compute(context: Any, scores: Tensor) -> Dict[str, MetricValue]:
        batch = kind.batch(context, scores)
        measure = partial(_sensitivity, method=kind.explain(_method(context)))
        return {"SensMax": _on_sampled(batch, SENSITIVITY_SHARE, measure)}

    return compute


# ---------------------------------------------------------------- classifiers
def _classifier_batch(context: MetricContext, scores: Tensor) -> _Perturbed:
    tokenizer = context.tokenizer
    return _Perturbed(
        context.input_ids,
        context.batch.forward_args(),
        TokenOptions(
            replacement_id(tokenizer),
            tokenizer.pad_token_id,
            tuple(tokenizer.all_special_ids),
        ),
        scores,
        context.target,
    )


def _probability(context: MetricContext) -> Callable[..., Tensor]:
    def probability(*inputs: Tensor) -> Tensor:
        return context.forward(*inputs).float().softmax(-1)  # [rows, C]

    return probability


def _classifier_explain(method: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def explain(input_ids: Tensor, forward_args: Tuple[Any, ...], target: Tensor):
        return method(input_ids, forward_args[0], target, *forward_args[1:])

    return explain


# ------------------------------------------------------ metrics of generated text
def _generation_batch(context: GenerationMetricContext, scores: Tensor) -> _Perturbed:
    r"""The prompts, with the continuation as a forward argument (Captum
    repeats it with its prompt)."""
    tokenizer = context.tokenizer
    return _Perturbed(
        context.input_ids,
        (context.attention_mask, context.target),
        TokenOptions(
            replacement_id(tokenizer),
            prompt_pad_id(tokenizer),
            context.tokens.special_token_ids,
        ),
        scores,
    )


def _log_likelihood(context: GenerationMetricContext) -> Callable[..., Tensor]:
    pad_id = prompt_pad_id(context.tokenizer)
    vocab_size = probe_vocab_size(context.forward, context.input_ids)

    def log_likelihood(prompt_ids: Tensor, mask: Tensor, target: Tensor) -> Tensor:
        joined = teacher_forced_batch(prompt_ids, mask, target, pad_id, vocab_size)
        logits = context.forward(*joined.model_inputs())  # [rows, P + T - 1, V]
        return joined.target_log_probs(logits).sum(1)  # [rows]

    return log_likelihood


def _generation_explain(method: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def explain(prompt_ids: Tensor, forward_args: Tuple[Any, ...], _: Any) -> Tensor:
        return method(prompt_ids, *forward_args)  # [rows, T, P]

    return explain


_CLASSIFIER = _Kind(
    _classifier_batch, _probability, lambda scores: scores, _classifier_explain
)
# [batch, T, P] -> [batch, P]: one ranking for the whole continuation.
_GENERATION = _Kind(
    _generation_batch,
    _log_likelihood,
    lambda scores: scores.sum(1),
    _generation_explain,
)
for _kind, _register in (
    (_CLASSIFIER, register_metric),
    (_GENERATION, register_generation_metric),
):
    _register("infidelity", _infidelity_metric(_kind), {"Infidelity": False})
    _register("sensitivity_max", _sensitivity_metric(_kind), {"SensMax": False})
