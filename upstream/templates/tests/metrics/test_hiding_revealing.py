#!/usr/bin/env python3

import torch
from captum.metrics import hiding_revealing
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.naive_token_curves import example_batch, naive_probabilities
from captum.testing.helpers.transformer_models import tiny_transformer
from torch import Tensor

LEVELS = [g / 10 for g in range(11)]


def _trapezoid(curve: Tensor) -> Tensor:
    area = torch.zeros(curve.shape[0], dtype=torch.float64)
    for j in range(len(LEVELS) - 1):
        width = LEVELS[j + 1] - LEVELS[j]
        area += width / 2 * (curve[:, j] + curve[:, j + 1])
    return area


class Test(BaseTest):
    def test_matches_naive_accuracy_curves(self) -> None:
        model = tiny_transformer(False, seed=3)
        ids, mask, scores = example_batch(left_padded=False)
        labels = torch.tensor([0, 1, 2])
        result = hiding_revealing(model, ids, scores, None, (mask,), labels=labels)
        for keep_top, part in ((False, result.hiding), (True, result.revealing)):
            probs = naive_probabilities(model, ids, mask, scores, keep_top, LEVELS)
            correct = (probs.argmax(-1) == labels[:, None]).double()
            assertTensorAlmostEqual(self, part.curve, correct, delta=0, mode="max")
            assertTensorAlmostEqual(
                self, part.score, _trapezoid(correct), delta=1e-6, mode="max"
            )
