#!/usr/bin/env python3
from typing import Dict, Tuple, Type

import pytest
import torch
from captum_ext import get_adapter, UnsupportedModelError
from captum_ext.attr import LogAt, NormXLogit
from torch import Tensor
from transformers import PreTrainedModel

from tests.attr.token_method_checks import (
    assert_checked_sentences,
    attribute,
    SentimentModel,
    unpadded,
)
from tests.helpers import (
    ALL_FAMILIES,
    is_causal,
    tiny_classifier,
    tiny_masked_lm,
    tiny_mean_pool_classifier,
    token_batch,
)


def _logits_and_positions(
    model: PreTrainedModel, batch: Dict[str, Tensor]
) -> Tuple[Tensor, Tensor]:
    adapter = get_adapter(model)
    kwargs = adapter.tokens.forward_kwargs(batch["attention_mask"], None)
    out = model(input_ids=batch["input_ids"], **kwargs)
    position = adapter.tokens.classification_position(
        batch["input_ids"], batch["attention_mask"]
    )
    return out.logits, position


# Encoders read position 0, a pad when padded on the left; causal classifiers
# read the last real token. Left-padded GPT-2 is included: the adapter passes
# position ids counted from the mask, so the logits are those of the unpadded text.
@pytest.mark.parametrize(
    "family, pad_side",
    [(f, "right") for f in ALL_FAMILIES] + [("gpt2", "left"), ("llama", "left")],
)
def test_score_at_classification_position_is_model_logit(
    family: str, pad_side: str
) -> None:
    model = tiny_classifier(family)
    batch = token_batch(pad_side=pad_side, causal=is_causal(family))
    logits, position = _logits_and_positions(model, batch)
    rows = torch.arange(3)
    for target in (None, 2):
        scores = attribute(LogAt(model), batch, target=target)
        index = logits.argmax(-1) if target is None else torch.full((3,), target)
        expected = logits[rows, index]
        torch.testing.assert_close(scores[rows, position], expected, atol=1e-5, rtol=0)


def test_scores_every_position_with_the_bert_head() -> None:
    model = tiny_classifier("bert")
    batch = token_batch()
    out = model(**batch, output_hidden_states=True)
    hidden = out.hidden_states[-1]  # [batch, pos, d]
    pooler_dense = model.get_submodule("bert.pooler.dense")
    per_position = model.get_submodule("classifier")(torch.tanh(pooler_dense(hidden)))
    expected = per_position[..., 1] * batch["attention_mask"]
    torch.testing.assert_close(attribute(LogAt(model), batch, target=1), expected)


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_regression_is_distance_to_model_output(family: str) -> None:
    model = tiny_classifier(family, num_labels=1)
    batch = token_batch(causal=is_causal(family))
    out = model(**batch, output_hidden_states=True)
    head = get_adapter(model).head_on_every_position(out.hidden_states[-1])
    expected = (head[..., 0] - out.logits).abs() * batch["attention_mask"]
    scores = attribute(LogAt(model), batch)
    torch.testing.assert_close(scores, expected, atol=1e-6, rtol=0)
    with pytest.raises(IndexError, match="out of range"):
        attribute(LogAt(model), batch, target=1)


def test_decoder_per_layer_reads_hidden_state() -> None:
    model = tiny_masked_lm("bert")
    decoder = get_adapter(model).mlm_head()
    batch = token_batch()
    out = model(**batch, output_hidden_states=True)
    mask = batch["attention_mask"]
    target = [7, 8, 9]

    def at_target(logits: Tensor) -> Tensor:  # [batch, pos, V] -> [batch, pos]
        return torch.stack([logits[row, :, t] for row, t in enumerate(target)])

    top = attribute(LogAt(model, decoder=decoder), batch, target=target)
    torch.testing.assert_close(top, at_target(out.logits) * mask)
    middle = attribute(LogAt(model, layer=1, decoder=decoder), batch, target=target)
    expected = at_target(decoder(out.hidden_states[1])) * mask
    torch.testing.assert_close(middle, expected)


def test_decoder_needs_a_vocabulary_target() -> None:
    model = tiny_masked_lm("bert")
    method = LogAt(model, layer=1, decoder=get_adapter(model).mlm_head())
    batch = token_batch()
    with pytest.raises(ValueError, match="vocabulary id"):
        attribute(method, batch)
    with pytest.raises(IndexError, match="out of range"):
        attribute(method, batch, target=model.config.vocab_size)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_causal_intermediate_layer_goes_through_final_norm(family: str) -> None:
    model = tiny_classifier(family)
    batch = token_batch(causal=True)
    out = model(**batch, output_hidden_states=True)
    final_norm = model.get_submodule(
        "model.norm" if family == "llama" else "transformer.ln_f"
    )
    expected = model.get_submodule("score")(final_norm(out.hidden_states[1]))[..., 2]
    scores = attribute(LogAt(model, layer=1), batch, target=2)
    torch.testing.assert_close(scores, expected * batch["attention_mask"])


def test_model_without_head_or_decoder_is_rejected() -> None:
    model = tiny_masked_lm("bert")
    with pytest.raises(UnsupportedModelError, match="classification head"):
        attribute(LogAt(model), token_batch(), target=1)


def test_bad_arguments() -> None:
    with pytest.raises(IndexError, match="layer 3"):
        LogAt(tiny_classifier("bert"), layer=3)


def test_runs_without_gradients() -> None:
    model = tiny_classifier("bert")
    scores = LogAt(model).attribute(unpadded(token_batch())[0])
    assert not scores.requires_grad


# The head reads the predicted class from every token alike (scores nearly
# constant), so only the sign is checked.
@pytest.mark.integration
def test_checked_sentences_on_default_model(sentiment_model: SentimentModel) -> None:
    assert_checked_sentences(
        LogAt,
        sentiment_model,
        gorgeous=dict(positive=["a", "film"]),
        dull=dict(positive=["a", "dull", "mess"]),
    )


@pytest.mark.parametrize("method", [LogAt, NormXLogit])
def test_a_mean_pooling_head_is_refused(method: Type[LogAt]) -> None:
    r"""The standard head at [CLS] does not give this model's logits, so every
    score would be a wrong number: the call raises instead."""
    model = tiny_mean_pool_classifier()
    with pytest.raises(UnsupportedModelError, match="not the standard bert head"):
        attribute(method(model), token_batch())
