#!/usr/bin/env python3
r"""Deterministic rankings of token scores, a batched Kendall :math:`\tau_b`,
and which explanations rank nothing (:func:`no_signal`)."""

import math

import torch
from torch import Tensor

__all__ = ["descending_order", "kendall_tau_b", "no_signal", "ranks_within"]

# Pairwise comparisons of one chunk of rows stay below this many elements.
_PAIRS_PER_CHUNK = 1 << 24


def descending_order(scores: Tensor, include: Tensor) -> Tensor:
    r"""Positions ``[batch, pos]`` sorted by decreasing score.

    Included positions come first; ties keep the lower position first (a stable
    sort), so the order never depends on the sorting algorithm.
    """
    key = torch.where(include, -scores, torch.full_like(scores, float("inf")))
    return torch.sort(key, dim=1, stable=True).indices


def ranks_within(scores: Tensor, include: Tensor) -> Tensor:
    r"""Rank ``[batch, pos]`` of each included position (0 = highest score) among
    the included positions of its row; ``-1`` elsewhere."""
    order = descending_order(scores, include)
    positions = torch.arange(scores.shape[1], device=scores.device)
    ranks = torch.empty_like(order).scatter_(1, order, positions.expand_as(order))
    return torch.where(include, ranks, torch.full_like(ranks, -1))


def kendall_tau_b(x: Tensor, y: Tensor, include: Tensor) -> Tensor:
    r"""Kendall's :math:`\tau_b` between ``x[i]`` and ``y[i]`` over the included
    entries of each row, ``[batch]``:

    .. math::
        \tau_b = \frac{\sum_{j<k} \mathrm{sgn}(x_j - x_k)\,\mathrm{sgn}(y_j - y_k)}
        {\sqrt{\sum_{j<k} |\mathrm{sgn}(x_j - x_k)|
        \;\sum_{j<k} |\mathrm{sgn}(y_j - y_k)|}}

    which is ``scipy.stats.kendalltau``'s default (ties in either variable
    shrink the denominator). NaN where a row has fewer than two distinct values
    in ``x`` or in ``y``, as in scipy.
    """
    batch, width = x.shape
    rows = max(1, _PAIRS_PER_CHUNK // max(1, width * width))
    return torch.cat(
        [
            _tau_b_chunk(x[i : i + rows], y[i : i + rows], include[i : i + rows])
            for i in range(0, batch, rows)
        ]
    )


def _tau_b_chunk(x: Tensor, y: Tensor, include: Tensor) -> Tensor:
    width = x.shape[1]
    upper = torch.ones(width, width, dtype=torch.bool, device=x.device).triu(1)
    pairs = (include[:, :, None] & include[:, None, :] & upper).double()
    # float64: sums of up to width^2 / 2 signs must stay exact.
    dx = torch.sign(x[:, :, None].double() - x[:, None, :].double()) * pairs
    dy = torch.sign(y[:, :, None].double() - y[:, None, :].double()) * pairs
    numerator = (dx * dy).sum((1, 2))
    denominator = torch.sqrt(dx.abs().sum((1, 2)) * dy.abs().sum((1, 2)))
    return numerator / denominator


def no_signal(scores: Tensor, real: Tensor) -> Tensor:
    r"""``[batch]`` True where an explanation has no signal: on an example
    with at least two real tokens, every row of its scores is constant over
    them (e.g. all zero after Grad-CAM's ReLU), so any ranking of its tokens
    is the tie-break's, not the method's.

    Args:
        scores (Tensor): ``[batch, pos]``, or ``[batch, T, pos]`` (one row per
            explained target token).
        real (Tensor): ``[batch, pos]``, nonzero at the tokens a metric ranks
            (attended, not special).

    Returns:
        Tensor: ``[batch]`` bool.
    """
    real = real.bool()
    grid = scores if scores.dim() == 3 else scores[:, None]  # [batch, T, pos]
    inside = real[:, None].expand_as(grid)
    high = grid.masked_fill(~inside, -math.inf).amax(-1)  # [batch, T]
    low = grid.masked_fill(~inside, math.inf).amin(-1)
    return (high == low).all(-1) & (real.sum(-1) >= 2)
