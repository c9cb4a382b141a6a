#!/usr/bin/env python3

import torch
from captum.metrics import aopc, TokenOptions
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.naive_token_curves import (
    example_batch,
    LEVELS,
    target_probabilities,
)
from captum.testing.helpers.transformer_models import tiny_transformer


class Test(BaseTest):
    def _check_naive(self, causal: bool) -> None:
        model = tiny_transformer(causal)
        ids, mask, scores = example_batch(left_padded=causal)
        result = aopc(model, ids, scores, additional_forward_args=(mask,))
        base, probs = target_probabilities(model, ids, mask, scores, None, False)
        expected = base[:, None] - probs
        assertTensorAlmostEqual(self, result.levels, LEVELS, delta=1e-9, mode="max")
        assertTensorAlmostEqual(self, result.curve, expected, delta=1e-5, mode="max")
        assertTensorAlmostEqual(
            self, result.score, expected.mean(1), delta=1e-5, mode="max"
        )

    def test_encoder_matches_naive_deletion(self) -> None:
        self._check_naive(causal=False)

    def test_decoder_left_padded_matches_naive_deletion(self) -> None:
        self._check_naive(causal=True)

    def test_special_tokens_never_removed(self) -> None:
        model = tiny_transformer(False)
        ids, mask, scores = example_batch(left_padded=False)
        tokens = TokenOptions(special_token_ids=[3, 8])
        target = torch.tensor([0, 1, 2])
        result = aopc(model, ids, scores, target, (mask,), tokens=tokens)
        special = (ids == 3) | (ids == 8)
        base, probs = target_probabilities(
            model, ids, mask, scores, target, False, special=special
        )
        assertTensorAlmostEqual(
            self, result.curve, base[:, None] - probs, delta=1e-5, mode="max"
        )

    def test_internal_batch_size_does_not_change_result(self) -> None:
        model = tiny_transformer(False)
        ids, mask, scores = example_batch(left_padded=False)
        whole = aopc(model, ids, scores, additional_forward_args=(mask,))
        for size in (1, 4):
            chunked = aopc(model, ids, scores, None, (mask,), internal_batch_size=size)
            assertTensorAlmostEqual(
                self, chunked.curve, whole.curve, delta=1e-6, mode="max"
            )

    def test_bad_attributions_name_the_argument(self) -> None:
        model = tiny_transformer(False)
        ids, mask, scores = example_batch(left_padded=False)
        with self.assertRaisesRegex(ValueError, "attributions"):
            aopc(model, ids, scores[:, :3], additional_forward_args=(mask,))
