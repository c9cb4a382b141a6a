#!/usr/bin/env python3

from typing import List, Optional, Sequence

import torch
from captum.attr import AttCAT, CAT
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.plain_transformers import plain_classifier, PLAIN_VARIANTS
from torch import nn, Tensor

TARGET = [2, 0, 1]


def _naive_layer_scores(
    model: nn.Module,
    ids: Tensor,
    layers: Sequence[nn.Module],
    attention: Optional[Sequence[nn.Module]] = None,
) -> Tensor:
    r"""``[batch, L, pos]``: per example and per layer on a forward pass of its
    own, the layer's output replaced by a leaf, ``sum_d grad * state`` of the
    target logit, times (``attention``) the mean over heads and query rows of
    the paired probabilities."""
    rows = []
    for b in range(len(ids)):
        per_layer: List[Tensor] = []
        for index, layer in enumerate(layers):
            leaf: List[Tensor] = []
            maps: List[Tensor] = []

            def as_leaf(_m: nn.Module, _i: object, out: Tensor) -> Tensor:
                leaf.append(out.detach().requires_grad_())
                return leaf[0]

            handles = [layer.register_forward_hook(as_leaf)]
            if attention is not None:
                handles.append(
                    attention[index].register_forward_hook(
                        lambda _m, _i, out: maps.append(out.detach())
                    )
                )
            try:
                logit = model(ids[b : b + 1])[0, TARGET[b]]
            finally:
                for handle in handles:
                    handle.remove()
            (grad,) = torch.autograd.grad(logit, leaf[0])
            score = (grad * leaf[0]).sum(-1)[0]  # [pos]
            if attention is not None:
                score = score * maps[0][0].mean(dim=(0, 1))
            per_layer.append(score)
        rows.append(torch.stack(per_layer))
    return torch.stack(rows)


class Test(BaseTest):
    def test_cat_equals_naive_gradient_times_state(self) -> None:
        for variant in PLAIN_VARIANTS:
            model, ids = plain_classifier(variant)
            blocks = list(model.blocks)
            expected = _naive_layer_scores(model, ids, blocks)
            cat = CAT(model, blocks)
            per_layer = cat.attribute(ids, target=TARGET, return_layers=True)
            assertTensorAlmostEqual(self, per_layer, expected, delta=1e-10, mode="max")
            assertTensorAlmostEqual(
                self,
                cat.attribute(ids, target=TARGET),
                expected.sum(1),
                delta=1e-10,
                mode="max",
            )

    def test_attcat_weights_cat_by_the_attention_each_token_receives(self) -> None:
        for variant in PLAIN_VARIANTS:
            model, ids = plain_classifier(variant)
            blocks = list(model.blocks)
            probs = [block.attention.probabilities for block in blocks]
            expected = _naive_layer_scores(model, ids, blocks, probs).sum(1)
            actual = AttCAT(model, blocks, attention=probs).attribute(ids, TARGET)
            assertTensorAlmostEqual(self, actual, expected, delta=1e-10, mode="max")

    def test_layer_input_is_the_previous_layer_output(self) -> None:
        model, ids = plain_classifier("pre-LN decoder")
        blocks = list(model.blocks)
        outputs = CAT(model, blocks[:-1]).attribute(ids, TARGET, return_layers=True)
        inputs = CAT(model, blocks[1:], attribute_to_layer_input=True).attribute(
            ids, TARGET, return_layers=True
        )
        assertTensorAlmostEqual(self, inputs, outputs, delta=0, mode="max")

    def test_chunks_give_the_whole_batch_scores(self) -> None:
        model, ids = plain_classifier("post-LN encoder")
        probs = [block.attention.probabilities for block in model.blocks]
        attcat = AttCAT(model, list(model.blocks), attention=probs)
        whole = attcat.attribute(ids, target=TARGET)
        chunked = attcat.attribute(ids, target=TARGET, internal_batch_size=2)
        assertTensorAlmostEqual(self, chunked, whole, delta=1e-12, mode="max")

    def test_default_target_is_the_predicted_class(self) -> None:
        model, ids = plain_classifier("pre-LN encoder")
        cat = CAT(model, list(model.blocks))
        predicted = model(ids).argmax(-1).tolist()
        assertTensorAlmostEqual(
            self, cat.attribute(ids), cat.attribute(ids, predicted), delta=0
        )

    def test_attcat_needs_one_attention_module_per_layer(self) -> None:
        model, _ = plain_classifier("pre-LN encoder")
        blocks = list(model.blocks)
        with self.assertRaisesRegex(ValueError, "needs attention="):
            AttCAT(model, blocks, attention=None)
        probs = [block.attention.probabilities for block in blocks]
        with self.assertRaisesRegex(ValueError, "3 layer modules and 2 attention"):
            AttCAT(model, blocks, attention=probs[:2])

    def test_out_of_range_target_raises(self) -> None:
        model, ids = plain_classifier("pre-LN encoder")
        with self.assertRaises((IndexError, ValueError)):
            CAT(model, list(model.blocks)).attribute(ids, target=3)
