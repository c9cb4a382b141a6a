#!/usr/bin/env python3

from typing import List

import torch
from captum.metrics import kendall_tau
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.naive_token_curves import example_batch
from captum.testing.helpers.transformer_models import tiny_transformer
from torch import Tensor


def _ranking(scores: List[float]) -> List[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def _tau_b(x: List[int], y: List[int]) -> float:
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            sign = (x[i] - x[j]) * (y[i] - y[j])
            concordant += sign > 0
            discordant += sign < 0
            ties_x += x[i] == x[j] and y[i] != y[j]
            ties_y += y[i] == y[j] and x[i] != x[j]
    pairs_x = concordant + discordant + ties_x
    pairs_y = concordant + discordant + ties_y
    return (concordant - discordant) / (pairs_x * pairs_y) ** 0.5


def _naive(table: Tensor, mask: Tensor, target: Tensor) -> Tensor:
    r"""Mean over the other classes of tau-b between the two rankings of the
    real tokens (argsort of the negated scores, ties to the lower position)."""
    taus = []
    for b in range(table.shape[0]):
        real = mask[b] != 0
        own = _ranking(table[b, int(target[b])][real].tolist())
        others = [
            _tau_b(own, _ranking(table[b, c][real].tolist()))
            for c in range(table.shape[1])
            if c != int(target[b])
        ]
        taus.append(sum(others) / len(others))
    return torch.tensor(taus)


class Test(BaseTest):
    def test_matches_naive_tau_of_rankings(self) -> None:
        model = tiny_transformer(False)
        ids, mask, _ = example_batch(left_padded=False)
        table = torch.randn(
            3, 3, ids.shape[1], generator=torch.Generator().manual_seed(0)
        )
        target = torch.tensor([1, 0, 2])
        tau = kendall_tau(model, ids, table, target, (mask,))
        assertTensorAlmostEqual(
            self, tau, _naive(table, mask, target), delta=1e-6, mode="max"
        )

    def test_callable_attributions_match_table(self) -> None:
        model = tiny_transformer(True)
        ids, mask, _ = example_batch(left_padded=True)
        table = torch.randn(
            3, 3, ids.shape[1], generator=torch.Generator().manual_seed(1)
        )
        rows = torch.arange(3)
        tau = kendall_tau(model, ids, lambda t: table[rows, t], None, (mask,))
        with torch.no_grad():
            predicted = model(ids, mask).argmax(-1)
        assertTensorAlmostEqual(
            self, tau, _naive(table, mask, predicted), delta=1e-6, mode="max"
        )

    def test_same_and_reversed_rankings(self) -> None:
        model = tiny_transformer(False)
        ids, mask, _ = example_batch(left_padded=False)
        scores = torch.arange(ids.shape[1], dtype=torch.float64).expand(3, -1)
        same = torch.stack([scores, scores, scores], dim=1)
        reversed_ = torch.stack([scores, -scores, -scores], dim=1)
        target = torch.zeros(3, dtype=torch.long)
        assertTensorAlmostEqual(
            self, kendall_tau(model, ids, same, target, (mask,)), [1.0] * 3
        )
        assertTensorAlmostEqual(
            self, kendall_tau(model, ids, reversed_, target, (mask,)), [-1.0] * 3
        )
