#!/usr/bin/env python3
r"""What every model-running metric shares: ``TokenOptions``, the typed preset
table, ``internal_batch_size`` and the float32 precision policy."""

import inspect
import re
from types import SimpleNamespace

import pytest
import torch
from captum_ext.metrics import (
    get_protocol,
    hiding_revealing,
    kendall_tau,
    KendallProtocol,
    PerturbationProtocol,
    token_overlap,
    TokenOptions,
)
from captum_ext.metrics._utils.protocols import _PRESETS, CurveMetric

from tests.helpers import PAD_ID
from tests.metrics.toys import (
    ALL_METRICS,
    batch_with_scores,
    CLASS_METRICS,
    CURVE_PRESETS,
    gold_labels,
    lively_forward,
    MASK_ID,
    PERTURBATION_METRICS,
    PRESET_CASES,
    run_metric,
    TOKENS,
)


def _flat(result):
    r"""Every tensor of a metric's result, concatenated."""
    if isinstance(result, torch.Tensor):
        return result.flatten()
    return torch.cat([_flat(part) for part in result])


@pytest.mark.parametrize("metric,preset", PRESET_CASES)
@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_internal_batch_size_equals_unchunked(metric, preset, chunk):
    forward = lively_forward("bert")
    batch = batch_with_scores((12, 4, 10, 16, 11), seed=41)
    labels = gold_labels(metric, batch)
    whole = run_metric(metric, forward, batch, preset=preset, **labels)
    chunked = run_metric(metric, forward, batch, chunk, preset=preset, **labels)
    torch.testing.assert_close(_flat(chunked), _flat(whole), equal_nan=True)


@pytest.mark.parametrize("chunk", [1, 2])
def test_internal_batch_size_kendall_tau_and_token_overlap(chunk):
    forward = lively_forward("bert")
    batch = batch_with_scores((12, 4, 10, 16, 11), seed=43)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    table = torch.randn(5, 3, ids.shape[1], generator=torch.Generator().manual_seed(0))
    for metric, scores in ((kendall_tau, table), (token_overlap, batch["scores"])):
        whole = metric(forward, ids, scores, None, mask, tokens=TOKENS)
        chunked = metric(
            forward, ids, scores, None, mask, tokens=TOKENS, internal_batch_size=chunk
        )
        torch.testing.assert_close(_flat(chunked), _flat(whole), equal_nan=True)


@pytest.mark.parametrize("metric", PERTURBATION_METRICS + CLASS_METRICS)
def test_bfloat16_model_gives_float32_results_from_its_logits(metric):
    r"""Probabilities come from the model's logits upcast to float32: a bfloat16
    model's results equal those of the same logits handed over in float32."""
    forward = lively_forward("bert")
    model = forward.model
    batch = batch_with_scores((12, 4, 10), seed=47)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    scores = batch["scores"]
    if metric is kendall_tau:
        scores = torch.randn(3, 3, ids.shape[1])
    bf16 = type(forward)(_bfloat16_copy(model))

    def upcast(input_ids, attention_mask):
        return bf16(input_ids, attention_mask).float()

    kwargs = {"labels": [0, 1, 2]} if metric is hiding_revealing else {}
    low = metric(bf16, ids, scores, None, mask, tokens=TOKENS, **kwargs)
    high = metric(upcast, ids, scores, None, mask, tokens=TOKENS, **kwargs)
    for part in [low] if isinstance(low, torch.Tensor) else low:
        for tensor in [part] if isinstance(part, torch.Tensor) else part:
            assert tensor.dtype in (torch.float32, torch.long)
    torch.testing.assert_close(_flat(low), _flat(high), equal_nan=True)


def _bfloat16_copy(model):
    copy = type(model)(model.config)
    copy.load_state_dict(model.state_dict())
    return copy.to(torch.bfloat16).eval()


def test_token_options_from_tokenizer():
    tokenizer = SimpleNamespace(
        mask_token_id=MASK_ID, pad_token_id=PAD_ID, all_special_ids=[2, 3, 0, 4]
    )
    tokens = TokenOptions.from_tokenizer(tokenizer)
    assert (tokens.mask_token_id, tokens.pad_token_id) == (MASK_ID, PAD_ID)
    assert tokens.special_token_ids == (2, 3, 0, 4)
    with pytest.raises(AttributeError):
        tokens.pad_token_id = 1  # type: ignore[misc]  # frozen: the test


def test_the_tests_preset_table_lists_every_preset():
    r"""``toys.CURVE_PRESETS``, which the option and perturbation tests run over,
    names every preset of every perturbation metric, the default first."""
    listed = {metric.__name__: presets for metric, presets in CURVE_PRESETS.items()}
    assert set(listed) == set(CurveMetric.__args__)  # type: ignore[attr-defined]
    for name, presets in listed.items():
        assert presets[0] is None
        assert set(presets) == set(_PRESETS[name]), name


def test_presets_are_one_typed_table():
    for metric in ("aopc", "log_odds", "sufficiency", "hiding_revealing"):
        assert isinstance(get_protocol(metric), PerturbationProtocol)
    assert get_protocol("kendall_tau") == KendallProtocol()
    assert get_protocol("kendall_tau", "attcat") == KendallProtocol(
        other="reference", compare="argsort", count_specials=True
    )
    with pytest.raises(ValueError, match="compare must be one of"):
        KendallProtocol(compare="pearson")


@pytest.mark.parametrize("metric", ALL_METRICS, ids=lambda m: m.__name__)
def test_docstring_documents_every_argument(metric):
    r"""Args text is real text (no ``{common_args}`` placeholder) and names every
    parameter, the shared ones too (Captum repeats them in each docstring)."""
    doc = inspect.getdoc(metric) or ""
    args = doc.split("Args:")[1].split("Returns:")[0]
    assert "{" not in args
    for name in inspect.signature(metric).parameters:
        assert re.search(rf"^\s+{name} \(", args, re.MULTILINE), name


@pytest.mark.parametrize("metric", ALL_METRICS, ids=lambda m: m.__name__)
def test_keyword_only_after_the_captum_arguments(metric):
    r"""As ``captum.metrics.infidelity``: the arguments Captum's metrics share
    are positional, every option is keyword-only (CONTRIBUTING)."""
    kinds = {name: p.kind for name, p in inspect.signature(metric).parameters.items()}
    positional = [
        n for n, k in kinds.items() if k is inspect.Parameter.POSITIONAL_OR_KEYWORD
    ]
    assert positional[-1] == "additional_forward_args"
    assert set(kinds) - set(positional) >= {"tokens"}
