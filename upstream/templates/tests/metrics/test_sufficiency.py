#!/usr/bin/env python3

import torch
from captum.metrics import sufficiency
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.naive_token_curves import (
    at_target,
    example_batch,
    naive_probabilities,
)
from captum.testing.helpers.transformer_models import tiny_transformer


class Test(BaseTest):
    def test_matches_naive_keep_top(self) -> None:
        for causal in (False, True):
            model = tiny_transformer(causal, seed=2)
            ids, mask, scores = example_batch(left_padded=causal)
            result = sufficiency(model, ids, scores, additional_forward_args=(mask,))
            with torch.no_grad():
                probs = model(ids, mask).softmax(-1)
            target = probs.argmax(-1)
            base = probs[torch.arange(3), target]
            kept = at_target(
                naive_probabilities(model, ids, mask, scores, True), target
            )
            expected = base[:, None] - kept
            assertTensorAlmostEqual(
                self, result.curve, expected, delta=1e-5, mode="max"
            )
            # Keeping every token (the last level) changes nothing.
            assertTensorAlmostEqual(
                self, result.curve[:, -1], torch.zeros(3), delta=1e-6, mode="max"
            )
