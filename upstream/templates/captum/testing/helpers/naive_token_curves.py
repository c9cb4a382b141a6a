#!/usr/bin/env python3
r"""Naive references for the token perturbation curves of ``captum.metrics``:
one example and one level at a time, each perturbed input run alone, without
padding, in plain Python loops."""

from typing import Callable, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

LEVELS: List[float] = [g / 10 for g in range(1, 11)]


def example_batch(left_padded: bool) -> Tuple[Tensor, Tensor, Tensor]:
    r"""Token ids, attention mask and float64 attributions of three examples
    of 7, 5 and 6 tokens (tied scores in the second), padded right or left."""
    ids = torch.tensor(
        [[3, 5, 7, 2, 9, 4, 6], [8, 1, 1, 5, 2, 0, 0], [4, 4, 9, 3, 7, 6, 0]]
    )
    mask = (ids != 0).long()
    scores = torch.tensor(
        [
            [0.3, -0.2, 0.9, 0.1, 0.5, -0.7, 0.4],
            [0.2, 0.2, -0.1, 0.6, 0.2, 0.0, 0.0],
            [-0.5, 0.8, 0.3, 0.3, -0.1, 0.7, 0.0],
        ],
        dtype=torch.float64,
    )
    if left_padded:
        order = torch.sort(mask, dim=1, stable=True).indices
        return ids.gather(1, order), mask.gather(1, order), scores.gather(1, order)
    return ids, mask, scores


def kept_positions(
    scores: Sequence[float], perturbable: Sequence[bool], k: int, keep_top: bool
) -> List[int]:
    r"""Positions of one example left after deleting its top ``k`` perturbable
    tokens (``keep_top``: after deleting every perturbable token but them);
    ranks by decreasing score, ties to the lower position."""
    candidates = [i for i, ok in enumerate(perturbable) if ok]
    ranked = sorted(candidates, key=lambda i: (-scores[i], i))
    top = set(ranked[:k])
    return [
        i for i in range(len(scores)) if not perturbable[i] or ((i in top) == keep_top)
    ]


def naive_probabilities(
    forward_func: Callable[..., Tensor],
    input_ids: Tensor,
    attention_mask: Tensor,
    attributions: Tensor,
    keep_top: bool,
    levels: Sequence[float] = LEVELS,
    special: Optional[Tensor] = None,
) -> Tensor:
    r"""``[batch, levels, classes]``: the softmax probabilities after each
    level's deletion, with ``k = round(g * n)`` (half to even) of the ``n``
    real non-special tokens. An input with every token deleted is one padding
    token (id 0) with attention mask 0."""
    rows = []
    for b in range(input_ids.shape[0]):
        real = attention_mask[b] != 0
        ids = input_ids[b][real].tolist()
        scores = attributions[b][real].tolist()
        perturbable = [True] * len(ids)
        if special is not None:
            perturbable = (~special[b][real]).tolist()
        n = sum(perturbable)
        row = []
        for g in levels:
            kept = kept_positions(scores, perturbable, round(g * n), keep_top)
            row.append(_probabilities(forward_func, [ids[i] for i in kept]))
        rows.append(torch.stack(row))
    return torch.stack(rows)


def target_probabilities(
    forward_func: Callable[..., Tensor],
    input_ids: Tensor,
    attention_mask: Tensor,
    attributions: Tensor,
    target: Optional[Tensor],
    keep_top: bool,
    special: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    r"""``(base [batch], curve [batch, levels])``: the probability of each
    example's ``target`` class (None: its predicted class) on the whole input,
    and after each level's deletion (:func:`naive_probabilities` on
    :data:`LEVELS`)."""
    with torch.no_grad():
        whole = forward_func(input_ids, attention_mask).double().softmax(-1)
    if target is None:
        target = whole.argmax(-1)
    curves = naive_probabilities(
        forward_func, input_ids, attention_mask, attributions, keep_top, LEVELS, special
    )
    rows = torch.arange(len(target))
    return whole[rows, target], curves[rows, :, target]


def _probabilities(forward_func: Callable[..., Tensor], ids: List[int]) -> Tensor:
    mask = torch.ones(1, len(ids), dtype=torch.long)
    if not ids:
        ids, mask = [0], torch.zeros(1, 1, dtype=torch.long)
    with torch.no_grad():
        logits = forward_func(torch.tensor([ids]), mask)
    return logits.double().softmax(-1)[0]
