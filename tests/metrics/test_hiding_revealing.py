#!/usr/bin/env python3
from functools import partial

import pytest
import torch
from captum_ext.metrics import hiding_revealing

from tests.helpers import CLS_ID, SEP_ID
from tests.metrics import reference
from tests.metrics.toys import (
    assert_scores,
    bag_of_words,
    BagOfWords,
    batch_with_scores,
    case_forward,
    exact_attributions,
    PAD_INVARIANT_CASES,
    per_example,
    predicted_class,
    run_metric,
    TOKENS,
)

GRID = torch.arange(11, dtype=torch.float64) / 10


def _naive(forward, batch, labels, curves_fn):
    r"""The reference hiding and revealing curves, ``[batch, 11]`` each."""
    curves = per_example(forward, batch, labels, curves_fn, lambda base, c: c)
    return curves[:, 0], curves[:, 1]


@pytest.mark.parametrize("name,pad_side", PAD_INVARIANT_CASES)
@pytest.mark.parametrize("chunk", [None, 1, 9])
def test_decoded_matches_reference_loop(name, pad_side, chunk):
    forward = case_forward(name)
    batch = batch_with_scores((12, 4, 10, 3, 16), pad_side=pad_side, seed=29)
    labels = [0, 1, 2, 1, 0]
    result = run_metric(
        hiding_revealing,
        forward,
        batch,
        chunk,
        labels=labels,
        preset="decoded",
    )
    hiding, revealing = _naive(forward, batch, labels, reference.decoded_curves)
    assert_scores(result.hiding.curve, hiding)
    assert_scores(result.revealing.curve, revealing)
    assert_scores(result.hiding.score, torch.trapezoid(hiding, GRID, dim=1))
    assert_scores(result.revealing.score, torch.trapezoid(revealing, GRID, dim=1))


@pytest.mark.parametrize("name,pad_side", PAD_INVARIANT_CASES)
@pytest.mark.parametrize("chunk", [None, 4])
def test_default_matches_reference_loop(name, pad_side, chunk):
    forward = case_forward(name)
    batch = batch_with_scores((12, 4, 10, 3, 16), pad_side=pad_side, seed=31)
    result = run_metric(hiding_revealing, forward, batch, chunk)
    predicted = predicted_class(forward, batch)
    hiding, revealing = _naive(
        forward, batch, predicted, reference.default_hiding_curves
    )
    assert_scores(result.hiding.curve, hiding)
    assert_scores(result.revealing.curve, revealing)
    assert (result.hiding.curve[:, 0] == 1).all()


def test_hand_worked_auc():
    # Target 1 wins while the sum of the remaining weights is > 0.
    weights = torch.zeros(99, 2)
    weights[10:15, 1] = torch.tensor([3.0, 2.0, -1.0, -1.5, -2.0])
    model = BagOfWords(weights, torch.zeros(2))
    ids = torch.tensor([[CLS_ID] + list(range(10, 15)) + [SEP_ID]])
    scores = torch.tensor([[0.0, 3.0, 2.0, -1.0, -1.5, -2.0, 0.0]])
    result = hiding_revealing(model, ids, scores, 1, tokens=TOKENS)
    # k = round(g * 5): 0 0 1 2 2 2 3 4 4 4 5 (half to even).
    # Hiding the top k leaves sums 0.5 0.5 -2.5 -4.5 ... (correct only at k = 0);
    # revealing the top k gives sums 0 0 3 5 5 5 4 2.5 2.5 2.5 0.5.
    hiding = [1.0, 1.0] + [0.0] * 9
    revealing = [0.0, 0.0] + [1.0] * 9
    assert result.hiding.curve[0].tolist() == hiding
    assert result.revealing.curve[0].tolist() == revealing
    assert result.hiding.score.item() == pytest.approx(0.15)
    assert result.revealing.score.item() == pytest.approx(0.85)


def test_exact_weights_hide_and_reveal_best():
    model = bag_of_words(2, seed=8)
    batch = batch_with_scores((14, 9, 20, 17, 11, 13, 19, 15), seed=9)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    _, exact = exact_attributions(model, batch)

    def aucs(attr):
        result = hiding_revealing(model, ids, attr, None, mask, tokens=TOKENS)
        return result.hiding.score.mean(), result.revealing.score.mean()

    hide, reveal = aucs(exact)
    hide_reversed, reveal_reversed = aucs(-exact)
    assert hide < hide_reversed and reveal > reveal_reversed


def test_decoded_needs_labels():
    batch = batch_with_scores((6, 4))
    decoded = partial(
        hiding_revealing,
        bag_of_words(2),
        batch["input_ids"],
        batch["scores"],
        additional_forward_args=batch["attention_mask"],
        preset="decoded",
    )
    with pytest.raises(ValueError, match="labels"):
        decoded(tokens=TOKENS)
    with pytest.raises(ValueError, match="mask_token_id"):
        decoded(labels=[0, 1])
