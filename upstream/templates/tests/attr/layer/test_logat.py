#!/usr/bin/env python3

from typing import Any, Dict, List

import torch
from captum.attr import EmbeddingNorm, LogAt, NormXLogit
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.plain_transformers import plain_classifier, PLAIN_VARIANTS
from torch import nn, Tensor

TARGET = [2, 0, 1]


def _outputs(model: nn.Module, modules: List[nn.Module], ids: Tensor) -> List[Tensor]:
    r"""Each module's output on one plain forward pass."""
    seen: Dict[int, Tensor] = {}
    handles = [
        module.register_forward_hook(
            lambda _m, _i, out, k=k: seen.__setitem__(k, out.detach())
        )
        for k, module in enumerate(modules)
    ]
    try:
        model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return [seen[k] for k in range(len(modules))]


def _naive_logat(model: Any, final: Tensor) -> Tensor:
    r"""``head(final[b, i])[target_b]`` one position at a time."""
    rows = []
    for b, target in enumerate(TARGET):
        rows.append(torch.stack([model.head(state)[target] for state in final[b]]))
    return torch.stack(rows)  # [batch, pos]


class Test(BaseTest):
    def test_equal_naive_references(self) -> None:
        for variant in PLAIN_VARIANTS:
            model, ids = plain_classifier(variant)
            final, embedded = _outputs(model, [model.final, model.embeddings], ids)
            logat = _naive_logat(model, final)
            norms = torch.stack(
                [torch.stack([x.norm() for x in row]) for row in embedded]
            )
            cases = (
                (LogAt(model, model.final, head=model.head), logat),
                (
                    NormXLogit(
                        model, model.final, head=model.head, embedding=model.embeddings
                    ),
                    norms * logat,
                ),
                (EmbeddingNorm(model, model.embeddings), norms),
            )
            for method, expected in cases:
                actual = method.attribute(ids, target=TARGET)
                assertTensorAlmostEqual(self, actual, expected, delta=1e-12, mode="max")

    def test_logat_at_the_classification_position_is_the_model_logit(self) -> None:
        for variant in PLAIN_VARIANTS:
            model, ids = plain_classifier(variant)
            scores = LogAt(model, model.final, head=model.head).attribute(ids, TARGET)
            read = -1 if model.causal else 0
            logits = model(ids)[torch.arange(3), TARGET]
            assertTensorAlmostEqual(self, scores[:, read], logits, delta=1e-12)

    def test_embedding_norm_ignores_the_target(self) -> None:
        model, ids = plain_classifier("post-LN decoder")
        method = EmbeddingNorm(model, model.embeddings)
        assertTensorAlmostEqual(
            self, method.attribute(ids, 0), method.attribute(ids, 2), delta=0
        )
        with self.assertRaises((IndexError, ValueError)):
            method.attribute(ids, target=3)

    def test_head_and_embedding_are_required(self) -> None:
        model, _ = plain_classifier("pre-LN encoder")
        with self.assertRaisesRegex(ValueError, "needs head="):
            LogAt(model, model.final, head=None)
        with self.assertRaisesRegex(ValueError, "needs embedding="):
            NormXLogit(model, model.final, head=model.head, embedding=None)

    def test_a_head_with_the_wrong_outputs_is_refused(self) -> None:
        model, ids = plain_classifier("pre-LN encoder")
        logat = LogAt(model, model.final, head=nn.Linear(16, 5).double())
        with self.assertRaisesRegex(ValueError, "head must map the states"):
            logat.attribute(ids, target=0)
