#!/usr/bin/env python3
r"""load_data: every file format gives the same examples; every kind of bad data
is one DataError naming the file and the fix; nothing touches the network or
leaves a cache behind."""

import json
import socket
import tempfile
from pathlib import Path

import datasets
import pandas as pd
import pytest
from captum_ext.evaluation.user_data import DataError, load_data, LoadedExamples

TEXTS = ["a fine film", "dull and long", "not bad at all", "what a mess", "loved it"]
PAIRS = ["it is good", "it is great", "it is fine", "it is bad", "it is good"]
LABELS = [1, 0, 1, 0, 1]
LABEL2ID = {"negative": 0, "positive": 1}
NAMES = [["negative", "positive"][label] for label in LABELS]


def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {"text": TEXTS, "premise": PAIRS, "label": LABELS, "name": NAMES}
    )


def write(directory: Path, suffix: str, table: pd.DataFrame) -> Path:
    path = directory / f"data{suffix}"
    if suffix == ".csv":
        table.to_csv(path, index=False)
    elif suffix == ".tsv":
        table.to_csv(path, sep="\t", index=False)
    elif suffix == ".jsonl":
        table.to_json(path, orient="records", lines=True)
    elif suffix == ".json":
        path.write_text(json.dumps(table.to_dict(orient="records")))
    elif suffix == ".parquet":
        table.to_parquet(path)
    else:
        datasets.Dataset.from_pandas(table).save_to_disk(str(path))
    return path


FORMATS = [".csv", ".tsv", ".jsonl", ".json", ".parquet", "_saved"]


@pytest.mark.parametrize("suffix", FORMATS)
def test_every_format_gives_the_same_examples(tmp_path: Path, suffix: str) -> None:
    path = write(tmp_path, suffix, frame())
    data = load_data(path, text_pair_column="premise", label_column="label")
    assert data.texts == TEXTS and data.text_pairs == PAIRS
    assert data.labels == LABELS and data.rows == list(range(5))
    assert len(data) == 5 and data.source == str(path)
    assert data.head(2).texts == TEXTS[:2] and data.head(2).labels == LABELS[:2]


def test_without_label_column_there_are_no_labels(tmp_path: Path) -> None:
    data = load_data(write(tmp_path, ".csv", frame()))
    assert data.labels is None and data.text_pairs is None and data.label_names is None


def test_label_names_map_through_label2id(tmp_path: Path) -> None:
    data = load_data(
        write(tmp_path, ".jsonl", frame()), label_column="name", label2id=LABEL2ID
    )
    assert data.labels == LABELS
    assert data.label_names == ["negative", "positive"]


def test_class_label_feature_gives_names(tmp_path: Path) -> None:
    table = datasets.Dataset.from_dict(
        {"text": TEXTS, "label": LABELS},
        features=datasets.Features(
            text=datasets.Value("string"),
            label=datasets.ClassLabel(names=["neg", "pos"]),
        ),
    )
    table.save_to_disk(str(tmp_path / "saved"))
    data = load_data(tmp_path / "saved", label_column="label")
    assert data.labels == LABELS and data.label_names == ["neg", "pos"]


def test_dataset_dict_split(tmp_path: Path) -> None:
    splits = datasets.DatasetDict(
        train=datasets.Dataset.from_dict({"text": TEXTS[:3]}),
        test=datasets.Dataset.from_dict({"text": TEXTS[3:]}),
    )
    splits.save_to_disk(str(tmp_path / "dd"))
    assert load_data(tmp_path / "dd", split="test").texts == TEXTS[3:]
    with pytest.raises(
        DataError, match="choose a split with --split; it has test, train"
    ):
        load_data(tmp_path / "dd")
    with pytest.raises(DataError, match="not 'dev'"):
        load_data(tmp_path / "dd", split="dev")


def test_seeded_shuffle_then_limit_keeps_source_rows(tmp_path: Path) -> None:
    path = write(tmp_path, ".csv", frame())
    data = load_data(path, label_column="label", seed=3, limit=3)
    again = load_data(path, label_column="label", seed=3, limit=3)
    assert data.rows == again.rows and len(data) == 3
    assert data.rows != [0, 1, 2]  # seed 3 moves the first rows
    assert data.texts == [TEXTS[row] for row in data.rows]
    assert data.labels == [LABELS[row] for row in data.rows]
    assert load_data(path, limit=2).rows == [0, 1]


def test_select_keeps_every_column_aligned() -> None:
    data = LoadedExamples("mem", TEXTS, PAIRS, LABELS, [10, 11, 12, 13, 14])
    picked = data.select([4, 1])
    assert picked.texts == [TEXTS[4], TEXTS[1]] and picked.text_pairs == [
        PAIRS[4],
        PAIRS[1],
    ]
    assert picked.labels == [1, 0] and picked.rows == [14, 11]
    with pytest.raises(ValueError, match="differ in length"):
        LoadedExamples("mem", TEXTS, labels=[1])


# ------------------------------------------------------------------ bad data
def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="nope.csv: no such file"):
        load_data(tmp_path / "nope.csv")


def test_unknown_format(tmp_path: Path) -> None:
    (tmp_path / "data.xlsx").write_text("x")
    with pytest.raises(DataError, match=r"unknown format '.xlsx'; use one of .csv"):
        load_data(tmp_path / "data.xlsx")


def test_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "data.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match=r"data.parquet: cannot be read as PARQUET"):
        load_data(tmp_path / "data.parquet")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(DataError, match="not a directory written by save_to_disk"):
        load_data(tmp_path / "empty_dir")


def test_missing_column_lists_the_columns(tmp_path: Path) -> None:
    path = write(tmp_path, ".csv", frame())
    with pytest.raises(DataError) as error:
        load_data(path, text_column="sentence")
    message = str(error.value)
    assert str(path) in message and "no column 'sentence'" in message
    assert "'text', 'premise', 'label', 'name'" in message


def test_empty_text_names_the_rows(tmp_path: Path) -> None:
    table = frame()
    table.loc[1, "text"] = "   "
    table.loc[3, "text"] = None
    with pytest.raises(DataError, match=r"empty 'text' in row\(s\) 1, 3"):
        load_data(write(tmp_path, ".jsonl", table))
    table = frame()
    table.loc[2, "premise"] = ""
    with pytest.raises(DataError, match=r"empty 'premise' in row\(s\) 2"):
        load_data(write(tmp_path, ".parquet", table), text_pair_column="premise")


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_texts_that_read_like_missing_values_are_texts(
    tmp_path: Path, suffix: str
) -> None:
    words = ["NA", "null", "NaN", "None", "N/A", "nan", "#N/A", "n/a"]
    table = pd.DataFrame({"text": words, "premise": words[::-1], "label": [1] * 8})
    table.loc[2, "label"] = None
    path = write(tmp_path, suffix, table)
    data = load_data(path, text_pair_column="premise")
    assert (data.texts, data.text_pairs) == (words, words[::-1])
    with pytest.raises(DataError, match=r"no label in row\(s\) 2"):
        load_data(path, label_column="label")


def test_number_column_as_text(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="column 'label' must hold text"):
        load_data(write(tmp_path, ".csv", frame()), text_column="label")


def test_label_outside_the_model_classes(tmp_path: Path) -> None:
    table = frame()
    table.loc[4, "label"] = 2
    with pytest.raises(DataError) as error:
        load_data(write(tmp_path, ".csv", table), label_column="label", num_labels=2)
    assert "row(s) 4" in str(error.value) and "valid labels are 0..1" in str(
        error.value
    )
    with pytest.raises(DataError, match=r"0..1 \(negative, positive\)"):
        load_data(
            write(tmp_path, ".csv", table), label_column="label", label2id=LABEL2ID
        )


def test_unknown_label_name_lists_valid_names(tmp_path: Path) -> None:
    table = frame()
    table.loc[2, "name"] = "neutral"
    with pytest.raises(DataError) as error:
        load_data(
            write(tmp_path, ".csv", table), label_column="name", label2id=LABEL2ID
        )
    message = str(error.value)
    assert "unknown label 'neutral' in row(s) 2" in message
    assert "'negative', 'positive'" in message


def test_label_names_without_label2id(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="holds label names, but the model has no"):
        load_data(write(tmp_path, ".csv", frame()), label_column="name")


def test_missing_and_fractional_labels(tmp_path: Path) -> None:
    table = frame()
    table["label"] = [1.0, None, 0.0, 1.0, 0.0]
    with pytest.raises(DataError, match=r"no label in row\(s\) 1"):
        load_data(write(tmp_path, ".csv", table), label_column="label")
    table["label"] = [1.0, 0.5, 0.0, 1.0, 0.0]
    with pytest.raises(DataError, match=r"row\(s\) 1 of 'label' hold fractions"):
        load_data(write(tmp_path, ".csv", table), label_column="label")


def test_zero_rows(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("text,label\n")
    with pytest.raises(DataError, match="data.csv: no rows"):
        load_data(tmp_path / "data.csv")
    (tmp_path / "data.jsonl").write_text("")
    with pytest.raises(DataError, match="data.jsonl: no rows"):
        load_data(tmp_path / "data.jsonl")


def test_bad_limit_and_split_on_a_file(tmp_path: Path) -> None:
    path = write(tmp_path, ".csv", frame())
    with pytest.raises(DataError, match="limit must be a positive"):
        load_data(path, limit=0)
    with pytest.raises(DataError, match="a single file has no splits"):
        load_data(path, split="train")


# ------------------------------------------------------- offline, no residue
def test_offline_and_no_cache_left_behind(tmp_path: Path, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("load_data tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    hf_cache = Path(datasets.config.HF_DATASETS_CACHE)
    before = sorted(hf_cache.rglob("*")) if hf_cache.exists() else None
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for suffix in FORMATS:
        assert load_data(write(data_dir, suffix, frame())).texts == TEXTS
    assert list(scratch.iterdir()) == []
    assert sorted(p.name for p in data_dir.iterdir()) == sorted(
        f"data{suffix}" for suffix in FORMATS
    )
    after = sorted(hf_cache.rglob("*")) if hf_cache.exists() else None
    assert before == after
