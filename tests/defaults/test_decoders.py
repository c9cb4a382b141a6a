#!/usr/bin/env python3
r"""Decoders fitted on a frozen encoder (Eq. 3 with t = the input tokens)."""

import pickle
import random
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, List, Tuple

import pytest
import torch
from captum_ext.attr import DecodedLayerGradCam
from captum_ext.defaults import cache, decoders
from captum_ext.defaults.decoders import (
    DecoderHead,
    fit_decoders,
    FitConfig,
    load_fitted_decoder,
    load_fitted_decoders,
)
from tokenizers import models, pre_tokenizers, processors, Tokenizer
from torch import nn
from transformers import PreTrainedTokenizerFast

from tests.helpers import (
    assert_same_state,
    CLS_ID,
    FIRST_CONTENT_ID,
    model_state,
    PAD_ID,
    SEP_ID,
    tiny_classifier,
    VOCAB,
)

CONFIG = FitConfig(
    fit_texts=150, held_out_texts=50, steps=40, batch_positions=128, lr=3e-2
)


def _tokenizer(vocab_size: int = VOCAB) -> PreTrainedTokenizerFast:
    r"""A word-level tokenizer over ``w5 .. w{vocab_size - 1}``, framed like BERT's."""
    vocab = {"[PAD]": PAD_ID, "[UNK]": 1, "[CLS]": CLS_ID, "[SEP]": SEP_ID}
    vocab["[MASK]"] = 4
    vocab.update({f"w{i}": i for i in range(FIRST_CONTENT_ID, vocab_size)})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def _corpus(count: int, seed: int = 0) -> List[str]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(FIRST_CONTENT_ID, VOCAB)]
    return [
        " ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
        for _ in range(count)
    ]


@pytest.fixture(scope="module")
def model() -> nn.Module:
    return tiny_classifier("bert")


def test_fitting_drives_reconstruction_accuracy_up(model: nn.Module) -> None:
    texts = _corpus(200)
    before = model_state(model)
    untrained = fit_decoders(model, _tokenizer(), texts, replace(CONFIG, steps=1, lr=0))
    fitted = fit_decoders(model, _tokenizer(), texts, CONFIG)
    assert_same_state(before, model_state(model))
    assert len(fitted.heads) == 3
    print("held-out top-1 per layer:", untrained.accuracy, "->", fitted.accuracy)
    for start, end in zip(untrained.accuracy, fitted.accuracy):
        assert end > start + 0.1 and end > 0.5  # chance is 1 / 94


def test_cache_reuses_the_fit(
    model: nn.Module, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CAPTUM_EXT_CACHE", str(tmp_path))
    calls: List[int] = []
    train = decoders._train_head

    def counting(*args: Any, **kwargs: Any) -> DecoderHead:
        calls.append(1)
        return train(*args, **kwargs)

    monkeypatch.setattr(decoders, "_train_head", counting)
    texts, tokenizer = _corpus(200), _tokenizer()
    config = replace(CONFIG, steps=5)
    first = load_fitted_decoders(model, tokenizer, texts, config)
    assert len(calls) == 3
    head = load_fitted_decoder(model, tokenizer, 2, texts, config)
    assert len(calls) == 3  # loaded from the cache, not trained
    assert (
        first.accuracy == load_fitted_decoders(model, tokenizer, texts, config).accuracy
    )
    for name, value in first.heads[2].state_dict().items():
        torch.testing.assert_close(head.state_dict()[name], value)
    other = tiny_classifier("bert", seed=1)  # other weights: fitted anew
    load_fitted_decoders(other, tokenizer, texts, config)
    assert len(calls) == 6


def test_fitted_decoders_in_the_sweep(model: nn.Module) -> None:
    tokenizer = _tokenizer()
    fitted = fit_decoders(model, tokenizer, _corpus(200), replace(CONFIG, steps=5))
    encoded = tokenizer(["w5 w6 w7 w5", "w9 w10"], padding=True, return_tensors="pt")
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    method = DecodedLayerGradCam(model, 1, fitted.heads[1])
    sweep = method.attribute_all_layers(ids, None, mask, decoders=fitted.heads)
    torch.testing.assert_close(sweep[:, 1], method.attribute(ids, None, mask))


def test_clear_errors(model: nn.Module) -> None:
    with pytest.raises(ValueError, match="vocabulary sizes differ"):
        fit_decoders(model, _tokenizer(50), _corpus(10), CONFIG)
    with pytest.raises(IndexError, match="out of range"):
        load_fitted_decoder(model, _tokenizer(), 3, _corpus(10), CONFIG)


@pytest.mark.parametrize("texts", [[], ["", "  "]])
def test_texts_are_required_and_not_empty(model: nn.Module, texts: List[str]) -> None:
    with pytest.raises(TypeError, match="texts"):
        load_fitted_decoders(model, _tokenizer())  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="texts is empty"):
        load_fitted_decoders(model, _tokenizer(), texts, CONFIG)
    with pytest.raises(ValueError, match="texts is empty"):
        fit_decoders(model, _tokenizer(), texts, CONFIG)
    with pytest.raises(TypeError, match="got one str"):
        load_fitted_decoder(model, _tokenizer(), 1, "w5 w6 w7", CONFIG)
    with pytest.raises(TypeError, match="item int"):
        # An int item on purpose: the run-time check is the test.
        wrong = ["w5 w6", 7]
        fit_decoders(model, _tokenizer(), wrong, CONFIG)  # type: ignore[arg-type]


class _Payload:
    r"""Pickles to a call of ``open(marker, "w")``: creating the marker file is
    what an attacker's ``os.system`` would do, harmlessly."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Tuple[Callable[..., Any], Tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def test_planted_pickle_in_the_cache_is_refused_not_run(
    model: nn.Module, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CAPTUM_EXT_CACHE", str(tmp_path / "cache"))
    texts, tokenizer = _corpus(200), _tokenizer()
    config = replace(CONFIG, steps=2)
    load_fitted_decoders(model, tokenizer, texts, config)
    (directory,) = (tmp_path / "cache").glob("fitted-decoder-*")
    marker = tmp_path / "payload-ran"
    planted = directory / "layer_0.pt"
    torch.save({"layer_norm.weight": _Payload(marker)}, planted)
    cache._write_manifest(directory)  # the attacker fixes the manifest too
    with pytest.raises(pickle.UnpicklingError, match="refused to load"):
        load_fitted_decoders(model, tokenizer, texts, config)
    assert not marker.exists()
    # the planted file is live: a plain torch.load would have run it
    torch.load(planted, weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("count, held_out", [(3, 1), (1, 0)])
def test_few_texts_still_fit_and_warn(count: int, held_out: int) -> None:
    # A user's small data set: a fifth is held out (none for one text: NaN).
    model = tiny_classifier("bert")
    config = replace(CONFIG, steps=2)
    with pytest.warns(UserWarning, match=f"fitting decoders on {count} texts"):
        fitted = fit_decoders(model, _tokenizer(), _corpus(count), config)
    assert len(fitted.heads) == model.config.num_hidden_layers + 1
    accuracy = torch.tensor(fitted.accuracy)
    assert bool(accuracy.isnan().all()) == (held_out == 0)
    assert bool(accuracy.isfinite().all()) == (held_out > 0)
