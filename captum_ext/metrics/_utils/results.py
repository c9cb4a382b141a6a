#!/usr/bin/env python3
r"""Result types of the metrics."""

from typing import NamedTuple

from torch import Tensor

__all__ = [
    "HidingRevealingResult",
    "MetricResult",
    "TokenOverlapResult",
]


class MetricResult(NamedTuple):
    r"""A per-example score and the curve it summarises.

    Attributes:
        score (Tensor): ``[batch]``. NaN for an example the protocol skips.
        curve (Tensor): ``[batch, levels]``, the value at each level. NaN at a
            level the protocol skips for that example.
        levels (Tensor): ``[levels]``, the fractions of tokens perturbed (or
            kept, for sufficiency and revealing).
    """

    score: Tensor
    curve: Tensor
    levels: Tensor


class HidingRevealingResult(NamedTuple):
    r"""Both curves of :func:`~captum_ext.metrics.hiding_revealing`; each
    ``score`` is the area under its curve (hiding: lower is better; revealing:
    higher is better)."""

    hiding: MetricResult
    revealing: MetricResult


class TokenOverlapResult(NamedTuple):
    r"""Corpus-level result of :func:`~captum_ext.metrics.token_overlap`.

    Attributes:
        score (Tensor): 0-d, the mean pairwise overlap of the classes' top tokens.
        classes (Tensor): ``[classes]``, the classes compared (those that are the
            target of at least one example), increasing.
        top_tokens (Tensor): ``[classes, top_k]`` token ids, best first; -1 where
            a class has fewer than ``top_k`` distinct tokens.
    """

    score: Tensor
    classes: Tensor
    top_tokens: Tensor
