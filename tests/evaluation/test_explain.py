#!/usr/bin/env python3
r"""``captum_ext.evaluation.explain.explain``: one text, several methods."""

import pytest
import torch
from captum_ext.evaluation.explain import default_methods, explain
from captum_ext.evaluation.registry import METHODS

from tests.helpers import TINY_LABEL_NAMES, tiny_labelled_bert, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("no_decoder_fitting")


def test_scores_every_non_control_method_without_decoders_by_default():
    model = tiny_labelled_bert()
    explanation = explain(model, tiny_tokenizer(), "the movie was fun")
    assert explanation.tokens == ["[CLS]", "the", "movie", "was", "fun", "[SEP]"]
    expected = [
        n
        for n, s in METHODS.items()
        if s.family != "control" and n != "Decoded Grad-CAM"
    ]
    assert list(explanation.scores) == expected == default_methods(False)
    assert explanation.target == explanation.pred_class
    assert explanation.label_names == TINY_LABEL_NAMES
    with torch.no_grad():
        ids = torch.tensor([tiny_tokenizer()("the movie was fun")["input_ids"]])
        probs = model(input_ids=ids).logits.softmax(-1)[0]
    assert explanation.pred_prob == pytest.approx(float(probs.max()))


def test_scores_equal_the_registry_method_and_follow_the_target():
    model, tokenizer = tiny_labelled_bert(), tiny_tokenizer()
    explanation = explain(model, tokenizer, "not very good", ["AttCAT"], target=2)
    assert explanation.target == 2
    ids = torch.tensor([tokenizer("not very good")["input_ids"]])
    direct = METHODS["AttCAT"].factory(model, tokenizer)(
        ids, torch.ones_like(ids), torch.tensor([2])
    )[0]
    torch.testing.assert_close(explanation.scores["AttCAT"], direct)


def test_decoder_texts_bring_in_decoded_grad_cam():
    explanation = explain(
        tiny_labelled_bert(), tiny_tokenizer(), "good", decoder_texts=["some text"]
    )
    assert "Decoded Grad-CAM" in explanation.scores


def test_bad_input_is_refused_and_truncation_is_told():
    model, tokenizer = tiny_labelled_bert(), tiny_tokenizer()
    with pytest.raises(
        ValueError, match="not a class of this model: choose one in 0..2"
    ):
        explain(model, tokenizer, "good", ["Random"], target=7)
    with pytest.raises(ValueError, match="the text is empty"):
        explain(model, tokenizer, "  \n", ["Random"])
    with pytest.raises(ValueError, match="unknown method"):
        explain(model, tokenizer, "good", ["Nope"])
    with pytest.warns(UserWarning, match="has 12 tokens and was cut to max_length=6"):
        explanation = explain(model, tokenizer, "good " * 10, ["Random"], max_length=6)
    assert len(explanation.tokens) == 6


def test_text_pairs():
    explanation = explain(
        tiny_labelled_bert(), tiny_tokenizer(), "good", ["Saliency"], text_pair="bad"
    )
    assert explanation.tokens == ["[CLS]", "good", "[SEP]", "bad", "[SEP]"]


def test_max_length_above_the_models_positions_is_refused_before_any_work():
    model, long_text = tiny_labelled_bert(), " ".join(["fun"] * 80)  # 64 positions
    with pytest.raises(ValueError, match="max_length=100 is more than the 64 pos"):
        explain(model, tiny_tokenizer(), long_text, ["NormXLogit"], max_length=100)
    with pytest.warns(UserWarning, match="cut to max_length=64"):
        explanation = explain(model, tiny_tokenizer(), long_text, max_length=64)
    assert len(explanation.tokens) == 64


def test_a_tokenizer_with_more_words_than_the_model_is_refused():
    model = tiny_labelled_bert()
    model.resize_token_embeddings(10)  # "movie" is id 7, "fun" id 15
    # Refused whatever the text (here all its ids < 10): the tokenizer belongs
    # to another model.
    for text in ("the movie was fun", "the movie"):
        with pytest.raises(ValueError, match="tokenizer has 99 tokens but the mod"):
            explain(model, tiny_tokenizer(), text, ["NormXLogit"])
