#!/usr/bin/env python3
r"""Loading the user's classifier from a local directory, and the errors for
everything that is not one."""

import json
from pathlib import Path
from typing import cast, Dict

import pytest
import torch
from captum_ext import UnsupportedModelError
from captum_ext.evaluation.user_models import load_classifier, resolve_device

from tests.helpers import (
    save_tiny_model,
    tiny_base_model,
    tiny_labelled_bert,
    tiny_masked_lm,
    tiny_tokenizer,
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny_model"))


def test_loads_a_classifier_the_default_way_in_eval_mode_in_the_asked_dtype(
    model_dir: Path,
) -> None:
    model, tokenizer = load_classifier(model_dir, dtype="bfloat16", max_length=12)
    assert not model.training
    assert model.config._attn_implementation == "sdpa"  # from_pretrained's default
    assert next(model.parameters()).dtype == torch.bfloat16
    assert tokenizer.model_max_length == 12
    # transformers types id2label by what a config accepts (also None or str
    # keys); a loaded config's keys are ints.
    assert cast(Dict[int, str], model.config.id2label)[2] == "<mixed>"


def test_a_separate_tokenizer_directory(model_dir: Path, tmp_path: Path) -> None:
    tiny_tokenizer().save_pretrained(tmp_path)
    _, tokenizer = load_classifier(model_dir, tokenizer=tmp_path)
    assert tokenizer.pad_token_id == 0


def test_a_directory_without_tokenizer_files_is_refused(tmp_path: Path) -> None:
    tiny_labelled_bert().save_pretrained(tmp_path)  # config and weights only
    with pytest.raises(ValueError, match="holds no tokenizer vocabulary") as error:
        load_classifier(tmp_path)
    assert "give --tokenizer DIR" in str(error.value)
    tiny_tokenizer().save_pretrained(tmp_path / "tokenizer")
    _, tokenizer = load_classifier(tmp_path, tokenizer=tmp_path / "tokenizer")
    assert tokenizer.tokenize("good movie") == ["good", "movie"]


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist") as error:
        load_classifier(tmp_path / "missing")
    assert "Repo id" not in str(error.value)
    with pytest.raises(ValueError, match="no config.json"):
        load_classifier(tmp_path)


def test_a_masked_lm_directory_is_refused(tmp_path: Path) -> None:
    tiny_masked_lm("bert").save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    with pytest.raises(UnsupportedModelError, match="BertForMaskedLM, not a sequence"):
        load_classifier(tmp_path)


def test_a_bare_encoder_directory_is_refused(tmp_path: Path) -> None:
    tiny_base_model("bert").save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    with pytest.raises(UnsupportedModelError, match="BertModel, not a sequence"):
        load_classifier(tmp_path)
    # The same weights declared as a classifier: the head would be random.
    path = tmp_path / "config.json"
    declared = json.loads(path.read_text())
    declared["architectures"] = ["BertForSequenceClassification"]
    path.write_text(json.dumps(declared))
    with pytest.raises(UnsupportedModelError, match="randomly initialised"):
        load_classifier(tmp_path)


def test_bad_devices_and_dtypes_are_named(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="unknown device 'nope'"):
        resolve_device("nope")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_classifier(model_dir, dtype="float8")
    assert resolve_device(None) == torch.device("cpu")
