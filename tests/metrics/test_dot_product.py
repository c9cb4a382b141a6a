#!/usr/bin/env python3
import math

import pytest
import torch
from captum_ext.metrics import dot_product, TokenOptions

IDS = torch.tensor([[2, 10, 11, 12, 3, 0]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 0]])
SCORES = torch.tensor([[5.0, 1.0, -2.0, 0.5, 5.0, 9.0]])
EVIDENCE = torch.tensor([[1, 1, 0, 1, 0, 1]])


def test_softmax_over_content_tokens():
    result = dot_product(
        IDS, SCORES, EVIDENCE, MASK, tokens=TokenOptions(special_token_ids=[2, 3])
    )
    total = math.exp(1.0) + math.exp(-2.0) + math.exp(0.5)
    assert result.item() == pytest.approx((math.exp(1.0) + math.exp(0.5)) / total)


def test_l1_and_raw():
    args = (IDS, SCORES, EVIDENCE, MASK)
    l1 = dot_product(
        *args, normalize="l1", tokens=TokenOptions(special_token_ids=[2, 3])
    )
    assert l1.item() == pytest.approx(1.5 / 3.5)
    raw = dot_product(
        *args, normalize=None, tokens=TokenOptions(special_token_ids=[2, 3])
    )
    assert raw.item() == pytest.approx(1.5)
    with pytest.raises(ValueError, match="normalize"):
        dot_product(*args, normalize="l2")
