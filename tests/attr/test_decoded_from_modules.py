#!/usr/bin/env python3
r"""Decoded layer attribution built Captum's way, from ``forward_func`` on token
ids, the layer module and a decoder: a plain PyTorch transformer against the
paper's formula by hand, and a registered family's shortcut numbers."""

from typing import Any

import pytest
import torch
from captum.attr import LayerIntegratedGradients
from captum_ext import classifier_forward, get_adapter
from captum_ext.attr import (
    DecodedLayerAttribution,
    DecodedLayerGradCam,
    EmbeddingDecoder,
)
from torch import nn, Tensor

from tests.attr.plain_transformers import plain_classifier
from tests.helpers import tiny_classifier


def _tied_decoder(model: Any) -> nn.Module:
    decoder = nn.Linear(16, 50, bias=False).double().eval()
    decoder.weight = model.tokens.weight
    return decoder


def _by_hand(
    model, layer: nn.Module, decoder: nn.Module, ids: Tensor, target
) -> Tensor:
    r"""``s_i = ReLU(sum_j softmax(decoder(h_j))[t_i] a_j)``, ``a_j = sum_d
    (dy/dh_j) h_j``, one example at a time (Hou & Castanon, Eq. 1, 4, 6)."""
    rows = []
    for b in range(len(ids)):
        seen = {}

        def hook(_m, _i, out):
            seen["h"] = out.detach().requires_grad_()
            return seen["h"]

        handle = layer.register_forward_hook(hook)
        try:
            logit = model(ids[b : b + 1])[0, target[b]]
        finally:
            handle.remove()
        (grad,) = torch.autograd.grad(logit, seen["h"])
        a = (grad * seen["h"]).sum(-1)[0]  # [pos]
        probabilities = decoder(seen["h"][0]).softmax(-1)  # [pos_j, vocab]
        rows.append((probabilities[:, ids[b]] * a[:, None]).sum(0).relu())
    return torch.stack(rows)


@pytest.mark.parametrize("variant", ["post-LN encoder", "pre-LN decoder"])
def test_a_plain_transformer_equals_the_formula_by_hand(variant: str) -> None:
    model, ids = plain_classifier(variant)
    decoder, layer = _tied_decoder(model), model.blocks[1]
    method = DecodedLayerGradCam(model, layer, decoder)
    torch.testing.assert_close(
        method.attribute(ids, target=[0, 1, 2], internal_batch_size=2),
        _by_hand(model, layer, decoder, ids, [0, 1, 2]),
        rtol=1e-10,
        atol=1e-12,
    )


def test_a_registered_family_gives_the_shortcut_numbers() -> None:
    model = tiny_classifier("bert", dtype=torch.float64)
    decoder = EmbeddingDecoder(model)
    module = get_adapter(model).hidden_state_module(2)
    ids = torch.randint(5, 60, (2, 6))
    explicit = DecodedLayerGradCam(classifier_forward(model), module, decoder)
    expected = DecodedLayerGradCam(model, 2, decoder).attribute(ids, target=1)
    assert torch.equal(explicit.attribute(ids, target=1), expected)
    wrapped = DecodedLayerAttribution(
        classifier_forward(model), module, decoder, LayerIntegratedGradients
    )
    shortcut = DecodedLayerAttribution(model, 2, decoder, LayerIntegratedGradients)
    assert torch.equal(
        wrapped.attribute(ids, target=1, n_steps=4, tau=2),
        shortcut.attribute(ids, target=1, n_steps=4, tau=2),
    )


def test_what_needs_the_model_is_refused_by_name() -> None:
    model, ids = plain_classifier("pre-LN encoder")
    layer = model.blocks[0]
    with pytest.raises(ValueError, match="needs decoder="):
        DecodedLayerGradCam(model, layer)
    with pytest.raises(ValueError, match="input_space='embeddings'"):
        DecodedLayerAttribution(
            model, layer, _tied_decoder(model), input_space="embeddings"
        )
    method = DecodedLayerGradCam(model, layer, nn.Linear(16, 7).double().eval())
    with pytest.raises(ValueError, match="outside the decoder's vocabulary of 7"):
        method.attribute(ids)
    with pytest.raises(ValueError, match="build DecodedLayerGradCam from the model"):
        DecodedLayerGradCam(model, layer, _tied_decoder(model)).attribute_all_layers(
            ids
        )
