#!/usr/bin/env python3

import unittest
from typing import Any, Callable, List, Tuple

import torch
from captum.attr import (
    AttCAT,
    AttentionRollout,
    BlockParts,
    CAT,
    DecodedLayerAttribution,
    DecodedLayerGradCam,
    EmbeddingNorm,
    GlobEnc,
    LastLayerAttention,
    LayerIntegratedGradients,
    LogAt,
    NormXLogit,
)
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.plain_transformers import plain_classifier
from torch import nn, Tensor

TARGET = [2, 0, 1]


def _methods(model: Any, forward: Callable[..., Tensor]) -> List[Tuple[str, Any]]:
    r"""Every method built from ``forward`` and ``model``'s modules."""
    blocks = list(model.blocks)
    probs = [block.attention.probabilities for block in blocks]
    head, final, embedded = model.head, model.final, model.embeddings
    parts = [
        BlockParts(b.attention.value, b.attention.out, b.ln1, b.ln2) for b in blocks
    ]
    decoder = nn.Linear(16, 50, bias=False).double()
    decoder.weight = model.tokens.weight
    return [
        ("CAT", CAT(forward, blocks)),
        ("AttCAT", AttCAT(forward, blocks, attention=probs)),
        ("LogAt", LogAt(forward, final, head=head)),
        ("NormXLogit", NormXLogit(forward, final, head=head, embedding=embedded)),
        ("EmbeddingNorm", EmbeddingNorm(forward, embedded)),
        ("LastLayerAttention", LastLayerAttention(forward, probs)),
        ("AttentionRollout", AttentionRollout(forward, probs)),
        ("GlobEnc", GlobEnc(forward, blocks, probs, parts)),
        ("DecodedLayerGradCam", DecodedLayerGradCam(forward, blocks[1], decoder)),
        (
            "DecodedLayerAttribution",
            DecodedLayerAttribution(
                forward, blocks[1], decoder, LayerIntegratedGradients
            ),
        ),
    ]


def _hook_count(model: nn.Module) -> int:
    return sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
        for m in model.modules()
    )


class _FailingForward(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor) -> Tensor:
        self.model(ids)  # every hook has fired
        raise RuntimeError("forward failed")


class Test(BaseTest):
    def test_hooks_are_removed_after_an_error(self) -> None:
        model, ids = plain_classifier("post-LN encoder")
        for name, method in _methods(model, _FailingForward(model)):
            with self.assertRaisesRegex(RuntimeError, "forward failed", msg=name):
                method.attribute(ids, target=TARGET)
            self.assertEqual(_hook_count(model), 0, name)

    def test_model_mode_and_gradients_are_left_as_they_were(self) -> None:
        model, ids = plain_classifier("post-LN decoder")
        expected = {
            name: m.attribute(ids, TARGET) for name, m in _methods(model, model)
        }
        model.train()
        for name, method in _methods(model, model):
            # A module forward_func runs in eval mode, as Captum's callers do.
            assertTensorAlmostEqual(
                self, method.attribute(ids, TARGET), expected[name], delta=0
            )
            self.assertTrue(model.training, name)
            self.assertTrue(all(p.grad is None for p in model.parameters()), name)
            self.assertEqual(_hook_count(model), 0, name)

    def test_jit_forward_func_is_refused(self) -> None:
        # A TorchScript forward function runs no Python module hooks: the
        # methods read no state from it and say so instead of scoring zeros.
        model, ids = plain_classifier("post-LN encoder")
        traced = torch.jit.trace(model, ids)
        for name, method in _methods(model, traced):
            with self.assertRaisesRegex(
                (RuntimeError, ValueError), "TorchScript", msg=name
            ):
                method.attribute(ids, target=TARGET)
            self.assertEqual(_hook_count(model), 0, name)

    @unittest.skipIf(not torch.cuda.is_available(), "Skipping as CUDA unavailable")
    def test_data_parallel(self) -> None:
        model, ids = plain_classifier("post-LN decoder")
        model, ids = model.cuda(), ids.cuda()
        expected = {
            name: m.attribute(ids, TARGET) for name, m in _methods(model, model)
        }
        wrapped = nn.DataParallel(model)
        for name, method in _methods(model, wrapped):
            assertTensorAlmostEqual(
                self,
                method.attribute(ids, TARGET),
                expected[name],
                delta=1e-10,
                mode="max",
            )
