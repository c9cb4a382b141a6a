#!/usr/bin/env python3
r"""The method and metric registries: names, families, call convention, and the
paper baselines' wiring to their classes on a tiny random BERT."""

import pytest
import torch
from captum_ext.attr import AttentionRollout, EmbeddingNorm, LastLayerAttention
from captum_ext.evaluation import registry
from captum_ext.evaluation.names import check_names
from captum_ext.evaluation.registry import METHODS, METRICS, register_method

from tests.helpers import tiny_labelled_bert, TINY_TEXTS, tiny_tokenizer


def test_registries_hold_the_new_methods_and_captum_baselines():
    for name in ("NormXLogit", "LogAt", "AttCAT", "CAT", "GlobEnc", "GlobEnc N_res"):
        assert METHODS[name].family == "captum_ext"
    assert METHODS["GlobEnc N"].family == "captum_ext"
    assert METHODS["Decoded Grad-CAM"].family == "captum_ext"
    for name in ("Saliency", "InputXGradient", "IntegratedGradients"):
        assert METHODS[name].family == "captum"
    assert METHODS["FeatureAblation"].family == "captum"
    assert METHODS["Random"].family == "control"
    for name in ("Attention", "Attention rollout", "Embedding norm"):
        assert METHODS[name].family == "baseline"
    assert [n for n, s in METHODS.items() if s.needs_decoders] == ["Decoded Grad-CAM"]
    names = ["aopc", "log_odds", "kendall_tau", "hiding_revealing", "sufficiency"]
    names += ["infidelity", "sensitivity_max"]  # Captum's own
    assert list(METRICS) == names
    columns = [c for name in names for c in METRICS[name].columns]
    assert columns == [
        "AOPC",
        "LOdds",
        "Kendall-tau",
        "Hide",
        "Reveal",
        "Sufficiency",
        "Infidelity",
        "SensMax",
    ]


@pytest.mark.usefixtures("no_decoder_fitting")
@pytest.mark.parametrize("pairs", [False, True])
def test_every_method_returns_one_score_per_position_zero_on_padding(pairs):
    model, tokenizer = tiny_labelled_bert(), tiny_tokenizer()
    second = TINY_TEXTS[3:6] if pairs else None
    encoded = tokenizer(TINY_TEXTS[:3], second, padding=True, return_tensors="pt")
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    types = encoded["token_type_ids"] if pairs else None
    target = torch.tensor([0, 1, 2])
    for name, spec in METHODS.items():
        scores = spec.factory(model, tokenizer)(ids, mask, target, types)
        assert scores.shape == ids.shape, name
        assert torch.isfinite(scores).all(), name
        assert (scores[mask == 0] == 0).all(), name


def test_segment_ids_reach_the_model():
    model, tokenizer = tiny_labelled_bert(), tiny_tokenizer()
    encoded = tokenizer(TINY_TEXTS[:1], TINY_TEXTS[1:2], return_tensors="pt")
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    explain = METHODS["NormXLogit"].factory(model, tokenizer)
    with_types = explain(ids, mask, torch.tensor([0]), encoded["token_type_ids"])
    without = explain(ids, mask, torch.tensor([0]))
    assert not torch.allclose(with_types, without)


def test_register_and_check_names_reject_bad_names():
    with pytest.raises(ValueError, match="already registered"):
        register_method("Random", METHODS["Random"].factory, "control")
    with pytest.raises(ValueError, match=r"unknown method\(s\) \['No'\]"):
        check_names(["No"], METHODS, "method")
    assert check_names(None, METRICS, "metric") == list(METRICS)


def test_decoders_are_fitted_on_the_given_texts_only(monkeypatch):
    model, tokenizer = tiny_labelled_bert(), tiny_tokenizer()
    with pytest.raises(ValueError, match="fits decoders on real text"):
        registry.decoders_for(model, tokenizer, None)
    seen = []

    class Fitted:
        heads = ["h0", "h1", "h2"]

    def fake_fit(model, tokenizer, texts):
        seen.append(texts)
        return Fitted()

    monkeypatch.setattr(registry.methods, "load_fitted_decoders", fake_fit)
    texts = ["one text", "another"]
    assert registry.decoders_for(model, tokenizer, texts) == ["h0", "h1", "h2"]
    assert seen == [["one text", "another"]]


@pytest.mark.parametrize("pairs", [False, True])
@pytest.mark.parametrize(
    "name, method",
    [
        ("Attention", LastLayerAttention),
        ("Attention rollout", AttentionRollout),
        ("Embedding norm", EmbeddingNorm),
    ],
)
def test_paper_baselines_run_their_classes(name, method, pairs):
    r"""The registry's baseline is its class's ``attribute`` on the same inputs,
    bit for bit (the formulas: ``tests/attr/test_last_layer_attention.py``,
    ``test_attention_rollout.py`` and ``test_embedding_norm.py``)."""
    model, tokenizer = tiny_labelled_bert(), tiny_tokenizer()
    second = TINY_TEXTS[3:6] if pairs else None
    encoded = tokenizer(TINY_TEXTS[:3], second, padding=True, return_tensors="pt")
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    types = encoded["token_type_ids"] if pairs else None
    scores = METHODS[name].factory(model, tokenizer)(ids, mask, None, types)
    args = (mask,) if types is None else (mask, types)
    expected = method(model).attribute(ids, additional_forward_args=args)
    assert torch.equal(scores, expected)


def test_random_scores_depend_on_the_example_and_class_not_the_batch():
    tokenizer = tiny_tokenizer()
    explain = METHODS["Random"].factory(tiny_labelled_bert(), tokenizer)
    encoded = tokenizer(TINY_TEXTS[:3], padding=True, return_tensors="pt")
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    batch = explain(ids, mask, torch.tensor([0, 1, 2]))
    alone = tokenizer(TINY_TEXTS[2:3], return_tensors="pt")
    single = explain(alone["input_ids"], alone["attention_mask"], torch.tensor([2]))
    torch.testing.assert_close(batch[2, : single.shape[1]], single[0])
    assert (batch[mask == 0] == 0).all() and (batch[mask == 1] > 0).all()
    other = explain(alone["input_ids"], alone["attention_mask"], torch.tensor([1]))
    assert not torch.equal(other, single)


def test_integrated_gradients_in_chunks_of_examples_equal_one_pass_over_the_batch():
    r"""The benchmark's IntegratedGradients runs IG_ROWS // IG_STEPS examples
    at a time, each with all its steps in one pass: the scores of one pass over
    the whole batch (float64, so equal to rounding)."""
    from captum.attr import LayerIntegratedGradients
    from captum_ext import classifier_forward
    from captum_ext.evaluation.registry import IG_ROWS, IG_STEPS

    model, tokenizer = tiny_labelled_bert().double(), tiny_tokenizer()
    n = 2 * IG_ROWS // IG_STEPS + 1  # two full chunks and one of a single example
    texts = [TINY_TEXTS[i % len(TINY_TEXTS)] for i in range(n)]
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    target = torch.arange(n) % 3
    scores = METHODS["IntegratedGradients"].factory(model, tokenizer)(ids, mask, target)
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)))
    reference = torch.where(torch.isin(ids, special), ids, tokenizer.pad_token_id)
    ig = LayerIntegratedGradients(
        classifier_forward(model), model.get_input_embeddings()
    )
    whole = (
        ig.attribute(
            ids,
            baselines=reference,
            target=target,
            additional_forward_args=(mask,),
            n_steps=IG_STEPS,
            internal_batch_size=n * IG_STEPS,
        ).sum(-1)
        * mask
    )  # [n, pos]
    torch.testing.assert_close(scores, whole, rtol=0, atol=1e-12)
