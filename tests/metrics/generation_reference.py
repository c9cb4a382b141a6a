#!/usr/bin/env python3
r"""Naive references for the faithfulness metrics of generated text: one
unpadded example, one target token and one perturbed prompt at a time, each
log-probability from its own forward pass over prompt + y_<t (default positions,
no mask), plus the shared padding / chunking / bad-input checks."""

import dataclasses
from typing import Any, Callable, Dict, Optional

import pytest
import torch
from captum_ext import causal_lm_forward
from captum_ext._utils.teacher_forcing import IGNORE_INDEX
from captum_ext.metrics import get_protocol, PerturbationProtocol, TokenOptions
from captum_ext.metrics._utils.soft_erasure import retention_generator
from torch import nn, Tensor
from transformers import PreTrainedModel

from tests.attr.contract_method import GradientXEmbedding
from tests.helpers import continuation_batch, tiny_causal_lm, tiny_classifier

BOS = 1
TOKENS = TokenOptions(pad_token_id=0, special_token_ids=[BOS])
LEVELS = (0.25, 0.5, 1.0)


def hard_protocol(metric_name: str) -> PerturbationProtocol:
    r"""The metric's default protocol on :data:`LEVELS` (what :func:`naive_hard`
    averages over)."""
    protocol = get_protocol(metric_name)
    assert isinstance(protocol, PerturbationProtocol)
    return dataclasses.replace(protocol, levels=LEVELS)


def bos_case(extra_padding: int = 0) -> Dict[str, Any]:
    r"""A float64 GPT-2, left-padded prompts starting with BOS (never removed),
    their continuations and gradient x input attributions ``[batch, T, P]``."""
    model = tiny_causal_lm("gpt2", dtype=torch.float64)
    batch = continuation_batch(prompt_lengths=(5, 3, 7), target_lengths=(3, 1, 2))
    ids, mask = batch["input_ids"], batch["attention_mask"]
    ids = torch.nn.functional.pad(ids, (extra_padding, 0))
    mask = torch.nn.functional.pad(mask, (extra_padding, 0))
    first = mask.argmax(1)
    ids[torch.arange(len(ids)), first] = BOS
    attributions = GradientXEmbedding(model).attribute(
        ids, target=batch["target"], additional_forward_args=(mask,)
    )
    return dict(
        model=model, ids=ids, mask=mask, target=batch["target"], attr=attributions
    )


def _examples(case: Dict[str, Any]):
    ids, mask, target = case["ids"], case["mask"], case["target"]
    for b in range(len(ids)):
        valid = mask[b].bool()
        steps = target[b][target[b] != IGNORE_INDEX]
        yield b, ids[b][valid], steps, valid


def log_prob(
    model: PreTrainedModel, prompt: Tensor, steps: Tensor, t: int, factor=None
) -> float:
    r"""``log p(y_t | prompt, y_<t)`` of one unpadded example; ``factor`` ``[n,
    d]`` scales the prompt's word embeddings."""
    ids = torch.cat([prompt, steps[:t]])[None]
    embeds = model.get_input_embeddings()(ids)
    if factor is not None:
        embeds = torch.cat(
            [embeds[:, : len(prompt)] * factor, embeds[:, len(prompt) :]], 1
        )
    with torch.no_grad():
        logits = model(inputs_embeds=embeds).logits[0, -1].double()
    return float(logits.log_softmax(-1)[steps[t]])


def naive_hard(
    case: Dict[str, Any],
    keep_top: bool,
    value: Callable[[float, float], float],
    shared: bool = False,
    replace_id: Optional[int] = None,
) -> Tensor:
    r"""``[batch, T]``: mean over :data:`LEVELS` of ``value(log p, log p~)``,
    deleting (or keeping) the top round(g * n) non-BOS prompt tokens, or
    replacing them by ``replace_id``."""
    model, attr = case["model"], case["attr"]
    out = torch.full(case["target"].shape, float("nan"), dtype=torch.float64)
    for b, prompt, steps, valid in _examples(case):
        for t in range(len(steps)):
            row = attr[b].sum(0) if shared else attr[b, t]
            scores = row[valid][1:]  # the BOS is never ranked
            order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
            base = log_prob(model, prompt, steps, t)
            values = []
            for g in LEVELS:
                k = int(torch.round(torch.tensor(g * len(scores), dtype=torch.float64)))
                top = set(order[:k])
                kept = [i for i in range(len(scores)) if (i in top) == keep_top]
                if replace_id is None:
                    reduced = torch.cat([prompt[:1], prompt[1:][kept]])
                else:
                    reduced = prompt.clone()
                    dropped = [i + 1 for i in range(len(scores)) if i not in kept]
                    reduced[dropped] = replace_id
                values.append(value(base, log_prob(model, reduced, steps, t)))
            out[b, t] = sum(values) / len(values)
    return out


def naive_soft(
    case: Dict[str, Any],
    keep_important: bool,
    value: Callable[[float, float, float], float],
    n_samples: int,
    seed: int,
) -> Tensor:
    r"""``[batch, T]``: mean over draws of ``value(p, p', p_empty)``, each
    element of a content token's embedding kept with probability s (or 1 - s)."""
    model, attr = case["model"], case["attr"]
    d = model.config.n_embd
    steps_per_row = attr.shape[1]
    out = torch.full(case["target"].shape, float("nan"), dtype=torch.float64)
    for b, prompt, steps, valid in _examples(case):
        n = len(prompt)
        empty = torch.zeros(n, d, dtype=torch.float64)
        empty[0] = 1  # the BOS stays
        for t in range(len(steps)):
            content = attr[b, t][valid][1:]
            low, high = content.min(), content.max()
            s = (content - low) / (high - low)
            keep = torch.cat([torch.ones(1), s if keep_important else 1 - s])
            p = log_prob(model, prompt, steps, t)
            p_empty = log_prob(model, prompt, steps, t, empty)
            values = []
            for j in range(n_samples):
                generator = retention_generator(seed, b * steps_per_row + t, j)
                uniforms = torch.rand((n, d), generator=generator)
                factor = (uniforms < keep[:, None]).double()
                p_soft = log_prob(model, prompt, steps, t, factor)
                values.append(value(p, p_soft, p_empty))
            out[b, t] = sum(values) / n_samples
    return out


def run(metric: Callable, case: Dict[str, Any], **options: Any) -> Any:
    r"""``metric`` on ``case`` through :func:`causal_lm_forward` (or
    ``forward_func``) with :data:`TOKENS` (or ``tokens``)."""
    forward_func = options.pop("forward_func", None)
    return metric(
        forward_func or causal_lm_forward(case["model"]),
        case["ids"],
        options.pop("attributions", case["attr"]),
        case["target"],
        (case["mask"],),
        tokens=options.pop("tokens", TOKENS),
        **options,
    )


def check_scores(got: Any, expected: Tensor) -> None:
    r"""The metric's ``score`` equals the naive ``[batch, T]`` reference (NaN
    where it is NaN)."""
    torch.testing.assert_close(
        got.score.double(), expected, equal_nan=True, rtol=0, atol=1e-6
    )


def check_hard_equals_naive(
    metric: Callable,
    keep_top: bool,
    value: Callable[[float, float], float],
    shared: bool = False,
) -> "tuple[Any, Tensor]":
    r"""A perturbation-curve metric with its protocol on :data:`LEVELS` equals
    :func:`naive_hard` (``shared``: one ranking for all targets); returns its
    result and the reference."""
    case = bos_case()
    attributions = case["attr"].sum(1) if shared else case["attr"]
    preset = hard_protocol(metric.__name__)
    got = run(metric, case, attributions=attributions, preset=preset)
    expected = naive_hard(case, keep_top=keep_top, value=value, shared=shared)
    check_scores(got, expected)
    return got, expected


def check_soft_equals_naive(
    metric: Callable,
    keep_important: bool,
    value: Callable[[float, float, float], float],
) -> None:
    r"""A soft metric equals :func:`naive_soft` with two draws, some finite."""
    case = bos_case()
    got = run(metric, case, n_samples=2, seed=3)
    expected = naive_soft(case, keep_important, value, n_samples=2, seed=3)
    assert bool(expected.isfinite().any())
    check_scores(got, expected)


def check_invariances(metric: Callable, **options) -> None:
    r"""More left padding and chunks of 1 or 2 rows change nothing."""
    expected = run(metric, bos_case(), **options)
    for case, chunk in (
        (bos_case(extra_padding=3), None),
        (bos_case(), 1),
        (bos_case(), 2),
    ):
        got = run(metric, case, internal_batch_size=chunk, **options)
        torch.testing.assert_close(
            got.score, expected.score, equal_nan=True, rtol=0, atol=1e-6
        )
        torch.testing.assert_close(
            got.curve, expected.curve, equal_nan=True, rtol=0, atol=1e-6
        )
    has_target = case["target"] != IGNORE_INDEX
    assert bool(expected.score[~has_target].isnan().all())


def check_bad_inputs(metric: Callable, **options) -> None:
    case = bos_case()
    with pytest.raises(ValueError, match=r"\[batch, T, P\]"):
        run(metric, case, attributions=case["attr"][:, :1, :3], **options)
    with pytest.raises(ValueError, match="attribute_generated"):
        padded = torch.nn.functional.pad(case["attr"], (0, case["target"].shape[1]))
        run(metric, case, attributions=padded, **options)
    with pytest.raises(ValueError, match="padded on the right"):
        right = dict(case, ids=case["ids"].flip(1), mask=case["mask"].flip(1))
        run(metric, right, **options)
    with pytest.raises(ValueError, match="no target token"):
        run(
            metric,
            dict(case, target=torch.full_like(case["target"], IGNORE_INDEX)),
            **options,
        )
    with pytest.raises(ValueError, match=r"\[batch, T, P\]"):
        run(metric, case, attributions=(case["attr"][:, :1, :3],), **options)
    with pytest.raises(ValueError, match="must hold one tensor"):
        run(metric, case, attributions=(case["attr"], case["attr"]), **options)
    for family in ("gpt2", "llama"):  # the model itself, not its logits
        with pytest.raises(TypeError, match="causal_lm_forward"):
            run(metric, case, forward_func=tiny_causal_lm(family), **options)
    classifier = tiny_classifier("gpt2")
    # A classifier's logits (the soft metrics refuse a plain function first).
    message = r"\[batch, pos, vocab\]|causal_lm_forward"
    with pytest.raises((ValueError, TypeError), match=message):
        run(metric, case, forward_func=logits_of(classifier), tokens=None, **options)


def logits_of(model: nn.Module) -> Callable[[Tensor, Tensor], Tensor]:
    r"""A plain ``f(ids, mask) -> logits``, not :func:`causal_lm_forward`."""
    return lambda ids, mask: model(input_ids=ids, attention_mask=mask).logits


def check_nothing_to_perturb_is_nan(metric: Callable, **options) -> None:
    r"""A prompt made only of special tokens scores NaN at every target (no
    token to perturb: not a perfect explanation); the others are unchanged."""
    case = bos_case()
    expected = run(metric, case, **options)
    only_bos = case["ids"].clone()
    only_bos[1][case["mask"][1].bool()] = BOS
    got = run(metric, dict(case, ids=only_bos), **options)
    assert bool(got.score[1].isnan().all()) and bool(got.sequence[1].isnan())
    for row in (0, 2):
        torch.testing.assert_close(
            got.score[row], expected.score[row], equal_nan=True, rtol=0, atol=0
        )
