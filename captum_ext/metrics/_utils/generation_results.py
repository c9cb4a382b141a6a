#!/usr/bin/env python3
r"""Result type of the metrics of generated text."""

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from captum_ext._utils.teacher_forcing import IGNORE_INDEX

__all__ = ["GenerationMetricResult", "per_target_result"]


class GenerationMetricResult(NamedTuple):
    r"""Per-target values of a faithfulness metric of generated text.

    Attributes:
        score (Tensor): ``[batch, T]``, one value per target token; NaN where a
            row has no target (a shorter continuation) or the protocol skips it.
        sequence (Tensor): ``[batch]``, the sum of ``score`` over each row's
            targets (NaN if one of them is NaN).
        curve (Tensor): ``[batch, T, levels]``, the value at each level (the
            soft metrics: ``[batch, T, n_samples]``, one value per Bernoulli
            draw).
        levels (Tensor, optional): ``[levels]``, the fractions of prompt tokens
            perturbed (or kept, for sufficiency); None for the soft metrics.
    """

    score: Tensor
    sequence: Tensor
    curve: Tensor
    levels: Optional[Tensor]


def per_target_result(
    score: Tensor, curve: Tensor, target: Tensor, levels: Optional[Tensor]
) -> GenerationMetricResult:
    r"""``score`` ``[batch, T]`` and ``curve`` ``[batch, T, k]`` in float32, NaN
    where a row has no target, and ``sequence``: the sum of ``score`` over each
    row's targets."""
    has_target = target != IGNORE_INDEX
    score = torch.where(has_target, score, float("nan")).float()
    curve = torch.where(has_target[..., None], curve, float("nan")).float()
    sequence = torch.where(has_target, score, torch.zeros_like(score)).sum(1)
    return GenerationMetricResult(score, sequence, curve, levels)
