#!/usr/bin/env python3

import math

import torch
from captum.metrics import average_precision, TokenOptions
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual

IDS = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 0], [5, 6, 7, 8]])
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]])
SCORES = torch.tensor(
    [[0.9, 0.1, 0.5, 0.3], [0.2, 0.8, 0.5, 9.0], [0.1, 0.2, 0.3, 0.4]]
)
EVIDENCE = torch.tensor([[0, 1, 1, 0], [1, 0, 0, 1], [0, 0, 0, 0]])


class Test(BaseTest):
    def test_hand_computed(self) -> None:
        # Example 0 ranks positions 0, 2, 3, 1: evidence at ranks 2 and 4,
        # AP = (1/2 + 2/4) / 2. Example 1 ranks 1, 2, 0 (position 3 is
        # padding): evidence at rank 3, AP = 1/3. Example 2 has no evidence.
        ap = average_precision(IDS, SCORES, EVIDENCE, (MASK,))
        assertTensorAlmostEqual(self, ap[:2], [0.5, 1 / 3], delta=1e-6, mode="max")
        self.assertTrue(math.isnan(ap[2].item()))

    def test_special_tokens_are_not_ranked(self) -> None:
        # Without token 5, example 1's evidence is only on padding: NaN;
        # example 0 ranks 2, 3, 1: evidence at ranks 1 and 3, AP = (1 + 2/3) / 2.
        tokens = TokenOptions(special_token_ids=[5])
        ap = average_precision(IDS, SCORES, EVIDENCE, (MASK,), tokens=tokens)
        assertTensorAlmostEqual(self, ap[:1], [5 / 6], delta=1e-6)
        self.assertTrue(math.isnan(ap[1].item()))
