#!/usr/bin/env python3
r"""Session-wide setup: torch on one thread (the only place the suite sets it),
and the real default models, fine-tuned once and cached under
:func:`captum_ext.defaults.cache.cache_root` (a few minutes the first time,
seconds afterwards)."""

import os
from typing import Iterator, Tuple

import pytest
import torch
from captum_ext._utils import attention_inputs as attention_module
from captum_ext.defaults.models import load_default_model
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tests.helpers import embedding_decoders_in_registry


def pytest_configure(config: pytest.Config) -> None:
    # The one thread setup of the suite (no test module sets it again): pytest-xdist
    # runs one worker per core, and more torch threads than cores only
    # oversubscribe the CPU; tiny models are dominated by thread start-up and
    # lock contention (a second thread spins for seconds per call on a busy
    # machine). The environment variable keeps it when the CLI's main, called
    # in-process, applies its thread rule (captum_ext.evaluation._utils.threads).
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def sentiment_model() -> Tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    r"""``(model, tokenizer)``: all-MiniLM-L6-v2 fine-tuned on negative/positive
    movie snippets, in eval mode."""
    return load_default_model("sentiment")


@pytest.fixture(scope="session")
def source_model() -> Tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    r"""``(model, tokenizer)``: all-MiniLM-L6-v2 fine-tuned to tell movie /
    tweet / product / editorial snippets apart, in eval mode."""
    return load_default_model("source")


@pytest.fixture
def no_decoder_fitting() -> Iterator[None]:
    r"""The registry's decoders are :func:`tests.helpers.embedding_decoders`
    (the tied input embeddings) instead of decoders fitted on real text."""
    with embedding_decoders_in_registry():
        yield


@pytest.fixture(params=[None, 1, 400], ids=["one-block", "row-blocks", "few-rows"])
def block_elements(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> object:
    r"""Attention recomputed from the query and key in one block, a query row
    at a time, and a few rows at a time (tiny batches: 3 x 4 heads x ~10 keys
    per row): :data:`captum_ext._utils.attention_inputs.BLOCK_ELEMENTS`."""
    if request.param is not None:
        monkeypatch.setattr(attention_module, "BLOCK_ELEMENTS", request.param)
    return request.param
