#!/usr/bin/env python3
r"""The built-in tasks go through the same engine: default model + data in,
one combined result out; the decoders' training texts are read only when a
chosen method fits decoders."""

import pytest
from captum_ext.defaults.data import TaskExamples
from captum_ext.evaluation import tasks

from tests.helpers import (
    TINY_LABEL_NAMES,
    tiny_labelled_bert,
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
    return read


def test_both_tasks_in_one_result_without_reading_training_texts(splits_read):
    result = tasks.benchmark_default_tasks(
        3, methods=["Random", "AttCAT"], metrics=["aopc"], progress=False
    )
    assert [(r.task, r.method) for r in result.rows] == [
        ("sentiment", "Random"),
        ("sentiment", "AttCAT"),
        ("source", "Random"),
        ("source", "AttCAT"),
    ]
    assert all(r.n == 3 for r in result.rows)
    assert result.config["tasks"] == {"sentiment": 3, "source": 3}
    assert result.config["max_length"] == {"sentiment": 64, "source": 64}
    assert set(result.examples) == set(result.layer_maps) == {"sentiment", "source"}
    assert splits_read == [("sentiment", "test"), ("source", "test")]


def test_decoded_grad_cam_reads_the_sentiment_training_texts_once(splits_read):
    tasks.benchmark_default_tasks(
        2, methods=["Decoded Grad-CAM"], metrics=["aopc"], progress=False
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
