#!/usr/bin/env python3

import torch
from captum.metrics import token_overlap
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.transformer_models import tiny_transformer

IDS = torch.tensor([[1, 2, 3], [1, 4, 5], [2, 4, 4]])
SCORES = torch.tensor([[0.5, 0.2, 0.9], [0.1, 0.7, 0.3], [0.4, 0.6, 0.1]])
TARGET = torch.tensor([0, 1, 1])


class Test(BaseTest):
    def test_hand_computed_overlap(self) -> None:
        # Class 0 sums 1: 0.5, 2: 0.2, 3: 0.9; class 1 sums 4: 0.7 + 0.6 + 0.1,
        # 2: 0.4, 5: 0.3, 1: 0.1. Top 3: {3, 1, 2} and {4, 2, 5} share one.
        model = tiny_transformer(False)
        result = token_overlap(model, IDS, SCORES, TARGET, top_k=3)
        assertTensorAlmostEqual(self, result.classes, [0, 1], delta=0)
        assertTensorAlmostEqual(
            self, result.top_tokens, [[3, 1, 2], [4, 2, 5]], delta=0
        )
        assertTensorAlmostEqual(self, result.score, 1 / 3, delta=1e-6)

    def test_idf_weights(self) -> None:
        # Token 4 weighs 0: class 1's top 3 become {2, 5, 1}, sharing 1 and 2.
        model = tiny_transformer(False)
        idf = torch.ones(16)
        idf[4] = 0.0
        result = token_overlap(model, IDS, SCORES, TARGET, top_k=3, idf=idf)
        assertTensorAlmostEqual(
            self, result.top_tokens, [[3, 1, 2], [2, 5, 1]], delta=0
        )
        assertTensorAlmostEqual(self, result.score, 2 / 3, delta=1e-6)

    def test_top_k_must_be_positive(self) -> None:
        model = tiny_transformer(False)
        with self.assertRaisesRegex(ValueError, "top_k"):
            token_overlap(model, IDS, SCORES, TARGET, top_k=0)
