#!/usr/bin/env python3
import pytest
import torch
from captum_ext.attr import AttCAT, CAT

from tests.attr.token_method_checks import (
    assert_checked_sentences,
    assert_equals_naive_cat,
    attribute,
)
from tests.helpers import first_norms, outputs_of, tiny_classifier, token_batch


@pytest.mark.parametrize("layers", ["inputs", "outputs"])
@pytest.mark.parametrize("family", ["bert", "deberta-v2", "gpt2"])
def test_equals_naive_formula(family, layers):
    assert_equals_naive_cat(
        lambda model: CAT(model, layers=layers), family, layers, False
    )


@pytest.mark.parametrize("layers", ["inputs", "outputs"])
def test_is_attcat_with_uniform_attention(layers, monkeypatch):
    model = tiny_classifier("bert")
    batch = token_batch()
    attcat = AttCAT(model, layers=layers)
    weights = attcat._token_weights
    monkeypatch.setattr(
        attcat, "_token_weights", lambda *args: torch.ones_like(weights(*args))
    )
    expected = attribute(attcat, batch, return_layers=True)
    scores = attribute(CAT(model, layers=layers), batch, return_layers=True)
    torch.testing.assert_close(scores, expected)


@pytest.mark.parametrize("method", [CAT, AttCAT])
@pytest.mark.parametrize("family", ["bert", "deberta-v2", "distilbert"])
def test_a_post_ln_encoders_attention_reads_its_block_inputs(method, family):
    model, batch = tiny_classifier(family), token_batch()
    reads = attribute(method(model, layers="attention_inputs"), batch)
    assert torch.equal(reads, attribute(method(model, layers="inputs"), batch))


def test_a_pre_ln_classifiers_attention_reads_its_first_norms():
    model, batch = tiny_classifier("gpt2", dtype=torch.float64), token_batch()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with outputs_of(first_norms(model)) as outputs:
        logits = model(ids, attention_mask=mask).logits
    chosen = logits.gather(1, logits.argmax(1, keepdim=True)).sum()
    grads = torch.autograd.grad(chosen, outputs)
    expected = sum((g * o).sum(-1) for g, o in zip(grads, outputs))
    scores = attribute(CAT(model, layers="attention_inputs"), batch)
    torch.testing.assert_close(scores, expected * mask)


def test_needs_no_attention_weights():
    batch = token_batch()
    eager = attribute(CAT(tiny_classifier("bert")), batch)
    sdpa = attribute(CAT(tiny_classifier("bert", attn_implementation="sdpa")), batch)
    torch.testing.assert_close(sdpa, eager, atol=1e-6, rtol=0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="layers must be one of"):
        CAT(tiny_classifier("bert"), layers=0)  # type: ignore[arg-type]


# Checked on nine fine-tuning runs of the default model. CAT is noisier than
# AttCAT: "a" can outrank "gorgeous", and "dull" or "lifeless" turn negative.
@pytest.mark.integration
def test_checked_sentences_on_default_model(sentiment_model):
    not_bad = ["not", "bad"]
    assert_checked_sentences(
        CAT,
        sentiment_model,
        gorgeous=dict(positive=["gorgeous"]),
        dull=dict(positive=["mess"]),
        not_bad=dict(top_magnitude=not_bad, same_sign=not_bad),
    )
