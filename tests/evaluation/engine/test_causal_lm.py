#!/usr/bin/env python3
r"""The generation benchmark on a tiny random GPT-2 in float64: its values are the
library metrics and planted-evidence accuracy on the same explanations, they do
not depend on the batch, greedy continuations are generated once for every
method, and bad choices get clear errors."""

import dataclasses
import math
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest
import torch
from captum_ext._utils.model_forward import causal_lm_forward
from captum_ext.attr._utils.continuations import left_padded, right_padded
from captum_ext.evaluation import prompt_batches
from captum_ext.evaluation.engine import causal_lm, run_benchmark
from captum_ext.evaluation.engine.causal_lm import run_generation_benchmark
from captum_ext.evaluation.names import GENERATION_METRIC_NAMES
from captum_ext.evaluation.options import BenchmarkOptions, GenerationBenchmarkOptions
from captum_ext.evaluation.planted_evidence import planted_evidence_accuracy
from captum_ext.evaluation.registry import GENERATION_METRICS, METHODS
from captum_ext.evaluation.registry.call_convention import GenerationFn
from captum_ext.evaluation.report import markdown_table, write_report
from captum_ext.evaluation.results import BenchmarkResult
from captum_ext.evaluation.timing import PairedTiming
from captum_ext.evaluation.user_data import LoadedExamples
from captum_ext.metrics import (
    generation_aopc,
    generation_log_odds,
    generation_soft_nc,
    generation_soft_ns,
    generation_sufficiency,
    GenerationMetricResult,
    TokenOptions,
)
from torch import nn, Tensor
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from tests.attr.llm_fixtures import tiny_lm_tokenizer
from tests.helpers import tiny_causal_lm, tiny_data, tiny_labelled_bert, tiny_tokenizer

# Prompts of different lengths (left padding differs by batch), continuations
# of 1-3 tokens, and evidence: positions in each prompt's own ids (<s> is 0).
PROMPTS = ["the cat sat on", "a mat", "the the cat sat on a", "on a mat"]
CONTINUATIONS = ["a mat", "the cat sat", "mat", "the cat"]
EVIDENCE = [[4, -1], [1, 2, -1], [5], [2, 3]]
# Each target token's set of needed positions (fewer steps than targets, sets
# of 1-3 positions).
EVIDENCE_SETS = [[[3, 4]], [[1], [1, 2]], [[2, 5, 6]], [[2, 3], [3]]]
METHOD_SET = ["LogAt", "AttCAT", "FeatureAblation", "Random"]
LIBRARY: Dict[str, Callable[..., GenerationMetricResult]] = {
    "AOPC": generation_aopc,
    "Sufficiency": generation_sufficiency,
    "LOdds": generation_log_odds,
    "Soft-NC": generation_soft_nc,
    "Soft-NS": generation_soft_ns,
}


# (model, tokenizer) of the tiny causal LM
LM = Tuple[PreTrainedModel, PreTrainedTokenizerFast]


@pytest.fixture(scope="module")
def lm() -> LM:
    r"""``(model, tokenizer)``: a tiny random GPT-2 in float64 (exact
    equalities) and its word-level tokenizer."""
    return tiny_causal_lm("gpt2", dtype=torch.float64), tiny_lm_tokenizer()


def prompts(evidence: bool = True, continuations: bool = True) -> LoadedExamples:
    return LoadedExamples(
        "tiny prompts",
        list(PROMPTS),
        continuations=list(CONTINUATIONS) if continuations else None,
        evidence=[list(e) for e in EVIDENCE] if evidence else None,
        evidence_sets=[list(e) for e in EVIDENCE_SETS] if evidence else None,
    )


def run(lm: LM, data: LoadedExamples, **options: Any) -> BenchmarkResult:
    options = {"methods": METHOD_SET, "progress": False, "task": "tiny", **options}
    model, tokenizer = lm
    return run_generation_benchmark(
        model, tokenizer, data, GenerationBenchmarkOptions(**options)
    )


def one_example(
    tokenizer: PreTrainedTokenizerBase, row: int
) -> Tuple[Tensor, Tensor, Tensor]:
    r"""Example ``row`` alone: ids ``[1, P]``, mask, target ``[1, T]``."""
    prompt = torch.tensor(tokenizer(PROMPTS[row])["input_ids"])
    ids, mask = left_padded([prompt], tokenizer.pad_token_id, torch.device("cpu"))
    continuation = tokenizer(CONTINUATIONS[row], add_special_tokens=False)
    target = right_padded([torch.tensor(continuation["input_ids"])], ids.device)
    return ids, mask, target


@pytest.fixture(scope="module")
def result(lm: LM) -> BenchmarkResult:
    return run(lm, prompts(), batch_size=4)


def test_values_are_the_library_metrics_and_evidence_accuracy(
    lm: LM, result: BenchmarkResult
) -> None:
    model, tokenizer = lm
    forward = causal_lm_forward(model)
    tokens = TokenOptions.from_tokenizer(tokenizer)
    for row_result in result.rows:
        explain = METHODS[row_result.method].build_generation(model, tokenizer)
        for position, row in enumerate(row_result.rows):
            ids, mask, target = one_example(tokenizer, row)
            scores = explain(ids, mask, target)  # [1, T, P]
            for column, metric in LIBRARY.items():
                options: Dict[str, int] = {}
                if column.startswith("Soft"):  # seeded by the example, as documented
                    content = [ids[0].tolist(), target[0].tolist()]
                    options["seed"] = zlib.crc32(repr(content).encode())
                direct = metric(
                    forward, ids, scores, target, (mask,), tokens=tokens, **options
                )
                expected = float(direct.score.double().nanmean())
                got = row_result.per_example[column][position]
                assert got == pytest.approx(expected, abs=1e-6, nan_ok=True), column
            special = torch.tensor(tokenizer.all_special_ids)
            ranked = mask * ~torch.isin(ids, special)  # <s> competes for no place
            assert ranked[0].tolist() == [0] + [1] * (ids.shape[1] - 1)
            steps = len(EVIDENCE_SETS[row])
            sets = torch.full((1, target.shape[1], 3), -1)
            for t, needed in enumerate(EVIDENCE_SETS[row]):
                sets[0, t, : len(needed)] = torch.tensor(needed)
            assert steps <= target.shape[1]
            for k in (1, 3):
                evidence = torch.tensor([EVIDENCE[row]])
                expected = planted_evidence_accuracy(scores, evidence, ranked, k)
                got = row_result.per_example[f"Evidence@{k}"][position]
                assert got == pytest.approx(expected, abs=1e-12)
                expected = planted_evidence_accuracy(scores, sets, ranked, k)
                got = row_result.per_example[f"EvidenceSet@{k}"][position]
                assert got == pytest.approx(expected, abs=1e-12)
        assert row_result.n == len(PROMPTS) and sorted(row_result.rows) == [0, 1, 2, 3]


def test_curves_are_the_mean_of_the_library_curves(
    lm: LM, result: BenchmarkResult
) -> None:
    model, tokenizer = lm
    forward = causal_lm_forward(model)
    tokens = TokenOptions.from_tokenizer(tokenizer)
    hard = {c: m for c, m in LIBRARY.items() if not c.startswith("Soft")}
    for row_result in result.rows:
        explain = METHODS[row_result.method].build_generation(model, tokenizer)
        for column, metric in hard.items():
            per_example = []  # each example's curve: mean over its targets
            for row in row_result.rows:
                ids, mask, target = one_example(tokenizer, row)
                scores = explain(ids, mask, target)
                direct = metric(forward, ids, scores, target, (mask,), tokens=tokens)
                per_example.append(direct.curve.double().nanmean(1)[0])
            grid, mean = row_result.curves[column]
            assert direct.levels is not None  # for mypy: a hard metric's levels
            assert grid == pytest.approx(direct.levels.tolist())
            expected = torch.stack(per_example).nanmean(0).tolist()
            assert mean == pytest.approx(expected, abs=1e-6, nan_ok=True), column
        assert not {"Soft-NC", "Soft-NS"} & set(row_result.curves)  # no levels


def test_columns_directions_and_ranking(result: BenchmarkResult) -> None:
    assert result.metrics == {
        "Evidence@1": True,
        "Evidence@3": True,
        "EvidenceSet@1": True,
        "EvidenceSet@3": True,
        "AOPC": True,
        "Sufficiency": False,
        "LOdds": False,
        "Soft-NC": True,
        "Soft-NS": True,
        "Infidelity": False,
        "SensMax": False,
    }
    assert result.task_columns("tiny") == list(result.metrics)
    top1 = [row.metrics["Evidence@1"] for row in result.rows]
    assert top1 == sorted(top1, reverse=True)
    assert {row.method for row in result.rows} == set(METHOD_SET)


def test_evidence_sets_alone_rank_the_table(lm: LM) -> None:
    data = prompts()
    data.evidence = None
    alone = run(lm, data, batch_size=4, metrics=["aopc"])
    assert list(alone.metrics) == ["EvidenceSet@1", "EvidenceSet@3", "AOPC"]
    top1 = [row.metrics["EvidenceSet@1"] for row in alone.rows]
    assert top1 == sorted(top1, reverse=True) and len(set(top1)) > 1


def test_batch_of_one_equals_batch_of_four(lm: LM, result: BenchmarkResult) -> None:
    alone = run(lm, prompts(), batch_size=1)
    by_method = {row.method: row for row in result.rows}
    for row in alone.rows:
        batched = by_method[row.method]
        assert row.rows == batched.rows
        for column, values in row.per_example.items():
            assert values == pytest.approx(
                batched.per_example[column], abs=1e-6, nan_ok=True
            ), (row.method, column)
        assert len(row.ratios) == 4 and len(batched.ratios) == 1


def _unit_forward_shapes(
    lm: LM, method: str, monkeypatch: pytest.MonkeyPatch
) -> Tuple[List[List[Tuple[int, ...]]], BenchmarkResult]:
    r"""The ``input_ids`` shapes of the forward passes ``method``'s time is
    divided by, per batch, on the four prompts in one batch."""
    batches: List[List[Tuple[int, ...]]] = []  # per batch: (batch, len) per pass
    timing_unit = [False]
    model, real_timing = lm[0], causal_lm.time_paired

    def record(
        module: nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> None:
        if timing_unit[0]:
            ids = args[0] if args else kwargs.get("input_ids")
            if ids is None:
                ids = kwargs["inputs_embeds"]
            batches[-1].append(tuple(ids.shape[:2]))

    def timed(
        forward: Callable[[], Any],
        method_run: Callable[[], Any],
        clock: Callable[[], float],
    ) -> Tuple[Any, PairedTiming]:
        batches.append([])
        timing_unit[0] = True
        forward()
        timing_unit[0] = False
        return real_timing(lambda: None, method_run, clock)

    monkeypatch.setattr(causal_lm, "time_paired", timed)
    hook = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        result = run(lm, prompts(), methods=[method], batch_size=4, metrics=["aopc"])
    finally:
        hook.remove()
    return batches, result


def test_time_unit_is_one_forward_at_the_methods_own_batch_size(
    lm: LM, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer = lm
    # CAT runs the batch at once: one pass over the padded batch (P + T - 1).
    batches, _ = _unit_forward_shapes(lm, "CAT", monkeypatch)
    lengths = [
        (len(tokenizer(p)["input_ids"]), len(tokenizer(c)["input_ids"]) - 1)
        for p, c in zip(PROMPTS, CONTINUATIONS)  # continuations without <s>
    ]
    width = max(p for p, _ in lengths) + max(t for _, t in lengths) - 1
    assert batches == [[(4, width)]]
    # Captum's LLM API takes one prompt: a pass per prompt alone, unpadded.
    batches, result = _unit_forward_shapes(lm, "FeatureAblation", monkeypatch)
    alone = sorted((1, p + t - 1) for p, t in lengths)
    assert len(batches) == 1 and sorted(batches[0]) == alone
    one_at_a_time = result.config["generation"]["tiny"]["one_prompt_at_a_time"]
    assert one_at_a_time == ["FeatureAblation"]


def test_kept_examples_are_each_methods_target_by_prompt_scores(
    lm: LM, result: BenchmarkResult
) -> None:
    examples = result.generation_examples["tiny"]
    assert len(examples) == 3  # n_examples default
    first = examples[0]
    assert first.prompt_tokens == ["<s>", "the", "cat", "sat", "on"]
    assert first.target_tokens == ["a", "mat"] and not first.generated
    ids, mask, target = one_example(lm[1], 0)
    for name in METHOD_SET:
        explain = METHODS[name].build_generation(*lm)
        torch.testing.assert_close(
            first.scores[name], explain(ids, mask, target)[0].float()
        )
    # The planted evidence rides along, for the heatmaps to outline.
    assert [e.evidence for e in examples] == [list(e) for e in EVIDENCE[:3]]
    document = result.to_dict()
    assert document["generation_examples"]["tiny"][0]["target_tokens"] == ["a", "mat"]
    assert document["generation_examples"]["tiny"][0]["evidence"] == list(EVIDENCE[0])
    assert document["config"]["generation"]["tiny"]["continuations"] == "given"


def test_greedy_continuations_are_generated_once_for_every_method(
    lm: LM, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: List[torch.Size] = []  # the prompt ids' shape per call
    generate = prompt_batches.generate_continuations

    def counted(*args: Any, **kwargs: Any) -> List[Tensor]:
        calls.append(args[2].shape)
        return generate(*args, **kwargs)

    monkeypatch.setattr(prompt_batches, "generate_continuations", counted)
    data = prompts(evidence=False, continuations=False)
    result = run(lm, data, batch_size=2, max_new_tokens=2, n_examples=4)
    assert len(calls) == 2  # one per batch of 2 prompts, not one per method
    assert "Evidence@1" not in result.metrics
    for example in result.generation_examples["tiny"]:
        assert example.generated and 1 <= len(example.target_tokens) <= 2
        shapes = {tuple(scores.shape) for scores in example.scores.values()}
        assert len(shapes) == 1  # every method explains the same continuation
    assert result.config["generation"]["tiny"]["max_new_tokens"] == 2


@pytest.mark.parametrize(
    "options, data, message",
    [
        ({"methods": ["Saliency"]}, {}, "unknown method for generated text"),
        ({"metrics": ["kendall_tau"]}, {}, "unknown metric for generated text"),
        ({"metrics": ["aopc", "aopc"]}, {}, "listed twice"),
        ({"methods": []}, {}, "no method for generated text chosen"),
        ({"max_new_tokens": 3}, {}, "max_new_tokens applies when the model"),
        ({}, {"continuations": False}, "planted evidence marks"),
        ({"batch_size": 0}, {}, "batch_size"),
    ],
)
def test_bad_choices_get_clear_errors(
    lm: LM, options: Dict[str, Any], data: Dict[str, bool], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        run(lm, prompts(**data), **options)


def test_evidence_outside_the_prompt_is_refused(lm: LM) -> None:
    data = prompts()
    assert data.evidence is not None  # for mypy: prompts() plants evidence
    data.evidence[1] = [9, 1, 1]
    with pytest.raises(ValueError, match="row 1's evidence positions"):
        run(lm, data)


def test_a_classifier_is_refused(lm: LM) -> None:
    with pytest.raises(Exception, match="causal"):
        run((tiny_labelled_bert(), lm[1]), prompts(evidence=False))


def test_registry_metric_names_are_the_cli_names() -> None:
    assert tuple(GENERATION_METRICS) == GENERATION_METRIC_NAMES
    columns = [c for spec in GENERATION_METRICS.values() for c in spec.columns]
    assert columns == [
        "AOPC",
        "Sufficiency",
        "LOdds",
        "Soft-NC",
        "Soft-NS",
        "Infidelity",
        "SensMax",
    ]


def test_combined_with_a_classifier_each_task_keeps_its_table(
    result: BenchmarkResult, tmp_path: Path
) -> None:
    classifier = run_benchmark(
        tiny_labelled_bert(),
        tiny_tokenizer(),
        tiny_data(4),
        BenchmarkOptions(
            methods=["AttCAT", "Random"], task="cls", progress=False, max_length=16
        ),
    )
    combined = BenchmarkResult.combine([classifier, result])
    alone = markdown_table(classifier).split("\n\n`*`")[0]
    assert markdown_table(combined).startswith(alone + "\n\n### tiny (n=4)")
    assert combined.task_columns("cls") == list(classifier.metrics)
    assert combined.task_columns("tiny") == list(result.metrics)
    table = combined.table()
    assert math.isnan(table[0]["Evidence@1"]) and not math.isnan(table[2]["AOPC"])
    paths = write_report(combined, tmp_path)
    page = paths["html"].read_text(encoding="utf-8")
    # One heatmap per method and kept example; both kinds of definitions.
    assert page.count("<tr><th>mat</th>") == len(METHOD_SET) * 2
    assert "Classifiers: area over the perturbation curve" in page
    assert "Generated text: comprehensiveness" in page
    assert "planted-evidence accuracy" in page
    # The generation task's curves, labelled with p(y_t), not p(class).
    assert (tmp_path / "tiny_AOPC_curve.png").exists()
    assert "drop in p(y_t) at this level (y) against the fraction of prompt" in page
    assert "drop in p(class) at this level" in page  # the classifier's, apart


@pytest.mark.integration
def test_on_the_default_generator_attcat_finds_the_planted_evidence() -> None:
    from captum_ext.evaluation.tasks import benchmark_default_tasks

    result = benchmark_default_tasks(
        8,
        ["recall"],
        methods=["AttCAT", "FeatureAblation", "Random"],
        metrics=["aopc"],
        progress=False,
    )
    rows = {row.method: row.metrics for row in result.rows}
    # Measured on these 8 held-out prompts (16 targets), AttCAT with its earlier
    # alpha="received": Evidence@1 AttCAT 0.875,
    # FeatureAblation 0.125 (its top-1 goes to the queried key as often: any
    # necessary token sends log p to about -10), Random 0.0; Evidence@3 0.94,
    # 0.88, 0.19; AOPC 0.96, 0.95, 0.82.
    assert rows["AttCAT"]["Evidence@1"] >= rows["Random"]["Evidence@1"] + 0.5
    assert rows["FeatureAblation"]["Evidence@3"] >= rows["Random"]["Evidence@3"] + 0.4
    assert rows["AttCAT"]["AOPC"] > rows["Random"]["AOPC"] + 0.05
    assert [row.method for row in result.rows][0] == "AttCAT"  # ranked first


LOGAT = METHODS["LogAt"]


def _zero_on_first_row(model: nn.Module, tokenizer: Any) -> GenerationFn:
    explain = LOGAT.build_generation(model, tokenizer)  # the registry's own

    def flat_first(ids: Tensor, mask: Tensor, target: Tensor) -> Tensor:
        scores = explain(ids, mask, target)  # [batch, T, P]
        return torch.cat([torch.zeros_like(scores[:1]), scores[1:]])

    return flat_first


def test_an_example_without_signal_is_left_out_of_every_column(
    lm: LM, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = dataclasses.replace(LOGAT, generation=_zero_on_first_row)
    monkeypatch.setitem(METHODS, "LogAt", spec)
    result = run(lm, prompts(), methods=["LogAt"], batch_size=4)
    row = result.rows[0]
    assert len(row.constant) == 1  # the batch's first prompt (batches by length)
    flat = row.rows.index(row.constant[0])
    for column, values in row.per_example.items():
        assert math.isnan(values[flat]), column
    # The others are scored (Soft-NC and Evidence have their own NaN cases).
    for column in ("AOPC", "Sufficiency", "LOdds"):
        values = row.per_example[column]
        assert all(map(math.isfinite, values[:flat] + values[flat + 1 :]))
    assert "| 1/4 |" in markdown_table(result)
