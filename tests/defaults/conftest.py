#!/usr/bin/env python3
r"""Fixtures of the default models' tests: a tiny generator recipe trained in a
temporary cache, counting what is trained in this process."""

from pathlib import Path
from typing import Any, List, Tuple

import pytest
from captum_ext.defaults import generator
from captum_ext.defaults.generator import GeneratorRecipe
from captum_ext.defaults.recall import RecallExample, RecallTask

TINY = GeneratorRecipe(
    task=RecallTask(n_keys=4, n_values=4, min_pairs=1, max_pairs=2),
    hidden_size=8,
    layers=1,
    heads=2,
    intermediate_size=16,
    batch_size=4,
    extra_queries=1,
    max_steps=3,
    eval_every=1,
    validation_size=4,
    target_accuracy=0.0,
)


@pytest.fixture
def counted_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> List[GeneratorRecipe]:
    r"""An empty cache in ``tmp_path``; yields the list of recipes trained."""
    monkeypatch.setenv("CAPTUM_EXT_CACHE", str(tmp_path))
    trained: List[GeneratorRecipe] = []
    train = generator._train

    def counting(
        model: Any,
        tokenizer: Any,
        recipe: GeneratorRecipe,
        validation: List[RecallExample],
    ) -> Tuple[int, float]:
        trained.append(recipe)
        return train(model, tokenizer, recipe, validation)

    monkeypatch.setattr(generator, "_train", counting)
    return trained
