#!/usr/bin/env python3
r"""The checks shared by the tests of the class-agnostic paper baselines
(LastLayerAttention, AttentionRollout, EmbeddingNorm): each equals its formula
written out per example, and target is validated but changes nothing. Padding,
batch, state, dtype and device behaviour is checked in ``tests/test_matrix.py``."""

from typing import Callable, Tuple

import pytest
import torch
from torch import nn, Tensor

from tests.attr.token_method_checks import attribute, MethodFactory, unpadded
from tests.helpers import is_causal, tiny_classifier, token_batch


def assert_equals_naive_per_example(
    factory: MethodFactory, family: str, naive: Callable[[nn.Module, Tensor], Tensor]
) -> Tuple[Tensor, Tensor]:
    r"""The batched method equals ``naive(model, ids)`` on every unpadded example
    ``[1, n]`` of a float64 tiny model, and is zero on padding. Returns the
    scores ``[batch, pos]`` and the mask of real tokens."""
    model = tiny_classifier(family, dtype=torch.float64)
    batch = token_batch(causal=is_causal(family))
    scores = attribute(factory(model), batch)
    valid = batch["attention_mask"].bool()
    for row, ids in enumerate(unpadded(batch)):
        expected = naive(model, ids).detach()
        torch.testing.assert_close(scores[row][valid[row]], expected)
        assert torch.all(scores[row][~valid[row]] == 0)
    return scores, valid


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
