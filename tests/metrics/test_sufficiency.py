#!/usr/bin/env python3
from functools import partial

import pytest
import torch
from captum_ext.metrics import sufficiency

from tests.metrics import reference
from tests.metrics.toys import (
    assert_scores,
    bag_of_words,
    batch_with_scores,
    case_forward,
    example,
    lively_forward,
    PAD_INVARIANT_CASES,
    predicted_class,
    probabilities,
    protocol,
    run_metric,
    TOKENS,
)

LENGTHS = (12, 4, 10, 3, 16, 11)


def _naive(forward, batch, curve_fn, empty=float("nan")):
    target = predicted_class(forward, batch)
    scores = []
    for row in range(len(batch["input_ids"])):
        ids, row_scores = example(batch, row)
        prob = partial(probabilities, forward)
        t = int(target[row])
        base = float(prob(ids)[t])
        curve = [p for p in curve_fn(prob, ids, row_scores, t) if p is not None]
        scores.append(sum(base - p for p in curve) / len(curve) if curve else empty)
    return torch.tensor(scores, dtype=torch.float64)


@pytest.mark.parametrize("name,pad_side", PAD_INVARIANT_CASES)
@pytest.mark.parametrize("chunk", [None, 1, 6])
def test_normxlogit_matches_reference_loop(name, pad_side, chunk):
    forward = case_forward(name)
    batch = batch_with_scores(LENGTHS, pad_side=pad_side, seed=13)
    result = run_metric(sufficiency, forward, batch, chunk, preset="normxlogit")
    expected = _naive(forward, batch, partial(reference.normxlogit_curve, suff=True))
    assert_scores(result.score, expected)


@pytest.mark.parametrize("name,pad_side", PAD_INVARIANT_CASES)
@pytest.mark.parametrize("chunk", [None, 5])
def test_ferret_matches_reference_loop(name, pad_side, chunk):
    forward = case_forward(name)
    batch = batch_with_scores(LENGTHS, pad_side=pad_side, seed=17)
    # Row 3 has a single content token with a negative score: nothing is kept
    # at any level, and ferret scores that 1.
    batch["scores"][3] = -1.0
    result = run_metric(sufficiency, forward, batch, chunk, preset="ferret")
    expected = _naive(
        forward, batch, partial(reference.ferret_curve, suff=True), empty=1.0
    )
    assert_scores(result.score, expected)
    assert result.score[3].item() == 1.0


@pytest.mark.parametrize("name,pad_side", PAD_INVARIANT_CASES)
@pytest.mark.parametrize("chunk", [None, 4])
def test_default_matches_reference_loop(name, pad_side, chunk):
    forward = case_forward(name)
    batch = batch_with_scores(LENGTHS, pad_side=pad_side, seed=19)
    result = run_metric(sufficiency, forward, batch, chunk)
    expected = _naive(forward, batch, partial(reference.default_curve, suff=True))
    assert_scores(result.score, expected)


@pytest.mark.parametrize("preset", [None, "normxlogit", "ferret"])
def test_full_input_is_zero(preset):
    forward = lively_forward("bert")
    batch = batch_with_scores((9, 5, 12), seed=23)
    batch["scores"] = batch["scores"].abs() + 0.1  # ferret keeps positive ones
    result = run_metric(
        sufficiency,
        forward,
        batch,
        preset=protocol("sufficiency", preset, levels=[1.0]),
    )
    assert (result.score == 0).all()


def test_exact_weights_are_most_sufficient():
    model = bag_of_words(2, seed=4)
    batch = batch_with_scores((14, 9, 20), seed=6)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    target = predicted_class(model, batch)
    margin = model.weights[:, 1] - model.weights[:, 0]
    exact = margin[ids] * torch.where(target == 1, 1.0, -1.0)[:, None]

    def score(attr):
        return sufficiency(model, ids, attr, target, mask, tokens=TOKENS).score

    best = score(exact)
    generator = torch.Generator().manual_seed(1)
    for _ in range(30):
        shuffled = torch.stack(
            [row[torch.randperm(len(row), generator=generator)] for row in exact]
        )
        assert (best <= score(shuffled) + 1e-6).all()
