#!/usr/bin/env python3
r"""Per-example re-implementations of the reference protocols, written from the
authors' code (loops over one unpadded sequence at a time), independent of
captum_ext.metrics. Each curve function returns the curve of target
probabilities (None at a skipped level) given ``prob(ids, attention) ->
probabilities [C]``; the score functions turn one example's curve into its
score."""

import math
from typing import Callable, Iterable, List, Optional, Sequence

import numpy as np

from tests.metrics.toys import MASK_ID, SPECIALS

Prob = Callable[..., "np.ndarray"]


def _order(scores: Sequence[float]) -> List[int]:
    return list(np.argsort(-np.asarray(scores), kind="stable"))


def attcat_curve(
    prob: Prob, ids: List[int], scores: List[float], target: int, replace: bool
) -> Optional[List[float]]:
    r"""AttCAT ``test``: ``truncate_words`` (deletion) or ``replace_words``
    ([PAD] = 0, attention on) over ``np.round(np.linspace(0, 1, 10) * n)``."""
    n = len(ids)
    if n < 10:
        return None
    numbers = [int(g) for g in np.round(np.linspace(0, 1, 10) * n)]
    numbers = list(dict.fromkeys(numbers))[1:]
    sorted_idx = _order(scores)
    curve = []
    for number in numbers:
        chosen: List[int] = []
        i = 0
        while len(chosen) < number and i != n - 1:
            if ids[sorted_idx[i]] not in SPECIALS:
                chosen.append(sorted_idx[i])
            i += 1
        if replace:
            new = [0 if j in chosen else t for j, t in enumerate(ids)]
        else:
            new = [t for j, t in enumerate(ids) if j not in chosen]
        curve.append(float(prob(new)[target]))
    return curve


def normxlogit_curve(
    prob: Prob, ids: List[int], scores: List[float], target: int, suff: bool
) -> List[float]:
    r"""NormXLogit Experiment 1: rank all real tokens, drop position 0 ([CLS])
    from the ranking, mask ``order[:int(n * K)]`` (or ``order[int(n * K):]``)."""
    n = len(ids)
    order = [i for i in _order(scores) if i != 0]
    curve = []
    for k in [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]:
        cut = int(n * k)
        chosen = order[cut:] if suff else order[:cut]
        new = [MASK_ID if j in chosen else t for j, t in enumerate(ids)]
        curve.append(float(prob(new)[target]))
    return curve


def _ferret_top(scores: "np.ndarray", percentage: float) -> Optional[List[int]]:
    # utils_from_soft_to_discrete._get_id_tokens_percentage, only_pos=True
    v = int(percentage * len(scores))
    if not (v > 0 and v <= len(scores)):
        return None
    top = [i for i in scores.argsort()[-v:][::-1] if scores[i] > 0]
    return top if top != [] else None


def ferret_curve(
    prob: Prob, ids: List[int], scores: List[float], target: int, suff: bool
) -> List[Optional[float]]:
    r"""ferret ``aopc_compr`` / ``aopc_suff`` with ``remove_first_last=True``,
    deletion; the re-tokenised text is [CLS] + kept ids + [SEP]."""
    content, content_scores = ids[1:-1], np.asarray(scores[1:-1])
    curve: List[Optional[float]] = []
    last = None
    for threshold in np.arange(0.1, 1.1, 0.1):
        top = _ferret_top(content_scores, threshold)
        if top is not None and last is not None and set(top) == last:
            top = None
        if top is None:
            curve.append(None)
            continue
        last = set(top)
        if suff:
            kept = [content[i] for i in sorted(top)]
        else:
            kept = [t for i, t in enumerate(content) if i not in top]
        curve.append(float(prob([ids[0]] + kept + [ids[-1]])[target]))
    return curve


def decoded_curves(
    prob: Prob, ids: List[int], scores: List[float], label: int
) -> List[List[float]]:
    r"""Hiding and revealing: [MASK] with attention 0, specials never hidden,
    k = round(g * n) of the real length, capped at the content tokens."""
    n = len(ids)
    order = [i for i in _order(scores) if ids[i] not in SPECIALS]
    curves: List[List[float]] = [[], []]
    for g in np.arange(11) / 10:
        top = order[: int(np.round(g * n))]
        for curve, hidden in ((curves[0], top), (curves[1], order[len(top) :])):
            new = [MASK_ID if j in hidden else t for j, t in enumerate(ids)]
            attention = [0 if j in hidden else 1 for j in range(n)]
            curve.append(float(int(prob(new, attention).argmax()) == label))
    return curves


def _default_inputs(
    ids: List[int], scores: List[float], suff: bool, levels: Iterable[float]
) -> List[List[int]]:
    order = [i for i in _order(scores) if ids[i] not in SPECIALS]
    inputs = []
    for g in levels:
        top = order[: int(np.round(g * len(order)))]
        chosen = order[len(top) :] if suff else top
        inputs.append([t for j, t in enumerate(ids) if j not in chosen])
    return inputs


def default_curve(
    prob: Prob, ids: List[int], scores: List[float], target: int, suff: bool
) -> List[float]:
    r"""The clean default: delete the top round(g * m) of the m content tokens
    (or all content tokens but them), g = 0.1 .. 1.0."""
    levels = np.arange(1, 11) / 10
    return [
        float(prob(new)[target]) for new in _default_inputs(ids, scores, suff, levels)
    ]


def default_hiding_curves(
    prob: Prob, ids: List[int], scores: List[float], label: int
) -> List[List[float]]:
    r"""Hiding and revealing under the default protocol, g = 0 .. 1.0."""
    levels = np.arange(11) / 10
    return [
        [
            float(int(prob(new).argmax()) == label)
            for new in _default_inputs(ids, scores, suff, levels)
        ]
        for suff in (False, True)
    ]


# The curve of each preset that deletes the top tokens or keeps only them
# (``suff``): AOPC's and sufficiency's.
CURVES = {"normxlogit": normxlogit_curve, "ferret": ferret_curve, None: default_curve}
Curve = Optional[List[Optional[float]]]


def mean_drop(
    base: float, curve: Curve, empty: float = math.nan, absolute: bool = False
) -> float:
    r"""AOPC and sufficiency: the mean of ``base - p`` (or ``|base - p|``) over
    the levels not skipped; ``empty`` when every level is skipped, NaN when the
    example is (``curve`` None)."""
    if curve is None:
        return math.nan
    drops = [base - p for p in curve if p is not None]
    drops = [abs(d) for d in drops] if absolute else drops
    return sum(drops) / len(drops) if drops else empty


def mean_log_odds(base: float, curve: Optional[List[float]]) -> float:
    r"""Log-odds: the mean of ``log(p / base)``; NaN for a skipped example (its
    curves, AttCAT's and the default, skip no level)."""
    if curve is None:
        return math.nan
    return sum(math.log(p / base) for p in curve) / len(curve)
