#!/usr/bin/env python3
r"""The per-row reduction of decoded layer attribution
(:mod:`captum_ext.attr._core.layer.decoded_layer_attribution`): token scores
``s_i`` from the decoded probabilities ``D`` and the per-position scores
``a_j`` (Hou & Castanon, ICML 2023, Eq. 6 and Alg. 1), with the top-tau mask
and the ReLU modes."""

from typing import Callable, Optional

import torch
from torch import Tensor

from captum_ext._utils.token_ids import TokenBatch

__all__ = ["aggregate", "check_aggregation_options", "RELU_MODES"]

RELU_MODES = ("outside", "inside", None)


def check_aggregation_options(tau: Optional[int], relu: Optional[str]) -> None:
    r"""Raises on a ``tau`` that is not a positive int or None, or an unknown
    ``relu`` mode."""
    if tau is not None and (isinstance(tau, bool) or not isinstance(tau, int)):
        raise TypeError(f"tau must be a positive int or None, got {tau!r}")
    if tau is not None and tau < 1:
        raise ValueError(f"tau must be >= 1 (or None for no limit), got {tau}")
    if relu not in RELU_MODES:
        raise ValueError(f"relu must be one of {RELU_MODES}, got {relu!r}")


def _first_occurrence(batch: TokenBatch) -> Tensor:
    r"""``[batch, pos]``: index of the first real position holding the same token
    (one column per unique token ``t_i``)."""
    ids = batch.input_ids
    same = (ids[:, :, None] == ids[:, None, :]) & batch.valid[:, None, :]
    return same.float().argmax(-1)  # argmax returns the first maximum


def _top_tau_mask(probabilities: Tensor, batch: TokenBatch, tau: int) -> Tensor:
    r"""``M[b, j, i] = 1`` when ``t_i`` is among the ``tau`` unique input tokens
    most probable at position ``j`` (Alg. 1 l.8); repeated tokens share it."""
    pos = probabilities.shape[-1]
    first = _first_occurrence(batch)
    # one candidate column per unique real token
    unique = (first == torch.arange(pos, device=first.device)) & batch.valid
    ranked = probabilities.masked_fill(~unique[:, None, :], float("-inf"))
    top = ranked.topk(min(tau, pos), dim=-1).indices  # [batch, j, k]
    keep = torch.zeros_like(ranked, dtype=torch.bool).scatter_(-1, top, True)
    keep &= unique[:, None, :]  # fewer than tau unique tokens: drop the -inf picks
    return keep.gather(-1, first[:, None, :].expand_as(keep))


def aggregate(
    probabilities: Tensor,
    position_scores: Tensor,
    batch: TokenBatch,
    tau: Optional[int] = None,
    relu: Optional[str] = "outside",
) -> Tensor:
    r"""Token scores ``s_i`` from decoded probabilities and per-position scores.

    ``"outside"``: ``s_i = ReLU(sum_j M_ij D_ij a_j)`` (Eq. 6); ``"inside"``:
    ``s_i = sum_j M_ij D_ij ReLU(a_j)`` (Alg. 1 literally); ``None``: signed.

    Args:
        probabilities (Tensor): ``[batch, pos_j, pos_i]``, ``D`` from
            :func:`decoded_input_probabilities` (zero on pad rows ``j``).
        position_scores (Tensor): ``[batch, pos_j]``, ``a_j = sum_k alpha[j, k]``.
        batch (TokenBatch): the input ids and masks.
        tau (int, optional): top-tau limit per position; None = no limit.
        relu (str, optional): ``"outside"``, ``"inside"`` or None.

    Returns:
        Tensor ``[batch, pos]``; repeated tokens share one score, pads are zero.
    """
    weights = probabilities
    if tau is not None:
        weights = weights * _top_tau_mask(probabilities, batch, tau)
    tokens = _with_relu(
        position_scores.to(weights.dtype),
        relu,
        lambda scores: torch.einsum("bji,bj->bi", weights, scores),
    )  # [batch, pos_i]
    return tokens * batch.valid.to(tokens.dtype)


def _with_relu(
    position_scores: Tensor, relu: Optional[str], combine: Callable[[Tensor], Tensor]
) -> Tensor:
    r"""``combine(a)`` with the ReLU of ``relu``: on ``a`` (``"inside"``), on
    the result (``"outside"``) or none."""
    if relu == "inside":
        position_scores = position_scores.clamp(min=0)
    tokens = combine(position_scores)
    return tokens.clamp(min=0) if relu == "outside" else tokens
