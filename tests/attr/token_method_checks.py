#!/usr/bin/env python3
r"""Helpers of the per-method tests of LogAt, NormXLogit, CAT and AttCAT: the
naive (Att)CAT reference and the checks on hand-picked sentences for the default
sentiment model. Padding, batch, state, dtype and device behaviour, shared by
every method, is checked once, in ``tests/test_matrix.py``."""

from typing import Any, Callable, cast, Dict, List, Optional, Protocol, Sequence, Tuple

import torch
from captum_ext import get_adapter
from captum_ext._utils.hooks import HookSet
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tests.helpers import is_causal, tiny_classifier, token_batch


class TokenMethod(Protocol):
    r"""What these checks call of a method: Captum's ``attribute``, token ids
    first, options by keyword (each method has its own)."""

    def attribute(self, *args: Any, **kwargs: Any) -> Tensor: ...


# A method's class (or a partial of it): model -> method
MethodFactory = Callable[[PreTrainedModel], TokenMethod]
# (model, tokenizer) of the default sentiment model
SentimentModel = Tuple[PreTrainedModel, PreTrainedTokenizerBase]


def attribute(method: TokenMethod, batch: Dict[str, Tensor], **kwargs: Any) -> Tensor:
    return method.attribute(
        batch["input_ids"], additional_forward_args=(batch["attention_mask"],), **kwargs
    )


def unpadded(batch: Dict[str, Tensor]) -> List[Tensor]:
    r"""Each example's real tokens, ``[1, n]``, in row order."""
    return [
        ids[mask.bool()][None]
        for ids, mask in zip(batch["input_ids"], batch["attention_mask"])
    ]


def naive_cat(
    model: PreTrainedModel,
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


def word_scores(
    method: TokenMethod, tokenizer: PreTrainedTokenizerBase, sentence: str
) -> Dict[str, float]:
    r"""``{word: score}`` of one sentence's alphabetic, non-special tokens
    (target None: the predicted class)."""
    encoded = tokenizer(sentence, return_tensors="pt")
    scores = method.attribute(
        encoded["input_ids"], additional_forward_args=(encoded["attention_mask"],)
    )[0]
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
    special = set(tokenizer.all_special_tokens)
    return {
        token: float(score)
        for token, score in zip(tokens, scores)
        if token not in special and token.isalpha()
    }


def assert_sentence(
    factory: MethodFactory,
    sentiment_model: SentimentModel,
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
        # transformers types id2label by what a config accepts (also None or str
        # keys); a loaded config's keys are ints.
        id2label = cast(Dict[int, str], model.config.id2label)
        assert id2label[predicted] == label, sentence
    scores = word_scores(factory(model), tokenizer, sentence)
    context = (sentence, scores)
    assert all(scores[word] > 0 for word in positive), context
    if top:
        assert max(scores, key=scores.__getitem__) in top, context
    if top_magnitude:
        assert max(scores, key=lambda w: abs(scores[w])) in top_magnitude, context
    signs = {scores[word] > 0 for word in same_sign}
    assert len(signs) <= 1, context


# The sentences checked by eye, with the label the default model predicts (None:
# it varies between fine-tuning runs).
CHECKED_SENTENCES = {
    "gorgeous": ("a gorgeous, moving film", "positive"),
    "dull": ("a dull, lifeless mess", "negative"),
    "not_bad": ("It's not bad at all.", None),
}


def assert_checked_sentences(
    factory: MethodFactory,
    sentiment_model: SentimentModel,
    **expectations: Dict[str, Any],
) -> None:
    r""":func:`assert_sentence` on each sentence of :data:`CHECKED_SENTENCES`
    named in ``expectations`` (``gorgeous=dict(positive=..., top=...)``), with
    that sentence's label."""
    for name, expected in expectations.items():
        sentence, label = CHECKED_SENTENCES[name]
        assert_sentence(factory, sentiment_model, sentence, label, **expected)
