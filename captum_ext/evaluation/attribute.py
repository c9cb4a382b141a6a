#!/usr/bin/env python3
r"""Attributions for a whole dataset, written as Parquet shards that a killed run
resumes, in one process or across ranks under ``torchrun``.

Layout of ``out_dir``:

- ``part-00000.parquet``, ``part-00001.parquet``, ...: shard ``k`` holds
  examples ``k * shard_size`` to ``(k + 1) * shard_size - 1`` of the data, in
  data order, one row per example. Shards are fixed slices of the data, so they
  do not depend on the number of ranks: under ``torchrun`` the shards still
  missing are dealt round-robin to the ranks, and a rerun with any number of
  ranks finishes what is left. Inside a shard examples are batched by length.
- ``_manifest.json``: arguments, data and model fingerprints, versions. A rerun
  whose methods, metrics, ``max_length``, ``shard_size``, ``target``, data or
  model differ refuses to write into the directory. ``batch_size`` and
  ``device`` may change between runs (scores do not depend on them beyond
  floating-point noise); different package versions only warn.

A shard is written under a hidden temporary name and renamed when complete, so
an interrupted run leaves whole shards only. Reading the result back is one
call; rows come in data order (sort by ``id`` for source order after a
shuffle)::

    import pandas as pd
    table = pd.read_parquet(out_dir)  # or
    # datasets.load_dataset("parquet", data_files=f"{out_dir}/*.parquet")

Across GPUs and machines every process runs the same call under ``torchrun``
(NCCL on GPUs, gloo on CPUs); ``out_dir`` must be on a file system all machines
share. On each of ``M`` machines, with ``NODE_RANK`` 0..M-1 and ``HOST0`` the
first machine::

    torchrun --nnodes M --node-rank NODE_RANK --nproc-per-node 8 \
        --master-addr HOST0 --master-port 29500 \
        --no-python captum-ext attribute --model DIR --data FILE \
        --methods NormXLogit AttCAT --out /shared/out --device cuda

(one machine: ``torchrun --nproc-per-node N --no-python captum-ext attribute
...``; a script calling :func:`attribute_dataset` runs the same way).

Columns: ``id`` (the example's row in the source), ``text`` (``text_pair``),
``label`` (with gold labels), ``tokens``, ``input_ids`` (``token_type_ids`` for
pairs), ``truncated``, ``predicted``, ``probabilities``, ``target`` (the class
explained), one ``list<float32>`` per method with a score per token, and with
``metrics`` one float per example and metric column, named
``"<method>/<column>"`` (e.g. ``"NormXLogit/AOPC"``).
"""

import hashlib
import json
import os
import platform
import warnings
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn, Tensor

from captum_ext._utils.atomic import atomic_path, write_text_atomically
from captum_ext._utils.common import classifier_forward
from captum_ext._utils.progress import Progress
from captum_ext._utils.row_chunks import check_internal_batch_size
from captum_ext.evaluation.data import TextData
from captum_ext.evaluation.distributed import distributed_context, DistributedContext
from captum_ext.evaluation.engine import (
    default_max_length,
    metric_values,
    SharedForward,
)
from captum_ext.evaluation.names import check_names
from captum_ext.evaluation.registry import METHODS, METRICS
from captum_ext.evaluation.tokenized_batches import bucketed_batches, EncodedBatch

__all__ = ["MANIFEST", "ManifestMismatchError", "attribute_dataset"]

MANIFEST = "_manifest.json"  # "_" prefix: Parquet readers skip it
_FORMAT = 1
_TARGETS = ("predicted", "label")
# The manifest entries a rerun must match to add shards to the same directory.
_MUST_MATCH = ("arguments", "data", "model")
_PACKAGES = ("captum_ext", "captum", "torch", "transformers", "datasets", "pyarrow")
_SAMPLED_VALUES = 4096  # per weight tensor, in the model fingerprint

Explain = Callable[..., Tensor]


class ManifestMismatchError(ValueError):
    r"""``out_dir`` holds outputs of a run with other arguments, data or model."""


def attribute_dataset(
    model: nn.Module,
    tokenizer: Any,
    data: TextData,
    methods: Sequence[str],
    out_dir: Any,
    *,
    metrics: Optional[Sequence[str]] = None,
    batch_size: int = 16,
    max_length: Optional[int] = None,
    device: str = "cpu",
    progress: bool = True,
    shard_size: int = 1000,
    target: str = "predicted",
) -> Path:
    r"""Explains every example of ``data`` with each of ``methods`` and writes one
    Parquet row per example (layout and columns: see the module docstring).

    The class explained is the model's prediction (``target="predicted"``, the
    benchmark's convention) or the gold label (``target="label"``, which needs a
    label column). Under ``torchrun`` every rank runs this same call; the model
    is moved to the rank's device (``cuda:LOCAL_RANK`` for ``device="cuda"``).

    Args:
        model (nn.Module): a Hugging Face sequence classifier in eval mode.
        tokenizer: its tokenizer (with a pad token).
        data (TextData): the examples (see :func:`load_data`).
        methods (Sequence[str]): method names of the registry, e.g.
            ``["NormXLogit", "AttCAT"]``.
        out_dir (str or Path): where shards and manifest go; shared by all
            ranks (a shared file system across machines).
        metrics (Sequence[str], optional): metric names of the registry whose
            per-example values are added. Default: None.
        batch_size (int, optional): examples per attribution call. Default: 16.
        max_length (int, optional): tokens per example after truncation.
            Default: the most both the tokenizer and the model's positions
            allow (:func:`~captum_ext.evaluation.engine.default_max_length`).
        device (str, optional): ``"cpu"`` or ``"cuda"``. Default: ``"cpu"``.
        progress (bool, optional): progress with examples/s and ETA on stderr
            (rank 0). Default: True.
        shard_size (int, optional): examples per output file. Default: 1000.
        target (str, optional): ``"predicted"`` or ``"label"``.
            Default: ``"predicted"``.

    Returns:
        Path: ``out_dir``.

    Raises:
        ManifestMismatchError: ``out_dir`` holds another run's outputs.
        ValueError: unknown method or metric, bad sizes, no labels for
            ``target="label"``, a model in training mode.
    """
    method_specs, metric_specs = _check_names(methods, metrics)
    for name, value in (("batch_size", batch_size), ("shard_size", shard_size)):
        check_internal_batch_size(value, name)
    _check_target(target, data)
    if model.training:
        raise ValueError("the model is in training mode; call model.eval() first")
    length = _max_length(model, tokenizer, max_length)
    out = Path(out_dir)
    arguments = {
        "methods": list(methods),
        "metrics": list(metrics or []),
        "max_length": length,
        "shard_size": shard_size,
        "target": target,
    }
    with distributed_context(device) as context:
        if next(model.parameters()).device != context.device:
            model.to(context.device)
        missing = _agreed_missing_shards(
            context, out, arguments, model, tokenizer, data
        )
        job = _Job(model, tokenizer, method_specs, metric_specs, length, target)
        mine = context.shard(missing)
        total = sum(len(_shard_positions(k, shard_size, len(data))) for k in mine)
        enabled = progress and context.is_main
        with Progress(
            total, "attribute", "examples", enabled=enabled, summary=False
        ) as bar:
            for shard in mine:
                positions = _shard_positions(shard, shard_size, len(data))
                table = job.shard_table(
                    data.select(positions), batch_size, context.device, bar.update
                )
                _write_atomically(table, out / _shard_name(shard), context.rank)
        context.barrier()
    return out


def _check_names(
    methods: Sequence[str], metrics: Optional[Sequence[str]]
) -> Tuple[List[Any], List[Any]]:
    if isinstance(methods, str) or not methods:
        raise ValueError("methods must be a non-empty list of method names")
    method_specs = [METHODS[name] for name in check_names(methods, METHODS, "method")]
    if not metrics:
        return method_specs, []
    return method_specs, [
        METRICS[name] for name in check_names(metrics, METRICS, "metric")
    ]


def _check_target(target: str, data: TextData) -> None:
    if target not in _TARGETS:
        raise ValueError(f"target must be one of {_TARGETS}, got {target!r}")
    if target == "label" and data.labels is None:
        raise ValueError(
            f"target='label' explains the gold labels, but {data.source} was "
            "loaded without a label column; pass label_column (--label-column)"
        )


def _max_length(model: nn.Module, tokenizer: Any, max_length: Optional[int]) -> int:
    if max_length is None:
        return default_max_length(model, tokenizer)
    return int(check_internal_batch_size(max_length, "max_length") or 0)


# ------------------------------------------------------------------- manifest
def _agreed_missing_shards(
    context: DistributedContext,
    out: Path,
    arguments: Dict[str, Any],
    model: nn.Module,
    tokenizer: Any,
    data: TextData,
) -> List[int]:
    r"""Rank 0 checks (or writes) the manifest and lists the shards still to do;
    every rank gets the same list, or the same error."""
    verdict: Tuple[Optional[Exception], List[int]] = (None, [])
    if context.is_main:
        try:
            manifest = _manifest(arguments, model, tokenizer, data)
            verdict = (None, _prepare(out, manifest))
        except (OSError, ManifestMismatchError) as error:
            verdict = (error, [])
    failure, missing = context.broadcast(verdict)  # pickled: the same error
    if failure is not None:
        raise failure
    return missing


def _manifest(
    arguments: Dict[str, Any], model: nn.Module, tokenizer: Any, data: TextData
) -> Dict[str, Any]:
    n_shards = -(-len(data) // arguments["shard_size"])
    return {
        "format": _FORMAT,
        "arguments": arguments,
        "data": {"examples": len(data), "fingerprint": _data_fingerprint(data)},
        "model": {
            "class": type(model).__name__,
            "fingerprint": _model_fingerprint(model, tokenizer),
        },
        "source": data.source,
        "shards": n_shards,
        "versions": _versions(),
    }


def _prepare(out: Path, manifest: Dict[str, Any]) -> List[int]:
    r"""Creates ``out`` with the manifest, or checks the one there; removes
    temporary files of interrupted runs; returns the shards not yet written."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / MANIFEST
    if path.exists():
        _check_same_run(path, _read_manifest(path), manifest)
    elif any(out.glob("part-*.parquet")):
        raise ManifestMismatchError(
            f"{out} holds shards but no {MANIFEST}; choose an empty --out directory"
        )
    else:
        write_text_atomically(
            path, lambda handle: json.dump(manifest, handle, indent=2)
        )
    for stale in out.glob(".part-*.tmp-*"):
        stale.unlink()
    shards = range(manifest["shards"])
    return [k for k in shards if not (out / _shard_name(k)).exists()]


def _read_manifest(path: Path) -> Dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except ValueError as error:
        raise ManifestMismatchError(
            f"{path} is not a readable manifest ({error}); use another --out "
            "directory"
        ) from error


def _check_same_run(path: Path, old: Dict[str, Any], new: Dict[str, Any]) -> None:
    differs = [
        f"{key}.{field}: {old.get(key, {}).get(field)!r} before, {value!r} now"
        for key in _MUST_MATCH
        for field, value in new[key].items()
        if old.get(key, {}).get(field) != value
    ]
    if differs:
        raise ManifestMismatchError(
            f"{path.parent} holds attributions of another run ("
            + "; ".join(differs)
            + "); use another --out directory, or the same arguments to resume"
        )
    before = old.get("versions", {})
    versions = [
        f"{name} {before.get(name)} -> {now}"
        for name, now in new["versions"].items()
        if before.get(name) != now
    ]
    if versions:
        warnings.warn(
            f"resuming {path.parent} with other package versions "
            f"({', '.join(versions)}); scores of old and new shards may differ "
            "in the last digits"
        )


def _data_fingerprint(data: TextData) -> str:
    content = [data.texts, data.text_pairs, data.labels, data.rows]
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()


def _model_fingerprint(model: nn.Module, tokenizer: Any) -> str:
    r"""Hash of the config, every tensor's name, shape and dtype with up to
    :data:`_SAMPLED_VALUES` evenly spaced values (exact bytes, so the same on
    any device, and a 7B model takes well under a second), and the tokenizer's
    vocabulary. Training or merging an adapter changes whole weight matrices,
    so sampled values see it."""
    digest = hashlib.sha256()
    config = getattr(model, "config", None)
    if config is not None:
        digest.update(config.to_json_string(use_diff=False).encode())
    for name, tensor in model.state_dict().items():
        flat = tensor.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // _SAMPLED_VALUES)]
        digest.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}".encode())
        digest.update(sample.cpu().contiguous().view(torch.uint8).numpy().tobytes())
    vocabulary = sorted(tokenizer.get_vocab().items())
    digest.update(json.dumps([type(tokenizer).__name__, vocabulary]).encode())
    return digest.hexdigest()


def _versions() -> Dict[str, str]:
    found = {"python": platform.python_version()}
    for package in _PACKAGES:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found


# --------------------------------------------------------------------- shards
def _shard_name(shard: int) -> str:
    return f"part-{shard:05d}.parquet"


def _shard_positions(shard: int, shard_size: int, n: int) -> range:
    return range(shard * shard_size, min((shard + 1) * shard_size, n))


def _write_atomically(table: pa.Table, path: Path, rank: int) -> None:
    r"""Writes under a hidden name and renames, so readers and reruns only ever
    see complete shards."""
    with atomic_path(path, tag=f"{rank}-{os.getpid()}") as temporary:
        pq.write_table(table, temporary)


class _Job:
    r"""The per-batch work: prediction, each method's scores, metric values."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        method_specs: Sequence[Any],
        metric_specs: Sequence[Any],
        max_length: int,
        target: str,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.forward = classifier_forward(model)
        self.names = [spec.name for spec in method_specs]
        self.families = [spec.family for spec in method_specs]
        self.explainers = [spec.factory(model, tokenizer) for spec in method_specs]
        self.metric_specs = list(metric_specs)
        self.max_length = max_length
        self.target = target

    def shard_table(
        self,
        data: TextData,
        batch_size: int,
        device: torch.device,
        advance: Callable[[int], None],
    ) -> pa.Table:
        r"""One shard's rows, in the order of ``data``; ``advance(n)`` after
        each batch of ``n`` examples."""
        columns: Dict[str, List[Any]] = {}
        order: List[int] = []
        gold = data.labels if self.target == "label" else None
        for batch in bucketed_batches(
            self.tokenizer,
            data.texts,
            data.text_pairs,
            batch_size=batch_size,
            max_length=self.max_length,
        ):
            classes = None if gold is None else [gold[i] for i in batch.rows]
            for name, values in self.batch_columns(batch.to(device), classes):
                columns.setdefault(name, []).extend(values)
            order.extend(batch.rows)
            advance(len(batch.rows))
        back = sorted(range(len(order)), key=order.__getitem__)
        columns = {name: [values[i] for i in back] for name, values in columns.items()}
        schema = _schema(data, self.names, columns)
        return pa.Table.from_pydict(_source_columns(data) | columns, schema=schema)

    def batch_columns(
        self, batch: EncodedBatch, classes: Optional[List[int]]
    ) -> Iterator[Tuple[str, List[Any]]]:
        r"""Output columns of one batch; ``classes`` to explain, or None for the
        predicted ones."""
        device = batch.input_ids.device
        gold = None if classes is None else torch.tensor(classes, device=device)
        first_scores, logits = self._first_method(batch, gold)
        probabilities = logits.float().softmax(-1)  # [batch, classes]
        predicted = probabilities.argmax(-1)
        target = predicted if gold is None else gold
        valid = batch.attention_mask.bool()  # [batch, pos]
        ids = [row[keep].tolist() for row, keep in zip(batch.input_ids, valid)]
        yield "tokens", [self.tokenizer.convert_ids_to_tokens(row) for row in ids]
        yield "input_ids", ids
        if batch.token_type_ids is not None:
            yield "token_type_ids", [
                row[keep].tolist() for row, keep in zip(batch.token_type_ids, valid)
            ]
        yield "truncated", list(batch.truncated)
        yield "predicted", predicted.tolist()
        yield "probabilities", probabilities.cpu().tolist()
        yield "target", target.tolist()
        shared = SharedForward(self.forward)  # one forward per distinct row
        for index, name in enumerate(self.names):
            explain = self.explainers[index]
            scores = first_scores if index == 0 else _call(explain, batch, target)
            yield name, _per_token(scores, valid, name)
            for column, value in metric_values(
                self.metric_specs,
                shared,
                batch,
                target,
                scores,
                explain,
                self.tokenizer,
            ):
                yield f"{name}/{column}", value.per_example.reshape(-1).tolist()

    def _first_method(
        self, batch: EncodedBatch, gold: Optional[Tensor]
    ) -> Tuple[Tensor, Tensor]:
        r"""The first method's scores and the model's logits ``[batch, C]``.

        The logits come from the first method's own forward pass when they can
        (a plain prediction pass would cost NormXLogit half its speed): with
        gold targets, or for captum_ext methods, whose ``target=None`` is the
        predicted class. Otherwise, or when that pass cannot be recognised, a
        ``no_grad`` forward predicts first and the method gets the classes.
        """
        explain = self.explainers[0]
        if gold is not None or self.families[0] == "captum_ext":
            with _first_logits(self.model, batch) as seen:
                scores = _call(explain, batch, gold)
            if seen:
                return scores, seen[0]
            if gold is not None:
                return scores, self._logits(batch)
        logits = self._logits(batch)
        target = gold if gold is not None else logits.argmax(-1)
        return _call(explain, batch, target), logits

    def _logits(self, batch: EncodedBatch) -> Tensor:
        with torch.no_grad():
            return self.forward(batch.input_ids, *batch.forward_args())


def _call(explain: Explain, batch: EncodedBatch, target: Optional[Tensor]) -> Tensor:
    return explain(batch.input_ids, batch.attention_mask, target, batch.token_type_ids)


def _per_token(scores: Tensor, valid: Tensor, name: str) -> List[List[float]]:
    if scores.shape != valid.shape:
        raise ValueError(
            f"method {name!r} returned scores of shape {tuple(scores.shape)}, "
            f"not one per token {tuple(valid.shape)}"
        )
    scores = scores.float().cpu()
    return [row[keep].tolist() for row, keep in zip(scores, valid.cpu())]


@contextmanager
def _first_logits(model: nn.Module, batch: EncodedBatch) -> Iterator[List[Tensor]]:
    r"""Collects the logits of the first model call on exactly ``batch``'s ids
    and mask; the hook is removed however the block ends."""
    seen: List[Tensor] = []

    def keep_logits(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask", batch.attention_mask)
        logits = getattr(output, "logits", output)
        if seen or not isinstance(ids, Tensor) or not isinstance(logits, Tensor):
            return
        same_rows = ids.shape == batch.input_ids.shape and torch.equal(
            ids, batch.input_ids
        )
        if same_rows and torch.equal(mask, batch.attention_mask) and logits.dim() == 2:
            seen.append(logits.detach())

    handle = model.register_forward_hook(keep_logits, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def _source_columns(data: TextData) -> Dict[str, List[Any]]:
    columns: Dict[str, List[Any]] = {"id": list(data.rows), "text": list(data.texts)}
    if data.text_pairs is not None:
        columns["text_pair"] = list(data.text_pairs)
    if data.labels is not None:
        columns["label"] = list(data.labels)
    return columns


def _schema(
    data: TextData, methods: Sequence[str], columns: Dict[str, List[Any]]
) -> pa.Schema:
    types = {
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
    }
    types.update({name: pa.list_(pa.float32()) for name in methods})
    names = list(_source_columns(data)) + list(columns)
    return pa.schema([(name, types.get(name, pa.float64())) for name in names])
