#!/usr/bin/env python3
r"""Decoded layer attribution: against a literal Algorithm 1, with every kind of
Captum layer method, and the one-pass sweep over all layers."""

import copy
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Type

import pytest
import torch
from captum.attr import (
    LayerAttribution,
    LayerConductance,
    LayerDeepLift,
    LayerGradientShap,
    LayerGradientXActivation,
    LayerIntegratedGradients,
)
from captum_ext._utils.model_forward import classifier_forward
from captum_ext._utils.token_batch import TokenBatch
from captum_ext.adapters import get_adapter
from captum_ext.attr import (
    DecodedLayerAttribution,
    DecodedLayerGradCam,
    EmbeddingDecoder,
)
from captum_ext.attr._utils.decoded_aggregation import _with_relu, aggregate
from captum_ext.attr._utils.decoded_probabilities import (
    decoded_input_probabilities,
    decoded_token_sums,
)
from torch import nn, Tensor
from transformers import BertForSequenceClassification

from tests.helpers import (
    assert_same_state,
    model_state,
    PAD_ID,
    tiny_classifier,
    tiny_masked_lm,
    token_batch,
)

RELUS = ("outside", "inside", None)
TAUS = (None, 1, 2, 5)


@pytest.fixture(scope="module")
def model() -> nn.Module:
    return tiny_classifier("bert")


@pytest.fixture(scope="module")
def decoder() -> nn.Module:
    # A pre-trained-style MLM head (random here) over the same 99-token vocab.
    head = get_adapter(tiny_masked_lm("bert", seed=1)).mlm_head()
    assert head is not None  # for mypy: a masked LM has its head
    return head


def _batch_with_repeats() -> Dict[str, Tensor]:
    batch = token_batch((9, 6, 8), seed=3)
    ids = batch["input_ids"]
    ids[0, 4] = ids[0, 2]  # a repeated content token
    ids[0, 6] = ids[0, 2]
    ids[1, 3] = ids[1, 1]
    return batch


def _naive(
    model: nn.Module,
    decoder: nn.Module,
    layer: int,
    batch: dict,
    tau: Optional[int],
    relu: Optional[str],
) -> Tensor:
    r"""Algorithm 1 of Hou & Castanon, literally: per example, loops over the
    unique tokens i and the real positions j."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        result = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    y_hat = result.logits.argmax(-1)  # predicted class, pre-softmax score
    module = get_adapter(model).hidden_state_module(layer)
    alpha = (
        LayerGradientXActivation(classifier_forward(model), module)
        .attribute(ids, target=y_hat, additional_forward_args=(mask,))
        .detach()
    )
    with torch.no_grad():
        p_hat = decoder(result.hidden_states[layer]).softmax(-1)  # [batch, pos, V]
    out = torch.zeros(ids.shape)
    for b in range(len(ids)):
        real = [j for j in range(ids.shape[1]) if mask[b, j]]
        a = {j: float(alpha[b, j].sum()) for j in real}  # a_j = sum_k alpha[j, k]
        tokens = {j: int(ids[b, j]) for j in real}
        unique = sorted(set(tokens.values()))
        t = len(unique)
        d_hat = [{j: float(p_hat[b, j, unique[i]]) for j in real} for i in range(t)]
        m = [{j: 0.0 for j in real} for _ in range(t)]
        for j in real:
            column = sorted(range(t), key=lambda i: -d_hat[i][j])
            for i in column[: t if tau is None else tau]:
                m[i][j] = 1.0
        scores = []
        for i in range(t):
            s = 0.0
            for j in real:
                a_j = max(a[j], 0.0) if relu == "inside" else a[j]
                s += m[i][j] * d_hat[i][j] * a_j
            scores.append(max(s, 0.0) if relu == "outside" else s)
        for j in real:
            out[b, j] = scores[unique.index(tokens[j])]
    return out


# Right padding only: an encoder reads position 0, so left-padded input is refused
# (tests/test_bad_inputs.py).
@pytest.mark.parametrize("layer", [0, 1, 2])
@pytest.mark.parametrize("relu", RELUS)
def test_equals_literal_algorithm_1(
    model: nn.Module, decoder: nn.Module, layer: int, relu: Optional[str]
) -> None:
    batch = _batch_with_repeats()
    method = DecodedLayerGradCam(model, layer, decoder)
    for tau in TAUS:
        got = method.attribute(
            batch["input_ids"],
            additional_forward_args=batch["attention_mask"],
            tau=tau,
            relu=relu,
        )
        expected = _naive(model, decoder, layer, batch, tau, relu)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-7)


def test_top_tau_and_relu_change_the_scores(
    model: nn.Module, decoder: nn.Module
) -> None:
    # The literal comparison is only meaningful if tau and relu matter here.
    batch = _batch_with_repeats()
    method = DecodedLayerGradCam(model, 1, decoder)
    args = (batch["input_ids"], None, batch["attention_mask"])
    signed = method.attribute(*args, relu=None)
    assert (signed < 0).any() and (signed > 0).any()
    assert not torch.allclose(signed, method.attribute(*args, tau=1, relu=None))
    inside = method.attribute(*args, relu="inside")
    assert not torch.allclose(inside, method.attribute(*args, relu="outside"))


def test_repeated_tokens_share_a_score_and_pads_are_zero(
    model: nn.Module, decoder: nn.Module
) -> None:
    batch = _batch_with_repeats()
    scores = DecodedLayerGradCam(model, 1, decoder).attribute(
        batch["input_ids"], additional_forward_args=batch["attention_mask"], relu=None
    )
    assert scores[0, 2] == scores[0, 4] == scores[0, 6]
    assert scores[1, 1] == scores[1, 3]
    pads = batch["attention_mask"] == 0
    assert pads.any() and (scores[pads] == 0).all()


@pytest.mark.parametrize("tau", [None, 2])
def test_batch_and_padding_invariance(
    model: nn.Module, decoder: nn.Module, tau: Optional[int]
) -> None:
    batch = token_batch((9, 4, 7), seed=5)
    method = DecodedLayerGradCam(model, 1, decoder)
    together = method.attribute(
        batch["input_ids"], None, batch["attention_mask"], tau=tau, relu=None
    )
    for row, length in enumerate((9, 4, 7)):
        alone = method.attribute(
            batch["input_ids"][row : row + 1, :length], tau=tau, relu=None
        )
        torch.testing.assert_close(
            together[row, :length], alone[0], atol=1e-7, rtol=1e-4
        )
        extra = torch.full((1, 5), PAD_ID)  # more right padding changes nothing
        longer = torch.cat([batch["input_ids"][row : row + 1, :length], extra], 1)
        mask = (torch.arange(length + 5) < length).long()[None]
        padded = method.attribute(longer, None, mask, tau=tau, relu=None)
        torch.testing.assert_close(padded[0, :length], alone[0], atol=1e-7, rtol=1e-4)
        assert (padded[0, length:] == 0).all()


def _spy(method: Any) -> List[Tensor]:
    r"""Records what ``method.attribute`` returns."""
    seen: List[Tensor] = []
    original = method.attribute

    def attribute(*args: Any, **kwargs: Any) -> Tensor:
        result = original(*args, **kwargs)
        seen.append(result)
        return result

    method.attribute = attribute
    return seen


def _decoded_from(
    method: DecodedLayerAttribution, alpha: Tensor, batch: Dict[str, Tensor]
) -> Tensor:
    r"""The decoded scores recomputed from a recorded layer attribution (signed,
    no tau), via the literal loops with ``a`` replaced."""
    from captum_ext._utils.token_batch import parse_token_batch
    from captum_ext.attr._utils.decoded_aggregation import aggregate
    from captum_ext.attr._utils.decoded_probabilities import decoded_input_probabilities

    tokens = parse_token_batch(
        method.adapter, batch["input_ids"], batch["attention_mask"]
    )
    with torch.no_grad():
        hidden = method.model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            output_hidden_states=True,
        ).hidden_states
    layer = [method.adapter.hidden_state_module(k) for k in range(3)].index(
        method.layer
    )
    decoded = decoded_input_probabilities(method.decoder, hidden[layer], tokens, 99)
    return aggregate(decoded, alpha.sum(-1), tokens, None, None)


def test_integrated_gradients_output_is_used_unchanged(
    model: nn.Module, decoder: nn.Module
) -> None:
    batch = token_batch((8, 5), seed=7)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    baseline = torch.where(mask.bool(), torch.full_like(ids, 4), ids)  # [MASK]-like
    module = get_adapter(model).hidden_state_module(1)
    forward = classifier_forward(model)
    lig = LayerIntegratedGradients(forward, module)
    seen = _spy(lig)
    scores = DecodedLayerAttribution(model, 1, decoder, lig).attribute(
        ids, 0, mask, relu=None, baselines=baseline, n_steps=300
    )
    (alpha,) = seen
    # Completeness of the layer attributions, before any decoding.
    with torch.no_grad():
        gap = forward(ids, mask)[:, 0] - forward(baseline, mask)[:, 0]
    torch.testing.assert_close(alpha.sum((1, 2)), gap, rtol=1e-2, atol=1e-4)
    method = DecodedLayerAttribution(model, 1, decoder, lig)
    torch.testing.assert_close(scores, _decoded_from(method, alpha, batch))


def test_an_option_named_like_a_chunking_argument_reaches_the_method(
    model: nn.Module, decoder: nn.Module
) -> None:
    r"""Integrated Gradients' own ``method`` (its quadrature rule) is one of the
    ``**attribute_kwargs``, not the name of the chunking's method."""
    batch = token_batch((8, 5), seed=7)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    module = get_adapter(model).hidden_state_module(1)
    lig = LayerIntegratedGradients(classifier_forward(model), module)
    seen = _spy(lig)
    method = DecodedLayerAttribution(model, 1, decoder, lig)
    scores = method.attribute(ids, 0, mask, relu=None, n_steps=3, method="riemann_left")
    method.attribute(ids, 0, mask, relu=None, n_steps=3)
    left, gauss_legendre = seen
    direct = LayerIntegratedGradients(classifier_forward(model), module).attribute(
        ids, target=0, additional_forward_args=(mask,), n_steps=3, method="riemann_left"
    )
    torch.testing.assert_close(left, direct)
    assert not torch.allclose(left, gauss_legendre)
    torch.testing.assert_close(scores, _decoded_from(method, left, batch))


@pytest.mark.parametrize(
    "method_class, kwargs",
    [
        (LayerGradientXActivation, {}),
        (LayerIntegratedGradients, {"n_steps": 20}),
        (LayerConductance, {"n_steps": 20}),
        (LayerGradientShap, {"n_samples": 4, "stdevs": 0.01}),
        (LayerDeepLift, {}),
    ],
)
@pytest.mark.parametrize("layer", [0, 2])
def test_any_captum_layer_method(
    model: nn.Module,
    decoder: nn.Module,
    method_class: Type[LayerAttribution],
    kwargs: Dict[str, Any],
    layer: int,
) -> None:
    batch = token_batch((8, 5), seed=8)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    if method_class is not LayerGradientXActivation:
        kwargs = {**kwargs, "baselines": torch.zeros_like(ids)}  # [PAD] ids
    if method_class is LayerGradientShap:
        kwargs["baselines"] = kwargs["baselines"][:1]  # a baseline distribution
    method = DecodedLayerAttribution(model, layer, decoder, method_class)
    built = method._wrapped(method.layer)
    seen = _spy(built)
    torch.manual_seed(0)
    scores = method.attribute(ids, 1, mask, relu=None, **kwargs)
    (alpha,) = seen
    assert alpha.shape == ids.shape + (32,) and torch.isfinite(alpha).all()
    assert alpha.abs().sum() > 0
    torch.testing.assert_close(scores, _decoded_from(method, alpha, batch))


def test_conductance_gets_embeddings_and_sums_to_the_output_gap(
    model: nn.Module, decoder: nn.Module
) -> None:
    batch = token_batch((8, 5), seed=9)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    method = DecodedLayerAttribution(model, 1, decoder, LayerConductance)
    assert method.input_space == "embeddings"
    seen = _spy(method._wrapped(method.layer))
    baseline = torch.zeros_like(ids)
    method.attribute(ids, 0, mask, baselines=baseline, n_steps=300)
    forward = classifier_forward(model)
    with torch.no_grad():
        gap = forward(ids, mask)[:, 0] - forward(baseline, mask)[:, 0]
    torch.testing.assert_close(seen[0].sum((1, 2)), gap, rtol=2e-2, atol=1e-3)


def test_deep_lift_runs_but_hf_nonlinearities_get_no_rescale_rule(
    model: nn.Module, decoder: nn.Module
) -> None:
    # Captum's DeepLift rules cover nn.ReLU/Tanh/Softmax/... modules; BERT's GELU
    # (GELUActivation), LayerNorm and functional attention softmax fall back to
    # plain gradients, so summation-to-delta does not hold.
    batch = token_batch((8, 5), seed=10)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    method = DecodedLayerAttribution(model, 1, decoder, LayerDeepLift)
    seen = _spy(method._wrapped(method.layer))
    baseline = torch.zeros_like(ids)
    method.attribute(ids, 0, mask, baselines=baseline)
    forward = classifier_forward(model)
    with torch.no_grad():
        gap = forward(ids, mask)[:, 0] - forward(baseline, mask)[:, 0]
    error = (seen[0].sum((1, 2)) - gap).abs()
    assert (error > 1e-3 * gap.abs()).any()


def test_method_instance_and_layer_by_module(
    model: nn.Module, decoder: nn.Module
) -> None:
    batch = token_batch(seed=11)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    module = get_adapter(model).hidden_state_module(2)
    expected = DecodedLayerGradCam(model, 2, decoder).attribute(ids, None, mask)
    by_module = DecodedLayerAttribution(model, module, decoder)
    instance = LayerGradientXActivation(classifier_forward(model), module)
    by_instance = DecodedLayerAttribution(model, None, decoder, instance)
    torch.testing.assert_close(by_module.attribute(ids, None, mask), expected)
    torch.testing.assert_close(by_instance.attribute(ids, None, mask), expected)
    with pytest.raises(ValueError, match="aimed at"):
        DecodedLayerAttribution(model, 1, decoder, instance)


def test_deberta_blocks_returning_tuples(decoder: nn.Module) -> None:
    model = tiny_classifier("deberta-v2")
    mlm = get_adapter(tiny_masked_lm("deberta-v2")).mlm_head()
    batch = token_batch(seed=12)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    sweep = DecodedLayerGradCam(model, 0, mlm).attribute_all_layers(ids, None, mask)
    for layer in (1, 2):  # DebertaV2Layer returns (hidden, None)
        single = DecodedLayerGradCam(model, layer, mlm).attribute(ids, None, mask)
        torch.testing.assert_close(sweep[:, layer], single)


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "deberta-v2"])
@pytest.mark.parametrize("tau, relu", [(None, "outside"), (2, "inside"), (3, None)])
def test_sweep_equals_single_layers(
    family: str, tau: Optional[int], relu: Optional[str]
) -> None:
    model = tiny_classifier(family)
    decoder = EmbeddingDecoder(model)
    batch = token_batch((9, 4, 7), seed=13)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    method = DecodedLayerGradCam(model, 0, decoder)
    sweep = method.attribute_all_layers(ids, [0, 1, 2], mask, tau=tau, relu=relu)
    assert sweep.shape == (3, 3, 9)
    for layer in range(3):
        single = DecodedLayerGradCam(model, layer, decoder).attribute(
            ids, [0, 1, 2], mask, tau=tau, relu=relu
        )
        torch.testing.assert_close(sweep[:, layer], single, rtol=1e-4, atol=1e-7)


def test_sweep_with_one_decoder_per_layer(model: nn.Module, decoder: nn.Module) -> None:
    batch = token_batch(seed=14)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    decoders = [decoder, EmbeddingDecoder(model), decoder]
    sweep = DecodedLayerGradCam(model, 0, decoder).attribute_all_layers(
        ids, None, mask, decoders=decoders
    )
    single = DecodedLayerGradCam(model, 1, decoders[1]).attribute(ids, None, mask)
    torch.testing.assert_close(sweep[:, 1], single)
    with pytest.raises(ValueError, match="one decoder per layer"):
        DecodedLayerGradCam(model, 0, decoder).attribute_all_layers(
            ids, None, mask, decoders=decoders[:2]
        )


def test_sweep_with_frozen_parameters(decoder: nn.Module) -> None:
    model = tiny_classifier("bert")
    model.requires_grad_(False)
    batch = token_batch(seed=15)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    before = model_state(model)
    sweep = DecodedLayerGradCam(model, 0, decoder).attribute_all_layers(
        ids, None, mask, relu=None
    )
    assert_same_state(before, model_state(model))
    assert (sweep != 0).any()


def _calls(
    method: DecodedLayerAttribution, ids: Tensor, mask: Tensor
) -> List[Callable[[], Tensor]]:
    return [
        lambda: method.attribute(ids, None, mask),
        lambda: method.attribute(
            ids, None, mask, tau=2, baselines=torch.zeros_like(ids)
        ),
    ]


@pytest.mark.parametrize("method_class", [LayerGradientXActivation, LayerConductance])
def test_model_state_untouched(
    decoder: nn.Module, method_class: Type[LayerAttribution]
) -> None:
    model = tiny_classifier("bert")
    assert isinstance(model, BertForSequenceClassification)  # for mypy: .classifier
    model.classifier.weight.grad = torch.ones_like(model.classifier.weight)
    model.train()
    batch = token_batch(seed=16)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    before = model_state(model)
    method = DecodedLayerAttribution(model, 1, decoder, method_class)
    # The wrapped Captum method's own options (its **attribute_kwargs: Any).
    kwargs: Dict[str, Any] = (
        {} if method_class is LayerGradientXActivation else {"n_steps": 4}
    )
    if method_class is LayerConductance:
        kwargs["baselines"] = torch.zeros_like(ids)
    with pytest.warns(UserWarning, match="training mode"):
        method.attribute(ids, None, mask, **kwargs)
    with pytest.warns(UserWarning, match="training mode"):
        DecodedLayerGradCam(model, 1, decoder).attribute_all_layers(ids, None, mask)
    assert_same_state(before, model_state(model))


class _Boom(RuntimeError):
    pass


def _failing_hook(after_calls: int) -> Callable[..., None]:
    calls = {"n": 0}

    def hook(*_: Any) -> None:
        calls["n"] += 1
        if calls["n"] > after_calls:
            raise _Boom("injected")

    return hook


@pytest.mark.parametrize("after_calls", [0, 1])
def test_model_state_untouched_when_a_forward_raises(
    decoder: nn.Module, after_calls: int
) -> None:
    # after_calls=1: the probe forward passes, the wrapped method's forward (with
    # Captum's hooks registered) raises.
    model = tiny_classifier("bert")
    assert isinstance(model, BertForSequenceClassification)  # for mypy: .bert
    batch = token_batch(seed=17)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    handle = model.bert.encoder.layer[1].register_forward_hook(
        _failing_hook(after_calls)
    )
    before = model_state(model)
    for method_class in (LayerGradientXActivation, LayerIntegratedGradients):
        method = DecodedLayerAttribution(model, 1, decoder, method_class)
        with pytest.raises(_Boom):
            method.attribute(ids, None, mask)
        assert_same_state(before, model_state(model))
    with pytest.raises(_Boom):
        DecodedLayerGradCam(model, 1, decoder).attribute_all_layers(ids, None, mask)
    assert_same_state(before, model_state(model))
    handle.remove()


def test_model_state_untouched_when_the_decoder_raises(model: nn.Module) -> None:
    def decoder(hidden: Tensor) -> Tensor:
        raise _Boom("decoder")

    batch = token_batch(seed=18)
    before = model_state(model)
    with pytest.raises(_Boom):
        DecodedLayerGradCam(model, 1, decoder).attribute(
            batch["input_ids"], None, batch["attention_mask"]
        )
    assert_same_state(before, model_state(model))


def test_clear_errors(model: nn.Module, decoder: nn.Module) -> None:
    batch = token_batch(seed=19)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    wrong_vocab = nn.Linear(32, 50).eval()
    with pytest.raises(ValueError, match="50 logits .* 99 tokens"):
        DecodedLayerGradCam(model, 1, wrong_vocab).attribute(ids, None, mask)
    with pytest.raises(ValueError, match="50 logits .* 99 tokens"):
        DecodedLayerGradCam(model, 1, wrong_vocab).attribute_all_layers(ids, None, mask)
    for layer in (3, -4):
        with pytest.raises(IndexError, match="out of range.*0..2"):
            DecodedLayerGradCam(model, layer, decoder)
    method = DecodedLayerGradCam(model, 1, decoder)
    with pytest.raises(ValueError, match="tau must be >= 1"):
        method.attribute(ids, None, mask, tau=0)
    with pytest.raises(ValueError, match="relu must be one of"):
        method.attribute(ids, None, mask, relu="both")
    with pytest.raises(ValueError, match="return_convergence_delta"):
        DecodedLayerAttribution(model, 1, decoder, LayerIntegratedGradients).attribute(
            ids, None, mask, return_convergence_delta=True
        )
    with pytest.raises(ValueError, match="input_space"):
        DecodedLayerAttribution(model, 1, decoder, input_space="tokens")


def test_embedding_decoder_needs_matching_width() -> None:
    with pytest.raises(ValueError, match="word embeddings have size 16"):
        EmbeddingDecoder(tiny_classifier("albert"))


@pytest.mark.parametrize("relu", RELUS)
def test_token_sums_equal_the_decoded_map_without_tau(
    decoder: nn.Module, relu: Optional[str]
) -> None:
    # The linear path of long prompts (no [pos, pos] map) against aggregate()
    # over decoded_input_probabilities, row by row, in float64, with padding and
    # repeated tokens.
    batch = _batch_with_repeats()
    tokens = TokenBatch(batch["input_ids"], batch["attention_mask"])
    generator = torch.Generator().manual_seed(0)
    decoder64 = copy.deepcopy(decoder).double()
    hidden = torch.randn(*tokens.input_ids.shape, 32, generator=generator).double()
    scores = torch.randn(3, 4, tokens.input_ids.shape[1], generator=generator)
    scores = scores.double()  # [batch, rows, pos]
    vocab = decoder64(hidden[:, :1]).shape[-1]
    decoded = decoded_input_probabilities(decoder64, hidden, tokens, vocab)
    expected = torch.stack(
        [aggregate(decoded, row, tokens, None, relu) for row in scores.unbind(1)], 1
    )
    sums = _with_relu(
        scores,
        relu,
        partial(decoded_token_sums, decoder64, hidden, tokens, vocab_size=vocab),
    )
    got = sums * tokens.valid[:, None].double()
    assert expected.abs().max() > 0.01
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
