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
    highest-scoring prompt positions, or, for a set of evidence positions, the
    fraction of the set found there.

    Ties are broken uniformly at random, in expectation: with ``g`` positions
    scoring strictly above an evidence position and ``e`` positions (that one
    included) scoring exactly as much, it is among the top ``k`` with
    probability

    .. math::
        c = \frac{\min(e, \max(0, k - g))}{e}

    so constant attributions score ``k / P`` like a random ranking, never 1.
    A target whose evidence is a set ``S`` (every token its answer needs)
    counts the expected share of the set in the top ``k``, out of as many as
    fit there:

    .. math::
        \frac{\sum_{s \in S} c_s}{\min(k, |S|)}

    so at ``k = 1`` it counts the top position being any token of the set,
    and at ``k >= |S|`` the whole set being in the top ``k``. A one-position
    set is the single-position accuracy above.

    Args:
        attributions (Tensor): ``[batch, T, P]`` scores of the prompt positions
            for each target step (the generative contract's layout; columns
            beyond ``P`` of ``[batch, T, P + T]`` must be sliced off first).
        evidence (Tensor): ``[batch, T]`` integer prompt positions, or
            ``[batch, T, S]`` sets of them padded with negative entries; a
            negative entry (no planted evidence, e.g. ``<eos>``, or no
            target, or past the set's end) is skipped, a target with none at
            all too.
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
    sets = evidence[..., None] if evidence.dim() == 2 else evidence  # [batch, T, S]
    scores, sets = _checked(attributions, sets, attention_mask, top_k)
    found = sets >= 0  # [batch, T, S]
    # [batch, T, S]: each evidence position's own score
    own = scores.gather(-1, sets.clamp(min=0))
    above = (scores[:, :, None, :] > own[..., None]).sum(-1).to(torch.float64)
    tied = (scores[:, :, None, :] == own[..., None]).sum(-1).to(torch.float64)
    credit = (top_k - above).clamp(min=0).minimum(tied) / tied  # tied >= 1
    size = found.sum(-1)  # [batch, T]
    share = (credit * found).sum(-1) / size.clamp(max=top_k).clamp(min=1)
    return float(share[size > 0].mean())


def _checked(
    attributions: Tensor,
    sets: Tensor,
    attention_mask: Optional[Tensor],
    top_k: int,
) -> "tuple[Tensor, Tensor]":
    if (
        attributions.dim() != 3
        or sets.dim() != 3
        or sets.shape[:2] != (attributions.shape[:2])
    ):
        raise ValueError(
            "attributions must be [batch, T, P] and evidence [batch, T] or "
            f"[batch, T, S]; got {tuple(attributions.shape)} and "
            f"{tuple(sets.shape)}"
        )
    if sets.dtype.is_floating_point or sets.dtype == torch.bool:
        raise ValueError(f"evidence must be integer positions, got {sets.dtype}")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if bool(torch.isnan(attributions).any()):
        raise ValueError("attributions contain NaN")
    width = attributions.shape[-1]
    if bool((sets >= width).any()):
        raise ValueError(f"evidence positions must be < P = {width}")
    if not bool((sets >= 0).any()):
        raise ValueError("no target has evidence (all entries are negative)")
    scores = attributions.to(torch.float64)
    if attention_mask is not None:
        if attention_mask.shape != (attributions.shape[0], width):
            raise ValueError(
                f"attention_mask must be [batch, P] = {(attributions.shape[0], width)}"
                f", got {tuple(attention_mask.shape)}"
            )
        valid = attention_mask.bool()[:, None, :].expand_as(scores)
        on_padding = ~valid.gather(-1, sets.clamp(min=0))
        if bool((on_padding & (sets >= 0)).any()):
            raise ValueError("an evidence position is on padding")
        scores = scores.masked_fill(~valid, -torch.inf)
    return scores, sets.long()
