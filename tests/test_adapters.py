#!/usr/bin/env python3
from dataclasses import replace

import pytest
import torch
from captum_ext import get_adapter, UnsupportedModelError
from captum_ext._utils.hooks import HookSet
from captum_ext._utils.model_forward import resolve_target
from captum_ext._utils.token_batch import parse_token_batch
from captum_ext.adapters import check_head_reproduces, supported_families
from captum_ext.adapters.families import _Family
from captum_ext.attr import AttCAT
from torch import nn

from tests.helpers import (
    ALL_FAMILIES,
    CAUSAL_LM_FAMILIES,
    CLS_ID,
    first_norms,
    is_causal,
    POST_LN_FAMILIES,
    SEP_ID,
    tiny_base_model,
    tiny_causal_lm,
    tiny_classifier,
    tiny_masked_lm,
    tiny_mean_pool_classifier,
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
    position = adapter.tokens.classification_position(
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
        position = adapter.tokens.classification_position(batch["input_ids"])
        expected = [4, 4] if side == "left" else [4, 2]
        assert position.tolist() == expected


def test_unknown_model_is_rejected():
    with pytest.raises(UnsupportedModelError, match="config"):
        get_adapter(nn.Linear(2, 2))
    model = tiny_classifier("bert")
    # An instance attribute over the config class's model_type (a ClassVar).
    setattr(model.config, "model_type", "mystery")
    with pytest.raises(UnsupportedModelError, match="mystery.*supported: albert"):
        get_adapter(model)
    assert "bert" in supported_families()


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


def test_families_are_keyword_records():
    with pytest.raises(TypeError):
        # Positional on purpose: the TypeError of keyword-only fields is the test.
        _Family("mini", ("embeddings",), "layers")  # type: ignore[call-arg]


def test_roberta_position_offset_is_a_field():
    # pad_token_id = 0 in the tiny configs: RoBERTa's first position is 1.
    assert get_adapter(tiny_classifier("roberta")).max_positions == 63
    assert get_adapter(tiny_classifier("bert")).max_positions == 64
    model = tiny_classifier("roberta")
    model(torch.full((1, 63), 7))
    with pytest.raises((IndexError, RuntimeError), match="out of"):
        model(torch.full((1, 64), 7))


# ---------------------------------------------------------------- special ids
def _as_released(family: str) -> nn.Module:
    r"""A tiny classifier whose config names the special ids the family's
    transformers 5 config names by default (BERT-style: none but pad)."""
    model = tiny_classifier(family)
    defaults = type(model.config)()
    for name in ("cls_token_id", "sep_token_id", "bos_token_id", "eos_token_id"):
        if hasattr(model.config, name):
            delattr(model.config, name)
        if getattr(defaults, name, None) is not None:
            setattr(model.config, name, getattr(defaults, name))
    return model


# Encoders whose configs name no framing ids: the first and last attended
# positions; the others: their config's ids (RoBERTa <s>=0 </s>=2, Llama <s>=1).
_FRAMED = ["bert", "distilbert", "electra", "deberta-v2"]


@pytest.mark.parametrize("family", _FRAMED)
@pytest.mark.parametrize("pad_side", ["right", "left"])
def test_special_positions_without_config_ids(family, pad_side):
    adapter = get_adapter(_as_released(family))
    assert adapter.tokens.special_token_ids() == [0]  # pad only: the rule decides
    batch = token_batch((5, 3), pad_side=pad_side)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    special = adapter.tokens.special_positions(ids, mask)
    expected = mask.bool() & ((ids == CLS_ID) | (ids == SEP_ID))
    assert special.tolist() == expected.tolist()
    assert special.sum(-1).tolist() == [2, 2]


@pytest.mark.parametrize(
    "family, row, expected",
    [
        ("roberta", [0, 9, 9, 2], [1, 0, 0, 1]),
        ("gpt2", [9, 9, 50256], [0, 0, 1]),
        ("gpt2", [9, 9, 9], [0, 0, 0]),  # GPT-2 frames nothing: no rule
        ("llama", [1, 9, 9], [1, 0, 0]),
    ],
)
def test_special_positions_from_config_ids(family, row, expected):
    adapter = get_adapter(_as_released(family))
    ids = torch.tensor([row])
    special = adapter.tokens.special_positions(ids, torch.ones_like(ids))
    assert special.int().tolist() == [expected]


def test_special_positions_prefer_the_tokenizer():
    class Tokenizer:
        all_special_ids = [9, 0]

    adapter = get_adapter(_as_released("bert"))
    ids = torch.tensor([[CLS_ID, 9, 7, SEP_ID, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    special = adapter.tokens.special_positions(ids, mask, Tokenizer())
    assert special.int().tolist() == [[0, 1, 0, 0, 0]]  # pads are never special
    assert adapter.tokens.special_token_ids(Tokenizer()) == [0, 9]


@pytest.mark.parametrize("family", _FRAMED)
def test_only_framing_tokens_are_all_special(family):
    # What the empty-input check reads: [CLS][SEP] holds nothing to explain.
    adapter = get_adapter(_as_released(family))
    ids = torch.tensor([[CLS_ID, SEP_ID], [CLS_ID, 7]])
    assert adapter.tokens.special_positions(ids, torch.ones_like(ids)).all()


@pytest.mark.parametrize("family", _FRAMED)
def test_attcat_refuses_only_framing_tokens(family):
    method = AttCAT(_as_released(family))
    method.attribute(torch.tensor([[CLS_ID, 7, SEP_ID]]))  # content: fine
    with pytest.raises(ValueError, match="empty input"):
        method.attribute(torch.tensor([[CLS_ID, SEP_ID]]))


# ----------------------------------------------------- decoder-only padding
# Left = right padding of every method on GPT-2 and Llama: tests/test_matrix.py.
def test_gpt2_left_padding_shifts_positions_without_position_ids():
    # Why the adapter passes position_ids: GPT-2's absolute positions.
    model = tiny_classifier("gpt2")
    left = token_batch((7, 4), pad_side="left", causal=True)
    right = token_batch((7, 4), pad_side="right", causal=True)
    plain = [model(**b).logits[1] for b in (left, right)]
    assert (plain[0] - plain[1]).abs().max() > 1e-3


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_encoders_get_no_position_ids(family):
    adapter = get_adapter(tiny_classifier(family))
    mask = torch.ones(1, 3, dtype=torch.long)
    assert set(adapter.tokens.forward_kwargs(mask, None)) == {"attention_mask"}


# ------------------------------------------------------------ head checks
def test_mean_pool_head_is_refused():
    model = tiny_mean_pool_classifier()
    adapter = get_adapter(model)
    batch = token_batch()
    out = _forward(model, batch)
    head = adapter.head_on_every_position(out.hidden_states[-1])[:, 0]
    with pytest.raises(UnsupportedModelError, match="not the standard bert head"):
        check_head_reproduces(adapter, head, out.logits)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_standard_heads_pass_the_check(family, dtype):
    model = tiny_classifier(family, dtype=dtype)
    adapter = get_adapter(model)
    batch = token_batch(causal=is_causal(family))
    ids, mask = batch["input_ids"], batch["attention_mask"]
    out = model(
        ids, **adapter.tokens.forward_kwargs(mask, None), output_hidden_states=True
    )
    position = adapter.tokens.classification_position(ids, mask)
    head = adapter.head_on_every_position(out.hidden_states[-1])
    check_head_reproduces(adapter, head[torch.arange(3), position], out.logits)


def test_head_check_tolerance_is_relative_to_the_logits():
    adapter = get_adapter(tiny_classifier("bert"))
    logits = torch.tensor([[100.0, -50.0]])
    check_head_reproduces(adapter, logits + 0.05, logits)  # 5e-4 relative
    with pytest.raises(UnsupportedModelError, match="0.002"):
        check_head_reproduces(adapter, logits + 0.2, logits)
    small = torch.tensor([[0.02, 0.01]])
    with pytest.raises(UnsupportedModelError):
        check_head_reproduces(adapter, small * 0.5, small)
    coarse = logits.bfloat16()
    check_head_reproduces(adapter, coarse + 4, coarse)  # 0.04 < 8 bf16 ulps
    with pytest.raises(UnsupportedModelError):
        check_head_reproduces(adapter, coarse + 8, coarse)


# ------------------------------------------------------ not a classifier
@pytest.mark.parametrize(
    "build, family",
    [(tiny_masked_lm, "bert"), (tiny_base_model, "bert"), (tiny_base_model, "gpt2")],
)
def test_non_classifiers_are_refused(build, family):
    adapter = get_adapter(build(family))
    hidden = torch.zeros(1, 4, adapter.hidden_size)  # [batch, pos, d_model]
    with pytest.raises(UnsupportedModelError, match="AutoModelForSequence"):
        adapter.head_on_every_position(hidden)
    classifier = get_adapter(tiny_classifier(family))
    logits = classifier.head_on_every_position(hidden)  # [batch, pos, C]
    assert logits.shape == (1, 4, classifier.num_labels)


# ------------------------------------------------------ causal LMs
@pytest.mark.parametrize("family", CAUSAL_LM_FAMILIES)
def test_causal_lm_head_reproduces_logits(family):
    model = tiny_causal_lm(family)
    adapter = get_adapter(model)
    assert adapter.is_causal_lm and adapter.is_causal
    batch = token_batch(pad_side="left", causal=True)
    mask = batch["attention_mask"]
    kwargs = adapter.tokens.forward_kwargs(mask, None)
    final_norm = adapter.hidden_state_module(adapter.num_layers)
    with HookSet() as hooks:
        embedded = hooks.capture_output(adapter.hidden_state_module(0))
        normed = hooks.capture_output(final_norm)
        block_out = hooks.capture_input(final_norm)  # the final norm's input
        out = model(batch["input_ids"], **kwargs, output_hidden_states=True)
    torch.testing.assert_close(embedded[0], out.hidden_states[0], atol=0, rtol=0)
    torch.testing.assert_close(normed[0], out.hidden_states[-1], atol=0, rtol=0)
    # hidden_states[L] is already normed: only the LM head is applied to it ...
    last = adapter.lm_head_on_every_position(out.hidden_states[-1], layer=-1)
    torch.testing.assert_close(last, out.logits, atol=0, rtol=0)
    # ... while a state before the final norm gets the norm first.
    pre_norm = adapter.lm_head_on_every_position(block_out[0])
    torch.testing.assert_close(pre_norm, out.logits, atol=1e-6, rtol=0)
    assert not torch.allclose(
        adapter.lm_head_on_every_position(out.hidden_states[-1]), out.logits
    )


@pytest.mark.parametrize(
    "build, family, missing",
    [
        (tiny_classifier, "gpt2", "sequence classifier"),
        (tiny_classifier, "llama", "sequence classifier"),
        (tiny_base_model, "gpt2", "no LM head"),
        (tiny_base_model, "llama", "no LM head"),
        (tiny_masked_lm, "bert", "masked LM"),
        (tiny_classifier, "roberta", "an encoder"),
    ],
)
def test_not_a_causal_lm_is_refused_with_what_is_missing(build, family, missing):
    adapter = get_adapter(build(family))
    assert not adapter.is_causal_lm
    hidden = torch.zeros(1, 4, adapter.hidden_size)
    with pytest.raises(UnsupportedModelError, match=missing):
        adapter.lm_head_on_every_position(hidden)
    with pytest.raises(UnsupportedModelError, match="AutoModelForCausalLM"):
        adapter.require_causal_lm("LogAt")


@pytest.mark.parametrize("family", CAUSAL_LM_FAMILIES)
def test_llama_style_classifiers_reproduce_logits(family):
    model = tiny_classifier(family)
    adapter = get_adapter(model)
    assert adapter.is_classifier and not adapter.is_causal_lm
    batch = token_batch(pad_side="left", causal=True)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    out = model(
        ids, **adapter.tokens.forward_kwargs(mask, None), output_hidden_states=True
    )
    position = adapter.tokens.classification_position(ids, mask)
    head = adapter.head_on_every_position(out.hidden_states[-1])
    torch.testing.assert_close(head[torch.arange(3), position], out.logits)


@pytest.mark.parametrize("family", CAUSAL_LM_FAMILIES)
def test_attention_input_modules_are_each_blocks_first_norm(family):
    model = tiny_causal_lm(family)
    modules = get_adapter(model).attention_input_modules()
    assert modules is not None
    expected = first_norms(model)
    assert len(modules) == len(expected) == model.config.num_hidden_layers
    assert all(got is norm for got, norm in zip(modules, expected))


@pytest.mark.parametrize("family", POST_LN_FAMILIES)
def test_a_post_ln_blocks_attention_reads_its_input(family):
    assert get_adapter(tiny_classifier(family)).attention_input_modules() is None


def test_a_decoder_without_known_first_norms_is_refused_not_read_as_inputs():
    adapter = get_adapter(tiny_causal_lm("llama"))
    adapter._family_record = replace(adapter._family_record, pre_norm=None)
    with pytest.raises(UnsupportedModelError, match="first norms"):
        adapter.attention_input_modules()
