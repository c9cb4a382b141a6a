#!/usr/bin/env python3
r"""The built-in tasks go through the same engines: default model + data in,
one combined result out; the decoders' training texts are read only when a
chosen method fits decoders; recall is the default generator on held-out
prompts with their planted evidence."""

from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any, List, Tuple

import pytest
import torch
from captum_ext._utils.model_forward import ImageClassifierLogits
from captum_ext._utils.progress import duration
from captum_ext.attr import AttCAT
from captum_ext.defaults import digits
from captum_ext.defaults.data import TaskExamples
from captum_ext.defaults.digits import digits_cache_name, DIGITS_RECIPE, digits_split
from captum_ext.defaults.flags import FlagTask
from captum_ext.defaults.generator import (
    DEFAULT_RECIPE,
    FLAG_RECIPE,
    generator_cache_name,
    GeneratorRecipe,
)
from captum_ext.evaluation import tasks
from captum_ext.evaluation.names import IMAGE_METHOD_NAMES
from captum_ext.evaluation.options import BenchmarkOptions
from captum_ext.evaluation.report import metric_definitions, write_report
from captum_ext.metrics import aopc, PatchTokens

from tests.helpers import (
    TINY_LABEL_NAMES,
    tiny_labelled_bert,
    tiny_recall_generator,
    TINY_TEXTS,
    tiny_tokenizer,
)


@pytest.fixture
def splits_read(
    monkeypatch: pytest.MonkeyPatch, no_decoder_fitting: None
) -> List[Tuple[str, str]]:
    r"""The (task, split) pairs read, in order, with tiny models and texts."""
    read: List[Tuple[str, str]] = []

    def load_split(task: str, split: str = "test") -> TaskExamples:
        read.append((task, split))
        return TaskExamples(list(TINY_TEXTS), [0, 1, 2, 0, 1, 2], TINY_LABEL_NAMES)

    monkeypatch.setattr(tasks, "load_split", load_split)
    monkeypatch.setattr(
        tasks,
        "load_default_model",
        lambda name, device=None: (tiny_labelled_bert(), tiny_tokenizer()),
    )
    monkeypatch.setattr(
        tasks,
        "load_default_generator",
        lambda device, recipe: tiny_recall_generator(task=recipe.task),
    )
    return read


def test_the_tasks_in_one_result_without_reading_training_texts(
    splits_read: List[Tuple[str, str]],
) -> None:
    # recall_long (1,000-token prompts) is left out to keep the test fast
    result = tasks.benchmark_default_tasks(
        3,
        ("sentiment", "source", "recall", "flags"),
        methods=["Random", "AttCAT"],
        metrics=["aopc"],
        progress=False,
    )
    assert [(r.task, r.method) for r in result.rows][:4] == [
        ("sentiment", "Random"),
        ("sentiment", "AttCAT"),
        ("source", "Random"),
        ("source", "AttCAT"),
    ]
    assert {(r.task, r.method) for r in result.rows[4:]} == {
        (task, method)
        for task in ("recall", "flags")
        for method in ("Random", "AttCAT")
    }
    assert all(r.n == 3 for r in result.rows)
    counts = {"sentiment": 3, "source": 3, "recall": 3, "flags": 3}
    assert result.config["tasks"] == counts
    assert result.config["max_length"]["sentiment"] == 64
    assert set(result.examples) == set(result.layer_maps) == {"sentiment", "source"}
    assert result.generation_tasks == ["recall", "flags"]
    assert result.task_columns("sentiment") == ["AOPC"]
    evidence = ["Evidence@1", "Evidence@3", "EvidenceSet@1", "EvidenceSet@3"]
    assert result.task_columns("recall") == evidence + ["AOPC"]
    # no single token decides a flag sum: only the set is scored
    assert result.task_columns("flags") == evidence[2:] + ["AOPC"]
    assert splits_read == [("sentiment", "test"), ("source", "test")]


def test_recall_data_is_held_out_with_evidence_on_the_answer() -> None:
    _, tokenizer = tiny_recall_generator()
    data = tasks.recall_data(6, tokenizer)
    assert data.texts == [e.prompt for e in DEFAULT_RECIPE.task.sample(6, 2)]
    assert DEFAULT_RECIPE.seeds()[2] == 2  # the test seed: not training's 1000 +
    # For mypy: recall data has continuations, evidence and evidence sets.
    assert data.continuations is not None and data.evidence is not None
    assert data.evidence_sets is not None
    for prompt, continuation, evidence, sets in zip(
        data.texts, data.continuations, data.evidence, data.evidence_sets
    ):
        ids = tokenizer(prompt)["input_ids"]
        answer = tokenizer(continuation, add_special_tokens=False)["input_ids"]
        assert [ids[position] for position in evidence] == answer
        # each value's set: the queried pair's key (the query's token), the value
        assert [[ids[p] for p in s] for s in sets] == [[ids[-1], a] for a in answer]
        assert [s[1] for s in sets] == evidence


def test_flag_data_has_the_two_flags_as_its_only_evidence() -> None:
    recipe = tasks.GENERATION_TASKS["flags"][0]
    _, tokenizer = tiny_recall_generator(task=recipe.task)
    data = tasks.recall_data(20, tokenizer, recipe)
    assert data.evidence is None
    # For mypy: a flag sum's continuations and sets, of a FlagTask.
    assert data.continuations is not None and data.evidence_sets is not None
    assert isinstance(recipe.task, FlagTask)
    for prompt, continuation, sets in zip(
        data.texts, data.continuations, data.evidence_sets
    ):
        words = tokenizer.convert_ids_to_tokens(tokenizer(prompt)["input_ids"])
        (flags,) = sets  # one label, its set: the two flags
        assert [p for p, w in enumerate(words) if w.startswith("f")] == flags
        total = sum(int(words[p][1:]) for p in flags)
        assert continuation == f"a{total % recipe.task.n_flags}"
        assert continuation not in words  # the answer copies no prompt token


def test_long_recall_has_16_prompts_of_over_1024_tokens_at_most() -> None:
    recipe, most = tasks.GENERATION_TASKS["recall_long"]
    assert most == 16
    _, tokenizer = tiny_recall_generator(task=recipe.task)
    data = tasks.recall_data(4, tokenizer, recipe)
    assert min(len(tokenizer(t)["input_ids"]) for t in data.texts) >= 1024
    # For mypy: recall data has continuations and evidence.
    assert data.continuations is not None and data.evidence is not None
    for prompt, continuation, evidence in zip(
        data.texts, data.continuations, data.evidence
    ):
        ids = tokenizer(prompt)["input_ids"]
        answer = tokenizer(continuation, add_special_tokens=False)["input_ids"]
        assert [ids[position] for position in evidence] == answer
        assert ids.count(ids[-1]) == 2  # the queried key: unique among hundreds


def test_a_task_cap_bounds_its_prompts(
    splits_read: List[Tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(tasks.GENERATION_TASKS, "recall", (DEFAULT_RECIPE, 2))
    result = tasks.benchmark_default_tasks(
        3, ["recall"], methods=["Random"], metrics=["aopc"], progress=False
    )
    assert result.config["tasks"] == {"recall": 2}


def test_a_task_without_a_chosen_method_is_skipped_with_a_notice(
    splits_read: List[Tuple[str, str]],
) -> None:
    with pytest.warns(UserWarning, match="task recall skipped: none of the chosen"):
        result = tasks.benchmark_default_tasks(
            2, methods=["Saliency"], metrics=["aopc"], progress=False
        )
    assert {r.task for r in result.rows} == {"sentiment", "source"}
    with pytest.warns(UserWarning, match="task sentiment skipped"):
        result = tasks.run_default_tasks(
            2,
            ["sentiment", "recall"],
            BenchmarkOptions(methods=["LogAt"], metrics=["soft_nc"], progress=False),
        )
    assert [r.task for r in result.rows] == ["recall"]
    evidence = ["Evidence@1", "Evidence@3", "EvidenceSet@1", "EvidenceSet@3"]
    assert result.task_columns("recall") == evidence + ["Soft-NC"]
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="any task"):
        tasks.benchmark_default_tasks(
            2, ["recall"], methods=["Saliency"], progress=False
        )


def test_decoded_grad_cam_reads_the_sentiment_training_texts_once(
    splits_read: List[Tuple[str, str]],
) -> None:
    tasks.benchmark_default_tasks(
        2,
        ("sentiment", "source"),
        methods=["Decoded Grad-CAM"],
        metrics=["aopc"],
        progress=False,
    )
    assert splits_read == [
        ("sentiment", "train"),
        ("sentiment", "test"),
        ("source", "test"),
    ]


def test_bad_task_and_n() -> None:
    with pytest.raises(ValueError, match="task must be one of"):
        tasks.default_task("nope", 3)
    with pytest.raises(ValueError, match="n must be >= 1"):
        tasks.default_task("sentiment", 0)


def test_the_first_run_is_estimated_from_the_measured_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAPTUM_EXT_CACHE", str(tmp_path))
    estimate = tasks.first_run_estimate(["sentiment", "recall"], 32)
    pieces = tasks.PREPARATION_SECONDS
    per_example = tasks.BENCHMARK_SECONDS_PER_EXAMPLE
    bench = 32 * (per_example["sentiment"] + per_example["recall"])
    # The generator trains in a second process meanwhile: the longer side counts.
    ahead = pieces["sentiment"] + pieces["decoders"]
    total = max(ahead, pieces["recall"]) + bench
    assert f"sentiment {duration(pieces['sentiment'])}" in estimate
    assert f"second process: recall {duration(pieces['recall'])})" in estimate
    assert "source" not in estimate
    assert f"(about {duration(bench)})" in estimate
    assert f"about {duration(total)} in all" in estimate
    for name in ("default-sentiment-v1", "fitted-decoder-v1-x"):
        (tmp_path / name).mkdir()
    # Nothing to overlap it with: the generator alone, in this process.
    alone = tasks.first_run_estimate(["sentiment", "recall"], 32)
    assert (
        "second process" not in alone
        and f"(recall {duration(pieces['recall'])})" in alone
    )
    assert f"about {duration(pieces['recall'] + bench)} in all" in alone
    (tmp_path / generator_cache_name()).mkdir()
    cached = tasks.first_run_estimate(["sentiment", "recall"], 32)
    assert "preparing" not in cached and str(tmp_path) in cached
    assert f"about {duration(bench)} in all" in cached
    source = tasks.first_run_estimate(["source"], 8)
    assert f"source {duration(pieces['source'])}" in source
    # digits: its preparation (no decoders), and 8 images per example.
    images = tasks.first_run_estimate(["digits"], 16)
    bench = 128 * per_example["digits"]
    assert f"(digits {duration(pieces['digits'])})" in images
    assert f"about {duration(pieces['digits'] + bench)} in all" in images
    (tmp_path / digits_cache_name()).mkdir()
    assert "preparing" not in tasks.first_run_estimate(["digits"], 16)


def test_the_benchmark_estimate_scales_with_n_up_to_a_task_s_cap() -> None:
    per_example = tasks.BENCHMARK_SECONDS_PER_EXAMPLE
    assert tasks.benchmark_seconds(["flags"], 10) == 10 * per_example["flags"]
    # recall_long runs 16 prompts at most, whatever n.
    assert (
        tasks.benchmark_seconds(["recall_long"], 64) == 16 * per_example["recall_long"]
    )
    both = tasks.benchmark_seconds(["flags", "recall_long"], 8)
    assert both == 8 * (per_example["flags"] + per_example["recall_long"])
    # digits runs 8 images per example, at most its 359 held-out ones.
    assert tasks.task_examples("digits", 4) == 32
    assert tasks.task_examples("digits", 64) == len(digits_split("test")) == 359


def _tiny_digits_vit() -> Any:
    r"""A random float32 ViT with the default digits ViT's input and classes."""
    torch.manual_seed(0)
    small = replace(DIGITS_RECIPE, hidden_size=16, heads=2, intermediate_size=32)
    return digits._model(small).eval()


def test_digits_runs_the_vit_methods_on_patch_tokens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    model = _tiny_digits_vit()
    monkeypatch.setattr(tasks, "load_default_vit", lambda device=None: model)
    result = tasks.benchmark_default_tasks(
        1, ("digits",), metrics=["aopc", "infidelity"], progress=False
    )
    assert [r.method for r in result.rows] == list(IMAGE_METHOD_NAMES)
    assert all(r.n == tasks.IMAGES_PER_EXAMPLE for r in result.rows)
    assert result.task_columns("digits") == ["AOPC", "Infidelity"]
    # The engine's AOPC is the library's on the images, masking patches.
    images = digits_split("test").images[: tasks.IMAGES_PER_EXAMPLE]
    view = PatchTokens(images, 4)
    forward = view.forward_func(ImageClassifierLogits(model))
    with torch.no_grad():
        target = model(pixel_values=images).logits.argmax(-1)
    scores = AttCAT(model).attribute(images, target=target)
    expected = aopc(forward, view.input_ids, scores, target, tokens=view.tokens)
    row = next(r for r in result.rows if r.method == "AttCAT")
    want = expected.score[row.rows].tolist()
    assert row.per_example["AOPC"] == pytest.approx(want, abs=1e-5)
    # GlobEnc reads token ids: left out of the image task, not an error.
    chosen = tasks.benchmark_default_tasks(
        1, ("digits",), methods=["GlobEnc", "CAT"], metrics=["aopc"], progress=False
    )
    assert [r.method for r in chosen.rows] == ["CAT"]
    # The report draws the kept images with their patch scores.
    paths = write_report(result, tmp_path)
    assert (tmp_path / "digits_patches.png").stat().st_size > 1000
    assert 'alt="digits_patches"' in paths["html"].read_text()
    assert "(digits_patches.png)" in paths["markdown"].read_text()
    # Its columns are defined on patches, and its examples say how they are named.
    definitions = dict(metric_definitions(result))
    assert "top-ranked patches are masked" in definitions["AOPC"]
    assert "replaced by the baseline" in definitions["Infidelity"]
    assert "token" not in definitions["AOPC"] + definitions["Infidelity"]
    assert "row and column in the patch grid" in paths["html"].read_text()


@pytest.mark.parametrize("others_cached", [False, True], ids=["overlap", "alone"])
def test_generators_train_alongside_only_what_overlaps(
    others_cached: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r"""The generators of the chosen generation tasks go to a second process
    when the classifier, decoders or ViT are prepared meanwhile, not when they
    alone are missing (as the estimate counts)."""
    monkeypatch.setenv("CAPTUM_EXT_CACHE", str(tmp_path))
    if others_cached:
        for name in (
            "default-sentiment-v1",
            "fitted-decoder-v1-x",
            digits_cache_name(),
        ):
            (tmp_path / name).mkdir()
    started: List[List[GeneratorRecipe]] = []

    def recorded(recipes: List[GeneratorRecipe]) -> "nullcontext[None]":
        started.append(recipes)
        return nullcontext()

    monkeypatch.setattr(tasks, "generators_trained_alongside", recorded)
    with tasks.preparing_generators_alongside(
        ["sentiment", "digits", "recall", "flags"]
    ):
        pass
    assert started == [[] if others_cached else [DEFAULT_RECIPE, FLAG_RECIPE]]
