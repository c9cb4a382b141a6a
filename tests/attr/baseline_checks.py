#!/usr/bin/env python3
r"""Checks shared by the tests of the class-agnostic paper baselines
(LastLayerAttention, AttentionRollout, EmbeddingNorm): target is validated but
changes nothing, and a bfloat16 model gives float32 scores close to float32's."""

from typing import Callable

import pytest
import torch
from torch import nn

from tests.attr.token_method_checks import attribute
from tests.helpers import is_causal, tiny_classifier, token_batch

MethodFactory = Callable[[nn.Module], object]


def assert_target_validated_but_ignored(factory: MethodFactory, family: str) -> None:
    batch = token_batch(causal=is_causal(family))
    method = factory(tiny_classifier(family, num_labels=3))
    reference = attribute(method, batch)
    for target in (0, 2, [1, 0, 2], torch.tensor([2, 2, 1])):
        assert torch.equal(attribute(method, batch, target=target), reference)
    with pytest.raises(IndexError, match="out of range"):
        attribute(method, batch, target=3)
    with pytest.raises(ValueError, match="2 entries"):
        attribute(method, batch, target=[0, 1])


def assert_bfloat16_gives_close_float32(
    factory: MethodFactory, family: str, max_relative_error: float
) -> None:
    r"""Scores are float32 for a bfloat16 model, within ``max_relative_error``
    (relative L2 over the batch) of the float32 model's."""
    batch = token_batch(causal=is_causal(family))
    exact = attribute(factory(tiny_classifier(family)), batch)
    low = attribute(factory(tiny_classifier(family, dtype=torch.bfloat16)), batch)
    assert exact.dtype == low.dtype == torch.float32
    assert (low - exact).norm() / exact.norm() < max_relative_error
