#!/usr/bin/env python3
import pytest
import torch
from captum_ext import get_adapter
from captum_ext.attr import LogAt, NormXLogit
from torch import nn

from tests.attr.token_method_checks import (
    assert_checked_sentences,
    attribute,
    SentimentModel,
)
from tests.helpers import (
    ALL_FAMILIES,
    is_causal,
    tiny_classifier,
    tiny_masked_lm,
    token_batch,
)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_is_embedding_output_norm_times_logat(family: str) -> None:
    model = tiny_classifier(family)
    batch = token_batch(causal=is_causal(family))
    out = model(**batch, output_hidden_states=True)
    norms = out.hidden_states[0].norm(dim=-1)  # [batch, pos]
    for target in (None, 1):
        logat = attribute(LogAt(model), batch, target=target)
        scores = attribute(NormXLogit(model), batch, target=target)
        torch.testing.assert_close(scores, norms * logat, atol=1e-6, rtol=0)


@pytest.mark.parametrize("family", ["bert", "electra", "llama"])
def test_word_embedding_norm(family: str) -> None:
    model = tiny_classifier(family)
    batch = token_batch(causal=is_causal(family))
    embeddings = model.get_input_embeddings()
    assert isinstance(embeddings, nn.Embedding)
    rows = embeddings.weight[batch["input_ids"]]  # [b, pos, d]
    logat = attribute(LogAt(model), batch)
    scores = attribute(NormXLogit(model, norm="word_embedding"), batch)
    torch.testing.assert_close(scores, rows.norm(dim=-1) * logat)


def test_norms_differ_where_embedding_output_is_not_the_word_embedding() -> None:
    model = tiny_classifier("bert")
    batch = token_batch()
    default = attribute(NormXLogit(model), batch)
    raw = attribute(NormXLogit(model, norm="word_embedding"), batch)
    assert not torch.allclose(default, raw)


def test_regression_value() -> None:
    model = tiny_classifier("roberta", num_labels=1)
    batch = token_batch()
    out = model(**batch, output_hidden_states=True)
    hidden = out.hidden_states[-1]
    dense = model.get_submodule("classifier.dense")
    head = model.get_submodule("classifier.out_proj")(torch.tanh(dense(hidden)))
    distance = (head[..., 0] - out.logits).abs()
    expected = out.hidden_states[0].norm(dim=-1) * distance * batch["attention_mask"]
    torch.testing.assert_close(
        attribute(NormXLogit(model), batch), expected, atol=1e-6, rtol=0
    )


def test_decoder_per_layer_keeps_layer_zero_norm() -> None:
    model = tiny_masked_lm("bert")
    decoder = get_adapter(model).mlm_head()
    batch = token_batch()
    out = model(**batch, output_hidden_states=True)
    logits = decoder(out.hidden_states[1])[..., 11]  # [batch, pos]
    norms = out.hidden_states[0].norm(dim=-1)
    expected = norms * logits * batch["attention_mask"]
    method = NormXLogit(model, layer=1, decoder=decoder)
    torch.testing.assert_close(attribute(method, batch, target=11), expected)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="norm must be one of"):
        NormXLogit(tiny_classifier("bert"), norm="l1")


@pytest.mark.integration
def test_checked_sentences_on_default_model(sentiment_model: SentimentModel) -> None:
    gorgeous = ["gorgeous", "moving"]
    dull = ["dull", "lifeless", "mess"]
    assert_checked_sentences(
        NormXLogit,
        sentiment_model,
        gorgeous=dict(positive=gorgeous, top=gorgeous),
        dull=dict(positive=dull, top=dull),
    )
