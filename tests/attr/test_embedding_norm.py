#!/usr/bin/env python3
import math

import pytest
import torch
import transformers
from captum_ext.attr import EmbeddingNorm, LogAt, NormXLogit

from tests.attr.baseline_checks import (
    assert_equals_naive_per_example,
    assert_target_validated_but_ignored,
)
from tests.attr.token_method_checks import attribute, unpadded
from tests.helpers import ALL_FAMILIES, is_causal, tiny_classifier, token_batch


def naive_embedding_norm(model, input_ids):
    r"""One unpadded example ``[1, n]``: ``sqrt(sum_d h0[i, d]^2)`` per token,
    in Python, from ``hidden_states[0]``."""
    hidden = model(input_ids=input_ids, output_hidden_states=True).hidden_states[0]
    rows = hidden[0].tolist()
    return torch.tensor(
        [math.sqrt(sum(v * v for v in row)) for row in rows], dtype=torch.float64
    )


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_equals_naive_per_example_norm(family):
    scores, valid = assert_equals_naive_per_example(
        EmbeddingNorm, family, naive_embedding_norm
    )
    assert torch.all(scores[valid] > 0)


def test_bert_is_the_norm_of_layernormed_summed_embeddings():
    # BERT's hidden_states[0] = LayerNorm(word + position + segment embeddings)
    model = tiny_classifier("bert", dtype=torch.float64)
    # For mypy: the family fixes the class, and so .bert.embeddings.
    assert isinstance(model, transformers.BertForSequenceClassification)
    ids = unpadded(token_batch())[0]
    embeddings = model.bert.embeddings
    n = ids.shape[1]
    summed = (
        embeddings.word_embeddings.weight[ids[0]]
        + embeddings.position_embeddings.weight[:n]
        + embeddings.token_type_embeddings.weight[0]
    )
    expected = embeddings.LayerNorm(summed).norm(dim=-1).detach()
    torch.testing.assert_close(EmbeddingNorm(model).attribute(ids)[0], expected)


@pytest.mark.parametrize("family", ["distilbert", "llama"])
def test_times_logat_is_normxlogit(family):
    # NormXLogit = ||h0|| * LogAt: the baseline is that factor alone
    model = tiny_classifier(family, dtype=torch.float64)
    batch = token_batch(causal=is_causal(family))
    product = attribute(EmbeddingNorm(model), batch) * attribute(
        LogAt(model), batch, target=1
    )
    torch.testing.assert_close(product, attribute(NormXLogit(model), batch, target=1))


def test_target_validated_but_ignored():
    assert_target_validated_but_ignored(EmbeddingNorm, "llama")
