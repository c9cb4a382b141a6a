#!/usr/bin/env python3
r"""Checks shared by the tests of LogAt, NormXLogit, CAT and AttCAT: every method
takes ``(input_ids, target, additional_forward_args)`` and returns
``[batch, pos]`` scores, so padding, state and dtype behaviour is tested once.
Also the naive (Att)CAT reference and the checks on hand-picked sentences for
the default sentiment model."""

from typing import Callable, List, Optional, Sequence

import pytest
import torch
from captum_ext import get_adapter
from captum_ext._utils.hooks import HookSet
from torch import nn, Tensor

from tests.helpers import (
    assert_same_state,
    is_causal,
    model_state,
    tiny_classifier,
    token_batch,
)

MethodFactory = Callable[[nn.Module], object]

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def attribute(method: object, batch: dict, **kwargs) -> Tensor:
    return method.attribute(  # type: ignore[attr-defined]
        batch["input_ids"], additional_forward_args=(batch["attention_mask"],), **kwargs
    )


def unpadded(batch: dict) -> List[Tensor]:
    r"""Each example's real tokens, ``[1, n]``, in row order."""
    return [
        ids[mask.bool()][None]
        for ids, mask in zip(batch["input_ids"], batch["attention_mask"])
    ]


def assert_batched_equals_loop(
    method: object, batch: dict, target: Optional[Sequence[int]] = None
) -> None:
    r"""The padded batch gives each example's unpadded scores on its real tokens
    (to 1e-5 of the largest score) and exactly zero on its padding."""
    scores = attribute(method, batch, target=target)
    valid = batch["attention_mask"].bool()
    assert scores.shape == batch["input_ids"].shape
    assert torch.all(scores[~valid] == 0)
    tolerance = 1e-5 * float(scores.abs().max())
    for row, ids in enumerate(unpadded(batch)):
        one = None if target is None else target[row]
        alone = method.attribute(ids, target=one)  # type: ignore[attr-defined]
        torch.testing.assert_close(
            scores[row][valid[row]], alone[0], atol=tolerance, rtol=0
        )


def assert_padding_invariant(
    factory: MethodFactory, family: str, dtype: torch.dtype = torch.float32
) -> None:
    r"""Right padding for every family; left padding where the model itself is
    invariant to it (RoPE is relative; GPT-2's absolute positions are not, so
    Hugging Face gives another output for a left-padded GPT-2 input).

    Gradient methods pass float64: their sums over d cancel to ~1e-3 of their
    terms after a LayerNorm, leaving float32 a relative error of ~1e-5."""
    right = token_batch((7, 4, 9), causal=is_causal(family))
    cases = [(tiny_classifier(family, dtype=dtype), right)]
    if family == "llama":
        # float32: in float64 Hugging Face's eager Llama turns the fully masked
        # attention rows of left padding into NaN.
        left = token_batch((7, 4, 9), pad_side="left", causal=True)
        cases.append((tiny_classifier(family), left))
    for model, batch in cases:
        assert_batched_equals_loop(factory(model), batch)
        assert_batched_equals_loop(factory(model), batch, target=[2, 0, 1])


def assert_state_kept(factory: MethodFactory, family: str = "bert") -> None:
    r"""Modes, grad flags, ``.grad`` and hooks are unchanged after a call, also
    when the forward pass raises halfway (a user hook failing in the last block)."""
    model = tiny_classifier(family).train()
    first = next(model.parameters())
    first.grad = torch.ones_like(first)
    batch = token_batch(causal=is_causal(family))
    method = factory(model)
    before = model_state(model)
    with pytest.warns(UserWarning, match="training mode"):
        attribute(method, batch)
    assert_same_state(before, model_state(model))

    def fail(*_args: object) -> None:
        raise RuntimeError("injected failure")

    adapter = get_adapter(model)
    with HookSet() as hooks:
        hooks.forward(adapter.hidden_state_module(adapter.num_layers), fail)
        with_hook = model_state(model)
        with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="injected"):
            attribute(method, batch)
        assert_same_state(with_hook, model_state(model))
    assert_same_state(before, model_state(model))


def assert_bfloat16_close(
    factory: MethodFactory, family: str, max_relative_error: float = 0.02
) -> None:
    r"""A bfloat16 model gives bfloat16 scores close to the float32 ones, in
    relative L2 error over the batch."""
    batch = token_batch(causal=is_causal(family))
    target = [0, 1, 2]
    exact = attribute(factory(tiny_classifier(family)), batch, target=target)
    model = tiny_classifier(family, dtype=torch.bfloat16)
    low = attribute(factory(model), batch, target=target)
    assert low.dtype == torch.bfloat16
    error = (low.float() - exact).norm() / exact.norm()
    assert error < max_relative_error


def assert_target_out_of_range(factory: MethodFactory) -> None:
    batch = token_batch()
    method = factory(tiny_classifier("bert", num_labels=3))
    with pytest.raises(IndexError, match="out of range"):
        attribute(method, batch, target=3)
    with pytest.raises(ValueError, match="2 entries"):
        attribute(method, batch, target=[0, 1])


def assert_cuda_matches_cpu(factory: MethodFactory, family: str) -> None:
    batch = token_batch(causal=is_causal(family))
    on_cpu = attribute(factory(tiny_classifier(family)), batch)
    model = tiny_classifier(family).cuda()
    on_gpu = attribute(factory(model), {k: v.cuda() for k, v in batch.items()})
    assert on_gpu.is_cuda
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, atol=1e-4, rtol=1e-4)


def assert_frozen_parameters_work(factory: MethodFactory, family: str) -> None:
    r"""Gradient methods give the same scores when no parameter requires grad."""
    model = tiny_classifier(family)
    batch = token_batch(causal=is_causal(family))
    expected = attribute(factory(model), batch)
    model.requires_grad_(False)
    torch.testing.assert_close(attribute(factory(model), batch), expected)
    assert not any(p.requires_grad for p in model.parameters())


def naive_cat(
    model: nn.Module,
    input_ids: Tensor,
    target: int,
    layers: str,
    use_attention: bool,
) -> Tensor:
    r"""(Att)CAT of one unpadded example ``[1, n]`` straight from the formula: one
    forward and one backward per layer, hidden states caught by a hook on the
    module that outputs them, attention averaged over heads and all query rows."""
    adapter = get_adapter(model)
    first = 0 if layers == "inputs" else 1
    total = torch.zeros(input_ids.shape[1], dtype=model.dtype)
    for block in range(adapter.num_layers):
        with HookSet() as hooks:
            caught = hooks.capture_output(adapter.hidden_state_module(first + block))
            out = model(input_ids=input_ids, output_attentions=use_attention)
        (grad,) = torch.autograd.grad(out.logits[0, target], caught[0])
        cat = (grad[0] * caught[0][0]).sum(-1)  # [n]
        alpha = out.attentions[block][0].mean(0).mean(0) if use_attention else 1.0
        total += (alpha * cat).detach()
    return total


def assert_equals_naive_cat(
    factory: MethodFactory, family: str, layers: str, use_attention: bool
) -> None:
    r"""The batched method equals :func:`naive_cat` on every example, in float64
    so that a 1e-6 relative tolerance is far above rounding."""
    model = tiny_classifier(family, dtype=torch.float64)
    batch = token_batch(causal=is_causal(family))
    target = [1, 0, 2]
    scores = attribute(factory(model), batch, target=target)
    tolerance = 1e-6 * float(scores.abs().max())
    valid = batch["attention_mask"].bool()
    for row, ids in enumerate(unpadded(batch)):
        expected = naive_cat(model, ids, target[row], layers, use_attention)
        torch.testing.assert_close(
            scores[row][valid[row]], expected, atol=tolerance, rtol=0
        )


def word_scores(method: object, tokenizer: object, sentence: str) -> dict:
    r"""``{word: score}`` of one sentence's alphabetic, non-special tokens
    (target None: the predicted class)."""
    encoded = tokenizer(sentence, return_tensors="pt")  # type: ignore[operator]
    scores = method.attribute(  # type: ignore[attr-defined]
        encoded["input_ids"], additional_forward_args=(encoded["attention_mask"],)
    )[0]
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])  # type: ignore
    special = set(tokenizer.all_special_tokens)  # type: ignore[attr-defined]
    return {
        token: float(score)
        for token, score in zip(tokens, scores)
        if token not in special and token.isalpha()
    }


def assert_sentence(
    factory: MethodFactory,
    sentiment_model: tuple,
    sentence: str,
    label: Optional[str] = None,
    positive: Sequence[str] = (),
    top: Sequence[str] = (),
    top_magnitude: Sequence[str] = (),
    same_sign: Sequence[str] = (),
) -> None:
    r"""What was checked by eye on the default sentiment model, kept to facts that
    held for several fine-tuning runs: the predicted ``label``; words scoring
    ``positive``ly (evidence for the predicted class); the best content word (by
    score, ``top``, or by magnitude, ``top_magnitude``) is one of those given;
    the ``same_sign`` words push the same way."""
    model, tokenizer = sentiment_model
    encoded = tokenizer(sentence, return_tensors="pt")
    predicted = int(model(**encoded).logits.argmax(-1))
    if label is not None:
        assert model.config.id2label[predicted] == label, sentence
    scores = word_scores(factory(model), tokenizer, sentence)
    context = (sentence, scores)
    assert all(scores[word] > 0 for word in positive), context
    if top:
        assert max(scores, key=scores.get) in top, context
    if top_magnitude:
        assert max(scores, key=lambda w: abs(scores[w])) in top_magnitude, context
    signs = {scores[word] > 0 for word in same_sign}
    assert len(signs) <= 1, context


GORGEOUS = "a gorgeous, moving film"
DULL = "a dull, lifeless mess"
NOT_BAD = "It's not bad at all."  # the predicted label varies between runs
