#!/usr/bin/env python3
r"""Planted-evidence accuracy: how often an explanation of a generated token
puts its top score on the one prompt token known to decide it (the key–value
recall task of :mod:`captum_ext.defaults.recall`, or any task whose evidence is
planted by construction).

It scores explanations against a ground truth that only a synthetic task has,
so it belongs to the benchmark, not to the library's faithfulness metrics
(which need no ground truth). It is the pointing game of Zhang et al. (2016,
https://arxiv.org/abs/1608.00507) on token positions.
"""

from typing import Optional

import torch
from torch import Tensor

__all__ = ["planted_evidence_accuracy"]


def planted_evidence_accuracy(
    attributions: Tensor,
    evidence: Tensor,
    attention_mask: Optional[Tensor] = None,
    top_k: int = 1,
) -> float:
    r"""Fraction of targets whose evidence position is among the ``top_k``
    highest-scoring prompt positions.

    Ties are broken uniformly at random, in expectation: with ``g`` positions
    scoring strictly above the evidence and ``e`` positions (the evidence
    included) scoring exactly as much, a target counts

    .. math::
        \frac{\min(e, \max(0, k - g))}{e}

    so constant attributions score ``k / P`` like a random ranking, never 1.

    Args:
        attributions (Tensor): ``[batch, T, P]`` scores of the prompt positions
            for each target step (the generative contract's layout; columns
            beyond ``P`` of ``[batch, T, P + T]`` must be sliced off first).
        evidence (Tensor): ``[batch, T]`` integer prompt positions; a negative
            entry (no planted evidence, e.g. ``<eos>``, or no target) is skipped.
        attention_mask (Tensor, optional): ``[batch, P]``; positions where it is 0
            (padding) never count as ranked above the evidence. Default: all
            positions count.
        top_k (int, optional): how many top positions may hold the evidence.
            Default: 1.

    Returns:
        float: accuracy in [0, 1] over the targets with evidence.

    Raises ``ValueError`` for mismatched shapes, ``top_k < 1``, evidence outside
    the prompt or on padding, no target with evidence, and NaN scores.
    """
    scores, evidence = _checked(attributions, evidence, attention_mask, top_k)
    scored = evidence >= 0  # [batch, T]
    # [batch, T, 1]: the evidence's own score
    own = scores.gather(-1, evidence.clamp(min=0)[..., None])
    above = (scores > own).sum(-1).to(torch.float64)  # [batch, T]
    tied = (scores == own).sum(-1).to(torch.float64)  # >= 1: the evidence
    credit = (top_k - above).clamp(min=0).minimum(tied) / tied
    return float(credit[scored].mean())


def _checked(
    attributions: Tensor,
    evidence: Tensor,
    attention_mask: Optional[Tensor],
    top_k: int,
) -> "tuple[Tensor, Tensor]":
    if attributions.dim() != 3 or evidence.shape != attributions.shape[:2]:
        raise ValueError(
            "attributions must be [batch, T, P] and evidence [batch, T]; got "
            f"{tuple(attributions.shape)} and {tuple(evidence.shape)}"
        )
    if evidence.dtype.is_floating_point or evidence.dtype == torch.bool:
        raise ValueError(f"evidence must be integer positions, got {evidence.dtype}")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if bool(torch.isnan(attributions).any()):
        raise ValueError("attributions contain NaN")
    width = attributions.shape[-1]
    if bool((evidence >= width).any()):
        raise ValueError(f"evidence positions must be < P = {width}")
    if not bool((evidence >= 0).any()):
        raise ValueError("no target has evidence (all entries are negative)")
    scores = attributions.to(torch.float64)
    if attention_mask is not None:
        if attention_mask.shape != (attributions.shape[0], width):
            raise ValueError(
                f"attention_mask must be [batch, P] = {(attributions.shape[0], width)}"
                f", got {tuple(attention_mask.shape)}"
            )
        valid = attention_mask.bool()[:, None, :].expand_as(scores)
        on_padding = ~valid.gather(-1, evidence.clamp(min=0)[..., None])[..., 0]
        if bool((on_padding & (evidence >= 0)).any()):
            raise ValueError("an evidence position is on padding")
        scores = scores.masked_fill(~valid, -torch.inf)
    return scores, evidence.long()
