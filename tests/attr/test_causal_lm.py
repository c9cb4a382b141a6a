#!/usr/bin/env python3
r"""LogAt, NormXLogit, CAT, AttCAT and decoded layer attribution on causal LMs
(docs/generation.rst): shapes and the score mask, padding and chunking
invariance, the consistency law, naive per-example per-target loops, hand-made
references and the errors of unsupported combinations."""

from functools import partial
from typing import Any, Dict, Optional, Tuple

import pytest
import torch
from captum_ext import UnsupportedModelError
from captum_ext.attr import (
    AttCAT,
    CAT,
    DecodedLayerAttribution,
    DecodedLayerGradCam,
    GlobEnc,
    LogAt,
    NormXLogit,
)
from torch import nn, Tensor
from transformers import PreTrainedModel

from tests.attr.token_method_checks import MethodFactory
from tests.helpers import (
    assert_same_state,
    CAUSAL_FAMILIES,
    CAUSAL_LM_FAMILIES,
    continuation_batch,
    model_state,
    tiny_base_model,
    tiny_causal_lm,
    tiny_classifier,
    tiny_masked_lm,
)

# name -> method on a causal LM; decoded scores signed (relu=None) so that they
# are linear in the explained objective.
# LogAt, NormXLogit, CAT and AttCAT with the definitions these tests derive
# (p_t's own term scored, alpha the mean received, the blocks' inputs; their
# defaults are tested in test_causal_lm_variants.py).
METHODS: Dict[str, Tuple[MethodFactory, Dict[str, Any]]] = {
    "LogAt": (partial(LogAt, score_predicting_position=True), {}),
    "NormXLogit": (partial(NormXLogit, score_predicting_position=True), {}),
    "CAT": (partial(CAT, layers="inputs"), {}),
    "AttCAT": (partial(AttCAT, alpha="received", layers="inputs"), {}),
    "DecodedLayerGradCam": (lambda m: DecodedLayerGradCam(m, 1), {"relu": None}),
    "DecodedLayerAttribution": (
        lambda m: DecodedLayerAttribution(m, 1),
        {"relu": None},
    ),
}


def _attribute(
    name: str,
    model: PreTrainedModel,
    batch: Dict[str, Tensor],
    target: Optional[Tensor] = None,
    **options: Any,
) -> Tensor:
    build, defaults = METHODS[name]
    return build(model).attribute(
        batch["input_ids"],
        target=batch["target"] if target is None else target,
        additional_forward_args=(batch["attention_mask"],),
        **defaults,
        **options,
    )


def _gpt2() -> PreTrainedModel:
    return tiny_causal_lm("gpt2", dtype=torch.float64)


def _full_targets(seed: int = 0) -> Dict[str, Tensor]:
    r"""Left-padded prompts whose continuations all have 3 tokens."""
    return continuation_batch((5, 3, 7), (3, 3, 3), seed=seed)


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
@pytest.mark.parametrize("generated", [False, True])
def test_shape_dtype_and_zero_outside_the_score_mask(
    name: str, family: str, generated: bool
) -> None:
    batch = continuation_batch()
    scores = _attribute(
        name, tiny_causal_lm(family), batch, attribute_generated=generated
    )
    prompt, steps = batch["input_ids"].shape[1], batch["target"].shape[1]
    assert scores.shape == (3, steps, prompt + steps if generated else prompt)
    assert scores.dtype == torch.float32
    lengths, targets = batch["attention_mask"].sum(1), (batch["target"] >= 0).sum(1)
    for row in range(3):
        start = prompt - int(lengths[row])
        for step in range(steps):
            live = scores[row, step]
            if step >= targets[row]:
                assert not live.any()  # no target at this step
                continue
            end = prompt + step if generated else prompt
            assert not live[:start].any() and not live[end:].any()
            assert live[start:end].abs().min() > 0
    assert _attribute(name, _gpt2(), batch).dtype == torch.float64


@pytest.mark.parametrize("name", METHODS)
def test_naive_loop_per_example_and_target_equals_batched(name: str) -> None:
    r"""Row t of example b equals the method run on example b alone, unpadded,
    on prompt + y_<t with the single target y_t (float64; covers left padding,
    ragged continuations and the consistency law)."""
    model, batch = _gpt2(), continuation_batch()
    scores = _attribute(name, model, batch, attribute_generated=True)
    prompt = batch["input_ids"].shape[1]
    for row in range(3):
        keep = batch["attention_mask"][row].bool()
        ids, target = batch["input_ids"][row, keep], batch["target"][row]
        for step in range(int((target >= 0).sum())):
            context = torch.cat([ids, target[:step]])[None]
            alone = dict(
                input_ids=context,
                attention_mask=torch.ones_like(context),
                target=target[None, step : step + 1],
            )
            single = _attribute(name, model, alone)[0, 0]  # [len(context)]
            batched = scores[row, step, prompt - len(ids) : prompt + step]
            torch.testing.assert_close(batched, single, atol=1e-9, rtol=1e-6)


@pytest.mark.parametrize("name", METHODS)
def test_consistency_law_on_a_padded_batch(name: str) -> None:
    r"""Row t on the prompt (and y_<t) equals the batched run on prompt + y_<t
    with the single target y_t."""
    model, batch = _gpt2(), _full_targets()
    scores = _attribute(name, model, batch, attribute_generated=True)
    prompt = batch["input_ids"].shape[1]
    for step in range(3):
        shorter = dict(
            input_ids=torch.cat([batch["input_ids"], batch["target"][:, :step]], 1),
            attention_mask=torch.cat(
                [batch["attention_mask"], torch.ones(3, step, dtype=torch.long)], 1
            ),
            target=batch["target"][:, step : step + 1],
        )
        single = _attribute(name, model, shorter)[:, 0]  # [batch, P + step]
        torch.testing.assert_close(
            scores[:, step, : prompt + step], single, atol=1e-9, rtol=1e-6
        )


@pytest.mark.parametrize("name", METHODS)
def test_llama_left_padding_equals_one_prompt_at_a_time(name: str) -> None:
    model, batch = tiny_causal_lm("llama"), continuation_batch()
    scores = _attribute(name, model, batch)
    prompt = batch["input_ids"].shape[1]
    for row in range(3):
        keep = batch["attention_mask"][row].bool()
        ids = batch["input_ids"][row, keep][None]
        alone = dict(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            target=batch["target"][row : row + 1],
        )
        single = _attribute(name, model, alone)[0]  # [T, len]
        scale = float(single.abs().max())
        torch.testing.assert_close(
            scores[row, :, prompt - ids.shape[1] :],
            single,
            atol=1e-5 * scale,
            rtol=1e-4,
        )


@pytest.mark.parametrize("name", METHODS)
def test_internal_batch_size_gives_the_whole_batch(name: str) -> None:
    model, batch = _gpt2(), continuation_batch()
    whole = _attribute(name, model, batch, attribute_generated=True)
    chunked = _attribute(
        name, model, batch, attribute_generated=True, internal_batch_size=2
    )
    torch.testing.assert_close(chunked, whole, atol=1e-12, rtol=1e-9)


@pytest.mark.parametrize("name", METHODS)
def test_contrast_is_the_difference_of_two_single_target_runs(name: str) -> None:
    r"""Every method is linear in its objective (a logit, or log p for the
    gradient methods; decoded scores signed): y vs y' = run(y) - run(y')."""
    model, batch = _gpt2(), _full_targets()
    batch["target"] = batch["target"][:, :1]  # one step: the same context for both
    foils = _full_targets(seed=5)["target"][:, :1]
    contrast = _attribute(name, model, batch, contrast_target=foils)
    difference = _attribute(name, model, batch) - _attribute(
        name, model, batch, target=foils
    )
    torch.testing.assert_close(contrast, difference, atol=1e-12, rtol=1e-9)


def _joined(batch: Dict[str, Tensor]) -> Tuple[Tensor, Tensor, Tensor, int]:
    r"""``prompt + y_<T`` ids and mask, the position ids and the prompt width."""
    ids = torch.cat([batch["input_ids"], batch["target"][:, :-1]], 1)
    mask = torch.cat(
        [batch["attention_mask"], torch.ones_like(batch["target"][:, :-1])], 1
    )
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    return ids, mask, positions, batch["input_ids"].shape[1]


def test_logat_is_the_models_own_logit_of_each_target() -> None:
    model, batch = _gpt2(), _full_targets()
    ids, mask, positions, prompt = _joined(batch)
    logits = model(ids, attention_mask=mask, position_ids=positions).logits
    scores = _attribute("LogAt", model, batch, attribute_generated=True)
    for step in range(3):
        expected = logits[torch.arange(3), :, batch["target"][:, step]]  # [b, pos]
        end = prompt + step
        valid = mask[:, :end].bool()
        torch.testing.assert_close(
            scores[:, step, :end], expected[:, :end] * valid, atol=1e-12, rtol=0
        )


@pytest.mark.parametrize("name", ["CAT", "AttCAT"])
def test_cat_equals_autograd_per_target_by_hand(name: str) -> None:
    model, batch = _gpt2(), _full_targets()
    ids, mask, positions, prompt = _joined(batch)
    out = model(
        ids,
        attention_mask=mask,
        position_ids=positions,
        output_hidden_states=True,
        output_attentions=True,
    )
    hidden = out.hidden_states[:-1]  # block inputs
    scores = _attribute(name, model, batch, attribute_generated=True)
    for step in range(3):
        predicting = prompt - 1 + step
        log_p = out.logits[:, predicting].log_softmax(-1)
        chosen = log_p[torch.arange(3), batch["target"][:, step]].sum()
        grads = torch.autograd.grad(chosen, hidden, retain_graph=True)
        expected = torch.zeros(3, ids.shape[1], dtype=torch.float64)
        for layer, (g, h) in enumerate(zip(grads, hidden)):
            cat = (g * h).sum(-1)  # [batch, pos]
            if name == "AttCAT":  # mean over heads and queries i <= q <= p_t
                attention = out.attentions[layer].mean(1)  # [batch, q, k]
                for key in range(predicting + 1):
                    received = attention[:, key : predicting + 1, key]
                    cat[:, key] *= received.mean(-1)
            expected += cat
        end = prompt + step
        torch.testing.assert_close(
            scores[:, step, :end],
            expected[:, :end] * mask[:, :end],
            atol=1e-12,
            rtol=1e-9,
        )


@pytest.mark.parametrize("name", METHODS)
def test_model_state_is_untouched(name: str) -> None:
    model = tiny_causal_lm("gpt2")
    model.get_submodule("transformer.h.0").requires_grad_(False)  # partly frozen
    model.train()
    before = model_state(model)
    with pytest.warns(UserWarning, match="training mode"):
        _attribute(name, model, continuation_batch())
    assert_same_state(before, model_state(model))


def test_causal_lm_without_target_is_refused() -> None:
    batch, model = continuation_batch(), tiny_causal_lm("gpt2")
    for build, _ in METHODS.values():
        with pytest.raises(ValueError, match="LLMTokenAttribution"):
            build(model).attribute(
                batch["input_ids"], additional_forward_args=(batch["attention_mask"],)
            )


@pytest.mark.parametrize("name", METHODS)
def test_continuation_ids_need_a_causal_lm(name: str) -> None:
    batch = continuation_batch()
    missing = "decoder is required" if name.startswith("Decoded") else "no LM head"
    with pytest.raises(ValueError, match=missing):  # UnsupportedModelError too
        _attribute(name, tiny_base_model("gpt2"), batch)
    if not name.startswith("Decoded"):  # those need a decoder for a classifier
        with pytest.raises(ValueError, match="need a causal LM"):
            _attribute(name, tiny_classifier("gpt2"), batch)


def test_masked_lm_is_not_a_causal_lm() -> None:
    model = tiny_masked_lm("bert")
    method = LogAt(model, decoder=LogAt(model).adapter.mlm_head())
    batch = continuation_batch()
    with pytest.raises(UnsupportedModelError, match="masked LM"):
        method.attribute(batch["input_ids"], target=batch["target"])


def test_generation_options_on_a_classifier_are_refused() -> None:
    model, batch = tiny_classifier("gpt2"), continuation_batch()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    for options in ({"attribute_generated": True}, {"contrast_target": ids}):
        with pytest.raises(UnsupportedModelError, match="sequence classifier"):
            LogAt(model).attribute(ids, additional_forward_args=(mask,), **options)


def test_bad_contrast_target_and_decoder_options_are_refused() -> None:
    model, batch = tiny_causal_lm("gpt2"), continuation_batch()
    with pytest.raises(ValueError, match="target's shape"):
        _attribute("CAT", model, batch, contrast_target=batch["target"][:, :1])
    with pytest.raises(ValueError, match="per-example tensors"):
        _attribute(
            "DecodedLayerAttribution",
            model,
            batch,
            baselines=torch.zeros_like(batch["input_ids"]),
        )
    with pytest.raises(ValueError, match="decoder is required"):
        DecodedLayerGradCam(tiny_classifier("gpt2"), 1)


@pytest.mark.parametrize("family", CAUSAL_LM_FAMILIES)
def test_every_causal_lm_family_is_explained(family: str) -> None:
    r"""The families that share Llama's module names: LogAt is the model's own
    logit of the target at the last prompt position, every method's row 0 is
    non-zero exactly on the attended prompt."""
    model, batch = tiny_causal_lm(family), _full_targets()
    ids, mask, positions, prompt = _joined(batch)
    logits = model(ids, attention_mask=mask, position_ids=positions).logits
    expected = logits[torch.arange(3), prompt - 1, batch["target"][:, 0]]
    for name in METHODS:
        scores = _attribute(name, model, batch)
        assert (scores[:, 0] != 0).equal(batch["attention_mask"].bool())
        if name == "LogAt":
            torch.testing.assert_close(scores[:, 0, -1], expected)


@pytest.mark.parametrize("name", [*METHODS, "GlobEnc"])
def test_a_non_finite_logit_at_a_predicting_position_raises_naming_it(
    name: str,
) -> None:
    r"""One policy for every method: a NaN (or inf) logit of any token at a
    position that predicts a target raises, naming the example and the step,
    although the target's own logit is finite."""
    model, batch = _gpt2(), _full_targets()
    steps = batch["target"].shape[1]

    def poison(
        _module: nn.Module, _inputs: Tuple[Tensor, ...], logits: Tensor
    ) -> Tensor:
        # Row 1 of the batch (of every copy of it in an expanded batch), the
        # position predicting step 1, a token that is not the target.
        logits = logits.clone()
        token = int(batch["target"][1, 1]) + 1
        logits[1::3, logits.shape[1] - steps + 1, token] = float("nan")
        return logits

    model.get_output_embeddings().register_forward_hook(poison)
    with pytest.raises(FloatingPointError, match="example 1 target step 1"):
        if name == "GlobEnc":
            GlobEnc(model).attribute(
                batch["input_ids"],
                target=batch["target"],
                additional_forward_args=(batch["attention_mask"],),
            )
        else:
            _attribute(name, model, batch)
