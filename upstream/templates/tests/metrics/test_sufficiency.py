#!/usr/bin/env python3

import torch
from captum.metrics import sufficiency
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.naive_token_curves import (
    example_batch,
    target_probabilities,
)
from captum.testing.helpers.transformer_models import tiny_transformer


class Test(BaseTest):
    def _check_naive(self, causal: bool) -> None:
        model = tiny_transformer(causal, seed=2)
        ids, mask, scores = example_batch(left_padded=causal)
        base, kept = target_probabilities(model, ids, mask, scores, None, True)
        curve = sufficiency(model, ids, scores, None, (mask,)).curve
        assertTensorAlmostEqual(self, curve, base[:, None] - kept, 1e-5, "max")
        # Keeping every token (the last level) changes nothing.
        assertTensorAlmostEqual(self, curve[:, -1], torch.zeros(3), 1e-6, "max")

    def test_encoder_matches_naive_keep_top(self) -> None:
        self._check_naive(causal=False)

    def test_decoder_left_padded_matches_naive_keep_top(self) -> None:
        self._check_naive(causal=True)
