#!/usr/bin/env python3
r"""The documented calls of the public ``attribute`` methods, written as a
caller writes them: the project's mypy run (``tests/test_style.py``) checks
them against the signatures and overloads, and these tests check that what the
types say is what runs."""

from typing import List

import pytest
import torch
from captum.attr import TextTokenInput
from captum_ext.attr import AttCAT, CAT, LLMTokenAttribution
from torch import Tensor

from tests.attr.llm_fixtures import tiny_lm_tokenizer
from tests.helpers import (
    continuation_batch,
    tiny_causal_lm,
    tiny_classifier,
    token_batch,
)


def test_options_are_keyword_only_after_captums_three_arguments():
    batch = token_batch()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    cat = CAT(tiny_classifier("bert", dtype=torch.float64))
    summed = cat.attribute(ids, None, (mask,))  # [batch, pos]
    with pytest.raises(TypeError, match="positional"):
        cat.attribute(ids, None, (mask,), True)
    layers = cat.attribute(ids, None, (mask,), return_layers=True)  # [b, L, pos]
    assert torch.equal(layers.sum(1), summed)
    for return_layers in (False, True):
        scores: Tensor = cat.attribute(
            ids, additional_forward_args=(mask,), return_layers=return_layers
        )
        assert torch.equal(scores, layers if return_layers else summed)


def test_contrast_target_explains_the_difference_of_two_targets():
    batch = continuation_batch()
    cat = CAT(tiny_causal_lm("gpt2", dtype=torch.float64))
    ids, target, mask = batch["input_ids"], batch["target"], batch["attention_mask"]
    foil = target.masked_fill(target != -100, 7)
    contrasted = cat.attribute(
        ids, target=target, additional_forward_args=(mask,), contrast_target=foil
    )  # [batch, T, P]
    alone = cat.attribute(ids, target=target, additional_forward_args=(mask,))
    against = cat.attribute(ids, target=foil, additional_forward_args=(mask,))
    # Gradient x hidden state is linear in the differentiated log-probability;
    # row 0 reads the prompt alone, whichever continuation follows it.
    difference = alone[:, 0] - against[:, 0]
    torch.testing.assert_close(contrasted[:, 0], difference, rtol=1e-9, atol=1e-12)


def test_one_result_per_prompt_or_chat_and_a_list_per_list_of_prompts():
    tokenizer = tiny_lm_tokenizer()
    llm_attr = LLMTokenAttribution(
        AttCAT(tiny_causal_lm("gpt2", dtype=torch.float64)), tokenizer
    )
    prompt = TextTokenInput("the cat sat", tokenizer)
    one = llm_attr.attribute(prompt, target="it was big")
    assert one.token_attr.shape[0] == 3
    chat = [{"role": "user", "content": "the cat sat"}]
    assert llm_attr.attribute(chat, target="blue").token_attr.shape[0] == 1
    prompts: List[str] = ["the cat sat", "a dog ran"]
    many = llm_attr.attribute(prompts, target=["it was big", "blue"])
    assert [result.token_attr.shape[0] for result in many] == [3, 1]
    torch.testing.assert_close(many[0].seq_attr, one.seq_attr)
