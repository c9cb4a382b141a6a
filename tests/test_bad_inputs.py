#!/usr/bin/env python3
r"""The bad-input catalogue: every case gets a specific error (or warning), for
every method of ``tests/attr/method_configs.py`` and every metric where it
applies. The user guide's table of these errors (docs/guide/bad_inputs.rst) is
this file's test list.

A model in training mode is asserted for every method and family in
``tests/test_matrix.py`` (it warns, computes in eval semantics and restores the
mode); here for the metrics."""

import warnings
from dataclasses import replace
from functools import lru_cache
from typing import Any, Callable, Dict, Optional, Tuple

import pytest
import torch
import transformers
from captum_ext import classifier_forward, UnsupportedModelError
from captum_ext.metrics import (
    aopc,
    get_protocol,
    kendall_tau,
    KendallProtocol,
    PerturbationProtocol,
    token_overlap,
    TokenOptions,
)
from torch import nn, Tensor

from tests.attr.method_configs import METHOD_CONFIGS, MethodConfig
from tests.helpers import (
    ALL_FAMILIES,
    CLS_ID,
    is_causal,
    PAD_ID,
    SEP_ID,
    tiny_base_model,
    tiny_classifier,
    tiny_masked_lm,
    token_batch,
    VOCAB,
)
from tests.metrics.toys import PERTURBATION_METRICS, PLAUSIBILITY_METRICS

CONFIGS = pytest.mark.parametrize("config", METHOD_CONFIGS, ids=str)
LAYERED = [c for c in METHOD_CONFIGS if c.layered is not None]
DECODED = [c for c in METHOD_CONFIGS if c.decoded is not None]
UNSUPPORTED = [
    pytest.param(c, f, id=f"{c.name}-{f}")
    for c in METHOD_CONFIGS
    for f in ALL_FAMILIES
    if f not in c.families
]
# Hugging Face has no SDPA attention for DeBERTa-v2: such a model cannot be built.
SDPA = [
    pytest.param(c, f, id=f"{c.name}-{f}")
    for c in METHOD_CONFIGS
    for f in c.families
    if f != "deberta-v2"
]
NUM_LAYERS = 2
NUM_LABELS = 3


@lru_cache(maxsize=None)
def _model(family: str = "bert", attn_implementation: str = "eager") -> nn.Module:
    return tiny_classifier(family, attn_implementation=attn_implementation)


def _inputs(family: str = "bert") -> Tuple[Tensor, Tensor]:
    r"""``(input_ids, attention_mask)`` ``[3, 9]``: rows 0 and 1 end in [PAD]."""
    batch = token_batch((7, 4, 9), causal=is_causal(family))
    return batch["input_ids"], batch["attention_mask"]


def _attribute(
    config: MethodConfig,
    model: nn.Module,
    ids: Tensor,
    mask: Optional[Tensor] = None,
    target: Any = None,
) -> Tensor:
    return config.factory(model)(ids, mask, target)


# ----------------------------------------------------------- architecture
@CONFIGS
def test_not_a_transformers_model(config: MethodConfig) -> None:
    with pytest.raises(UnsupportedModelError, match="no Hugging Face config"):
        _attribute(config, nn.Linear(4, 3), _inputs()[0])


@lru_cache(maxsize=None)
def _mpnet() -> nn.Module:
    # num_labels: a PreTrainedConfig keyword the dataclass signature omits
    config = transformers.MPNetConfig(  # type: ignore[call-arg]
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=4,
        intermediate_size=37,
        num_labels=NUM_LABELS,
    )
    return transformers.AutoModelForSequenceClassification.from_config(config).eval()


@CONFIGS
def test_family_without_adapter(config: MethodConfig) -> None:
    with pytest.raises(UnsupportedModelError, match="model_type='mpnet'"):
        _attribute(config, _mpnet(), _inputs()[0])


@pytest.mark.parametrize("config, family", UNSUPPORTED)
def test_family_the_method_does_not_support(config: MethodConfig, family: str) -> None:
    ids, mask = _inputs(family)
    with pytest.raises(UnsupportedModelError, match=config.unsupported_match):
        _attribute(config, _model(family), ids, mask)


@lru_cache(maxsize=None)
def _headless(kind: str) -> nn.Module:
    if kind == "masked_lm":
        return tiny_masked_lm("bert")
    return tiny_base_model("bert")


@CONFIGS
@pytest.mark.parametrize("kind", ["masked_lm", "base_model"])
def test_model_without_classification_head(config: MethodConfig, kind: str) -> None:
    ids, mask = _inputs()
    with pytest.raises(UnsupportedModelError, match="no sequence-classification head"):
        _attribute(config, _headless(kind), ids, mask)


@pytest.mark.parametrize("config, family", SDPA)
def test_sdpa_gives_the_eager_scores(config: MethodConfig, family: str) -> None:
    r"""SDPA returns no attention weights: methods that read attention
    recompute it from the query and key, and every method gives the eager
    model's scores (float64 equality: tests/adapters/test_attention.py)."""
    ids, mask = _inputs(family)
    sdpa = _model(family, "sdpa")
    eager = _attribute(config, _model(family), ids, mask)
    tolerance = 1e-4 * float(eager.abs().max())
    torch.testing.assert_close(
        _attribute(config, sdpa, ids, mask), eager, atol=tolerance, rtol=0
    )


# ------------------------------------------------------------------ layer
@pytest.mark.parametrize("config", LAYERED, ids=str)
def test_layer_index_out_of_range(config: MethodConfig) -> None:
    assert config.layered is not None
    for layer in (NUM_LAYERS + 1, -(NUM_LAYERS + 2)):
        with pytest.raises(IndexError, match=f"layer {layer} is out of range.*0..2"):
            config.layered(_model(), layer)
    with pytest.raises(TypeError, match="layer must be an int"):
        config.layered(_model(), "1")  # type: ignore[arg-type]


# ----------------------------------------------------------------- target
@CONFIGS
@pytest.mark.parametrize("target", [NUM_LABELS, -1, [0, 1, NUM_LABELS]])
def test_target_out_of_range(config: MethodConfig, target: Any) -> None:
    ids, mask = _inputs()
    with pytest.raises(IndexError, match="out of range for a model with 3 output"):
        _attribute(config, _model(), ids, mask, target)


@CONFIGS
@pytest.mark.parametrize(
    "target, message",
    [
        ([0, 1], "target has 2 entries but the batch has 3 examples"),
        (torch.zeros(3, 1, dtype=torch.long), "1-d list / tensor.*shape \\(3, 1\\)"),
        (1.0, "target must be integer class indices"),
        ((0,), "target as a tuple"),
    ],
    ids=["length", "2-d", "float", "tuple"],
)
def test_target_of_wrong_shape(config: MethodConfig, target: Any, message: str) -> None:
    ids, mask = _inputs()
    with pytest.raises(ValueError, match=message):
        _attribute(config, _model(), ids, mask, target)


# ------------------------------------------------------------------ input
def _only_special(family: str) -> Tensor:
    if is_causal(family):
        return torch.tensor([[1, 1]])  # bos = eos = 1
    return torch.tensor([[CLS_ID, SEP_ID]])


@CONFIGS
def test_empty_input(config: MethodConfig) -> None:
    ids, mask = _inputs()
    for empty in (ids[:, :0], ids[:0]):
        with pytest.raises(ValueError, match="empty input: inputs has shape"):
            _attribute(config, _model(), empty)
    with pytest.raises(ValueError, match=r"example\(s\) \[1\] have no attended"):
        _attribute(config, _model(), ids, mask * torch.tensor([[1], [0], [1]]))
    for family in dict.fromkeys((config.families[0], config.families[-1])):
        with pytest.raises(ValueError, match="hold only special tokens"):
            _attribute(config, _model(family), _only_special(family))


@CONFIGS
def test_input_longer_than_the_positions(config: MethodConfig) -> None:
    r"""BERT has 64 positions, RoBERTa 63 (its first position id is
    ``pad_token_id + 1``); exactly that many tokens work."""
    lengths = {"bert": 64, "roberta": 63}
    for family, most in lengths.items():
        if family not in config.families:
            continue
        ids = token_batch((most + 1,))["input_ids"]
        message = f"{most + 1} positions but the model has only {most} position"
        with pytest.raises(ValueError, match=message):
            _attribute(config, _model(family), ids)
        assert _attribute(config, _model(family), ids[:, 1:]).shape == (1, most)


@CONFIGS
@pytest.mark.parametrize("bad_id", [VOCAB, -1])
def test_token_id_outside_the_vocabulary(config: MethodConfig, bad_id: int) -> None:
    ids, mask = _inputs()
    ids = ids.clone()
    ids[0, 1] = bad_id
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 99\)"):
        _attribute(config, _model(), ids, mask)


@CONFIGS
def test_malformed_inputs(config: MethodConfig) -> None:
    ids, mask = _inputs()
    with pytest.raises(TypeError, match="integer token ids"):
        _attribute(config, _model(), ids.float(), mask)
    with pytest.raises(ValueError, match="add a batch dimension"):
        _attribute(config, _model(), ids[0])
    with pytest.raises(ValueError, match=r"attention_mask has shape \(3, 8\)"):
        _attribute(config, _model(), ids, mask[:, :-1])


def test_causal_model_without_pad_token() -> None:
    r"""A batch needs ``pad_token_id`` to find each row's last token (Hugging
    Face's own error); one example at a time works."""
    model = tiny_classifier("gpt2")
    model.config.pad_token_id = None
    ids, mask = _inputs("gpt2")
    for config in METHOD_CONFIGS:
        if "gpt2" not in config.families:
            continue
        with pytest.raises(ValueError, match="no padding token is defined"):
            _attribute(config, model, ids, mask)


@CONFIGS
def test_left_padded_encoder_is_refused(config: MethodConfig) -> None:
    r"""An encoder reads its prediction from position 0: left padding would
    explain a [PAD]. A decoder reads its last token and accepts left padding."""
    left = token_batch((7, 4, 9), pad_side="left")
    message = r"example\(s\) \[0, 1\] are padded on the left.*padding_side"
    with pytest.raises(ValueError, match=message):
        _attribute(config, _model(), left["input_ids"], left["attention_mask"])
    if "gpt2" in config.families:
        causal = token_batch((7, 4, 9), pad_side="left", causal=True)
        ids, mask = causal["input_ids"], causal["attention_mask"]
        assert _attribute(config, _model("gpt2"), ids, mask).shape == ids.shape


def _pad_warnings(call: Callable[[], Any]) -> int:
    r"""How many padding-without-mask warnings ``call`` raises."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return sum("no attention_mask was given" in str(w.message) for w in caught)


@CONFIGS
def test_pad_id_without_attention_mask_warns_once(config: MethodConfig) -> None:
    ids = _inputs()[0]  # rows 0 and 1 end in [PAD]
    assert _pad_warnings(lambda: _attribute(config, _model(), ids)) == 1
    with pytest.warns(UserWarning, match=r"example\(s\) \[0, 1\] hold the padding"):
        _attribute(config, _model(), ids)
    assert _pad_warnings(lambda: _attribute(config, _model(), ids[2:])) == 0


# ---------------------------------------------------------------- decoder
@pytest.mark.parametrize("config", DECODED, ids=str)
def test_decoder_of_another_vocabulary(config: MethodConfig) -> None:
    assert config.decoded is not None
    decoder = nn.Linear(32, 50).eval()
    ids, mask = _inputs()
    method = config.decoded(_model(), decoder)
    with pytest.raises(ValueError, match="50 logits but the model's vocabulary has 99"):
        method(ids, mask, 1)


# ---------------------------------------------------------------- metrics
def _token_metrics() -> Dict[str, Callable[..., Any]]:
    r"""Metric name -> ``f(forward, ids, attributions, mask, **kwargs)``."""
    evidence = token_batch((7, 4, 9))["attention_mask"]

    def curve(metric: Callable[..., Any]) -> Callable[..., Any]:
        return lambda f, ids, a, mask, **kw: metric(f, ids, a, None, (mask,), **kw)

    def plausibility(metric: Callable[..., Any]) -> Callable[..., Any]:
        return lambda f, ids, a, mask, **kw: metric(ids, a, evidence, (mask,), **kw)

    return {
        **{m.__name__: curve(m) for m in (*PERTURBATION_METRICS, token_overlap)},
        **{m.__name__: plausibility(m) for m in PLAUSIBILITY_METRICS},
    }


TOKEN_METRICS = _token_metrics()
CURVE_METRICS = [metric.__name__ for metric in PERTURBATION_METRICS]


def _metric_inputs(
    name: str,
) -> Tuple[Callable[..., Any], Callable[..., Tensor], Tensor, Tensor, Tensor]:
    r"""``TOKEN_METRICS[name]``, the tiny BERT's forward, :func:`_inputs` and
    random attributions ``[3, 9]``."""
    ids, mask = _inputs()
    forward = classifier_forward(_model())
    return TOKEN_METRICS[name], forward, ids, mask, torch.rand(ids.shape)


@pytest.mark.parametrize("name", TOKEN_METRICS)
def test_metric_attributions_of_the_wrong_shape(name: str) -> None:
    metric, forward, ids, mask, scores = _metric_inputs(name)
    for wrong in (scores[:, :-1], scores[:2]):
        with pytest.raises(ValueError, match="one score per token, shape \\(3, 9\\)"):
            metric(forward, ids, wrong, mask)
    embedding_level = scores[..., None].expand(-1, -1, 4)
    with pytest.raises(ValueError, match="sum them over the last dimension"):
        metric(forward, ids, embedding_level, mask)


def test_kendall_tau_needs_every_class() -> None:
    ids, mask = _inputs()
    forward = classifier_forward(_model())
    with pytest.raises(ValueError, match="needs the scores of every class"):
        kendall_tau(forward, ids, torch.rand(ids.shape), None, (mask,))


@pytest.mark.parametrize("name", CURVE_METRICS)
def test_metric_without_mask_or_pad_token(name: str) -> None:
    metric, forward, ids, mask, scores = _metric_inputs(name)
    protocol = get_protocol(name)
    assert isinstance(protocol, PerturbationProtocol)  # for mypy: a curve metric's
    for mode in ("mask", "pad"):
        preset = replace(protocol, mode=mode)
        with pytest.raises(ValueError, match=f"mode='{mode}'.*{mode}_token_id"):
            metric(forward, ids, scores, mask, preset=preset)


def test_metric_preset_needing_a_mask_token() -> None:
    ids, mask = _inputs()
    forward = classifier_forward(_model())
    with pytest.raises(ValueError, match="TokenOptions.mask_token_id"):
        aopc(forward, ids, torch.rand(ids.shape), None, (mask,), preset="normxlogit")


@pytest.mark.parametrize("name", TOKEN_METRICS)
def test_metric_empty_input(name: str) -> None:
    metric, forward, ids, mask, scores = _metric_inputs(name)
    mask = mask.clone()
    mask[1] = 0
    with pytest.raises(ValueError, match=r"example\(s\) \[1\] have no attended token"):
        metric(forward, ids, scores, mask)


@pytest.mark.parametrize("name", [*CURVE_METRICS, "token_overlap"])
def test_metric_model_in_training_mode(name: str) -> None:
    r"""Dropout would make every score random: the metric warns, runs the model
    in eval mode and leaves it in training mode."""
    ids, mask = _inputs()
    metric = TOKEN_METRICS[name]
    scores = torch.rand(ids.shape, generator=torch.Generator().manual_seed(0))
    expected = metric(classifier_forward(_model()), ids, scores, mask)
    model = tiny_classifier("bert").train()
    with pytest.warns(UserWarning, match="training mode"):
        result = metric(classifier_forward(model), ids, scores, mask)
    assert all(m.training for m in model.modules())
    torch.testing.assert_close(result, expected, equal_nan=True)


def test_metric_causal_model_without_pad_token() -> None:
    model = tiny_classifier("gpt2")
    model.config.pad_token_id = None
    ids, mask = _inputs("gpt2")
    with pytest.raises(ValueError, match="no padding token is defined"):
        aopc(classifier_forward(model), ids, torch.rand(ids.shape), None, (mask,))


@pytest.mark.parametrize("name", [*CURVE_METRICS, "token_overlap"])
def test_metric_pad_id_without_attention_mask_warns_once(name: str) -> None:
    metric, forward, ids, mask, scores = _metric_inputs(name)
    tokens = TokenOptions(pad_token_id=PAD_ID)
    call = metric_call(metric, forward, ids, scores, None, tokens=tokens)
    assert _pad_warnings(call) == 1
    with_mask = metric_call(metric, forward, ids, scores, mask, tokens=tokens)
    assert _pad_warnings(with_mask) == 0


def metric_call(
    metric: Callable[..., Any], *args: Any, **kwargs: Any
) -> Callable[[], Any]:
    return lambda: metric(*args, **kwargs)


@pytest.mark.parametrize("name", [*CURVE_METRICS, "token_overlap", "kendall_tau"])
def test_metric_with_a_raw_hugging_face_model(name: str) -> None:
    r"""The model returns a ``ModelOutput``: the error names the fix."""
    ids, mask = _inputs()
    scores = torch.rand(ids.shape)
    metric = kendall_tau if name == "kendall_tau" else TOKEN_METRICS[name]
    if name == "kendall_tau":
        scores = torch.rand(3, NUM_LABELS, ids.shape[1])
        # kendall_tau takes the Captum argument order
        call = metric_call(kendall_tau, _model(), ids, scores, None, (mask,))
    else:
        call = metric_call(metric, _model(), ids, scores, mask)
    with pytest.raises(ValueError, match=r"captum_ext.classifier_forward\(model\)"):
        call()


class _InfOnRows(nn.Module):
    r"""The tiny BERT's logits, inf on the rows ``bad(input_ids, mask) [rows]``."""

    def __init__(self, bad: Callable[[Tensor, Tensor], Tensor]) -> None:
        super().__init__()
        self.bad = bad
        self.eval()

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        logits = classifier_forward(_model())(input_ids, attention_mask)
        bad = self.bad(input_ids, attention_mask)[:, None]
        return logits.masked_fill(bad, float("inf"))


@pytest.mark.parametrize("name", CURVE_METRICS)
def test_metric_non_finite_logits_name_the_example(name: str) -> None:
    r"""Non-finite logits on unperturbed inputs, or only on the perturbed rows of
    one example, name that example (not a row of a chunk)."""
    ids, mask = _inputs()
    ids = ids.clone()
    metric = TOKEN_METRICS[name]
    short = _InfOnRows(lambda i, m: m.sum(-1) < 8)  # examples 0 and 1
    with pytest.raises(FloatingPointError, match=r"logits.*example\(s\) \[0, 1\]"):
        metric(short, ids, torch.rand(ids.shape), mask)
    ids[ids >= 97] = 50
    ids[2, 3], ids[2, 4] = 97, 98  # only in example 2, ranked first and last
    scores = torch.zeros(ids.shape)
    scores[2, 3], scores[2, 4] = 1.0, -1.0
    # Perturbing example 2 separates them (one perturbed, the other not yet).
    one_of_two = _InfOnRows(lambda i, m: (i == 97).any(-1) ^ (i == 98).any(-1))
    with pytest.raises(FloatingPointError, match=r"example\(s\) \[2\]"):
        metric(one_of_two, ids, scores, mask)


@pytest.mark.parametrize("name", [*CURVE_METRICS, "token_overlap", "kendall_tau"])
@pytest.mark.parametrize(
    "value,error",
    [(0, ValueError), (-2, ValueError), (1.5, TypeError), (True, TypeError)],
)
def test_metric_bad_internal_batch_size(name: str, value: Any, error: type) -> None:
    ids, mask = _inputs()
    forward = classifier_forward(_model())
    if name == "kendall_tau":
        scores = torch.rand(3, NUM_LABELS, ids.shape[1])
        call = metric_call(
            kendall_tau, forward, ids, scores, None, (mask,), internal_batch_size=value
        )
    else:
        scores = torch.rand(ids.shape)
        call = metric_call(
            TOKEN_METRICS[name], forward, ids, scores, mask, internal_batch_size=value
        )
    with pytest.raises(error, match="internal_batch_size"):
        call()


def test_metric_preset_of_another_kind() -> None:
    ids, mask = _inputs()
    forward = classifier_forward(_model())
    with pytest.raises(TypeError, match="aopc takes a PerturbationProtocol"):
        aopc(
            forward,
            ids,
            torch.rand(ids.shape),
            None,
            mask,
            # The wrong kind on purpose: the run-time check is the test.
            preset=KendallProtocol(),  # type: ignore[arg-type]
        )
    with pytest.raises(ValueError, match="no metric 'aopcc'"):
        get_protocol("aopcc")


def _message(call: Callable[[], Any]) -> str:
    with pytest.raises((ValueError, TypeError)) as caught:
        call()
    return str(caught.value)


@pytest.mark.parametrize("case", ["empty row", "mask shape", "float ids", "1-d ids"])
def test_methods_and_metrics_share_one_message_per_error(case: str) -> None:
    r"""One input core: a method and a metric reject the same input with the
    same words."""
    ids, mask = _inputs()
    bad_ids, bad_mask = {
        "empty row": (ids, mask * torch.tensor([[1], [0], [1]])),
        "mask shape": (ids, mask[:, :-1]),
        "float ids": (ids.float(), mask),
        "1-d ids": (ids[0], mask[0]),
    }[case]
    method = METHOD_CONFIGS[0]
    forward = classifier_forward(_model())
    scores = torch.rand(ids.shape)
    from_method = _message(lambda: _attribute(method, _model(), bad_ids, bad_mask))
    from_metric = _message(lambda: aopc(forward, bad_ids, scores, None, bad_mask))
    assert from_method == from_metric
