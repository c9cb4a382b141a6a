#!/usr/bin/env python3
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import torch
from captum_ext import get_adapter, UnsupportedModelError
from captum_ext._utils.hooks import HookSet
from captum_ext._utils.token_batch import parse_token_batch
from captum_ext.adapters import BlockParts
from captum_ext.attr import GlobEnc
from captum_ext.attr._core import globenc
from captum_ext.attr._utils import encoder_decomposition
from captum_ext.attr._utils.encoder_capture import capture_encoder
from captum_ext.attr._utils.encoder_decomposition import EncoderLayer
from captum_ext.defaults.data import load_split
from captum_ext.defaults.models import MAX_LENGTH
from torch import nn, Tensor
from transformers import PreTrainedModel

from tests.attr.token_method_checks import SentimentModel
from tests.helpers import (
    assert_same_state,
    model_state,
    PAD_ID,
    POST_LN_FAMILIES,
    tiny_classifier,
    token_batch,
)


def _attribute(
    model: PreTrainedModel, batch: Dict[str, Tensor], **kwargs: Any
) -> Tensor:
    return GlobEnc(model).attribute(
        batch["input_ids"], additional_forward_args=(batch["attention_mask"],), **kwargs
    )


def _matrices(
    model: PreTrainedModel, batch: Dict[str, Tensor], **kwargs: Any
) -> Tensor:
    return GlobEnc(model).attribute_matrices(
        batch["input_ids"], additional_forward_args=(batch["attention_mask"],), **kwargs
    )


def _centred(x: Tensor) -> Tensor:
    return x - x.mean(-1, keepdim=True)


def _layernorm_terms(norm: nn.LayerNorm, pre_ln: Tensor) -> Tuple[Tensor, Tensor]:
    r"""``(gamma / sqrt(Var(pre_ln) + eps), beta)`` of a LayerNorm's real call."""
    std = (pre_ln.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
    return norm.weight / std, norm.bias


def _decomposed_sum(layer: EncoderLayer, parts: BlockParts, variant: str) -> Tensor:
    r"""Sum over source tokens of the decomposed vectors: ``[batch, pos, d]``."""
    return (
        encoder_decomposition.encoder_factors(layer, parts, variant)
        .vectors()
        .sum(dim=2)
    )


@pytest.mark.parametrize("family", POST_LN_FAMILIES)
def test_decomposition_reproduces_both_layernorm_outputs(family: str) -> None:
    model = tiny_classifier(family, dtype=torch.float64)
    adapter = get_adapter(model)
    tokens = token_batch()
    batch = parse_token_batch(adapter, tokens["input_ids"], (tokens["attention_mask"],))
    parts = [adapter.block_parts(k) for k in range(1, adapter.num_layers + 1)]
    with HookSet() as hooks, torch.no_grad():
        ln1_out = [hooks.capture_output(p.layernorm1) for p in parts]
        ln2_out = [hooks.capture_output(p.layernorm2) for p in parts]
        _, layers = capture_encoder(adapter, batch)
    matrices = _matrices(model, tokens, rollout=False)
    for k, (layer, part) in enumerate(zip(layers, parts)):
        b_out = part.attention_output.bias
        # attention + residual, before LN1: sum_j z_ij + b_O = LN1's real input
        z_sum = _decomposed_sum(layer, part, "N_res")
        torch.testing.assert_close(z_sum + b_out, layer.pre_ln1, atol=1e-5, rtol=0)
        # LN1: sum_j y_ij + gamma1 * centred(b_O) / std1 + beta1 = LN1 output
        scale1, beta1 = _layernorm_terms(part.layernorm1, layer.pre_ln1)
        ln1_dropped = scale1 * _centred(b_out) + beta1
        y_sum = _decomposed_sum(layer, part, "N_resln")
        torch.testing.assert_close(
            y_sum + ln1_dropped, ln1_out[k][0], atol=1e-5, rtol=0
        )
        # LN2: the FFN and LN1's dropped terms are not decomposed
        ffn = layer.pre_ln2 - ln1_out[k][0]
        scale2, beta2 = _layernorm_terms(part.layernorm2, layer.pre_ln2)
        ln2_dropped = scale2 * _centred(ffn + ln1_dropped) + beta2
        e = encoder_decomposition.encoder_factors(layer, part, "N_enc").vectors()
        torch.testing.assert_close(
            e.sum(dim=2) + ln2_dropped, ln2_out[k][0], atol=1e-5, rtol=0
        )
        # the method's N^l (from Gram matrices) is the norm of exactly these vectors
        valid = batch.valid.double()
        norms = e.norm(dim=-1) * valid[:, :, None] * valid[:, None, :]
        torch.testing.assert_close(matrices[:, k], norms, atol=1e-10, rtol=0)


def _naive_attention_norms(model: PreTrainedModel, input_ids: Tensor) -> List[Tensor]:
    r"""Per-layer ``||sum_h A_h[i,j] v_h,j W_O,h^T||`` by loops, one example."""
    adapter = get_adapter(model)
    heads, dh = adapter.num_heads, adapter.head_dim
    with torch.no_grad():
        out = model(
            input_ids=input_ids[None], output_attentions=True, output_hidden_states=True
        )
    pos = len(input_ids)
    matrices = []
    for k in range(adapter.num_layers):
        parts = adapter.block_parts(k + 1)
        with torch.no_grad():
            values = parts.value(out.hidden_states[k][0])  # [pos, d], b_V included
        w_out = parts.attention_output.weight
        n = torch.zeros(pos, pos, dtype=torch.float64)
        for i in range(pos):
            for j in range(pos):
                total = torch.zeros(w_out.shape[0], dtype=w_out.dtype)  # [d]
                for h in range(heads):
                    cols = slice(h * dh, (h + 1) * dh)
                    a = out.attentions[k][0, h, i, j]
                    total = total + a * values[j, cols] @ w_out[:, cols].T
                n[i, j] = total.norm()
        matrices.append(n)
    return matrices


@pytest.mark.parametrize("family", POST_LN_FAMILIES)
def test_variant_n_rollout_matches_naive_loops(family: str) -> None:
    model = tiny_classifier(family, dtype=torch.float64)
    batch = token_batch(lengths=(7, 4))
    attr = _attribute(model, batch, variant="N")
    rolled = _matrices(model, batch, variant="N")
    for row, length in enumerate((7, 4)):
        naive = _naive_attention_norms(model, batch["input_ids"][row, :length])
        expected = [naive[0]]
        for n in naive[1:]:
            expected.append(n @ expected[-1])
        torch.testing.assert_close(rolled[row, -1, :length, :length], expected[-1])
        torch.testing.assert_close(attr[row, :length], expected[-1][0])
        assert torch.all(attr[row, length:] == 0)
        assert torch.all(rolled[row, :, length:] == 0)
        assert torch.all(rolled[row, :, :, length:] == 0)


@pytest.mark.parametrize("family", POST_LN_FAMILIES)
@pytest.mark.parametrize("variant", globenc.VARIANTS)
def test_batched_equals_per_example_and_padding_invariant(
    family: str, variant: str
) -> None:
    model = tiny_classifier(family)
    lengths = (7, 4, 9)
    batch = token_batch(lengths=lengths)
    attr = _attribute(model, batch, variant=variant)
    per_layer = _attribute(model, batch, variant=variant, rollout=False)
    for row, length in enumerate(lengths):
        alone = {k: v[row : row + 1, :length] for k, v in batch.items()}
        extra = {k: torch.nn.functional.pad(v, (0, 5)) for k, v in alone.items()}
        extra["input_ids"][:, length:] = PAD_ID
        for padded in (alone, extra):
            single = _attribute(model, padded, variant=variant)
            torch.testing.assert_close(attr[row, :length], single[0, :length])
            assert torch.all(single[0, length:] == 0)
        single = _attribute(model, alone, variant=variant, rollout=False)
        torch.testing.assert_close(per_layer[row, :length], single[0])
        assert torch.all(attr[row, length:] == 0)


def test_float32_matches_float64() -> None:
    model = tiny_classifier("bert")
    batch = token_batch()
    single = _matrices(model, batch, rollout=False)
    double = _matrices(model.double(), batch, rollout=False)
    assert single.dtype == torch.float32
    torch.testing.assert_close(single.double(), double, rtol=1e-5, atol=1e-7)


def test_attribute_is_the_row_of_the_rolled_out_matrices() -> None:
    model = tiny_classifier("roberta", dtype=torch.float64)
    batch = token_batch()
    rolled = _matrices(model, batch)
    per_layer = _matrices(model, batch, rollout=False)
    assert rolled.shape == per_layer.shape == (3, 2, 9, 9)
    torch.testing.assert_close(rolled[:, 0], per_layer[:, 0])
    torch.testing.assert_close(rolled[:, 1], per_layer[:, 1] @ per_layer[:, 0])
    torch.testing.assert_close(_attribute(model, batch), rolled[:, -1, 0])
    torch.testing.assert_close(
        _attribute(model, batch, rollout=False), per_layer[:, -1, 0]
    )


def test_target_is_validated_but_ignored() -> None:
    model = tiny_classifier("bert")
    batch = token_batch()
    reference = _attribute(model, batch)
    for target in (0, 2, [1, 0, 2], torch.tensor([2, 2, 1])):
        torch.testing.assert_close(_attribute(model, batch, target=target), reference)
    with pytest.raises(IndexError, match="out of range"):
        _attribute(model, batch, target=3)
    with pytest.raises(ValueError, match="entries"):
        _attribute(model, batch, target=[0, 1])


def test_float32_model_gives_float32_scores() -> None:
    attr = _attribute(tiny_classifier("distilbert"), token_batch())
    assert attr.dtype == torch.float32
    assert torch.all(attr >= 0)


@pytest.mark.parametrize("family", POST_LN_FAMILIES)
def test_model_state_untouched(family: str) -> None:
    model = tiny_classifier(family)
    before = model_state(model)
    _attribute(model, token_batch())
    _matrices(model, token_batch())
    assert_same_state(before, model_state(model))


def test_model_state_restored_when_forward_raises() -> None:
    model = tiny_classifier("electra").train()
    before = model_state(model)
    parts = get_adapter(model).block_parts(2)

    def fail(*_: object) -> None:
        raise RuntimeError("injected")

    handle = parts.layernorm2.register_forward_hook(fail)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            with pytest.warns(UserWarning, match="training mode"):
                _attribute(model, token_batch())
    finally:
        handle.remove()
    assert_same_state(before, model_state(model))


@pytest.mark.parametrize("family", ["gpt2", "albert", "llama", "deberta-v2"])
def test_unsupported_family_raises(family: str) -> None:
    with pytest.raises(UnsupportedModelError, match="post-LayerNorm"):
        GlobEnc(tiny_classifier(family))


def test_unknown_variant_raises() -> None:
    with pytest.raises(ValueError, match="variant"):
        _attribute(tiny_classifier("bert"), token_batch(), variant="N-Enc")


@pytest.mark.integration
def test_agrees_with_grad_x_input_on_the_default_model(
    sentiment_model: SentimentModel,
) -> None:
    from benchmarks.globenc_faithfulness import correlations

    model, tokenizer = sentiment_model
    method = GlobEnc(model)

    def explain(input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return method.attribute(input_ids, additional_forward_args=(attention_mask,))

    texts = load_split("sentiment").texts[:50]
    rho = correlations(model, tokenizer, texts, {"GlobEnc": explain}, MAX_LENGTH)
    assert np.nanmean(rho["GlobEnc"]) >= 0.6


def test_left_padding_at_the_classification_position_raises() -> None:
    batch = token_batch(pad_side="left")
    with pytest.raises(ValueError, match="padded on the left"):
        _attribute(tiny_classifier("bert"), batch)
