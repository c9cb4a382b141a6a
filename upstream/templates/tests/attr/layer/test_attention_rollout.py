#!/usr/bin/env python3

from typing import Any, List

import torch
from captum.attr import AttentionRollout, LastLayerAttention
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.plain_transformers import plain_classifier, PLAIN_VARIANTS
from torch import Tensor


def _maps(model: Any, ids: Tensor) -> List[Tensor]:
    r"""Every block's attention probabilities ``[batch, heads, pos, pos]``."""
    maps: List[Tensor] = []
    handles = [
        block.attention.probabilities.register_forward_hook(
            lambda _m, _i, out: maps.append(out.detach())
        )
        for block in model.blocks
    ]
    try:
        model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return maps


class Test(BaseTest):
    def test_equal_rows_of_the_head_averaged_product(self) -> None:
        for variant in PLAIN_VARIANTS:
            model, ids = plain_classifier(variant)
            position = -1 if model.causal else 0
            probs = [block.attention.probabilities for block in model.blocks]
            means = [m.mean(1) for m in _maps(model, ids)]  # [batch, pos, pos]
            product = means[0]
            for later in means[1:]:
                product = later @ product
            last = LastLayerAttention(model, probs, position).attribute(ids)
            rollout = AttentionRollout(model, probs, position).attribute(ids)
            assertTensorAlmostEqual(
                self, last, means[-1][:, position], delta=1e-12, mode="max"
            )
            assertTensorAlmostEqual(
                self, rollout, product[:, position], delta=1e-12, mode="max"
            )
            # Rows of row-stochastic matrices and of their product sum to 1.
            for scores in (last, rollout):
                assertTensorAlmostEqual(
                    self, scores.sum(-1), torch.ones(3), delta=1e-12, mode="max"
                )

    def test_one_layer_rollout_is_last_layer_attention(self) -> None:
        model, ids = plain_classifier("pre-LN encoder")
        last_probs = [model.blocks[-1].attention.probabilities]
        assertTensorAlmostEqual(
            self,
            AttentionRollout(model, last_probs).attribute(ids),
            LastLayerAttention(model, last_probs).attribute(ids),
            delta=0,
        )

    def test_out_of_range_position_raises(self) -> None:
        model, ids = plain_classifier("pre-LN encoder")
        probs = [block.attention.probabilities for block in model.blocks]
        with self.assertRaisesRegex(IndexError, "position 7 is out of range"):
            LastLayerAttention(model, probs, position=7).attribute(ids)

    def test_a_module_returning_no_probabilities_is_refused(self) -> None:
        model, ids = plain_classifier("pre-LN encoder")
        with self.assertRaisesRegex(ValueError, "reads attention probabilities"):
            AttentionRollout(model, list(model.blocks)).attribute(ids)
