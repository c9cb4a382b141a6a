#!/usr/bin/env python3
from functools import partial

import pytest
import torch
from captum_ext.attr import LastLayerAttention

from tests.attr.baseline_checks import (
    assert_equals_naive_per_example,
    assert_target_validated_but_ignored,
)
from tests.attr.token_method_checks import attribute
from tests.helpers import ALL_FAMILIES, is_causal, tiny_classifier, token_batch


def naive_last_layer_attention(model, input_ids, causal):
    r"""One unpadded example ``[1, n]``: the classification position's row (the
    last token for causal models, else the first) of the last layer's
    attention, averaged over heads by an explicit loop."""
    attention = model(input_ids=input_ids, output_attentions=True).attentions[-1][0]
    position = input_ids.shape[1] - 1 if causal else 0
    heads = attention.shape[0]
    return sum(attention[h, position] for h in range(heads)) / heads


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_equals_naive_per_example_formula(family):
    naive = partial(naive_last_layer_attention, causal=is_causal(family))
    assert_equals_naive_per_example(LastLayerAttention, family, naive)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_is_a_probability_distribution_over_real_tokens(family):
    scores = attribute(
        LastLayerAttention(tiny_classifier(family)),
        token_batch(causal=is_causal(family)),
    )
    assert torch.all(scores >= 0)
    torch.testing.assert_close(scores.sum(-1), torch.ones(3))


def test_target_validated_but_ignored():
    assert_target_validated_but_ignored(LastLayerAttention, "bert")
