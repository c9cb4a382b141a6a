#!/usr/bin/env python3
r"""The Parquet schema of an attribution run.

A classifier's columns: ``id`` (the example's row in the source), ``text``
(``text_pair``), ``label`` (with gold labels), ``tokens``, ``input_ids``
(``token_type_ids`` for pairs), ``truncated``, ``predicted``,
``probabilities``, ``target`` (the class explained), one ``list<float32>`` per
method with a score per token, and with metrics one float per example and
metric column, named ``"<method>/<column>"`` (e.g. ``"NormXLogit/AOPC"``).

A causal LM's columns: ``id``, ``prompt``, ``continuation`` (given, or the
generated text), ``tokens`` and ``input_ids`` (the prompt's ``P`` tokens),
``continuation_tokens`` and ``continuation_ids`` (its ``T`` tokens), and one
``list<list<float32>>`` per method: ``T`` rows of ``P`` scores, row ``t``
explaining :math:`\log p(y_t \mid \text{prompt}, y_{<t})`. Scored by source
(``sources="sentences"`` or ``"lines"``), a ``sources`` column holds the
prompt's ``S`` sources (their texts, which concatenate to the prompt) and each
method's rows hold ``S`` scores, each the sum of its source's tokens'."""

from typing import Any, Dict, List, Sequence

import pyarrow as pa

from captum_ext.evaluation.registry import MetricSpec
from captum_ext.evaluation.user_data import LoadedExamples

__all__ = [
    "generation_schema",
    "generation_source_columns",
    "run_schema",
    "source_columns",
]

_TYPES = {
    "id": pa.int64(),
    "text": pa.string(),
    "text_pair": pa.string(),
    "label": pa.int64(),
    "tokens": pa.list_(pa.string()),
    "input_ids": pa.list_(pa.int32()),
    "token_type_ids": pa.list_(pa.int8()),
    "truncated": pa.bool_(),
    "predicted": pa.int64(),
    "probabilities": pa.list_(pa.float32()),
    "target": pa.int64(),
    "prompt": pa.string(),
    "continuation": pa.string(),
    "continuation_tokens": pa.list_(pa.string()),
    "continuation_ids": pa.list_(pa.int32()),
    "sources": pa.list_(pa.string()),
}


def source_columns(data: LoadedExamples) -> Dict[str, List[Any]]:
    r"""The columns copied from ``data``: ids, texts, pairs, labels."""
    columns: Dict[str, List[Any]] = {"id": list(data.rows), "text": list(data.texts)}
    if data.text_pairs is not None:
        columns["text_pair"] = list(data.text_pairs)
    if data.labels is not None:
        columns["label"] = list(data.labels)
    return columns


def run_schema(
    data: LoadedExamples,
    methods: Sequence[str],
    metrics: Sequence[MetricSpec],
    token_type_ids: bool,
) -> pa.Schema:
    r"""The schema every shard of a run has, known before the first is written
    (so a finished shard can be checked against it on resume): ``data``'s
    source columns, the tokens and prediction, then each method's scores
    followed by its metric columns. ``token_type_ids``: whether the tokenizer
    gives segment ids for ``data``'s pairs."""
    names = list(source_columns(data)) + ["tokens", "input_ids"]
    names += ["token_type_ids"] if token_type_ids else []
    names += ["truncated", "predicted", "probabilities", "target"]
    fields = [(name, _TYPES[name]) for name in names]
    for method in methods:
        fields.append((method, pa.list_(pa.float32())))
        fields += [
            (f"{method}/{column}", pa.float64())
            for metric in metrics
            for column in metric.columns
        ]
    return pa.schema(fields)


def generation_source_columns(data: LoadedExamples) -> Dict[str, List[Any]]:
    r"""The columns a causal LM's run copies from ``data``: ids, prompts and
    the given continuations."""
    columns: Dict[str, List[Any]] = {"id": list(data.rows), "prompt": list(data.texts)}
    if data.continuations is not None:
        columns["continuation"] = list(data.continuations)
    return columns


def generation_schema(methods: Sequence[str], sources: bool = False) -> pa.Schema:
    r"""The schema of every shard of a causal LM's run (module docstring);
    ``sources``: the prompts are scored by source."""
    names = ["id", "prompt", "continuation", "tokens", "input_ids"]
    names += ["sources"] if sources else []
    names += ["continuation_tokens", "continuation_ids"]
    fields = [(name, _TYPES[name]) for name in names]
    fields += [(method, pa.list_(pa.list_(pa.float32()))) for method in methods]
    return pa.schema(fields)
