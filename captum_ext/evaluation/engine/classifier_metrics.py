#!/usr/bin/env python3
r"""A classifier's metrics on one batch, shared by the benchmark
(:mod:`~captum_ext.evaluation.engine.classifier`) and dataset attribution
(:mod:`~captum_ext.evaluation.attribute`): every metric of the registry's
``METRICS`` on a method's scores (:func:`metric_values`), with one forward pass
per distinct input row for all of them (:class:`SharedForward`)."""

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from captum_ext._utils.token_batch import TokenBatch
from captum_ext.evaluation.registry import (
    MethodFn,
    MetricContext,
    MetricSpec,
    MetricValue,
)

__all__ = ["SharedForward", "explain_batch", "metric_values"]


class SharedForward:
    r"""Logits memoised per input row, for all metrics of all methods on one
    batch.

    The default protocols perturb the same inputs more than once: AOPC, LOdds
    and hiding delete the same top-ranked tokens, sufficiency and revealing keep
    the same ones, every metric re-runs the unperturbed batch, and the extreme
    levels (every content token removed or kept) are the same for every method.
    Each distinct row runs once, which makes the metrics about 3x cheaper. A
    row's key is its tokens, mask and segment ids up to its last attended
    position: trailing padding, which the metrics trim differently per chunk,
    does not change the logits.
    """

    def __init__(self, forward: Callable[..., Tensor]) -> None:
        self.forward = forward
        self.rows: Dict[Tuple[bytes, ...], Tensor] = {}

    def remember(
        self,
        logits: Tensor,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Optional[Tensor] = None,
    ) -> None:
        keys = _row_keys(input_ids, attention_mask, token_type_ids)
        self.rows.update(zip(keys, logits.detach()))

    def __call__(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Optional[Tensor] = None,
    ) -> Tensor:
        keys = _row_keys(input_ids, attention_mask, token_type_ids)
        missing = {key: row for row, key in enumerate(keys) if key not in self.rows}
        if missing:
            rows = torch.tensor(list(missing.values()), device=input_ids.device)
            ids, mask = input_ids[rows], attention_mask[rows]
            types = None if token_type_ids is None else token_type_ids[rows]
            self.remember(self.forward(ids, mask, types), ids, mask, types)
        return torch.stack([self.rows[key] for key in keys])


def _row_keys(
    input_ids: Tensor, attention_mask: Tensor, token_type_ids: Optional[Tensor] = None
) -> List[Tuple[bytes, ...]]:
    ends = (attention_mask.cumsum(-1) * attention_mask).argmax(-1) + 1  # [batch]
    parts = [input_ids, attention_mask]
    parts += [] if token_type_ids is None else [token_type_ids]
    arrays = [part.cpu().numpy() for part in parts]
    return [
        tuple(array[row, :end].tobytes() for array in arrays)
        for row, end in enumerate(ends.tolist())
    ]


def _other_classes(
    explain: MethodFn, batch: TokenBatch, target: Tensor, scores: Tensor
) -> Callable[[Tensor], Tensor]:
    r"""``explain(classes)`` for Kendall-tau: rows asking for the class already
    explained (``target``) reuse their ``scores``; only the other rows run the
    method again."""

    def explain_for(classes: Tensor) -> Tensor:
        out = scores.clone()
        redo = (classes != target).nonzero().flatten()
        if len(redo):
            rows = batch.select(redo)
            out[redo] = explain_batch(explain, rows, classes[redo]).detach().float()
        return out

    return explain_for


def explain_batch(
    explain: MethodFn, batch: TokenBatch, target: Optional[Tensor]
) -> Tensor:
    r"""A registry method's scores ``[batch, pos]`` on ``batch`` for ``target``
    (None: the predicted classes)."""
    return explain(batch.input_ids, batch.attention_mask, target, batch.token_type_ids)


def metric_values(
    metrics: Sequence[MetricSpec],
    forward: Callable[..., Tensor],
    batch: TokenBatch,
    target: Tensor,
    scores: Tensor,
    explain: MethodFn,
    tokenizer: Any,
    labels: Optional[Tensor] = None,
) -> Iterator[Tuple[str, MetricValue]]:
    r"""``(column, value)`` of every metric on one batch's ``scores``
    ``[batch, pos]`` for ``target`` ``[batch]``; ``forward`` is the batch's
    :class:`SharedForward`, shared by every metric and method of the batch."""
    other_classes = _other_classes(explain, batch, target, scores)
    context = MetricContext(
        forward,
        batch.input_ids,
        batch.attention_mask,
        target,
        tokenizer,
        other_classes,
        batch.token_type_ids,
        labels,
        explain,
    )
    for metric in metrics:
        yield from metric.compute(context, scores).items()
