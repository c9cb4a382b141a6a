#!/usr/bin/env python3
r"""The default vision task: scikit-learn's digits split by a hash ranking
(disjoint, the same every time, normalised by the training split), a changed
recipe under another cache name, a small recipe trained into a temporary
cache; marked ``integration``, the default digits ViT's held-out accuracy."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from captum_ext.defaults import digits
from captum_ext.defaults.cache import CACHE_ENV
from captum_ext.defaults.digits import (
    digits_cache_name,
    DIGITS_RECIPE,
    digits_split,
    evaluate_digits,
    load_default_vit,
)

# Measured 0.964 with the shipped recipe (359 held-out images).
DIGITS_FLOOR = 0.9


def test_the_splits_are_disjoint_fixed_and_normalised() -> None:
    train, test = digits_split("train"), digits_split("test")
    assert train.images.shape[1:] == (1, 16, 16)
    assert len(test) == round(0.2 * (len(train) + len(test)))
    rows = {image.numpy().tobytes() for image in train.images}
    assert not any(image.numpy().tobytes() in rows for image in test.images)
    assert float(train.images.mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(train.images.std()) == pytest.approx(1.0, abs=1e-4)
    # Nearest-neighbour upsampling: each 2 x 2 block is one pixel of the 8 x 8.
    block = test.images[:, :, ::2, ::2].repeat_interleave(2, 2).repeat_interleave(2, 3)
    assert torch.equal(block, test.images)
    assert sorted(set(test.labels)) == list(range(10))
    again = digits_split("test")
    assert torch.equal(again.images, test.images) and again.labels == test.labels
    with pytest.raises(ValueError, match="split"):
        digits_split("validation")


def test_another_recipe_another_cache_name() -> None:
    assert digits_cache_name() == digits_cache_name(replace(DIGITS_RECIPE))
    assert digits_cache_name() != digits_cache_name(replace(DIGITS_RECIPE, epochs=1))


def test_a_small_recipe_trains_once_into_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    recipe = replace(
        DIGITS_RECIPE, hidden_size=8, heads=2, intermediate_size=8, epochs=1
    )
    threads = torch.get_num_threads()
    model = load_default_vit(recipe=recipe)
    assert torch.get_num_threads() == threads  # training's one thread undone
    assert not model.training
    assert (tmp_path / digits_cache_name(recipe) / "training.json").is_file()
    monkeypatch.setattr(digits, "_train", lambda *args: pytest.fail("trained again"))
    again = load_default_vit(recipe=recipe)
    for a, b in zip(model.parameters(), again.parameters()):
        assert torch.equal(a, b)


@pytest.mark.integration
def test_the_default_vit_is_accurate_on_held_out_digits() -> None:
    accuracy = evaluate_digits(load_default_vit(), digits_split("test"))
    assert accuracy >= DIGITS_FLOOR
