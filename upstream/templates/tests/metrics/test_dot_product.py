#!/usr/bin/env python3

import math

import torch
from captum.metrics import dot_product
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual

IDS = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 0]])
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
SCORES = torch.tensor([[0.9, -0.1, 0.5, 0.3], [0.2, 0.8, -0.5, 9.0]])
EVIDENCE = torch.tensor([[0, 1, 1, 0], [1, 0, 0, 1]])


class Test(BaseTest):
    def test_softmax_share_on_evidence(self) -> None:
        e = math.exp
        first = (e(-0.1) + e(0.5)) / (e(0.9) + e(-0.1) + e(0.5) + e(0.3))
        second = e(0.2) / (e(0.2) + e(0.8) + e(-0.5))  # padding left out
        result = dot_product(IDS, SCORES, EVIDENCE, (MASK,))
        assertTensorAlmostEqual(self, result, [first, second], delta=1e-6, mode="max")

    def test_l1_and_raw(self) -> None:
        l1 = dot_product(IDS, SCORES, EVIDENCE, (MASK,), normalize="l1")
        raw = dot_product(IDS, SCORES, EVIDENCE, (MASK,), normalize=None)
        assertTensorAlmostEqual(
            self, l1, [0.6 / 1.8, 0.2 / 1.5], delta=1e-6, mode="max"
        )
        assertTensorAlmostEqual(self, raw, [0.4, 0.2], delta=1e-6, mode="max")

    def test_unknown_normalization_is_named(self) -> None:
        with self.assertRaisesRegex(ValueError, "normalize"):
            dot_product(IDS, SCORES, EVIDENCE, (MASK,), normalize="l2")
