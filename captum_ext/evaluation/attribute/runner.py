#!/usr/bin/env python3
r""":func:`attribute_dataset`: every example of a dataset explained by several
methods (and scored by metrics), one Parquet row per example; the user guide is
``docs/guide/attribute.rst``. What differs between a classifier and a causal
LM is the run's plan (:mod:`~captum_ext.evaluation.attribute.plans`) and its
shard builder (:mod:`~captum_ext.evaluation.attribute.shard_builders`)."""

import warnings
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import pyarrow as pa
from torch import nn

from captum_ext._utils.positive_int import check_positive_int
from captum_ext._utils.progress import Progress
from captum_ext.evaluation.attribute.lock import output_lock
from captum_ext.evaluation.attribute.manifest import (
    check_or_write_manifest,
    ManifestMismatchError,
    run_manifest,
)
from captum_ext.evaluation.attribute.plans import Plan, plan_for, RunInputs
from captum_ext.evaluation.attribute.shard_builders import ShardBuilder
from captum_ext.evaluation.attribute.shards import (
    remove_temporary_files,
    shard_name,
    shard_positions,
    shard_problem,
    write_shard,
)
from captum_ext.evaluation.distributed import distributed_context, DistributedContext
from captum_ext.evaluation.engine import checked_max_length
from captum_ext.evaluation.names import check_names
from captum_ext.evaluation.options import DEFAULT_SHARD_SIZE, JobOptions
from captum_ext.evaluation.registry import METHODS, METRICS
from captum_ext.evaluation.tokenized_batches import texts_without_words
from captum_ext.evaluation.user_data import DataError, LoadedExamples

__all__ = ["attribute_dataset"]


class _OutputDir(NamedTuple):
    r"""What rank 0 checks the output directory against."""

    out: Path
    arguments: Dict[str, Any]
    schema: pa.Schema
    data: LoadedExamples


def attribute_dataset(
    model: nn.Module,
    tokenizer: Any,
    data: LoadedExamples,
    methods: Sequence[str],
    out_dir: Any,
    *,
    metrics: Optional[Sequence[str]] = None,
    batch_size: int = JobOptions.batch_size,
    max_length: Optional[int] = None,
    device: str = "cpu",
    progress: bool = True,
    shard_size: int = DEFAULT_SHARD_SIZE,
    target: str = "predicted",
    max_new_tokens: Optional[int] = None,
    sources: str = "tokens",
) -> Path:
    r"""Explains every example of ``data`` with each of ``methods`` and writes one
    Parquet row per example (layout and columns: see the module docstring).

    A causal LM (the adapter's ``is_causal_lm``) explains its continuation of
    each prompt (``data.texts``): the given one (``data.continuations``), or
    the one it generates greedily (at most ``max_new_tokens`` tokens, ending at
    its first EOS), one ``[T, P]`` matrix per method (row ``t`` explains
    ``log p(y_t | prompt, y_<t)``); the run is the same in every other way.

    The class explained is the model's prediction (``target="predicted"``, the
    benchmark's convention) or the gold label (``target="label"``, which needs a
    label column). Under ``torchrun`` every rank runs this same call; the model
    is moved to the rank's device (``cuda:LOCAL_RANK`` for ``device="cuda"``).

    Args:
        model (nn.Module): a Hugging Face sequence classifier or causal LM in
            eval mode.
        tokenizer (PreTrainedTokenizerBase): its tokenizer (with a pad token).
        data (LoadedExamples): the examples (see :func:`load_data`).
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
        target (str, optional): ``"predicted"`` or ``"label"`` (a
            classifier's). Default: ``"predicted"``.
        max_new_tokens (int, optional): a causal LM's generated continuation
            length when ``data`` has none. Default: None (Captum's 25).
        sources (str, optional): a causal LM's prompt columns: ``"tokens"``,
            or ``"sentences"`` / ``"lines"`` (column ``sources``; each score the
            sum of the source's tokens', see
            :mod:`~captum_ext.evaluation.attribute.sources`). Default:
            ``"tokens"``

    Returns:
        Path: ``out_dir``.

    Raises:
        ManifestMismatchError: ``out_dir`` holds another run's outputs.
        OutputLockedError: another run is writing into ``out_dir``.
        ValueError: unknown method or metric, bad sizes, no labels for
            ``target="label"``, a model in training mode; for a causal LM a
            method that does not explain one, metrics, a prompt and
            continuation longer than ``max_length``.
    """
    method_specs, metric_specs = _check_names(methods, metrics)
    for name, value in (("batch_size", batch_size), ("shard_size", shard_size)):
        check_positive_int(value, name)
    if model.training:
        raise ValueError("the model is in training mode; call model.eval() first")
    length = checked_max_length(model, tokenizer, max_length)
    _check_words(tokenizer, data)
    arguments: Dict[str, Any] = {
        "methods": list(methods),
        "max_length": length,
        "shard_size": shard_size,
    }
    plan = plan_for(
        RunInputs(
            model,
            tokenizer,
            data,
            method_specs,
            metric_specs,
            length,
            target,
            max_new_tokens,
            sources,
        )
    )
    arguments.update(plan.arguments)
    output = _OutputDir(Path(out_dir), arguments, plan.schema, data)
    truncated = _run_ranks(model, tokenizer, output, plan, batch_size, device, progress)
    if truncated:
        warnings.warn(
            f"{truncated} of the texts this run attributed were cut to "
            f"max_length={length} tokens (column 'truncated'); their "
            "attributions cover the kept tokens only"
        )
    return output.out


def _run_ranks(
    model: nn.Module,
    tokenizer: Any,
    output: _OutputDir,
    plan: Plan,
    batch_size: int,
    device: str,
    progress: bool,
) -> int:
    r"""Every rank writes its share of the shards still to do (the output
    lock held by rank 0 until all are done); how many of its texts were cut."""
    with distributed_context(device) as context, ExitStack() as held:
        if next(model.parameters()).device != context.device:
            model.to(context.device)
        missing = _agreed_missing_shards(context, output, model, tokenizer, held)
        builder = plan.builder()
        enabled = progress and context.is_main
        mine = context.shard(missing)
        truncated = _write_shards(builder, output, mine, batch_size, context, enabled)
        context.barrier()
    return truncated


def _write_shards(
    builder: ShardBuilder,
    output: _OutputDir,
    shards: List[int],
    batch_size: int,
    context: DistributedContext,
    progress: bool,
) -> int:
    r"""Builds and writes ``shards``; how many of their texts were cut."""
    shard_size, n_rows = output.arguments["shard_size"], len(output.data)
    total = sum(len(shard_positions(k, shard_size, n_rows)) for k in shards)
    truncated = 0
    with Progress(
        total, "attribute", "examples", enabled=progress, summary=False
    ) as bar:
        for shard in shards:
            positions = shard_positions(shard, shard_size, n_rows)
            table = builder.shard_table(
                output.data.select(positions),
                output.schema,
                batch_size,
                context.device,
                bar.update,
            )
            write_shard(table, output.out / shard_name(shard), context.rank)
            truncated += builder.truncated(table)
    return truncated


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


def _check_words(tokenizer: Any, data: LoadedExamples) -> None:
    empty = texts_without_words(tokenizer, data.texts, data.text_pairs)
    if empty:
        rows = ", ".join(str(data.rows[i]) for i in empty[:10])
        more = f" and {len(empty) - 10} more" if len(empty) > 10 else ""
        raise DataError(
            f"{data.source}: the text(s) in row(s) {rows}{more} have no word after "
            "tokenisation (only control characters or special-token strings); "
            "remove them"
        )


def _agreed_missing_shards(
    context: DistributedContext,
    output: _OutputDir,
    model: nn.Module,
    tokenizer: Any,
    held: ExitStack,
) -> List[int]:
    r"""Rank 0 takes the output lock (held in ``held`` until the run ends),
    checks (or writes) the manifest and lists the shards still to do; every
    rank gets the same list, or the same error."""
    verdict: Tuple[Optional[Exception], List[int]] = (None, [])
    if context.is_main:
        try:
            output.out.mkdir(parents=True, exist_ok=True)
            held.enter_context(output_lock(output.out))
            manifest = run_manifest(output.arguments, model, tokenizer, output.data)
            verdict = (None, _prepare(output, manifest))
        except (OSError, ManifestMismatchError) as error:
            verdict = (error, [])
    failure, missing = context.broadcast(verdict)  # pickled: the same error
    if failure is not None:
        raise failure
    return missing


def _prepare(output: _OutputDir, manifest: Dict[str, Any]) -> List[int]:
    r"""Writes or checks the manifest, removes temporary files of runs that are
    gone, and returns the shards still to do: those missing and those that do
    not verify (removed, with a notice)."""
    remove_temporary_files(output.out)
    check_or_write_manifest(output.out, manifest)
    missing = []
    for shard in range(manifest["shards"]):
        path = output.out / shard_name(shard)
        if not path.exists():
            missing.append(shard)
            continue
        positions = shard_positions(
            shard, output.arguments["shard_size"], len(output.data)
        )
        problem = shard_problem(
            path, [output.data.rows[i] for i in positions], output.schema
        )
        if problem is not None:
            warnings.warn(f"{path} is redone: it does not verify ({problem})")
            path.unlink()
            missing.append(shard)
    return missing
