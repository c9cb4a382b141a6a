#!/usr/bin/env python3
import pytest
import torch
from captum_ext.attr import AttCAT

from tests.attr.token_method_checks import (
    assert_checked_sentences,
    assert_equals_naive_cat,
    attribute,
)
from tests.helpers import ALL_FAMILIES, is_causal, tiny_classifier, token_batch

# hidden_state_module(l) needs one module per layer, which ALBERT does not have.
NAIVE_FAMILIES = [f for f in ALL_FAMILIES if f != "albert"]


@pytest.mark.parametrize("layers", ["inputs", "outputs"])
@pytest.mark.parametrize("family", NAIVE_FAMILIES)
def test_equals_naive_formula(family, layers):
    assert_equals_naive_cat(
        lambda model: AttCAT(model, layers=layers), family, layers, True
    )


@pytest.mark.parametrize("layers", ["inputs", "outputs"])
def test_return_layers_sums_to_total(layers):
    model = tiny_classifier("bert")
    batch = token_batch()
    method = AttCAT(model, layers=layers)
    per_layer = attribute(method, batch, return_layers=True)
    assert per_layer.shape == (3, 2, 9)
    padding = ~batch["attention_mask"].bool()  # [batch, pos]
    assert torch.all(per_layer.transpose(1, 2)[padding] == 0)
    torch.testing.assert_close(per_layer.sum(1), attribute(method, batch))


def test_layer_modes_differ():
    model = tiny_classifier("bert")
    batch = token_batch()
    inputs = attribute(AttCAT(model), batch, return_layers=True)
    outputs = attribute(AttCAT(model, layers="outputs"), batch, return_layers=True)
    assert not torch.allclose(inputs, outputs)


def test_one_forward_and_one_backward_per_batch(monkeypatch):
    model = tiny_classifier("bert")
    forwards = []
    model.register_forward_hook(lambda *args: forwards.append(1))
    backwards = []
    grad = torch.autograd.grad

    def counting_grad(*args, **kwargs):
        backwards.append(1)
        return grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", counting_grad)
    attribute(AttCAT(model), token_batch((5, 9, 3, 7, 4)))
    assert (len(forwards), len(backwards)) == (1, 1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="layers must be one of"):
        AttCAT(tiny_classifier("bert"), layers="all")


def test_scores_are_signed():
    model = tiny_classifier("bert")
    scores = attribute(AttCAT(model), token_batch(causal=is_causal("bert")))
    assert (scores < 0).any() and (scores > 0).any()


# Checked on nine fine-tuning runs of the default model: "dull" can turn
# negative, and "gorgeous" and "moving" can tie.
@pytest.mark.integration
def test_checked_sentences_on_default_model(sentiment_model):
    gorgeous = ["gorgeous", "moving"]
    dull = ["dull", "lifeless", "mess"]
    not_bad = ["not", "bad"]
    assert_checked_sentences(
        AttCAT,
        sentiment_model,
        gorgeous=dict(positive=gorgeous, top=gorgeous),
        dull=dict(positive=["lifeless", "mess"], top=dull),
        not_bad=dict(top_magnitude=not_bad, same_sign=not_bad),
    )
