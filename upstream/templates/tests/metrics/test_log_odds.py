#!/usr/bin/env python3

import torch
from captum.metrics import log_odds
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.naive_token_curves import (
    example_batch,
    target_probabilities,
)
from captum.testing.helpers.transformer_models import tiny_transformer


class Test(BaseTest):
    def test_matches_naive_log_ratio(self) -> None:
        target = torch.tensor([2, 0, 1])
        for causal in (False, True):
            model = tiny_transformer(causal, seed=1)
            ids, mask, scores = example_batch(left_padded=causal)
            result = log_odds(model, ids, scores, target, (mask,))
            base, probs = target_probabilities(
                model, ids, mask, scores, target, keep_top=False
            )
            expected = (probs / base[:, None]).log()
            assertTensorAlmostEqual(
                self, result.curve, expected, delta=1e-5, mode="max"
            )
            assertTensorAlmostEqual(
                self, result.score, expected.mean(1), delta=1e-5, mode="max"
            )

    def test_zero_attributions_rank_by_position(self) -> None:
        # Ties go to the lower position: all-zero scores delete tokens left to
        # right, as scores decreasing along the sequence do.
        model = tiny_transformer(False)
        ids, mask, _ = example_batch(left_padded=False)
        zeros = torch.zeros(ids.shape, dtype=torch.float64)
        falling = -torch.arange(ids.shape[1], dtype=torch.float64).expand(3, -1)
        tied = log_odds(model, ids, zeros, additional_forward_args=(mask,))
        ordered = log_odds(model, ids, falling, additional_forward_args=(mask,))
        assertTensorAlmostEqual(self, tied.curve, ordered.curve, delta=0, mode="max")
