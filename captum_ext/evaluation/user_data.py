#!/usr/bin/env python3
r"""A user's labelled or unlabelled text, loaded with Hugging Face ``datasets``:
a local CSV, TSV, JSON / JSON Lines or Parquet file, a ``save_to_disk``
directory (a ``Dataset``, or a ``DatasetDict`` with ``split``), or a Hub
dataset id (``"stanfordnlp/sst2"``, with ``config_name`` and ``split``).

A local file is parsed by the packaged local-file builders, never looked up on
a hub; the Arrow cache ``datasets`` writes while parsing goes to a temporary
directory deleted once the rows are in memory, so loading leaves nothing in
``~/.cache/huggingface`` or next to the data. A Hub id goes through
``datasets.load_dataset`` and its cache (``HF_HOME``; ``HF_DATASETS_OFFLINE=1``
or ``HF_HUB_OFFLINE=1`` reads a dataset prepared there before; ``HF_TOKEN`` for
private ones).

Every problem with the data is one :class:`DataError` naming the file and what
to do about it.
"""

import math
import random
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import datasets
import datasets.utils

from captum_ext.evaluation.hub import cache_only_unless_reachable, is_hub_id

__all__ = ["DataError", "LoadedExamples", "load_data"]

# file suffix -> (datasets builder, its options)
_BUILDERS: Dict[str, tuple] = {
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"sep": "\t"}),
    ".jsonl": ("json", {}),
    ".json": ("json", {}),
    ".parquet": ("parquet", {}),
}
_SHOWN_ROWS = 10
# What marks a missing label in a CSV/TSV cell; no other cell has missing values,
# so a text that is literally "NA" or "null" stays that text.
_MISSING_LABELS = ["", "NA", "N/A", "NaN", "nan", "null", "None"]
# What datasets says when a file parses to a header and no rows.
_NO_DATA = "corresponds to no data"


class DataError(ValueError):
    r"""The data cannot be used as given; the message names the file and the fix."""


@dataclass
class LoadedExamples:
    r"""Examples loaded from the user's file (:func:`load_data`), ready to
    tokenise.

    ``rows[i]`` is example ``i``'s row index in the source (before any shuffle),
    the id under which its results are written; ``labels`` are class indices
    (``None`` without a label column); ``label_names[c]`` names class ``c`` when
    known (the model's ``id2label`` order, or the file's ``ClassLabel`` names).
    For a causal LM, ``texts`` are the prompts and ``continuations`` the given
    continuations (``None``: the model generates them); ``evidence[i][t]``, when
    known (a task with planted evidence, e.g. key-value recall), is the position
    of the prompt token that decides continuation token ``t``, counted in the
    prompt's own token ids (the tokenizer's BOS included), -1 for none;
    ``evidence_sets[i][t]``, when known, lists the positions of every prompt
    token that continuation token ``t`` needs (recall: the queried key and the
    value; a task whose answer copies nothing: the tokens that decide it).
    ``columns`` names the source column of each field (``{"texts": "prompt",
    ...}``).
    """

    source: str
    texts: List[str]
    text_pairs: Optional[List[str]] = None
    labels: Optional[List[int]] = None
    rows: List[int] = field(default_factory=list)
    label_names: Optional[List[str]] = None
    continuations: Optional[List[str]] = None
    columns: Dict[str, str] = field(default_factory=dict)
    evidence: Optional[List[List[int]]] = None
    evidence_sets: Optional[List[List[List[int]]]] = None

    def __post_init__(self) -> None:
        if not self.rows:
            self.rows = list(range(len(self.texts)))
        columns = [
            self.rows,
            self.text_pairs,
            self.labels,
            self.continuations,
            self.evidence,
            self.evidence_sets,
        ]
        if any(c is not None and len(c) != len(self.texts) for c in columns):
            raise ValueError(
                "texts, text_pairs, labels, continuations, evidence (sets) and rows "
                "differ in length"
            )

    def __len__(self) -> int:
        return len(self.texts)

    def head(self, n: int) -> "LoadedExamples":
        r"""The first ``n`` examples."""
        return self.select(range(min(n, len(self))))

    def select(self, positions: Sequence[int]) -> "LoadedExamples":
        r"""The examples at ``positions``, in that order."""
        positions = list(positions)

        def pick(values: Optional[List[Any]]) -> Optional[List[Any]]:
            return None if values is None else [values[i] for i in positions]

        return replace(
            self,
            texts=[self.texts[i] for i in positions],
            text_pairs=pick(self.text_pairs),
            labels=pick(self.labels),
            continuations=pick(self.continuations),
            evidence=pick(self.evidence),
            evidence_sets=pick(self.evidence_sets),
            rows=[self.rows[i] for i in positions],
        )


def load_data(
    path: Union[str, Path],
    *,
    text_column: str = "text",
    text_pair_column: Optional[str] = None,
    label_column: Optional[str] = None,
    split: Optional[str] = None,
    limit: Optional[int] = None,
    seed: Optional[int] = None,
    label2id: Optional[Dict[str, int]] = None,
    num_labels: Optional[int] = None,
    config_name: Optional[str] = None,
    continuation_column: Optional[str] = None,
) -> LoadedExamples:
    r"""Loads text examples (and optionally text pairs and labels) from a local
    file, a ``save_to_disk`` directory or a Hub dataset.

    Args:
        path (str or Path): a ``.csv``, ``.tsv``, ``.json``/``.jsonl`` (JSON
            Lines or a JSON array of records) or ``.parquet`` file, a
            directory written by ``Dataset.save_to_disk`` /
            ``DatasetDict.save_to_disk``, or a Hub dataset id (when no such
            local path exists).
        text_column (str, optional): column with the text. Default: ``"text"``.
        text_pair_column (str, optional): column with the second text of a pair
            (NLI, paraphrase); tokenised as pairs. Default: None.
        label_column (str, optional): column with gold labels: class indices,
            or names mapped through ``label2id``. Default: None (no labels;
            targets are then the model's predictions).
        split (str, optional): which split of a saved ``DatasetDict`` or Hub
            dataset; needed when it has more than one. Default: None.
        limit (int, optional): keep the first ``limit`` examples (after the
            shuffle, if ``seed`` is given). Default: None (all).
        seed (int, optional): shuffle the examples with this seed before
            ``limit``. Default: None (file order).
        label2id (dict, optional): the model's ``config.label2id``; maps label
            names and gives ``label_names``. Default: None.
        num_labels (int, optional): the model's number of classes; labels
            outside ``range(num_labels)`` are an error. Default: None
            (``len(label2id)`` if given).
        config_name (str, optional): the configuration of a Hub dataset
            (``datasets.load_dataset``'s ``name``). Default: its default.
        continuation_column (str, optional): column with the continuation a
            causal LM's prompt (``text_column``) is explained for. Default:
            None (the model generates it).

    Returns:
        LoadedExamples: the examples, ``rows`` holding each one's source row index.

    Raises:
        DataError: missing or unreadable file, unknown format, a Hub id that
            does not exist (or is not cached when offline), missing column,
            empty text or continuation, unknown label name, label out of range,
            no rows.
    """
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise DataError(f"limit must be a positive number of examples, got {limit!r}")
    if is_hub_id(str(path)):
        table = _read_hub(str(path), config_name, split)
    elif config_name is not None:
        raise DataError(f"{path}: --config-name applies to Hub datasets only")
    else:
        table = _read(Path(path), split, label_column)
    path = Path(path)
    fields = {
        "texts": text_column,
        "text_pairs": text_pair_column,
        "labels": label_column,
        "continuations": continuation_column,
    }
    columns = {name: column for name, column in fields.items() if column is not None}
    _require_columns(path, table, list(columns.values()))
    if len(table) == 0:
        raise DataError(_no_rows(path))
    order = list(range(len(table)))
    if seed is not None:
        random.Random(seed).shuffle(order)
    order = order[:limit]
    texts = _texts(path, table, text_column, order)
    pairs = None
    if text_pair_column is not None:
        pairs = _texts(path, table, text_pair_column, order)
    continuations = None
    if continuation_column is not None:
        continuations = _texts(path, table, continuation_column, order)
    names = _label_names(table, label_column, label2id)
    labels = None
    if label_column is not None:
        raw = [table[label_column][i] for i in order]
        labels = _labels(path, label_column, raw, order, label2id, names, num_labels)
    return LoadedExamples(
        str(path), texts, pairs, labels, order, names, continuations, columns
    )


@contextmanager
def _quiet_private_cache() -> Iterator[str]:
    r"""A throw-away cache directory for ``datasets``' Arrow files, with its
    progress bars off for the duration (restored after)."""
    bars_were_on = not datasets.utils.are_progress_bars_disabled()
    datasets.utils.disable_progress_bars()
    try:
        with tempfile.TemporaryDirectory(prefix="captum_ext_data_") as cache:
            yield cache
    finally:
        if bars_were_on:
            datasets.utils.enable_progress_bars()


@contextmanager
def _quiet_logs() -> Iterator[None]:
    verbosity = datasets.utils.logging.get_verbosity()
    datasets.utils.logging.set_verbosity_error()
    try:
        yield
    finally:
        datasets.utils.logging.set_verbosity(verbosity)


@contextmanager
def _cache_only_unless_reachable() -> Iterator[None]:
    r"""Offline mode for ``datasets`` too (it keeps its own flag) inside
    :func:`~captum_ext.evaluation.hub.cache_only_unless_reachable`, so an
    unreachable Hub means the datasets cache is read at once; restored
    after."""
    with cache_only_unless_reachable() as offline:
        before = datasets.config.HF_HUB_OFFLINE
        datasets.config.HF_HUB_OFFLINE = before or offline
        try:
            yield
        finally:
            datasets.config.HF_HUB_OFFLINE = before


def _read(
    path: Path,
    split: Optional[str],
    label_column: Optional[str],
) -> datasets.Dataset:
    if not path.exists():
        raise DataError(f"{path}: no such file or directory")
    if path.is_dir():
        return _read_saved(path, split)
    builder = _BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise DataError(
            f"{path}: unknown format {path.suffix!r}; use one of "
            f"{', '.join(sorted(_BUILDERS))} or a save_to_disk directory"
        )
    if split is not None:
        raise DataError(
            f"{path}: a single file has no splits; drop --split (it selects a "
            "split of a save_to_disk DatasetDict)"
        )
    if path.stat().st_size == 0:
        raise DataError(_no_rows(path))
    name, options = builder
    if name == "csv":
        options = {**options, **_csv_missing_values(label_column)}
    with _quiet_private_cache() as cache:
        try:
            return datasets.load_dataset(
                name,
                data_files=str(path),
                split="train",
                cache_dir=cache,
                keep_in_memory=True,
                **options,
            )
        except Exception as error:  # any parser failure is the file's fault
            if _NO_DATA in str(error):
                raise DataError(_no_rows(path)) from error
            raise DataError(
                f"{path}: cannot be read as {name.upper()} "
                f"({type(error).__name__}: {error}); check the file's format"
            ) from error


def _read_hub(
    name: str, config_name: Optional[str], split: Optional[str]
) -> datasets.Dataset:
    try:
        # _quiet_logs: no "Using the latest cached version ..." lines
        with _quiet_logs(), _cache_only_unless_reachable():
            loaded = datasets.load_dataset(name, config_name, split=split)
    except ConnectionError as error:  # offline or unreachable, and not cached
        raise DataError(_hub_unreachable(name)) from error
    except datasets.exceptions.DatasetNotFoundError as error:
        raise DataError(
            f"{name}: no such local file or directory, and no Hub dataset you "
            "can access (private or gated: set HF_TOKEN or run `hf auth login`)"
        ) from error
    except ValueError as error:  # unknown split or configuration
        raise DataError(f"{name}: {error}") from error
    if isinstance(loaded, datasets.Dataset):
        return loaded
    return _pick_split(Path(name), loaded, split)


def _hub_unreachable(name: str) -> str:
    where = datasets.config.HF_DATASETS_CACHE
    if datasets.config.HF_HUB_OFFLINE:
        return (
            f"Hub dataset {name!r} is not in the datasets cache ({where}) and "
            "offline mode is on: unset HF_DATASETS_OFFLINE and HF_HUB_OFFLINE to "
            "download it once, or set HF_HOME to a cache that holds it"
        )
    return (
        f"cannot download Hub dataset {name!r}: the Hub is unreachable and the "
        f"dataset is not in the datasets cache ({where}); check the network"
    )


def _csv_missing_values(label_column: Optional[str]) -> Dict[str, Any]:
    r"""pandas' CSV options that apply missing-value rules to the label column
    only: a text cell ``NA`` is the text "NA", an empty one the empty text."""
    return {
        "keep_default_na": False,
        "na_values": {label_column: _MISSING_LABELS} if label_column else None,
    }


def _read_saved(path: Path, split: Optional[str]) -> datasets.Dataset:
    try:
        saved = datasets.load_from_disk(str(path), keep_in_memory=True)
    except Exception as error:
        raise DataError(
            f"{path}: not a directory written by save_to_disk ({error}); pass a "
            "data file or a saved Dataset / DatasetDict"
        ) from error
    if isinstance(saved, datasets.Dataset):
        if split is not None:
            raise DataError(f"{path}: a saved Dataset has no splits; drop --split")
        return saved
    return _pick_split(path, saved, split)


def _pick_split(
    path: Path, saved: datasets.DatasetDict, split: Optional[str]
) -> datasets.Dataset:
    splits = sorted(saved)
    if split is None and len(splits) == 1:
        split = splits[0]
    if split not in saved:
        raise DataError(
            f"{path}: choose a split with --split; it has {', '.join(splits)}"
            + ("" if split is None else f" (not {split!r})")
        )
    return saved[split]


def _require_columns(
    path: Path, table: datasets.Dataset, columns: Sequence[Optional[str]]
) -> None:
    missing = [c for c in columns if c is not None and c not in table.column_names]
    if missing:
        raise DataError(
            f"{path}: no column {', '.join(map(repr, missing))}; it has columns "
            f"{', '.join(map(repr, table.column_names))} (choose with "
            "--text-column / --text-pair-column / --label-column, or "
            "--prompt-column / --target-column for a causal LM)"
        )


def _no_rows(path: Path) -> str:
    return f"{path}: no rows; point --data at a file with examples"


def _shown(rows: List[int]) -> str:
    more = f" and {len(rows) - _SHOWN_ROWS} more" if len(rows) > _SHOWN_ROWS else ""
    return ", ".join(map(str, rows[:_SHOWN_ROWS])) + more


def _texts(
    path: Path, table: datasets.Dataset, column: str, order: List[int]
) -> List[str]:
    values = table[column]
    texts = [values[i] for i in order]
    not_text = [
        (row, text)
        for row, text in zip(order, texts)
        if text is not None and not isinstance(text, str)
    ]
    if not_text:
        raise DataError(
            f"{path}: column {column!r} must hold text, but row(s) "
            f"{_shown([row for row, _ in not_text])} do not (first: "
            f"{not_text[0][1]!r}); choose the text column with --text-column"
        )
    empty = [row for row, text in zip(order, texts) if not (text or "").strip()]
    if empty:
        raise DataError(
            f"{path}: empty {column!r} in row(s) {_shown(empty)} (0-based); remove "
            "those rows or fill them in"
        )
    return texts


def _label_names(
    table: datasets.Dataset,
    label_column: Optional[str],
    label2id: Optional[Dict[str, int]],
) -> Optional[List[str]]:
    if label2id:
        return [name for name, _ in sorted(label2id.items(), key=lambda kv: kv[1])]
    feature = table.features.get(label_column) if label_column else None
    if isinstance(feature, datasets.ClassLabel):
        return list(feature.names)
    return None


def _labels(
    path: Path,
    column: str,
    raw: List[Any],
    order: List[int],
    label2id: Optional[Dict[str, int]],
    names: Optional[List[str]],
    num_labels: Optional[int],
) -> List[int]:
    missing = [row for row, value in zip(order, raw) if _is_missing(value)]
    if missing:
        raise DataError(
            f"{path}: no label in row(s) {_shown(missing)} of {column!r}; fill them "
            "in or drop --label-column"
        )
    if any(isinstance(value, str) for value in raw):
        labels = _labels_from_names(path, column, raw, order, label2id)
    else:
        labels = _labels_from_numbers(path, column, raw, order)
    classes = num_labels if num_labels is not None else len(names or []) or None
    if classes is not None:
        outside = [row for row, label in zip(order, labels) if not 0 <= label < classes]
        if outside:
            valid = f"0..{classes - 1}" + (f" ({', '.join(names)})" if names else "")
            raise DataError(
                f"{path}: label(s) in row(s) {_shown(outside)} of {column!r} are "
                f"outside the model's {classes} classes; valid labels are {valid}"
            )
    return labels


def _labels_from_names(
    path: Path,
    column: str,
    raw: List[Any],
    order: List[int],
    label2id: Optional[Dict[str, int]],
) -> List[int]:
    if not label2id:
        raise DataError(
            f"{path}: column {column!r} holds label names, but the model has no "
            "label2id to map them; use class indices or set config.label2id"
        )
    unknown = [(row, v) for row, v in zip(order, raw) if str(v) not in label2id]
    if unknown:
        raise DataError(
            f"{path}: unknown label {unknown[0][1]!r} in row(s) "
            f"{_shown([row for row, _ in unknown])} of "
            f"{column!r}; the model's labels are {', '.join(map(repr, label2id))}"
        )
    return [int(label2id[str(value)]) for value in raw]


def _labels_from_numbers(
    path: Path, column: str, raw: List[Any], order: List[int]
) -> List[int]:
    fractional = [(row, v) for row, v in zip(order, raw) if float(v) != int(v)]
    if fractional:
        raise DataError(
            f"{path}: labels must be class indices or names, but row(s) "
            f"{_shown([row for row, _ in fractional])} of {column!r} hold "
            f"fractions (first: {fractional[0][1]!r})"
        )
    return [int(value) for value in raw]


def _is_missing(value: Any) -> bool:
    # pandas-backed CSV parsing turns an empty cell of a number column into NaN
    return value is None or (isinstance(value, float) and math.isnan(value))
