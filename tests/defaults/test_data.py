#!/usr/bin/env python3
r"""The real text tasks: archive verification, parsing, fixed splits and their
documented sizes.

Unit tests run on a small archive built here, shaped like the vaderSentiment
sdist (an outer tar.gz holding ``additional_resources/hutto_ICWSM_2014.tar.gz``
with the four ``*_GroundTruth.txt`` files), so they need no network. The tests on
the real sdist (downloaded once with pip, cached) are marked ``integration``."""

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Dict, Iterator, List

import pytest
from captum_ext.defaults import data as default_data
from captum_ext.defaults.data import (
    label_names,
    load_split,
    parse_ground_truth,
    read_ground_truth,
    TaskExamples,
    TASKS,
    verify_sha256,
)

from tests.helpers import offline_pip_error

ROOT = Path(__file__).resolve().parents[2]

# Digests of "label<TAB>text" lines of each split of the real data: a changed
# parser, dedupe rule, seed or subsample size shows up here.
SPLIT_DIGESTS = {
    (
        "sentiment",
        "train",
    ): "fd4b4160b4e51acf3201240d0e3ed92f0149d9a5045aea24a6b5173d012ecc69",
    (
        "sentiment",
        "test",
    ): "b6783896ddc80e439b959d5ff97fd457021997a2d8ad63783d9af1630f3f9cee",
    (
        "source",
        "train",
    ): "f7c62acb33bd2f6d5e40c279188b9a9e24e17cefc4c4b1d1373793e2bab8724a",
    (
        "source",
        "test",
    ): "1f39e32d057b525ee4941ee46d77a5afbf12d2dee921f8c06aa57a11134e13eb",
}


def _digest(data: TaskExamples) -> str:
    lines = "\n".join(f"{y}\t{x}" for x, y in zip(data.texts, data.labels))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


# The fixture archive: per corpus, ``FAKE_ROWS`` snippets rated -2, -1, 0, 1, 2 in
# turn; the movie corpus repeats two texts (the first rating counts) and one text
# is in both the tweet and product corpora (left out of "source").
FAKE_ROWS = 40
FAKE_SHARED = "Shared by two corpora &amp; so left out"
FAKE_TRAIN_PER_CLASS, FAKE_TEST_PER_CLASS = 6, 3
# Movie: 40 unique texts, 8 rated 0 -> 32; 20 % test.
FAKE_SENTIMENT_SIZES = (26, 6)


def _fake_lines(corpus: str) -> List[str]:
    lines = [
        (
            f"{i}\t{i % 5 - 2}.5\t{corpus} snippet {i} &lt;{corpus}&gt;"
            if i % 5 != 2
            else f"{i}\t0\t{corpus} snippet {i} is neutral"
        )
        for i in range(FAKE_ROWS)
    ]
    if corpus == "movie":
        lines += [f"90\t3.0\t{corpus} snippet 0 &lt;{corpus}&gt;"]
        lines += [f"91\t-3.0\t{corpus} snippet 1 &lt;{corpus}&gt;"]
    if corpus in ("tweet", "product"):
        lines.append(f"99\t1.0\t{FAKE_SHARED}")
    return lines


def _tar_gz(files: Dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def fake_vader_sdist(path: Path) -> Path:
    r"""Writes an archive shaped like ``vaderSentiment-3.3.2.tar.gz`` to ``path``."""
    inner = _tar_gz(
        {
            f"hutto_ICWSM_2014/{name}": "\r\n".join(_fake_lines(corpus)).encode()
            for corpus, name in default_data._FILES.items()
        }
    )
    prefix = f"vaderSentiment-{default_data.VADER_VERSION}"
    path.write_bytes(_tar_gz({f"{prefix}/{default_data._INNER_TARBALL}": inner}))
    return path


@pytest.fixture
def fake_vader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    r"""Points :mod:`captum_ext.defaults.data` at the fixture archive (its digest
    pinned instead of the release's) with smaller "source" splits."""
    sdist = fake_vader_sdist(tmp_path / default_data.VADER_SDIST)
    monkeypatch.setattr(default_data, "VADER_SHA256", default_data.sha256_of(sdist))
    monkeypatch.setattr(default_data, "vader_sdist_path", lambda: sdist)
    monkeypatch.setattr(default_data, "SOURCE_TRAIN_PER_CLASS", FAKE_TRAIN_PER_CLASS)
    monkeypatch.setattr(default_data, "SOURCE_TEST_PER_CLASS", FAKE_TEST_PER_CLASS)
    default_data._splits.cache_clear()
    yield sdist
    default_data._splits.cache_clear()  # no fixture split leaks into later tests


def test_parse_handles_crlf_entities_and_bad_bytes():
    data = (
        b"1\t2.5\tA fine film.\r\n"
        b"2\t-1.25\tDull &amp; long\tstill one text\r\n"
        b"\r\n"
        b"3\t0\tcaf\xe9 \xe2\x80\xa8 tail"  # latin-1 byte, U+2028, no final CRLF
    )
    rows = parse_ground_truth(data)
    assert rows == [
        (2.5, "A fine film."),
        (-1.25, "Dull & long\tstill one text"),
        (0.0, "caf\ufffd \u2028 tail"),
    ]


def test_verify_sha256_rejects_corrupted_file(tmp_path):
    good = tmp_path / "archive.tar.gz"
    good.write_bytes(b"some archive bytes")
    digest = hashlib.sha256(b"some archive bytes").hexdigest()
    verify_sha256(good, digest)
    good.write_bytes(b"some archive bytez")
    with pytest.raises(RuntimeError, match="SHA-256 mismatch"):
        verify_sha256(good, digest)


def test_corrupted_archive_is_not_read(fake_vader, tmp_path):
    corrupted = tmp_path / "corrupted.tar.gz"
    data = bytearray(fake_vader.read_bytes())
    data[len(data) // 2] ^= 0xFF
    corrupted.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match="SHA-256 mismatch"):
        read_ground_truth(corrupted)


def test_download_with_wrong_checksum_is_rejected_and_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("CAPTUM_EXT_CACHE", str(tmp_path))

    def fake_pip(command, shown, what):
        Path(command[-1], default_data.VADER_SDIST).write_bytes(b"not the release")

    monkeypatch.setattr(default_data, "_run_pip", fake_pip)
    with pytest.raises(RuntimeError, match="SHA-256 mismatch"):
        default_data.vader_sdist_path()
    assert not (tmp_path / default_data._CACHE_NAME).exists()


def test_pip_failure_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("CAPTUM_EXT_CACHE", str(tmp_path))

    def offline(*args, **kwargs):
        return subprocess.CompletedProcess(args, 1, "", "No matching distribution")

    message = offline_pip_error(
        monkeypatch, default_data, default_data.vader_sdist_path, offline
    )
    assert "python -m pip download --no-deps --no-binary :all: " in message
    assert "vadersentiment==3.3.2" in message
    assert "PyPI must be reachable once" in message
    assert "No matching distribution" in message


def test_fixture_corpora_are_parsed(fake_vader):
    corpora = read_ground_truth(fake_vader)
    sizes = {name: len(rows) for name, rows in corpora.items()}
    assert sizes == {
        "movie": FAKE_ROWS + 2,
        "tweet": FAKE_ROWS + 1,
        "product": FAKE_ROWS + 1,
        "editorial": FAKE_ROWS,
    }
    assert corpora["tweet"][3] == (1.5, "tweet snippet 3 <tweet>")
    assert corpora["movie"][2] == (0.0, "movie snippet 2 is neutral")


def test_sentiment_split_of_fixture(fake_vader):
    train, test = load_split("sentiment", "train"), load_split("sentiment", "test")
    assert (len(train), len(test)) == FAKE_SENTIMENT_SIZES
    texts = train.texts + test.texts
    assert len(set(texts)) == len(texts)
    assert not any("neutral" in text for text in texts)  # rated 0: dropped
    # A repeated text keeps its first rating: snippet 0 (-1.5) stays negative.
    label = dict(zip(texts, train.labels + test.labels))
    assert label["movie snippet 0 <movie>"] == 0
    assert label["movie snippet 1 <movie>"] == 0
    assert label["movie snippet 3 <movie>"] == 1
    assert sorted(label.values()).count(1) == 16
    assert train.label_names == test.label_names == ["negative", "positive"]


def test_source_split_of_fixture_is_balanced(fake_vader):
    train, test = load_split("source", "train"), load_split("source", "test")
    assert [train.labels.count(c) for c in range(4)] == [FAKE_TRAIN_PER_CLASS] * 4
    assert [test.labels.count(c) for c in range(4)] == [FAKE_TEST_PER_CLASS] * 4
    assert train.label_names == ["movie", "tweet", "product", "editorial"]
    shared = FAKE_SHARED.replace("&amp;", "&")
    assert shared not in train.texts + test.texts
    for data in (train, test):
        assert all(
            text.startswith(label_names("source")[y])
            for text, y in zip(data.texts, data.labels)
        )


@pytest.mark.parametrize("task", TASKS)
def test_train_and_test_are_disjoint(fake_vader, task):
    train, test = load_split(task, "train"), load_split(task, "test")
    assert not set(train.texts) & set(test.texts)
    assert len(set(test.texts)) == len(test)


def test_splits_are_deterministic_within_a_process(fake_vader):
    first = load_split("sentiment", "test")
    default_data._splits.cache_clear()
    second = load_split("sentiment", "test")
    assert first == second and first is not second
    # A caller's edits do not leak into later loads.
    first.texts.clear()
    assert len(load_split("sentiment", "test")) == FAKE_SENTIMENT_SIZES[1]


def test_splits_are_deterministic_across_processes(fake_vader):
    # String hashing is salted per process; the split must not depend on it.
    code = (
        "import sys; from pathlib import Path\n"
        "from captum_ext.defaults import data as d\n"
        "d.VADER_SHA256 = sys.argv[2]; d.vader_sdist_path = lambda: Path(sys.argv[1])\n"
        "s = d.load_split('sentiment'); print(repr((s.texts, s.labels)))"
    )
    output = subprocess.run(
        [sys.executable, "-c", code, str(fake_vader), default_data.VADER_SHA256],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONHASHSEED="12345"),
    ).stdout
    here = load_split("sentiment")
    assert output == repr((here.texts, here.labels)) + "\n"


def test_text_dataset_slicing(fake_vader):
    data = load_split("sentiment", "train")
    head = data.head(5)
    assert isinstance(head, TaskExamples) and len(head) == 5
    assert head.texts == data.texts[:5] and head.labels == data.labels[:5]
    assert data[2:4].texts == data.texts[2:4]
    assert data[0] == (data.texts[0], data.labels[0])


def test_unknown_task_or_split():
    assert label_names("source") == ["movie", "tweet", "product", "editorial"]
    with pytest.raises(ValueError, match="task must be one of"):
        load_split("imdb")
    with pytest.raises(ValueError, match="split must be one of"):
        load_split("sentiment", "validation")


# The real sdist: downloaded once with pip (PyPI must be reachable), cached.


@pytest.mark.integration
def test_real_archive_is_verified_and_corpora_sizes():
    corpora = read_ground_truth(default_data.vader_sdist_path())
    sizes = {name: len(rows) for name, rows in corpora.items()}
    assert sizes == {"movie": 10605, "tweet": 4200, "product": 3708, "editorial": 5190}
    for rows in corpora.values():
        assert all(-4 <= r <= 4 and t and "\r" not in t for r, t in rows)


@pytest.mark.integration
def test_real_sentiment_split_sizes_and_balance():
    train, test = load_split("sentiment", "train"), load_split("sentiment", "test")
    # 10,605 snippets - 37 rated 0 - 2 repeated texts = 10,566; 20 % test.
    assert (len(train), len(test)) == (8453, 2113)
    assert (test.labels.count(0), test.labels.count(1)) == (1028, 1085)
    assert 0.45 < sum(train.labels) / len(train) < 0.55


@pytest.mark.integration
def test_real_source_split_sizes():
    train, test = load_split("source", "train"), load_split("source", "test")
    per_class_train = default_data.SOURCE_TRAIN_PER_CLASS
    per_class_test = default_data.SOURCE_TEST_PER_CLASS
    assert [train.labels.count(c) for c in range(4)] == [per_class_train] * 4
    assert [test.labels.count(c) for c in range(4)] == [per_class_test] * 4
    # Classes are interleaved, not in blocks.
    assert len(set(test.labels[:20])) == 4


@pytest.mark.integration
@pytest.mark.parametrize("key", sorted(SPLIT_DIGESTS))
def test_real_splits_match_pinned_digest(key):
    assert _digest(load_split(*key)) == SPLIT_DIGESTS[key]
