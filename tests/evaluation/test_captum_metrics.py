#!/usr/bin/env python3
r"""Captum's infidelity and sensitivity_max in the benchmark: each example's
value equals Captum's function called on that example alone with the
documented perturbation (classifiers and causal LMs), whatever the batches;
sensitivity-max is measured on the examples the hash picks, NaN
elsewhere."""

import hashlib
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
import torch
from captum.metrics import infidelity, sensitivity_max
from captum_ext import classifier_forward
from captum_ext.evaluation.engine import benchmark
from captum_ext.evaluation.registry import (
    captum_metrics,
    INFIDELITY_SAMPLES,
    INFIDELITY_SHARE,
    method_spec,
    METHODS,
    SENSITIVITY_SAMPLES,
    SENSITIVITY_SHARE,
)
from captum_ext.evaluation.report import DEFINITIONS, GENERATION_DEFINITIONS
from captum_ext.evaluation.results import BenchmarkResult
from captum_ext.metrics import TokenOptions, TokenSubsetPerturbation
from torch import Tensor

from tests.attr.llm_fixtures import tiny_lm_tokenizer
from tests.evaluation.engine.test_causal_lm import LM, one_example, prompts, run
from tests.helpers import tiny_causal_lm, tiny_data, tiny_labelled_bert, tiny_tokenizer

DOCS = Path(__file__).resolve().parents[2] / "docs"
METHOD_SET = ["NormXLogit", "AttCAT"]
METRIC_SET = ["infidelity", "sensitivity_max"]


def _classifier_run(batch_size: int, n: int = 6) -> BenchmarkResult:
    return benchmark(
        tiny_labelled_bert(),
        tiny_tokenizer(),
        tiny_data(n),
        METHOD_SET,
        METRIC_SET,
        task="tiny",
        batch_size=batch_size,
        max_length=16,
        progress=False,
    )


def _alone(tokenizer: Any, text: str) -> Dict[str, Tensor]:
    return tokenizer(text, return_tensors="pt", truncation=True, max_length=16)


def _classifier_reference(name: str, text: str) -> Dict[str, float]:
    r"""Captum's metrics on one example alone, the perturbation spelled out:
    [MASK] in place of tokens, the tokenizer's special ids kept."""
    model, tokenizer = tiny_labelled_bert(), tiny_tokenizer()
    encoded = _alone(tokenizer, text)
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    forward = classifier_forward(model)
    with torch.no_grad():
        target = forward(ids, mask).argmax(-1)
    explain = METHODS[name].build(model, tokenizer, None)
    scores = explain(ids, mask, target).float()
    tokens = TokenOptions.from_tokenizer(tokenizer)

    def explanation(rows: Tensor, rows_mask: Tensor, target: Tensor) -> Tensor:
        return explain(rows, rows_mask, target.expand(len(rows))).float()

    probability = lambda i, m: forward(i, m).float().softmax(-1)  # noqa: E731
    return _reference(probability, explanation, ids, scores, (mask,), target, tokens)


def _reference(
    function: Callable[..., Tensor],
    explain: Callable[..., Tensor],
    ids: Tensor,
    attributions: Tensor,
    forward_args: Tuple[Tensor, ...],
    target: Optional[Tensor],
    tokens: TokenOptions,
) -> Dict[str, float]:
    r"""Captum's two metrics on one example, ``tokens.mask_token_id`` in place
    of tokens; ``explain(ids, *forward_args[, target])`` re-runs the method."""
    replacement = tokens.mask_token_id
    assert replacement is not None
    infid = infidelity(
        function,
        TokenSubsetPerturbation(replacement, tokens=tokens),
        ids,
        attributions,
        additional_forward_args=forward_args,
        target=target,
        n_perturb_samples=INFIDELITY_SAMPLES,
        normalize=True,
    )
    known = (target,) if target is not None else ()

    def explanation(inputs: Any, additional_forward_args: Any, **_: Any) -> Any:
        rows = inputs[0] if isinstance(inputs, tuple) else inputs
        result = explain(rows, *additional_forward_args, *known)
        return (result,) if isinstance(inputs, tuple) else result

    sens = sensitivity_max(
        explanation,
        ids,
        TokenSubsetPerturbation(replacement, tokens=tokens, size=1, indicator=False),
        n_perturb_samples=SENSITIVITY_SAMPLES,
        additional_forward_args=forward_args,
    )
    return {"Infidelity": float(infid), "SensMax": float(sens)}


def _values(result: BenchmarkResult, column: str) -> Dict[str, List[float]]:
    return {row.method: row.per_example[column] for row in result.rows}


@pytest.mark.parametrize("batch_size", [6, 4])
def test_classifier_values_are_captums_on_each_example_alone(
    monkeypatch: pytest.MonkeyPatch, batch_size: int
) -> None:
    monkeypatch.setattr(captum_metrics, "SENSITIVITY_SHARE", 1)
    monkeypatch.setattr(captum_metrics, "INFIDELITY_SHARE", 1)
    result = _classifier_run(batch_size)
    assert list(result.metrics) == ["Infidelity", "SensMax"]
    assert result.metrics == {"Infidelity": False, "SensMax": False}
    texts = tiny_data(6).texts
    for row in result.rows:
        for b, text in enumerate(texts):
            expected = _classifier_reference(row.method, text)
            for column, value in expected.items():
                got = row.per_example[column][b]
                # float32 methods on other batch shapes
                assert got == pytest.approx(value, rel=1e-4, abs=1e-12), (row.method, b)
        assert all(v > 0 for v in row.per_example["SensMax"])


def _picked(share: int) -> List[bool]:
    r"""The tiny texts whose attended ids have a BLAKE2b hash (8 bytes, little
    endian) divisible by ``share``."""
    tokenizer = tiny_tokenizer()
    picked = []
    for text in tiny_data(6).texts:
        ids = _alone(tokenizer, text)["input_ids"][0].numpy().tobytes()
        digest = hashlib.blake2b(ids, digest_size=8).digest()
        picked.append(int.from_bytes(digest, "little") % share == 0)
    return picked


def test_each_metric_runs_on_the_examples_the_hash_picks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(captum_metrics, "SENSITIVITY_SHARE", 2)
    monkeypatch.setattr(captum_metrics, "INFIDELITY_SHARE", 4)
    result = _classifier_run(4)
    for column, share in (("SensMax", 2), ("Infidelity", 4)):
        picked = _picked(share)
        assert 0 < sum(picked) < len(picked)  # the test sees both kinds
        for values in _values(result, column).values():
            assert [not math.isnan(v) for v in values] == picked


# ------------------------------------------------------------------ causal LMs
@pytest.fixture(scope="module")
def lm() -> LM:
    return tiny_causal_lm("gpt2", dtype=torch.float64), tiny_lm_tokenizer()


def _log_likelihood(model: Any) -> Any:
    r"""``sum_t log p(y_t | prompt, y_<t)`` by a plain forward pass over the
    prompt and the whole continuation, one row at a time."""

    def f(prompt_ids: Tensor, mask: Tensor, target: Tensor) -> Tensor:
        values = []
        for ids, attended, steps in zip(prompt_ids, mask, target):
            joined = torch.cat([ids[attended.bool()], steps])[None]
            logits = model(input_ids=joined).logits[0]  # [P + T, V]
            start = int(attended.sum()) - 1
            log_probs = logits[start : start + len(steps)].log_softmax(-1)
            values.append(log_probs.gather(1, steps[:, None]).sum())
        return torch.stack(values)

    return f


def _generation_reference(lm: LM, name: str, row: int) -> Dict[str, float]:
    model, tokenizer = lm
    ids, mask, target = one_example(tokenizer, row)
    explain = method_spec(name).build_generation(model, tokenizer)
    scores = explain(ids, mask, target)  # [1, T, P]
    # <unk> in place of tokens (no [MASK]); <s> and padding kept.
    tokens = TokenOptions(
        tokenizer.unk_token_id, 0, special_token_ids=tokenizer.all_special_ids
    )
    return _reference(
        _log_likelihood(model),
        explain,
        ids,
        scores.sum(1),
        (mask, target),
        None,
        tokens,
    )


@pytest.mark.parametrize("batch_size", [4, 3])
def test_causal_lm_values_are_captums_on_each_example_alone(
    monkeypatch: pytest.MonkeyPatch, lm: LM, batch_size: int
) -> None:
    monkeypatch.setattr(captum_metrics, "SENSITIVITY_SHARE", 1)
    monkeypatch.setattr(captum_metrics, "INFIDELITY_SHARE", 1)
    methods = ["LogAt", "AttCAT"]
    result = run(
        lm, prompts(), methods=methods, metrics=METRIC_SET, batch_size=batch_size
    )
    for row in result.rows:
        for b in range(4):
            expected = _generation_reference(lm, row.method, b)
            for column, value in expected.items():
                got = row.per_example[column][b]
                assert got == pytest.approx(value, rel=1e-9, abs=1e-12), (
                    row.method,
                    b,
                    column,
                )
        assert all(v > 0 for v in row.per_example["SensMax"])
        assert any(v > 0 for v in row.per_example["Infidelity"])


def test_report_definitions_and_docs_state_the_sample_counts() -> None:
    for definitions in (DEFINITIONS, GENERATION_DEFINITIONS):
        infid = definitions["Infidelity"]
        assert f"; {INFIDELITY_SAMPLES} subsets per" in infid
        assert f"one example in {INFIDELITY_SHARE}," in infid
        sensitivity = definitions["SensMax"]
        assert f" over {SENSITIVITY_SAMPLES} " in sensitivity
        assert f"one example in {SENSITIVITY_SHARE}," in sensitivity
    docs = " ".join((DOCS / "generation_metrics.rst").read_text().split())
    assert f"kept; {INFIDELITY_SAMPLES} subsets per example" in docs
    assert f"over {SENSITIVITY_SAMPLES} prompts" in docs
    assert f"one example in {INFIDELITY_SHARE} and" in docs
    assert f"on one in {SENSITIVITY_SHARE}:" in docs
