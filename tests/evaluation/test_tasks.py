#!/usr/bin/env python3
r"""The built-in tasks go through the same engines: default model + data in,
one combined result out; the decoders' training texts are read only when a
chosen method fits decoders; recall is the default generator on held-out
prompts with their planted evidence."""

import pytest
from captum_ext.defaults.data import TaskExamples
from captum_ext.defaults.generator import DEFAULT_RECIPE
from captum_ext.evaluation import tasks
from captum_ext.evaluation.options import BenchmarkOptions

from tests.helpers import (
    TINY_LABEL_NAMES,
    tiny_labelled_bert,
    tiny_recall_generator,
    TINY_TEXTS,
    tiny_tokenizer,
)


@pytest.fixture
def splits_read(monkeypatch, no_decoder_fitting):
    read = []

    def load_split(task, split="test"):
        read.append((task, split))
        return TaskExamples(list(TINY_TEXTS), [0, 1, 2, 0, 1, 2], TINY_LABEL_NAMES)

    monkeypatch.setattr(tasks, "load_split", load_split)
    monkeypatch.setattr(
        tasks,
        "load_default_model",
        lambda name, device=None: (tiny_labelled_bert(), tiny_tokenizer()),
    )
    monkeypatch.setattr(
        tasks, "load_default_generator", lambda device=None: tiny_recall_generator()
    )
    return read


def test_the_three_tasks_in_one_result_without_reading_training_texts(splits_read):
    result = tasks.benchmark_default_tasks(
        3, methods=["Random", "AttCAT"], metrics=["aopc"], progress=False
    )
    assert [(r.task, r.method) for r in result.rows][:4] == [
        ("sentiment", "Random"),
        ("sentiment", "AttCAT"),
        ("source", "Random"),
        ("source", "AttCAT"),
    ]
    assert {(r.task, r.method) for r in result.rows[4:]} == {
        ("recall", "Random"),
        ("recall", "AttCAT"),
    }
    assert all(r.n == 3 for r in result.rows)
    assert result.config["tasks"] == {"sentiment": 3, "source": 3, "recall": 3}
    assert result.config["max_length"]["sentiment"] == 64
    assert set(result.examples) == set(result.layer_maps) == {"sentiment", "source"}
    assert result.generation_tasks == ["recall"]
    assert result.task_columns("sentiment") == ["AOPC"]
    assert result.task_columns("recall") == ["Evidence@1", "Evidence@3", "AOPC"]
    assert splits_read == [("sentiment", "test"), ("source", "test")]


def test_recall_data_is_held_out_with_evidence_on_the_answer():
    _, tokenizer = tiny_recall_generator()
    data = tasks.recall_data(6, tokenizer)
    assert data.texts == [e.prompt for e in DEFAULT_RECIPE.task.sample(6, 2)]
    assert DEFAULT_RECIPE.seeds()[2] == 2  # the test seed: not training's 1000 +
    assert data.continuations is not None and data.evidence is not None
    for prompt, continuation, evidence in zip(
        data.texts, data.continuations, data.evidence
    ):
        ids = tokenizer(prompt)["input_ids"]
        answer = tokenizer(continuation, add_special_tokens=False)["input_ids"]
        assert [ids[position] for position in evidence] == answer


def test_a_task_without_a_chosen_method_is_skipped_with_a_notice(splits_read):
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
    assert result.task_columns("recall") == ["Evidence@1", "Evidence@3", "Soft-NC"]
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="any task"):
        tasks.benchmark_default_tasks(
            2, ["recall"], methods=["Saliency"], progress=False
        )


def test_decoded_grad_cam_reads_the_sentiment_training_texts_once(splits_read):
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


def test_bad_task_and_n():
    with pytest.raises(ValueError, match="task must be one of"):
        tasks.default_task("nope", 3)
    with pytest.raises(ValueError, match="n must be >= 1"):
        tasks.default_task("sentiment", 0)
