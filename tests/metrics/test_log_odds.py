#!/usr/bin/env python3
import math
from functools import partial
from typing import Any, Dict

import pytest
import torch
from captum_ext.metrics import log_odds

from tests.helpers import CLS_ID, SEP_ID
from tests.metrics import reference
from tests.metrics.toys import (
    bag_of_words,
    BagOfWords,
    batch_with_scores,
    check_reference_loop,
    PAD_INVARIANT_CASES,
    protocol,
    TOKENS,
)


@pytest.mark.parametrize("name,pad_side", PAD_INVARIANT_CASES)
@pytest.mark.parametrize("chunk", [None, 1, 8])
def test_attcat_matches_reference_loop(name, pad_side, chunk):
    batch = batch_with_scores((12, 4, 10, 16, 11), pad_side=pad_side, seed=11)
    labels = torch.tensor([2, 0, 1, 1, 0])
    curve_fn = partial(reference.attcat_curve, replace=True)
    result = check_reference_loop(
        log_odds,
        name,
        batch,
        chunk,
        curve_fn,
        reference.mean_log_odds,
        labels,
        preset="attcat",
    )
    assert torch.isnan(result.score[1])


@pytest.mark.parametrize("name,pad_side", PAD_INVARIANT_CASES)
@pytest.mark.parametrize("chunk", [None, 3])
def test_default_matches_reference_loop(name, pad_side, chunk):
    batch = batch_with_scores((12, 4, 10, 16, 3), pad_side=pad_side, seed=37)
    curve_fn = partial(reference.default_curve, suff=False)
    check_reference_loop(
        log_odds, name, batch, chunk, curve_fn, reference.mean_log_odds
    )


_HALF = [0.1, 0.2, 0.3, 0.4, 0.5]


def test_sign_on_a_bag_of_words():
    # Removing the evidence for the target lowers its probability: LOdds < 0;
    # removing the evidence against it first raises it: LOdds > 0.
    weights = torch.zeros(99, 2)
    weights[10:20, 1] = torch.linspace(-2.0, 2.5, 10)
    model = BagOfWords(weights, torch.zeros(2))
    ids = torch.tensor([[CLS_ID] + list(range(10, 20)) + [SEP_ID]])
    exact = torch.cat(
        [torch.zeros(1, 1), weights[10:20, 1][None], torch.zeros(1, 1)], 1
    )
    # Up to 50 %, the reversed ranking removes only tokens against the target.
    half: Dict[str, Any] = dict(
        target=1, tokens=TOKENS, preset=protocol("log_odds", levels=_HALF)
    )
    good = log_odds(model, ids, exact, **half)
    bad = log_odds(model, ids, -exact, **half)
    assert good.score.item() < 0 < bad.score.item()
    # Hand check of the first level: round(0.1 * 10) = 1 token (weight 2.5) gone.
    total = float(weights[10:20, 1].sum())
    first = math.log(
        (1 / (1 + math.exp(-(total - 2.5)))) / (1 / (1 + math.exp(-total)))
    )
    assert good.curve[0, 0].item() == pytest.approx(first, abs=1e-6)


def test_pad_replacement_needs_pad_token_id():
    batch = batch_with_scores((10, 12))
    with pytest.raises(ValueError, match="pad_token_id"):
        log_odds(
            bag_of_words(2),
            batch["input_ids"],
            batch["scores"],
            None,
            batch["attention_mask"],
            preset="attcat",
        )
