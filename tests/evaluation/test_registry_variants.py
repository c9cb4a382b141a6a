#!/usr/bin/env python3
r"""The registry's causal-LM variants (``METHOD_VARIANTS``): each is its class
with its options on generated text, accepted by name and never run by
default."""

from typing import Any, Callable, Dict, Tuple

import pytest
import torch
from captum_ext.attr import AttCAT, CAT, DecodedLayerGradCam, GlobEnc, LogAt, NormXLogit
from captum_ext.evaluation.names import (
    check_names,
    GENERATION_METHOD_CHOICES,
    GENERATION_METHOD_NAMES,
    METHOD_CHOICES,
    METHOD_NAMES,
    VARIANT_METHOD_NAMES,
)
from captum_ext.evaluation.registry import method_spec, METHOD_VARIANTS, METHODS
from torch import nn

from tests.attr.llm_fixtures import tiny_lm_tokenizer
from tests.helpers import continuation_batch, tiny_causal_lm

# name -> (class with its options, attribute keywords): the docs' definitions.
EXPECTED: Dict[str, Tuple[Callable[[nn.Module], Any], Dict[str, str]]] = {
    "AttCAT received": (lambda m: AttCAT(m, layers="inputs", alpha="received"), {}),
    "AttCAT row": (lambda m: AttCAT(m, layers="inputs", alpha="row"), {}),
    "AttCAT logit": (
        lambda m: AttCAT(m, layers="inputs", alpha="rollout", objective="logit"),
        {},
    ),
    "AttCAT received logit": (
        lambda m: AttCAT(m, layers="inputs", alpha="received", objective="logit"),
        {},
    ),
    "AttCAT row logit": (
        lambda m: AttCAT(m, layers="inputs", alpha="row", objective="logit"),
        {},
    ),
    "CAT logit": (lambda m: CAT(m, layers="inputs", objective="logit"), {}),
    "CAT outputs": (lambda m: CAT(m, layers="outputs"), {}),
    "AttCAT outputs": (lambda m: AttCAT(m, alpha="rollout", layers="outputs"), {}),
    "AttCAT received outputs": (
        lambda m: AttCAT(m, alpha="received", layers="outputs"),
        {},
    ),
    "AttCAT row outputs": (lambda m: AttCAT(m, alpha="row", layers="outputs"), {}),
    "CAT inputs": (lambda m: CAT(m, layers="inputs"), {}),
    "AttCAT inputs": (lambda m: AttCAT(m, alpha="rollout", layers="inputs"), {}),
    # tiny_causal_lm has 2 blocks: the benchmark decodes hidden_states[1].
    "Decoded Grad-CAM hidden state": (lambda m: DecodedLayerGradCam(m, 1), {}),
    "AttCAT received attention inputs": (
        lambda m: AttCAT(m, alpha="received", layers="attention_inputs"),
        {},
    ),
    "LogAt with p_t": (lambda m: LogAt(m, score_predicting_position=True), {}),
    "NormXLogit with p_t": (
        lambda m: NormXLogit(m, score_predicting_position=True),
        {},
    ),
    "GlobEnc with p_t": (lambda m: GlobEnc(m, score_predicting_position=True), {}),
    "GlobEnc N with p_t": (
        lambda m: GlobEnc(m, score_predicting_position=True),
        {"variant": "N"},
    ),
}


def test_the_variants_are_the_named_ones_and_run_only_when_named():
    assert list(METHOD_VARIANTS) == list(VARIANT_METHOD_NAMES) == list(EXPECTED)
    assert not set(METHOD_VARIANTS) & set(METHODS)
    assert all(spec.causal_lm for spec in METHOD_VARIANTS.values())
    assert check_names(None, GENERATION_METHOD_CHOICES, "m") == list(
        GENERATION_METHOD_NAMES
    )
    assert check_names(None, METHOD_CHOICES, "m") == list(METHOD_NAMES)
    assert check_names(["AttCAT row"], GENERATION_METHOD_CHOICES, "m") == ["AttCAT row"]
    assert method_spec("CAT logit") is METHOD_VARIANTS["CAT logit"]
    assert method_spec("CAT") is METHODS["CAT"]
    with pytest.raises(ValueError, match="unknown method"):
        check_names(["AttCAT row"], GENERATION_METHOD_NAMES, "method")


@pytest.mark.parametrize("name", VARIANT_METHOD_NAMES)
def test_each_variant_is_its_class_with_its_options(name):
    model = tiny_causal_lm("gpt2", dtype=torch.float64)
    batch = continuation_batch((5, 3, 7), (3, 1, 2), seed=3)
    ids, mask, target = batch["input_ids"], batch["attention_mask"], batch["target"]
    explain = METHOD_VARIANTS[name].build_generation(model, tiny_lm_tokenizer())
    build, options = EXPECTED[name]
    expected = build(model).attribute(
        ids, target=target, additional_forward_args=(mask,), **options
    )
    torch.testing.assert_close(explain(ids, mask, target), expected, rtol=0, atol=0)


def test_decoded_grad_cam_on_a_causal_lm_reads_the_next_blocks_attention_input():
    model = tiny_causal_lm("gpt2", dtype=torch.float64)
    batch = continuation_batch((5, 3, 7), (3, 1, 2), seed=3)
    ids, mask, target = batch["input_ids"], batch["attention_mask"], batch["target"]
    explain = METHODS["Decoded Grad-CAM"].build_generation(model, tiny_lm_tokenizer())
    reads = model.get_submodule("transformer.h.1.ln_1")  # block 2's first norm
    expected = DecodedLayerGradCam(model, reads).attribute(
        ids, target=target, additional_forward_args=(mask,)
    )
    scores = explain(ids, mask, target)
    torch.testing.assert_close(scores, expected, rtol=0, atol=0)
    hidden = DecodedLayerGradCam(model, 1).attribute(
        ids, target=target, additional_forward_args=(mask,)
    )
    assert not torch.allclose(scores, hidden)
