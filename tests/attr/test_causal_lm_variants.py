#!/usr/bin/env python3
r"""The causal-LM variants of the four methods (docs/generation.rst, "Choosing
the causal-LM definitions"): AttCAT's ``alpha``, CAT's and AttCAT's
``objective``, and ``score_predicting_position`` of LogAt, NormXLogit and
GlobEnc. Each keeps the consistency law (naive per-example, per-target loop),
matches a hand-made reference on float64 models, and reads attention the same
with sdpa as with eager."""

from functools import partial
from typing import Any, Callable, Dict, List, Tuple

import pytest
import torch
from captum_ext.attr import AttCAT, CAT, GlobEnc, LogAt, NormXLogit
from torch import nn, Tensor

from tests.helpers import (
    continuation_batch,
    eager_one_at_a_time,
    first_norms,
    outputs_of,
    sdpa_and_eager,
    tiny_causal_lm,
    tiny_classifier,
)

# name -> (method on a model, attribute keywords)
VARIANTS: Dict[str, Tuple[Callable[[nn.Module], Any], Dict[str, str]]] = {
    "AttCAT received": (lambda m: AttCAT(m, alpha="received"), {}),
    "AttCAT row": (lambda m: AttCAT(m, alpha="row"), {}),
    "AttCAT rollout": (lambda m: AttCAT(m, alpha="rollout"), {}),
    "AttCAT rollout logit": (
        lambda m: AttCAT(m, alpha="rollout", objective="logit"),
        {},
    ),
    "AttCAT outputs row": (lambda m: AttCAT(m, layers="outputs", alpha="row"), {}),
    "CAT logit": (lambda m: CAT(m, layers="inputs", objective="logit"), {}),
    "CAT attention inputs": (lambda m: CAT(m, layers="attention_inputs"), {}),
    "AttCAT attention inputs": (lambda m: AttCAT(m, layers="attention_inputs"), {}),
}
# LogAt, NormXLogit and GlobEnc (and its "N") with and without p_t's own term.
OWN_TERM = {
    "LogAt": (LogAt, {}),
    "NormXLogit": (NormXLogit, {}),
    "GlobEnc": (GlobEnc, {}),
    "GlobEnc N": (GlobEnc, {"variant": "N"}),
}
for _name, (_method, _options) in OWN_TERM.items():
    for _own in (True, False):
        VARIANTS[f"{_name} {'with' if _own else 'without'} p_t"] = (
            partial(_method, score_predicting_position=_own),
            _options,
        )


def _run(method, options, model, batch, **more):
    return method.attribute(
        batch["input_ids"],
        target=batch["target"],
        additional_forward_args=(batch["attention_mask"],),
        **options,
        **more,
    )


def _variant(name, model, batch, **more):
    build, options = VARIANTS[name]
    return _run(build(model), options, model, batch, **more)


def _alone(ids, target, step):
    r"""One unpadded example: prompt + y_<t with the single target y_t."""
    context = torch.cat([ids, target[:step]])[None]
    return dict(
        input_ids=context,
        attention_mask=torch.ones_like(context),
        target=target[None, step : step + 1],
    )


@pytest.mark.parametrize("name", VARIANTS)
def test_naive_loop_per_example_and_target_equals_batched(name):
    r"""Row t of example b equals the variant run on example b alone, unpadded,
    on prompt + y_<t with the single target y_t (float64 GPT-2: left padding,
    ragged continuations and the consistency law)."""
    model, batch = tiny_causal_lm("gpt2", dtype=torch.float64), continuation_batch()
    scores = _variant(name, model, batch, attribute_generated=True)
    prompt = batch["input_ids"].shape[1]
    for row in range(3):
        keep = batch["attention_mask"][row].bool()
        ids, target = batch["input_ids"][row, keep], batch["target"][row]
        for step in range(int((target >= 0).sum())):
            single = _variant(name, model, _alone(ids, target, step))[0, 0]
            batched = scores[row, step, prompt - len(ids) : prompt + step]
            torch.testing.assert_close(batched, single, atol=1e-9, rtol=1e-6)


def _one_example(family, seed=3):
    model = tiny_causal_lm(family, dtype=torch.float64)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 90, (1, 9), generator=generator)
    target = torch.randint(5, 90, (1, 3), generator=generator)
    batch = dict(input_ids=ids, attention_mask=torch.ones_like(ids), target=target)
    return model, batch


def _attention_weights(model, batch, alpha):
    r"""``[T, L, P + T - 1]``: alpha from the model's own eager maps, by
    explicit products (row) or matrix products from the top (rollout)."""
    joined = torch.cat([batch["input_ids"], batch["target"][:, :-1]], 1)
    maps = [a[0].mean(0) for a in model(joined, output_attentions=True).attentions]
    rows = batch["input_ids"].shape[1] - 1 + torch.arange(batch["target"].shape[1])
    per_layer: List[Tensor] = []
    product = None
    for mean in reversed(maps):  # [pos, pos], last layer first
        product = mean if (product is None or alpha == "row") else product @ mean
        per_layer.insert(0, product[rows])  # [T, pos]
    return torch.stack(per_layer, 1)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("alpha", ["row", "rollout"])
@pytest.mark.parametrize("objective", ["log_prob", "logit"])
def test_attcat_alpha_is_the_predicting_rows_of_the_eager_maps(
    family, alpha, objective
):
    r"""AttCAT = sum_l alpha_t^l * CAT_t^l with alpha the predicting position's
    row of A^l (row) or of A^L ... A^l (rollout), from the eager maps."""
    model, batch = _one_example(family)
    cat = CAT(model, objective=objective)
    layers = _run(cat, {}, model, batch, return_layers=True, attribute_generated=True)
    width = layers.shape[-1]  # P + T: y_T's column is zero
    weights = _attention_weights(model, batch, alpha)  # [T, L, P + T - 1]
    expected = (layers[0, :, :, : width - 1] * weights).sum(1)
    attcat = AttCAT(model, alpha=alpha, objective=objective)
    scores = _run(attcat, {}, model, batch, attribute_generated=True)[0]
    torch.testing.assert_close(scores[:, : width - 1], expected, rtol=1e-7, atol=1e-12)
    assert not scores[:, width - 1].any()
    if alpha == "rollout":  # the default
        default = _run(AttCAT(model, objective=objective), {}, model, batch)[0]
        torch.testing.assert_close(scores[:, : default.shape[-1]], default)
    # The variants differ from the earlier default (the test can fail).
    received = AttCAT(model, objective=objective, alpha="received")
    before = _run(received, {}, model, batch)[0]
    assert not torch.allclose(scores[:, : before.shape[-1]], before)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_cat_logit_is_gradient_of_the_logit_times_hidden_state(family):
    model, batch = _one_example(family)
    prompt, steps = batch["input_ids"].shape[1], batch["target"].shape[1]
    joined = torch.cat([batch["input_ids"], batch["target"][:, :-1]], 1)
    out = model(joined, output_hidden_states=True)
    hidden = out.hidden_states[:-1]  # block inputs
    expected = []
    for step in range(steps):
        logit = out.logits[0, prompt - 1 + step, batch["target"][0, step]]
        grads = torch.autograd.grad(logit, hidden, retain_graph=True)
        expected.append(sum((g * h).sum(-1)[0] for g, h in zip(grads, hidden)))
    scores = _variant("CAT logit", model, batch, attribute_generated=True)[0]
    for step in range(steps):
        end = prompt + step
        torch.testing.assert_close(scores[step, :end], expected[step][:end])
        assert not scores[step, end:].any()
    log_prob = _run(CAT(model), {}, model, batch)[0]
    assert not torch.allclose(scores[:, :prompt], log_prob)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_attention_inputs_are_gradient_times_each_first_norms_output(family):
    model, batch = _one_example(family)
    prompt, steps = batch["input_ids"].shape[1], batch["target"].shape[1]
    joined = torch.cat([batch["input_ids"], batch["target"][:, :-1]], 1)
    with outputs_of(first_norms(model)) as reads:
        out = model(joined)
    layers = []
    for step in range(steps):
        log_p = out.logits[0, prompt - 1 + step].log_softmax(-1)
        grads = torch.autograd.grad(
            log_p[batch["target"][0, step]], reads, retain_graph=True
        )
        layers.append(torch.stack([(g * r).sum(-1)[0] for g, r in zip(grads, reads)]))
    cat = CAT(model, layers="attention_inputs")
    scores = _run(cat, {}, model, batch, attribute_generated=True, return_layers=True)
    for step in range(steps):
        end = prompt + step
        torch.testing.assert_close(scores[0, step, :, :end], layers[step][:, :end])
        assert not scores[0, step, :, end:].any()


def test_the_residual_stream_is_nearly_blind_before_the_last_blocks_norm():
    r"""Why ``attention_inputs`` exists: the last block's input reaches the
    predicting position only through that block's RMSNorm, invariant to its
    scale up to eps, so gradient x input there is about eps / mean(h^2) of
    the norm output's score at every other position."""
    model, batch = _one_example("llama")
    prompt = batch["input_ids"].shape[1]
    inputs = _run(CAT(model, layers="inputs"), {}, model, batch, return_layers=True)
    reads = _run(
        CAT(model, layers="attention_inputs"), {}, model, batch, return_layers=True
    )
    last = (slice(None), slice(None), -1, slice(0, prompt - 1))  # not p_1
    assert inputs[last].abs().max() < 1e-2 * reads[last].abs().max()


def test_cat_logit_with_a_contrast_is_the_difference_of_the_two_targets():
    model, batch = _one_example("llama")
    batch["target"] = batch["target"][:, :1]  # the foil's run reads no y_<t
    foil = (batch["target"] + 7) % 90
    cat = CAT(model, objective="logit")
    both = _run(cat, {}, model, batch, contrast_target=foil)
    other = _run(cat, {}, model, dict(batch, target=foil))
    torch.testing.assert_close(both, _run(cat, {}, model, batch) - other)


@pytest.mark.parametrize("name", OWN_TERM)
def test_without_p_t_is_with_p_t_with_the_predicting_position_zeroed(name):
    # GPT-2: Llama's eager mask makes left padding NaN in float64.
    model, batch = tiny_causal_lm("gpt2", dtype=torch.float64), continuation_batch()
    build, options = OWN_TERM[name]
    both = [
        _run(
            build(model, score_predicting_position=own),
            options,
            model,
            batch,
            attribute_generated=True,
        )
        for own in (True, False)
    ]
    default = _run(build(model), options, model, batch, attribute_generated=True)
    prompt, has = batch["input_ids"].shape[1], batch["target"] >= 0
    own = torch.zeros_like(both[0], dtype=torch.bool)
    for step in range(own.shape[1]):
        own[:, step, prompt - 1 + step] = True
    assert (both[0][own & has[..., None]] != 0).all()
    torch.testing.assert_close(both[1], both[0].masked_fill(own, 0), rtol=0, atol=0)
    torch.testing.assert_close(default, both[1], rtol=0, atol=0)  # the default


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("alpha", ["received", "row", "rollout"])
def test_attcat_alpha_with_sdpa_equals_eager(family, alpha, block_elements):
    r"""sdpa's attention recomputed in blocks of query rows gives the eager
    maps' alpha (the eager reference one unpadded example at a time). alpha is
    read as AttCAT's per-layer scores over CAT's of the same model: the two
    implementations' gradients differ by rounding (Llama's RMSNorm computes in
    float32), their attention must not."""
    sdpa, eager = sdpa_and_eager(family, causal_lm=True)
    batch = continuation_batch()

    def alpha_of(model, one):
        options = dict(return_layers=True, attribute_generated=True)
        cat = _run(CAT(model), {}, model, one, **options)
        attcat = _run(AttCAT(model, alpha=alpha), {}, model, one, **options)
        return torch.where(cat != 0, attcat / cat, 0)  # [batch, T, L, width]

    got = alpha_of(sdpa, batch)
    torch.testing.assert_close(
        got,
        eager_one_at_a_time(partial(alpha_of, eager), batch),
        rtol=1e-6,
        atol=1e-12,
    )
    assert (got > 0).sum() > got.numel() / 3  # a real comparison


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda m: AttCAT(m, alpha="column"), "alpha must be one of"),
        (lambda m: CAT(m, objective="prob"), "objective must be one of"),
        (lambda m: AttCAT(m, objective="prob"), "objective must be one of"),
    ],
)
def test_unknown_options_are_refused(build, message):
    with pytest.raises(ValueError, match=message):
        build(tiny_causal_lm("gpt2"))


def test_the_default_layers_are_attention_inputs_on_a_causal_lm_only():
    model, batch = _one_example("llama")
    default = _run(CAT(model), {}, model, batch)
    chosen = _run(CAT(model, layers="attention_inputs"), {}, model, batch)
    assert torch.equal(default, chosen)
    assert not torch.allclose(
        default, _run(CAT(model, layers="inputs"), {}, model, batch)
    )
    assert CAT(tiny_classifier("gpt2")).layers == "inputs"  # the authors' reading
