#!/usr/bin/env python3
r"""Vision transformers (ViT, DeiT) through the shortcut, ``Method(model)``:
one score per token of the encoder's sequence (class token(s), then the
patches), the same numbers as the methods built from the modules named by
hand, on eager and sdpa attention; the methods that read token ids refuse."""

from typing import Any, Callable, Dict

import pytest
import torch
from captum_ext import UnsupportedModelError
from captum_ext.attr import (
    AttCAT,
    AttentionRollout,
    CAT,
    DecodedLayerGradCam,
    EmbeddingNorm,
    GlobEnc,
    LastLayerAttention,
    LogAt,
    NormXLogit,
)
from torch import nn, Tensor

from tests.helpers import tiny_vision


def _by_hand(model: Any) -> Dict[str, Callable[[], Any]]:
    r"""Each method built from the modules named by hand (not the adapter)."""
    base = model.base_model
    blocks = list(base.layers)
    norms = [block.layernorm_before for block in blocks]
    attention = [block.attention for block in blocks]

    def forward(pixel_values: Tensor) -> Tensor:
        return model(pixel_values=pixel_values).logits

    return {
        "CAT": lambda: CAT(forward, norms),
        "AttCAT": lambda: AttCAT(forward, norms, attention),
        "LogAt": lambda: LogAt(forward, base.layernorm, head=model.classifier),
        "NormXLogit": lambda: NormXLogit(
            forward, base.layernorm, head=model.classifier, embedding=base.embeddings
        ),
        "EmbeddingNorm": lambda: EmbeddingNorm(forward, base.embeddings),
        "LastLayerAttention": lambda: LastLayerAttention(forward, attention),
        "AttentionRollout": lambda: AttentionRollout(forward, attention),
    }


_SHORTCUTS = {
    "CAT": CAT,
    "AttCAT": AttCAT,
    "LogAt": LogAt,
    "NormXLogit": NormXLogit,
    "EmbeddingNorm": EmbeddingNorm,
    "LastLayerAttention": LastLayerAttention,
    "AttentionRollout": AttentionRollout,
}


@pytest.mark.parametrize("family, class_tokens", [("vit", 1), ("deit", 2)])
@pytest.mark.parametrize("name", list(_SHORTCUTS))
def test_the_shortcut_equals_the_modules_named_by_hand(
    family: str, class_tokens: int, name: str
) -> None:
    model = tiny_vision(family)
    pixels = torch.rand(3, 3, 8, 8, dtype=torch.float64)
    shortcut = _SHORTCUTS[name](model).attribute(pixels, target=[0, 3, 1])
    by_hand = _by_hand(model)[name]().attribute(pixels, target=[0, 3, 1])
    assert shortcut.shape == (3, class_tokens + 4)
    assert torch.equal(shortcut, by_hand)
    assert shortcut.abs().sum() > 0


@pytest.mark.parametrize("name", ["CAT", "LogAt", "NormXLogit", "EmbeddingNorm"])
def test_sdpa_gives_the_eager_numbers(name: str) -> None:
    pixels = torch.rand(2, 3, 8, 8, dtype=torch.float64)
    eager = _SHORTCUTS[name](tiny_vision("vit")).attribute(pixels, target=2)
    sdpa = _SHORTCUTS[name](tiny_vision("vit", "sdpa")).attribute(pixels, target=2)
    # ViT's eager attention takes its softmax in float32 (4e-8 relative here);
    # sdpa keeps float64.
    torch.testing.assert_close(sdpa, eager, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("method", [AttCAT, LastLayerAttention, AttentionRollout])
def test_attention_readers_on_sdpa_give_the_eager_numbers(method: type) -> None:
    pixels = torch.rand(2, 3, 8, 8, dtype=torch.float64)
    eager = method(tiny_vision("vit")).attribute(pixels, target=1)
    sdpa = method(tiny_vision("vit", "sdpa")).attribute(pixels, target=1)
    # ViT's eager softmax runs in float32 (see test_sdpa_gives_the_eager_numbers)
    torch.testing.assert_close(sdpa, eager, rtol=1e-6, atol=1e-9)


def test_named_attention_modules_on_sdpa_say_to_load_eager() -> None:
    model = tiny_vision("vit", "sdpa")
    attention = [block.attention for block in model.vit.layers]

    def forward(pixel_values: Tensor) -> Tensor:
        return model(pixel_values=pixel_values).logits

    with pytest.raises(ValueError, match="attn_implementation='eager'"):
        LastLayerAttention(forward, attention).attribute(
            torch.rand(1, 3, 8, 8).double()
        )


def test_earlier_layers_pass_the_final_norm_before_the_head() -> None:
    model = tiny_vision("vit")
    pixels = torch.rand(2, 3, 8, 8, dtype=torch.float64)
    block = model.vit.layers[0]
    head = nn.Sequential(model.vit.layernorm, model.classifier)

    def forward(pixel_values: Tensor) -> Tensor:
        return model(pixel_values=pixel_values).logits

    expected = LogAt(forward, block, head=head).attribute(pixels, target=1)
    assert torch.equal(LogAt(model, layer=1).attribute(pixels, target=1), expected)


def test_methods_that_read_token_ids_refuse_a_vision_transformer() -> None:
    model = tiny_vision("vit")
    for build in (lambda: GlobEnc(model), lambda: DecodedLayerGradCam(model, 1)):
        with pytest.raises(UnsupportedModelError, match="vision transformer; .*AttCAT"):
            build()
    with pytest.raises(ValueError, match="a vision transformer has none"):
        LogAt(model, decoder=nn.Identity())
    with pytest.raises(ValueError, match="attribute_generated explains"):
        CAT(model).attribute(torch.rand(1, 3, 8, 8).double(), attribute_generated=True)
