#!/usr/bin/env python3
r"""GlobEnc on models loaded with sdpa attention equals GlobEnc on the same
model loaded with eager attention (float64): every family, every variant,
padding, tiny blocks of query rows, sliding windows; the model and
transformers' attention registry are left as they were, also when it raises."""

from functools import partial
from typing import Any, Dict, Iterator, List, Tuple

import pytest
import torch
from captum_ext._utils import attention_inputs as attention_module
from captum_ext.attr import AttCAT, GlobEnc
from captum_ext.attr._utils.decoder_decomposition import DECODER_VARIANTS
from captum_ext.attr._utils.encoder_decomposition import VARIANTS
from captum_ext.attr._utils.norm_decomposition import Factors
from torch import nn, Tensor
from transformers import PreTrainedModel
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from tests.helpers import (
    assert_same_in_threads,
    assert_same_state,
    CAUSAL_LM_FAMILIES,
    continuation_batch,
    eager_one_at_a_time,
    model_state,
    POST_LN_FAMILIES,
    sdpa_and_eager,
    sliding_window_lm,
    tiny_causal_lm,
    tiny_classifier,
    token_batch,
)


def _classifier(model: nn.Module, batch: Dict[str, Tensor], **options: Any) -> Tensor:
    return GlobEnc(model).attribute(
        batch["input_ids"],
        additional_forward_args=(batch["attention_mask"],),
        **options,
    )


def _generation(model: nn.Module, batch: Dict[str, Tensor], **options: Any) -> Tensor:
    # p_t's own term scored: the sliding window's check reads it.
    return GlobEnc(model, score_predicting_position=True).attribute(
        batch["input_ids"],
        target=batch["target"],
        additional_forward_args=(batch["attention_mask"],),
        attribute_generated=True,  # every column: prompt and generated tokens
        **options,
    )


@pytest.mark.parametrize("rollout", (True, False))
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("family", POST_LN_FAMILIES)
def test_classifier_sdpa_equals_eager(
    family: str, variant: str, rollout: bool, block_elements: object
) -> None:
    sdpa, eager = sdpa_and_eager(family, causal_lm=False)
    batch = token_batch((7, 4, 9))  # right padding
    options = dict(variant=variant, rollout=rollout)
    got = _classifier(sdpa, batch, **options)
    torch.testing.assert_close(
        got, _classifier(eager, batch, **options), rtol=1e-6, atol=1e-12
    )
    assert bool((got[batch["attention_mask"] == 0] == 0).all())


@pytest.mark.parametrize("family", POST_LN_FAMILIES)
def test_classifier_matrices_sdpa_equal_eager(
    family: str, block_elements: object
) -> None:
    r"""``attribute_matrices`` (the full path: its output is every layer's
    ``[pos, pos]``) joins the blocks."""
    sdpa, eager = sdpa_and_eager(family, causal_lm=False)
    batch = token_batch((7, 4, 9))

    def matrices(model: nn.Module) -> Tensor:
        return GlobEnc(model).attribute_matrices(
            batch["input_ids"], additional_forward_args=(batch["attention_mask"],)
        )

    torch.testing.assert_close(matrices(sdpa), matrices(eager), rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("rollout", (True, False))
@pytest.mark.parametrize("variant", DECODER_VARIANTS)
@pytest.mark.parametrize("family", CAUSAL_LM_FAMILIES)
def test_causal_lm_sdpa_equals_eager(
    family: str, variant: str, rollout: bool, block_elements: object
) -> None:
    sdpa, eager = sdpa_and_eager(family, causal_lm=True)
    batch = continuation_batch((5, 3, 7), (3, 1, 2))  # left-padded prompts
    scores = partial(_generation, variant=variant, rollout=rollout)
    torch.testing.assert_close(
        scores(sdpa, batch),
        eager_one_at_a_time(partial(scores, eager), batch),
        rtol=1e-6,
        atol=1e-12,
    )


@pytest.mark.parametrize("variant", DECODER_VARIANTS)
def test_sliding_window_sdpa_equals_eager(variant: str, block_elements: object) -> None:
    sdpa, eager = (sliding_window_lm(i) for i in ("sdpa", "eager"))
    batch = continuation_batch((9, 4, 7), (3, 2, 3))
    scores = partial(_generation, variant=variant, rollout=False)
    got = scores(sdpa, batch)
    expected = eager_one_at_a_time(partial(scores, eager), batch)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-12)
    if variant == "N":  # the window bites: keys 3 or more positions back get 0
        prompt = batch["input_ids"].shape[1]
        assert bool((got[0, 0, : prompt - 3] == 0).all())
        assert bool((got[0, 0, prompt - 3 : prompt] > 0).all())


def _planted_failure(*_: object) -> None:
    raise RuntimeError("planted failure")


def _snapshot(model: PreTrainedModel) -> Dict[str, object]:
    r"""The model's state, config and transformers' attention registry."""
    return dict(
        model_state(model),
        config=model.config.to_dict(),
        implementation=model.config._attn_implementation,
        sdpa=ALL_ATTENTION_FUNCTIONS["sdpa"],
        local=dict(ALL_ATTENTION_FUNCTIONS._local_mapping),
    )


def _assert_untouched(model: PreTrainedModel, before: Dict[str, object]) -> None:
    after = _snapshot(model)
    assert_same_state(before, after)
    for key in ("config", "implementation", "local"):
        assert after[key] == before[key], key
    assert after["sdpa"] is before["sdpa"]


@pytest.mark.parametrize("causal_lm", (False, True), ids=("classifier", "lm"))
def test_model_and_registry_untouched_also_when_it_raises(causal_lm: bool) -> None:
    if causal_lm:
        model = tiny_causal_lm("llama", attn_implementation="sdpa")
        run = partial(_generation, model, continuation_batch())
        second_block = model.get_submodule("model.layers.1")
    else:
        model = tiny_classifier("bert", attn_implementation="sdpa")
        run = partial(_classifier, model, token_batch())
        second_block = model.get_submodule("bert.encoder.layer.1")
    model.train()  # the method runs in eval mode and restores this one
    model.zero_grad(set_to_none=False)
    before = _snapshot(model)
    with pytest.warns(UserWarning, match="training mode"):
        assert bool((run() >= 0).all())
    _assert_untouched(model, before)
    handle = second_block.register_forward_hook(_planted_failure)
    try:
        with pytest.raises(RuntimeError, match="planted failure"):
            with pytest.warns(UserWarning, match="training mode"):
                run()
    finally:
        handle.remove()
    _assert_untouched(model, before)


def test_threads_sharing_the_registry_wrapper_get_their_own_scores() -> None:
    r"""GlobEnc in one thread and AttCAT in another, on two sdpa models, under
    one installed wrapper: each thread records only its own model's attention."""
    models = [
        tiny_causal_lm("llama", seed=s, attn_implementation="sdpa") for s in (0, 1)
    ]
    batch = continuation_batch()

    def attcat(model: nn.Module) -> Tensor:
        return AttCAT(model).attribute(
            batch["input_ids"],
            target=batch["target"],
            additional_forward_args=(batch["attention_mask"],),
        )

    runs = [partial(_generation, models[0], batch), partial(attcat, models[1])]
    assert_same_in_threads(runs)
    assert "sdpa" not in ALL_ATTENTION_FUNCTIONS._local_mapping


@pytest.mark.parametrize("causal_lm", (False, True), ids=("classifier", "lm"))
def test_attribute_forms_no_layer_matrix_on_sdpa(
    causal_lm: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    r"""With blocks of one query row, every ``N^l`` comes one row at a time and
    no layer's whole matrix is joined (only ``attribute_matrices`` joins)."""
    monkeypatch.setattr(attention_module, "BLOCK_ELEMENTS", 1)
    rows: List[int] = []
    norm_blocks = Factors.norm_blocks

    def recording(factors: Factors) -> Iterator[Tuple[int, Tensor]]:
        for start, block in norm_blocks(factors):
            rows.append(block.shape[1])
            yield start, block

    monkeypatch.setattr(Factors, "norm_blocks", recording)
    monkeypatch.setattr(Factors, "norms", None)  # calling it would raise
    if causal_lm:
        batch = continuation_batch()
        _generation(tiny_causal_lm("qwen2", attn_implementation="sdpa"), batch)
        width = batch["input_ids"].shape[1] + batch["target"].shape[1] - 1
    else:
        batch = token_batch()
        _classifier(tiny_classifier("bert", attn_implementation="sdpa"), batch)
        width = batch["input_ids"].shape[1]
    assert rows == [1] * (2 * width)  # 2 layers, one row per block
