#!/usr/bin/env python3
import math
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
import torch
from captum_ext.metrics import aopc, get_protocol

from tests.helpers import CLS_ID, SEP_ID
from tests.metrics import reference
from tests.metrics.toys import (
    bag_of_words,
    BagOfWords,
    batch_with_scores,
    check_reference_loop,
    exact_attributions,
    PAD_INVARIANT_CASES,
    shuffled_rows,
    TOKENS,
)

LENGTHS = (12, 4, 10, 9, 15, 11)


@pytest.mark.parametrize("name,pad_side", PAD_INVARIANT_CASES)
@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_attcat_matches_reference_loop(name, pad_side, chunk):
    batch = batch_with_scores(LENGTHS, pad_side=pad_side)
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    curve_fn = partial(reference.attcat_curve, replace=False)
    score_fn = partial(reference.mean_drop, absolute=True)
    result = check_reference_loop(
        aopc, name, batch, chunk, curve_fn, score_fn, labels, preset="attcat"
    )
    assert result.curve.shape == (6, 9)
    # n < 10 (rows 1 and 3) are skipped: NaN, as documented.
    assert torch.isnan(result.score[[1, 3]]).all()
    assert torch.isnan(result.curve[[1, 3]]).all()


# Deletion of the top tokens under each preset: the batch (lengths, seed), the
# chunk sizes, and the levels the result reports.
PRESET_RUNS = [
    pytest.param(preset, lengths, seed, chunk, levels, id=f"{preset}-{chunk}")
    for preset, lengths, seed, chunks, levels in (
        ("normxlogit", LENGTHS, 3, (None, 5), torch.arange(1, 10) / 10),
        ("ferret", LENGTHS + (3, 5), 5, (None, 4), torch.arange(1, 11) / 10),
        (None, LENGTHS, 7, (None, 3), torch.arange(1, 11) / 10),
    )
    for chunk in chunks
]


@pytest.mark.parametrize("name,pad_side", PAD_INVARIANT_CASES)
@pytest.mark.parametrize("preset,lengths,seed,chunk,levels", PRESET_RUNS)
def test_preset_matches_reference_loop(
    name, pad_side, preset, lengths, seed, chunk, levels
):
    batch = batch_with_scores(lengths, pad_side=pad_side, seed=seed)
    curve_fn = partial(reference.CURVES[preset], suff=False)
    score_fn = partial(reference.mean_drop, empty=0.0)
    result = check_reference_loop(
        aopc, name, batch, chunk, curve_fn, score_fn, preset=preset
    )
    torch.testing.assert_close(result.levels, levels)


def test_protocol_grids_are_the_references():
    assert get_protocol("aopc", "attcat").levels == tuple(np.linspace(0, 1, 10)[1:])
    assert get_protocol("aopc", "ferret").levels == tuple(np.arange(0.1, 1.1, 0.1))
    assert get_protocol("aopc", "normxlogit").levels == (
        0.1,
        0.2,
        0.3,
        0.4,
        0.5,
        0.6,
        0.7,
        0.8,
        0.9,
    )


def _binary_bow(weights_by_token):
    weights = torch.zeros(99, 2)
    for token, weight in weights_by_token.items():
        weights[token, 1] = weight
    return BagOfWords(weights, torch.zeros(2))


def test_hand_worked_four_tokens():
    # p = sigmoid(sum of weights); tokens a=2, b=-1, c=0.5, d=1 ranked a, d, c, b.
    model = _binary_bow({10: 2.0, 11: -1.0, 12: 0.5, 13: 1.0})
    ids = torch.tensor([[CLS_ID, 10, 11, 12, 13, SEP_ID]])
    scores = torch.tensor([[0.0, 2.0, -1.0, 0.5, 1.0, 0.0]])
    result = aopc(model, ids, scores, target=1, tokens=TOKENS)
    # k = round(g * 4) for g = 0.1 .. 1.0 (half to even): 0 1 1 2 2 2 3 3 4 4;
    # the remaining sums are then:
    remaining = [2.5, 0.5, 0.5, -0.5, -0.5, -0.5, -1.0, -1.0, 0.0, 0.0]

    def sigmoid(s):
        return 1 / (1 + math.exp(-s))

    expected = sum(sigmoid(2.5) - sigmoid(s) for s in remaining) / 10
    assert result.score.item() == pytest.approx(expected, abs=1e-6)
    assert result.score.item() == pytest.approx(0.4401852868270674, abs=1e-6)


def test_exact_weights_beat_every_other_ranking():
    model = bag_of_words(2, seed=1)
    batch = batch_with_scores((14, 9, 20, 12), seed=2)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    target, exact = exact_attributions(model, batch)

    def score(attr):
        return aopc(model, ids, attr, target, (mask,), tokens=TOKENS).score

    best = score(exact)
    for shuffled in shuffled_rows(exact, seed=0):
        assert (best >= score(shuffled) - 1e-6).all()
    assert (best > score(-exact)).all()


def test_single_token_input():
    # One content token and no specials: deleting it leaves only the bias.
    model = _binary_bow({10: 3.0})
    result = aopc(model, torch.tensor([[10]]), torch.tensor([[1.0]]), target=1)
    # k = round(g): 0 for g <= 0.5 (0.5 rounds to even), 1 from 0.6 on.
    expected = 5 * (1 / (1 + math.exp(-3.0)) - 0.5) / 10
    assert result.score.item() == pytest.approx(expected, abs=1e-6)


def test_attcat_absolute_and_last_ranked_token_kept():
    # Ten real tokens; the content token ranked last overall is never removed,
    # so at 100 % one content token is left.
    model = _binary_bow({t: 1.0 for t in range(10, 18)})
    ids = torch.tensor([[CLS_ID] + list(range(10, 18)) + [SEP_ID]])
    scores = torch.tensor([[5.0] + [float(8 - i) for i in range(8)] + [6.0]])
    result = aopc(model, ids, scores, target=1, preset="attcat", tokens=TOKENS)
    # numbers removed: round(j/9 * 10) = 1 2 3 4 6 7 8 9 10, capped at 7.
    left = [7, 6, 5, 4, 2, 1, 1, 1, 1]

    def sigmoid(s):
        return 1 / (1 + math.exp(-s))

    expected = [abs(sigmoid(8) - sigmoid(n)) for n in left]
    torch.testing.assert_close(
        result.curve[0].double(), torch.tensor(expected, dtype=torch.float64)
    )


def test_errors_are_clear():
    model = bag_of_words(2)
    batch = batch_with_scores((6, 4))
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with pytest.raises(ValueError, match="one score per token"):
        aopc(model, ids, batch["scores"][:, :-1], None, (mask,))
    with pytest.raises(ValueError, match=r"sum them over the last dimension"):
        aopc(model, ids, batch["scores"][..., None].expand(-1, -1, 3), None, (mask,))
    with pytest.raises(ValueError, match="mask_token_id"):
        aopc(model, ids, batch["scores"], None, (mask,), preset="normxlogit")
    with pytest.raises(ValueError, match="pad_token_id"):
        pad = replace(get_protocol("aopc"), mode="pad")
        aopc(model, ids, batch["scores"], None, (mask,), preset=pad)
    with pytest.raises(ValueError, match="no preset 'decoded'"):
        aopc(model, ids, batch["scores"], None, (mask,), preset="decoded")
    with pytest.raises(ValueError, match="strictly increasing"):
        replace(get_protocol("aopc"), levels=[0.5, 0.2])
