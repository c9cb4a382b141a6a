#!/usr/bin/env python3
import pytest
import torch
from captum_ext import get_adapter, UnsupportedModelError
from captum_ext._utils.common import parse_token_batch, resolve_target
from captum_ext.adapters import supported_families
from torch import nn

from tests.helpers import (
    ALL_FAMILIES,
    is_causal,
    POST_LN_FAMILIES,
    tiny_classifier,
    tiny_masked_lm,
    token_batch,
)


def _forward(model, batch):
    return model(**batch, output_hidden_states=True, output_attentions=True)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_sizes_match_config(family):
    model = tiny_classifier(family)
    adapter = get_adapter(model)
    assert adapter.num_layers == 2
    assert adapter.num_heads == 4
    assert adapter.hidden_size == 32
    assert adapter.head_dim == 8
    assert adapter.num_labels == 3
    assert adapter.is_causal == is_causal(family)
    assert adapter.word_embeddings() is model.get_input_embeddings()


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_head_on_every_position_reproduces_logits(family):
    model = tiny_classifier(family)
    adapter = get_adapter(model)
    batch = token_batch(causal=is_causal(family))
    out = _forward(model, batch)
    per_position = adapter.head_on_every_position(out.hidden_states[-1])
    assert per_position.shape == (3, batch["input_ids"].shape[1], 3)
    position = adapter.classification_position(
        batch["input_ids"], batch["attention_mask"]
    )
    at_position = per_position[torch.arange(3), position]
    torch.testing.assert_close(at_position, out.logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", [f for f in ALL_FAMILIES if f != "albert"])
@pytest.mark.parametrize("layer", [0, 1, 2, -1])
def test_hidden_state_module_output_is_hidden_state(family, layer):
    model = tiny_classifier(family)
    adapter = get_adapter(model)
    batch = token_batch(causal=is_causal(family))
    seen = []
    handle = adapter.hidden_state_module(layer).register_forward_hook(
        lambda m, i, o: seen.append(o[0] if isinstance(o, tuple) else o)
    )
    try:
        out = _forward(model, batch)
    finally:
        handle.remove()
    assert len(seen) == 1
    torch.testing.assert_close(seen[0], out.hidden_states[layer], atol=0, rtol=0)


def test_albert_shared_blocks_are_reported():
    adapter = get_adapter(tiny_classifier("albert"))
    assert isinstance(adapter.hidden_state_module(0), nn.Linear)
    with pytest.raises(UnsupportedModelError, match="share their weights"):
        adapter.hidden_state_module(1)


@pytest.mark.parametrize("family", POST_LN_FAMILIES)
def test_block_parts(family):
    model = tiny_classifier(family)
    adapter = get_adapter(model)
    batch = token_batch()
    for layer in (1, 2):
        parts = adapter.block_parts(layer)
        assert parts.value.out_features == 32
        assert parts.attention_output.in_features == 32
        assert isinstance(parts.layernorm1, nn.LayerNorm)
        assert isinstance(parts.layernorm2, nn.LayerNorm)
        # LayerNorm-2 of block l produces hidden_states[l]
        seen = []
        handle = parts.layernorm2.register_forward_hook(lambda m, i, o: seen.append(o))
        try:
            out = _forward(model, batch)
        finally:
            handle.remove()
        torch.testing.assert_close(seen[0], out.hidden_states[layer], atol=0, rtol=0)


@pytest.mark.parametrize("family", ["albert", "deberta-v2", "gpt2", "llama"])
def test_block_parts_unsupported(family):
    adapter = get_adapter(tiny_classifier(family))
    with pytest.raises(UnsupportedModelError, match="post-LayerNorm"):
        adapter.block_parts(1)


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "electra"])
def test_mlm_head_maps_to_vocabulary(family):
    model = tiny_masked_lm(family)
    adapter = get_adapter(model)
    batch = token_batch()
    out = model(**batch, output_hidden_states=True)
    head = adapter.mlm_head()
    torch.testing.assert_close(head(out.hidden_states[-1]), out.logits)


def test_classifier_has_no_mlm_head():
    assert get_adapter(tiny_classifier("bert")).mlm_head() is None


def test_masked_lm_has_no_classification_head():
    adapter = get_adapter(tiny_masked_lm("bert"))
    with pytest.raises(
        UnsupportedModelError, match="AutoModelForSequenceClassification"
    ):
        adapter.head_on_every_position(torch.zeros(1, 2, 32))


def test_causal_classification_position_left_and_right_padding():
    adapter = get_adapter(tiny_classifier("gpt2"))
    for side in ("left", "right"):
        batch = token_batch((5, 3), pad_side=side, causal=True)
        position = adapter.classification_position(batch["input_ids"])
        expected = [4, 4] if side == "left" else [4, 2]
        assert position.tolist() == expected


def test_unknown_model_is_rejected():
    with pytest.raises(UnsupportedModelError, match="config"):
        get_adapter(nn.Linear(2, 2))
    model = tiny_classifier("bert")
    model.config.model_type = "mystery"
    with pytest.raises(UnsupportedModelError, match="mystery.*supported: albert"):
        get_adapter(model)
    assert "bert" in supported_families()


def test_sdpa_attention_is_rejected_with_the_fix():
    adapter = get_adapter(tiny_classifier("bert", attn_implementation="sdpa"))
    with pytest.raises(ValueError, match="attn_implementation='eager'"):
        adapter.require_attention_weights("AttCAT")
    get_adapter(tiny_classifier("bert")).require_attention_weights("AttCAT")


@pytest.mark.parametrize("layer", [3, -4, 1.0])
def test_layer_out_of_range(layer):
    adapter = get_adapter(tiny_classifier("bert"))
    with pytest.raises((IndexError, TypeError), match="layer"):
        adapter.check_layer(layer)


def test_parse_token_batch_errors():
    adapter = get_adapter(tiny_classifier("bert"))
    batch = token_batch()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert parse_token_batch(adapter, ids, (mask,)).attention_mask is mask
    assert parse_token_batch(adapter, (ids,), mask).valid.dtype == torch.bool
    with pytest.raises(ValueError, match="unsqueeze"):
        parse_token_batch(adapter, ids[0])
    with pytest.raises(TypeError, match="integer"):
        parse_token_batch(adapter, ids.float())
    with pytest.raises(ValueError, match="empty input"):
        parse_token_batch(adapter, ids[:, :0])
    with pytest.raises(ValueError, match="shape"):
        parse_token_batch(adapter, ids, (mask[:, :2],))
    empty_row = mask.clone()
    empty_row[1] = 0
    with pytest.raises(ValueError, match=r"example\(s\) \[1\] have no attended"):
        parse_token_batch(adapter, ids, (empty_row,))
    only_specials = torch.tensor([[2, 3, 0]])
    with pytest.raises(ValueError, match="only special"):
        parse_token_batch(adapter, only_specials, (torch.tensor([[1, 1, 0]]),))
    too_long = torch.full((1, 65), 7)
    with pytest.raises(ValueError, match="64 position"):
        parse_token_batch(adapter, too_long)


def test_resolve_target():
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]])
    assert resolve_target(None, logits).tolist() == [1, 0]
    assert resolve_target(2, logits).tolist() == [2, 2]
    assert resolve_target(torch.tensor(1), logits).tolist() == [1, 1]
    assert resolve_target([0, 2], logits).tolist() == [0, 2]
    with pytest.raises(IndexError, match="out of range"):
        resolve_target(3, logits)
    with pytest.raises(IndexError, match="out of range"):
        resolve_target([0, -1], logits)
    with pytest.raises(ValueError, match="3 entries"):
        resolve_target([0, 1, 2], logits)
    with pytest.raises(ValueError, match="tuple"):
        resolve_target((0, 1), logits)
