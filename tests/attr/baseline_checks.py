#!/usr/bin/env python3
r"""The check shared by the tests of the class-agnostic paper baselines
(LastLayerAttention, AttentionRollout, EmbeddingNorm): target is validated but
changes nothing. Padding, batch, state, dtype and device behaviour is checked
in ``tests/test_matrix.py``."""

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
