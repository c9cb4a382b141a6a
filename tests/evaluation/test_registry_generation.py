#!/usr/bin/env python3
r"""The registry's generation entries (``MethodSpec.build_generation``) on a tiny
random GPT-2: ``[batch, T, P]`` zero on padding, a batch equal to one prompt at
a time, and Captum's baselines on exactly the ids captum_ext's methods get (a
hand loop for FeatureAblation, Captum's own user script for both)."""

import pytest
import torch
from captum.attr import (
    FeatureAblation,
    LayerGradientXActivation,
    LayerIntegratedGradients,
    LLMAttribution,
    LLMGradientAttribution,
    TextTokenInput,
)
from captum_ext.evaluation.names import GENERATION_METHOD_NAMES
from captum_ext.evaluation.registry import (
    baseline_token_id,
    IG_STEPS,
    METHODS,
    MethodSpec,
)

from tests.attr.llm_fixtures import tiny_lm_tokenizer
from tests.helpers import continuation_batch, tiny_causal_lm, tiny_classifier


@pytest.fixture(scope="module")
def lm():
    r"""``(model, tokenizer)``: a tiny random GPT-2 in float64 (exact
    equalities) and its word-level tokenizer."""
    return tiny_causal_lm("gpt2", dtype=torch.float64), tiny_lm_tokenizer()


@pytest.fixture(scope="module")
def batch():
    return continuation_batch((5, 3, 7), (3, 1, 2), seed=3)


def _explain(name, lm, batch):
    explain = METHODS[name].build_generation(*lm)
    return explain(batch["input_ids"], batch["attention_mask"], batch["target"])


def test_generation_entries_are_the_named_ones_and_only_they_build():
    assert [n for n, s in METHODS.items() if s.causal_lm] == list(
        GENERATION_METHOD_NAMES
    )
    with pytest.raises(ValueError, match="does not explain what a causal LM"):
        METHODS["Saliency"].build_generation(None, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="causal_lm=True goes with a generation"):
        MethodSpec("Broken", METHODS["Random"].factory, "control", causal_lm=True)
    with pytest.raises(ValueError, match="one_prompt_at_a_time describes"):
        MethodSpec(
            "Broken", METHODS["Random"].factory, "control", one_prompt_at_a_time=True
        )


def test_captums_llm_entries_and_only_they_take_one_prompt_at_a_time():
    one_at_a_time = [n for n, s in METHODS.items() if s.one_prompt_at_a_time]
    assert one_at_a_time == ["InputXGradient", "IntegratedGradients", "FeatureAblation"]


@pytest.mark.parametrize("name", GENERATION_METHOD_NAMES)
def test_scores_are_target_by_prompt_zero_on_padding(name, lm, batch):
    scores = _explain(name, lm, batch)
    mask, target = batch["attention_mask"].bool(), batch["target"] != -100
    assert scores.shape == (3, 3, 7)
    assert scores.dtype == torch.float64
    assert torch.isfinite(scores).all()
    valid = target[:, :, None] & mask[:, None, :]  # [batch, T, P]
    assert (scores[~valid] == 0).all()
    assert (scores[valid] != 0).any()


@pytest.mark.parametrize("name", GENERATION_METHOD_NAMES)
def test_batch_equals_one_prompt_at_a_time(name, lm, batch):
    batched = _explain(name, lm, batch)
    for row in range(3):
        kept = batch["attention_mask"][row].bool()
        steps = batch["target"][row] != -100
        alone = dict(
            input_ids=batch["input_ids"][row][kept][None],
            attention_mask=batch["attention_mask"][row][kept][None],
            target=batch["target"][row][steps][None],
        )
        single = _explain(name, lm, alone)[0]
        torch.testing.assert_close(
            batched[row][steps][:, kept], single, rtol=1e-9, atol=1e-10
        )


def _log_prob(model, ids, next_id):
    with torch.no_grad():
        logits = model(ids[None]).logits[0, -1]
    return logits.double().log_softmax(-1)[next_id]


def test_feature_ablation_is_the_hand_loop_of_ablated_prompt_tokens(lm, batch):
    model, tokenizer = lm
    scores = _explain("FeatureAblation", lm, batch)
    baseline = baseline_token_id(tokenizer)
    for row in range(3):
        prompt = batch["input_ids"][row][batch["attention_mask"][row].bool()]
        width = batch["input_ids"].shape[1]
        target = batch["target"][row][batch["target"][row] != -100]
        for t, y in enumerate(target):
            full = _log_prob(model, torch.cat([prompt, target[:t]]), y)
            for i in range(len(prompt)):
                ablated = prompt.clone()
                ablated[i] = baseline
                drop = full - _log_prob(model, torch.cat([ablated, target[:t]]), y)
                column = width - len(prompt) + i
                torch.testing.assert_close(scores[row, t, column], drop)


def test_input_x_gradient_is_the_hand_gradient_of_each_targets_log_prob(lm, batch):
    r"""Row t: d log p(y_t | prompt, y_<t) / d embedding, times the embedding,
    summed over features, by autograd on each prompt alone."""
    model, _ = lm
    scores = _explain("InputXGradient", lm, batch)
    width = batch["input_ids"].shape[1]
    for row in range(3):
        prompt = batch["input_ids"][row][batch["attention_mask"][row].bool()]
        target = batch["target"][row][batch["target"][row] != -100]
        for t, y in enumerate(target):
            ids = torch.cat([prompt, target[:t]])
            embedded = model.get_input_embeddings()(ids[None]).detach()
            embedded.requires_grad_()
            logits = model(inputs_embeds=embedded).logits[0, -1]
            logits.log_softmax(-1)[y].backward()
            expected = (embedded.grad * embedded).sum(-1)[0, : len(prompt)]
            columns = slice(width - len(prompt), width)
            torch.testing.assert_close(scores[row, t, columns], expected.detach())


@pytest.mark.parametrize(
    "name", ["FeatureAblation", "InputXGradient", "IntegratedGradients"]
)
def test_captum_entries_equal_captum_users_script(name, lm):
    r"""A Captum user's ``TextTokenInput`` of the prompt text (BOS included, as
    the tokenizer encodes it) gives the same rows as the entry fed its ids; for
    FeatureAblation in Captum's default token-by-token mode too (the entry runs
    the faster ``forward_in_tokens=False``: the same scores)."""
    model, tokenizer = lm
    baseline = baseline_token_id(tokenizer)
    inp = TextTokenInput("the cat sat on a mat", tokenizer, baselines=baseline)
    target = torch.tensor(tokenizer.encode("it was big", add_special_tokens=False))
    embeddings = model.get_input_embeddings()
    if name == "FeatureAblation":
        llm = LLMAttribution(FeatureAblation(model), tokenizer)
        expected = llm.attribute(inp, target=target, use_cached_outputs=False)
    elif name == "InputXGradient":
        llm = LLMGradientAttribution(
            LayerGradientXActivation(model, embeddings), tokenizer
        )
        expected = llm.attribute(inp, target=target)
    else:
        ig = LayerIntegratedGradients(model, embeddings)
        llm = LLMGradientAttribution(ig, tokenizer)
        expected = llm.attribute(inp, target=target, n_steps=IG_STEPS)
    ids = inp.to_model_input()  # [1, P]: <s> the cat sat on a mat
    assert ids[0, 0] == tokenizer.bos_token_id
    explain = METHODS[name].build_generation(model, tokenizer)
    scores = explain(ids, torch.ones_like(ids), target[None])
    torch.testing.assert_close(scores[0], expected.token_attr.double())


def test_a_classifier_gets_a_clear_error(lm):
    explain = METHODS["LogAt"].build_generation(tiny_classifier("gpt2"), lm[1])
    batch = continuation_batch((3,), (1,))
    with pytest.raises(Exception, match="causal"):
        explain(batch["input_ids"], batch["attention_mask"], batch["target"])
