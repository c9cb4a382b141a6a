#!/usr/bin/env python3

from typing import Any, List, Optional

import torch
from captum.attr import (
    DecodedLayerAttribution,
    DecodedLayerGradCam,
    LayerGradientXActivation,
    LayerIntegratedGradients,
)
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.plain_transformers import plain_classifier, PLAIN_VARIANTS
from torch import nn, Tensor

TARGET = [2, 0, 1]


def _tied_decoder(model: Any) -> nn.Module:
    r"""The input embeddings as the decoder onto the vocabulary."""
    decoder = nn.Linear(16, 50, bias=False).double().eval()
    decoder.weight = model.tokens.weight
    return decoder


def _naive(
    model: Any,
    layer: nn.Module,
    decoder: nn.Module,
    ids: Tensor,
    tau: Optional[int] = None,
    relu: Optional[str] = "outside",
) -> Tensor:
    r"""Decoded Grad-CAM one example at a time (Hou & Castanon, Eq. 1, 4, 6
    and Alg. 1): ``a_j = sum_d (dy/dh_j) h_j``, ``D[i, j] =
    softmax(decoder(h_j))[t_i]`` over the unique tokens ``t``, the top-tau
    tokens of each ``j`` kept, ``s_i = ReLU(sum_j D[i, j] a_j)``."""
    rows = []
    for b, target in enumerate(TARGET):
        seen = {}

        def hook(_m: nn.Module, _i: Any, out: Tensor) -> Tensor:
            seen["h"] = out.detach().requires_grad_()
            return seen["h"]

        handle = layer.register_forward_hook(hook)
        try:
            logit = model(ids[b : b + 1])[0, target]
        finally:
            handle.remove()
        (grad,) = torch.autograd.grad(logit, seen["h"])
        a = (grad * seen["h"]).sum(-1)[0].detach()  # [pos]
        tokens: List[int] = sorted(set(ids[b].tolist()))
        with torch.no_grad():
            probabilities = decoder(seen["h"][0]).softmax(-1)[:, tokens]  # [j, T]
        score = {}
        for i, token in enumerate(tokens):
            total = torch.zeros((), dtype=a.dtype)
            for j in range(len(a)):
                column = probabilities[j]
                kept = tau is None or int((column > column[i]).sum()) < tau
                weight = a[j].relu() if relu == "inside" else a[j]
                total = total + (column[i] * weight if kept else 0)
            score[token] = total.relu() if relu == "outside" else total
        rows.append(torch.stack([score[token] for token in ids[b].tolist()]))
    return torch.stack(rows)


class Test(BaseTest):
    def test_grad_cam_equals_the_naive_loop(self) -> None:
        for variant in PLAIN_VARIANTS:
            model, ids = plain_classifier(variant)
            decoder, layer = _tied_decoder(model), model.blocks[1]
            method = DecodedLayerGradCam(model, layer, decoder)
            for tau, relu in ((None, "outside"), (2, "outside"), (3, "inside")):
                expected = _naive(model, layer, decoder, ids, tau, relu)
                actual = method.attribute(
                    ids, TARGET, tau=tau, relu=relu, internal_batch_size=2
                )
                assertTensorAlmostEqual(self, actual, expected, delta=1e-12, mode="max")

    def test_grad_cam_is_the_decoded_gradient_x_activation(self) -> None:
        model, ids = plain_classifier("pre-LN decoder")
        decoder, layer = _tied_decoder(model), model.blocks[2]
        generic = DecodedLayerAttribution(
            model, layer, decoder, LayerGradientXActivation
        )
        instance = DecodedLayerAttribution(
            model, None, decoder, LayerGradientXActivation(model, layer)
        )
        expected = DecodedLayerGradCam(model, layer, decoder).attribute(
            ids, TARGET, relu=None
        )
        for method in (generic, instance):
            actual = method.attribute(ids, TARGET, relu=None)
            assertTensorAlmostEqual(self, actual, expected, delta=0)

    def test_a_wrapped_method_with_steps(self) -> None:
        model, ids = plain_classifier("post-LN encoder")
        decoder, layer = _tied_decoder(model), model.blocks[1]
        method = DecodedLayerAttribution(
            model, layer, decoder, LayerIntegratedGradients
        )
        whole = method.attribute(ids, TARGET, n_steps=4, relu=None)
        chunked = method.attribute(
            ids, TARGET, n_steps=4, relu=None, internal_batch_size=1
        )
        assertTensorAlmostEqual(self, chunked, whole, delta=1e-12, mode="max")

    def test_bad_arguments_are_named(self) -> None:
        model, ids = plain_classifier("post-LN encoder")
        layer = model.blocks[1]
        with self.assertRaisesRegex(ValueError, "decoder="):
            DecodedLayerGradCam(model, layer, None)
        method = DecodedLayerGradCam(model, layer, _tied_decoder(model))
        with self.assertRaisesRegex(ValueError, "relu"):
            method.attribute(ids, TARGET, relu="both")
        with self.assertRaisesRegex(ValueError, "outside the decoder's vocabulary"):
            small = nn.Linear(16, 10, bias=False).double()
            DecodedLayerGradCam(model, layer, small).attribute(ids, TARGET)
