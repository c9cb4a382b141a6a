#!/usr/bin/env python3
from functools import partial

import pytest
from captum_ext.metrics import sufficiency

from tests.metrics import reference
from tests.metrics.toys import (
    bag_of_words,
    batch_with_scores,
    check_reference_loop,
    exact_attributions,
    lively_forward,
    PAD_INVARIANT_CASES,
    protocol,
    run_metric,
    shuffled_rows,
    TOKENS,
)

LENGTHS = (12, 4, 10, 3, 16, 11)
# Keeping only the top tokens under each preset but ferret (below): the batch's
# seed and the chunk sizes.
PRESET_RUNS = [
    pytest.param(preset, seed, chunk, id=f"{preset}-{chunk}")
    for preset, seed, chunks in (
        ("normxlogit", 13, (None, 1, 6)),
        (None, 19, (None, 4)),
    )
    for chunk in chunks
]


@pytest.mark.parametrize("name,pad_side", PAD_INVARIANT_CASES)
@pytest.mark.parametrize("preset,seed,chunk", PRESET_RUNS)
def test_preset_matches_reference_loop(name, pad_side, preset, seed, chunk):
    batch = batch_with_scores(LENGTHS, pad_side=pad_side, seed=seed)
    curve_fn = partial(reference.CURVES[preset], suff=True)
    check_reference_loop(
        sufficiency, name, batch, chunk, curve_fn, reference.mean_drop, preset=preset
    )


@pytest.mark.parametrize("name,pad_side", PAD_INVARIANT_CASES)
@pytest.mark.parametrize("chunk", [None, 5])
def test_ferret_matches_reference_loop(name, pad_side, chunk):
    batch = batch_with_scores(LENGTHS, pad_side=pad_side, seed=17)
    # Row 3 has a single content token with a negative score: nothing is kept
    # at any level, and ferret scores that 1.
    batch["scores"][3] = -1.0
    curve_fn = partial(reference.ferret_curve, suff=True)
    score_fn = partial(reference.mean_drop, empty=1.0)
    result = check_reference_loop(
        sufficiency, name, batch, chunk, curve_fn, score_fn, preset="ferret"
    )
    assert result.score[3].item() == 1.0


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
    target, exact = exact_attributions(model, batch)

    def score(attr):
        return sufficiency(model, ids, attr, target, mask, tokens=TOKENS).score

    best = score(exact)
    for shuffled in shuffled_rows(exact, seed=1):
        assert (best <= score(shuffled) + 1e-6).all()
