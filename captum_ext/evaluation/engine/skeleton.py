#!/usr/bin/env python3
r"""The benchmark engines' one skeleton: the examples are dealt to the ranks
(:meth:`DistributedContext.shard`), every rank encodes its share into batches
and scores every chosen method on them (:class:`MethodShard`), rank 0 gathers
the shards, merges them into one row per method (:func:`merge_method`: means
over examples in row order) and builds the result, which every rank returns.

What differs between a classifier and a causal LM, how examples are encoded
and how a method's scores on one batch are scored, is an
:class:`EngineStrategy` (:mod:`~captum_ext.evaluation.engine.classifier`,
:mod:`~captum_ext.evaluation.engine.causal_lm`).
"""

import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Dict,
    Generic,
    List,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypeVar,
)

import torch
from torch import nn, Tensor

from captum_ext._utils.positive_int import check_positive_int
from captum_ext._utils.progress import Progress
from captum_ext.adapters import get_adapter, UnsupportedModelError
from captum_ext.evaluation.distributed import distributed_context, DistributedContext
from captum_ext.evaluation.options import BenchmarkOptions
from captum_ext.evaluation.registry import IG_STEPS, MethodSpec, MetricValue
from captum_ext.evaluation.results import BenchmarkResult, MethodResult
from captum_ext.evaluation.timing import PairedTiming
from captum_ext.evaluation.user_models import ModelSource
from captum_ext.metrics._utils.ranking import no_signal

__all__ = [
    "EngineStrategy",
    "Examples",
    "MethodShard",
    "RankOutput",
    "check_run_sizes",
    "checked_max_length",
    "default_max_length",
    "kept_scores",
    "merge_method",
    "metric_columns",
    "no_signal",
    "ranked_tokens",
    "run_config",
    "run_engine",
]

# Longest input the engine feeds a model whose tokenizer states no limit.
FALLBACK_MAX_LENGTH = 512


class Examples(Protocol):
    r"""What the engine reads from any examples (the user's
    :class:`~captum_ext.evaluation.user_data.LoadedExamples`, a built-in task's
    :class:`~captum_ext.defaults.data.TaskExamples`, or a record of one's own):
    ``texts``, gold ``labels`` or None, ``label_names`` or None, and optionally
    ``text_pairs``."""

    @property
    def texts(self) -> Sequence[str]: ...

    def __len__(self) -> int: ...


def default_max_length(model: nn.Module, tokenizer: Any) -> int:
    r"""The most tokens both the tokenizer and the model's positions allow
    (:data:`FALLBACK_MAX_LENGTH` when neither says)."""
    limits = [getattr(tokenizer, "model_max_length", None), _positions(model)]
    known = [int(n) for n in limits if isinstance(n, int) and 0 < n < 1_000_000]
    return min(known, default=FALLBACK_MAX_LENGTH)


def checked_max_length(
    model: nn.Module, tokenizer: Any, max_length: Optional[int]
) -> int:
    r"""``max_length``, or :func:`default_max_length` when None; a
    ``ValueError`` before any work when the model has fewer positions."""
    if max_length is None:
        return default_max_length(model, tokenizer)
    check_positive_int(max_length, "max_length")
    positions = _positions(model)
    if positions is not None and max_length > positions:
        raise ValueError(
            f"max_length={max_length} is more than the {positions} positions "
            f"{type(model).__name__} has; use --max-length {positions} or less"
        )
    return int(max_length)


def _positions(model: nn.Module) -> Optional[int]:
    r"""The model's number of input positions, if it states one."""
    try:
        return get_adapter(model).max_positions
    except UnsupportedModelError:
        value = getattr(getattr(model, "config", None), "max_position_embeddings", 0)
        return int(value) if isinstance(value, int) and value > 0 else None


# ------------------------------------------------------------ one rank's work
@dataclass
class MethodShard:
    r"""One method on one rank's rows: values per example row, paired timings,
    and the scores of the rows the report shows."""

    values: Dict[str, Dict[int, float]] = field(default_factory=dict)
    curves: Dict[str, Dict[int, List[float]]] = field(default_factory=dict)
    grids: Dict[str, List[float]] = field(default_factory=dict)
    ratios: List[float] = field(default_factory=list)
    spreads: List[float] = field(default_factory=list)
    seconds: float = 0.0
    forward_seconds: float = 0.0
    kept: Dict[int, Tensor] = field(default_factory=dict)
    # Rows whose explanation is constant: no ranking to score (see no_signal).
    constant: List[int] = field(default_factory=list)

    def mark_constant(self, rows: Sequence[int], flags: Tensor) -> None:
        r"""Records which of a batch's ``rows`` have no signal (``flags``
        ``[batch]``, :func:`no_signal`); their metric values become NaN."""
        self.constant += [row for row, flat in zip(rows, flags.tolist()) if flat]

    def record(self, column: str, rows: Sequence[int], value: MetricValue) -> None:
        r"""One batch's values of ``column`` (and its curves), by example row;
        NaN for a row marked constant, whose ranking would only be the
        tie-break's."""
        void = set(self.constant)
        per_example = value.per_example.reshape(-1).double().cpu().tolist()
        per_example = [math.nan if r in void else v for r, v in zip(rows, per_example)]
        self.values.setdefault(column, {}).update(zip(rows, per_example))
        if value.curve is not None:
            curve = value.curve.double().cpu().tolist()
            curve = [
                [math.nan] * len(c) if r in void else c for r, c in zip(rows, curve)
            ]
            self.curves.setdefault(column, {}).update(zip(rows, curve))
            self.grids[column] = [float(g) for g in value.grid or []]

    def add_timing(self, timing: PairedTiming) -> None:
        r"""One batch's paired timing (:func:`time_paired`)."""
        self.seconds += min(timing.method)
        self.forward_seconds += min(timing.forward)
        self.ratios.append(timing.ratio)
        self.spreads.append(timing.spread)


def ranked_tokens(
    input_ids: Tensor, attention_mask: Tensor, special_ids: Sequence[int]
) -> Tensor:
    r"""``[batch, pos]``: 1 at the tokens a metric ranks (attended, not one of
    ``special_ids``), 0 elsewhere."""
    special = torch.tensor(list(special_ids), dtype=torch.long)
    return attention_mask * ~torch.isin(input_ids, special.to(input_ids.device))


@dataclass
class RankOutput:
    r"""What a rank sends to rank 0: each method's shard, the kept rows' token
    ids (a classifier's attended token ids and type ids, a causal LM's prompt
    and continuation ids), a classifier's explained class and its probability
    per row, and how many texts were cut."""

    methods: Dict[str, MethodShard] = field(default_factory=dict)
    kept: Dict[int, Any] = field(default_factory=dict)
    predictions: Dict[int, Tuple[int, float]] = field(default_factory=dict)
    truncated: int = 0


Batch = TypeVar("Batch")


@dataclass
class EngineStrategy(ABC, Generic[Batch]):
    r"""One kind of model in the engine: how a rank's rows become batches,
    how one method scores one batch, and the result rank 0 builds from the
    merged rows (:func:`run_engine` does the rest)."""

    model: nn.Module
    tokenizer: Any
    data: Any  # the examples
    methods: List[MethodSpec]
    columns: Dict[str, bool]  # metric column -> whether higher is better
    options: BenchmarkOptions

    @property
    def keep(self) -> range:
        r"""The rows kept with every method's scores for the report."""
        return range(min(self.options.n_examples, len(self.data)))

    @abstractmethod
    def batches(self, rows: List[int], device: torch.device) -> List[Batch]:
        r"""``rows`` of the data, encoded in batches on ``device``, with what
        every method shares (a classifier's prediction, a causal LM's
        continuations)."""

    @abstractmethod
    def rows_of(self, batch: Batch) -> List[int]:
        r"""The data positions of ``batch``'s rows."""

    @abstractmethod
    def rank_output(self, batches: List[Batch]) -> RankOutput:
        r"""What a rank sends besides the methods' shards."""

    @abstractmethod
    def scorer(self, spec: MethodSpec) -> Callable[[Batch, MethodShard], None]:
        r"""``score(batch, shard)``: ``spec``'s method run and scored on one
        batch, its values added to ``shard``."""

    @abstractmethod
    def result(
        self,
        outputs: List[RankOutput],
        rows: List[MethodResult],
        ctx: DistributedContext,
    ) -> BenchmarkResult:
        r"""On rank 0: the result from every rank's output and the merged
        rows."""


def run_engine(strategy: EngineStrategy[Any], start: float) -> BenchmarkResult:
    r"""Shard -> score -> gather -> merge: every rank scores its share of the
    data, rank 0 merges and every rank returns the result (``wall_seconds``
    since ``start``)."""
    model, options = strategy.model, strategy.options
    default_device = next(model.parameters()).device
    with distributed_context(str(options.device or default_device)) as ctx:
        model.to(ctx.device)
        output = _score_shard(strategy, ctx)
        gathered = ctx.gather(output)
        result = None
        if gathered is not None:
            rows = _merged_rows(strategy, gathered)
            result = strategy.result(gathered, rows, ctx)
            result.wall_seconds = time.perf_counter() - start
        return ctx.broadcast(result)


def _score_shard(strategy: EngineStrategy[Any], ctx: DistributedContext) -> RankOutput:
    r"""This rank's rows in batches, scored by every method in turn."""
    options = strategy.options
    rows = ctx.shard(list(range(len(strategy.data))))
    batches = strategy.batches(rows, ctx.device)
    output = strategy.rank_output(batches)
    for spec in strategy.methods:
        label = f"{options.task}: {spec.name}"
        if ctx.is_distributed:
            label += f" (rank {ctx.rank})"
        progress = Progress(len(rows), label, "examples", enabled=options.progress)
        score = strategy.scorer(spec)
        shard = MethodShard()
        for batch in batches:
            score(batch, shard)
            progress.update(len(strategy.rows_of(batch)))
        progress.close()
        output.methods[spec.name] = shard
    return output


# ---------------------------------------------------------------- rank 0 merge
def _merged_rows(
    strategy: EngineStrategy[Any], outputs: List[RankOutput]
) -> List[MethodResult]:
    r"""One row per method from every rank's shards, with the data's own row
    ids (e.g. rows of the file) where it has them."""
    task, columns = strategy.options.task, list(strategy.columns)
    rows = [
        merge_method(spec, [out.methods[spec.name] for out in outputs], task, columns)
        for spec in strategy.methods
    ]
    ids = getattr(strategy.data, "rows", None)
    if ids:  # positions -> the data's own row ids
        for row in rows:
            row.rows = [ids[position] for position in row.rows]
    return rows


def _mean(values: Dict[int, Any]) -> Any:
    r"""Mean over examples in row order that skips NaN (an example a metric's
    protocol leaves out), per value or per curve point; NaN where none counts."""
    stacked = torch.tensor([values[row] for row in sorted(values)], dtype=torch.double)
    counted = ~stacked.isnan()
    total = torch.where(counted, stacked, 0.0).sum(0)
    return (total / counted.sum(0)).tolist()


def merge_method(
    spec: MethodSpec, shards: List[MethodShard], task: str, columns: Sequence[str]
) -> MethodResult:
    r"""One method's row from every rank's shard: per-example values in row
    order, their means (NaN skipped), mean curves and all batches' timings."""
    values: Dict[str, Dict[int, float]] = {c: {} for c in columns}
    curves: Dict[str, Dict[int, List[float]]] = {}
    grids: Dict[str, List[float]] = {}
    for shard in shards:
        for column, by_value in shard.values.items():
            values[column].update(by_value)
        for column, by_curve in shard.curves.items():
            curves.setdefault(column, {}).update(by_curve)
        grids.update(shard.grids)
    rows = sorted({row for by_row in values.values() for row in by_row})
    ratios = [ratio for shard in shards for ratio in shard.ratios]
    spreads = [spread for shard in shards for spread in shard.spreads]
    return MethodResult(
        task=task,
        method=spec.name,
        family=spec.family,
        class_agnostic=spec.class_agnostic,
        n=len(rows),
        metrics={c: float(_mean(values[c])) for c in columns if values[c]},
        curves={c: (grids[c], _mean(by_row)) for c, by_row in curves.items()},
        seconds=sum(shard.seconds for shard in shards),
        forward_seconds=sum(shard.forward_seconds for shard in shards),
        ratios=ratios,
        spreads=spreads,
        rows=rows,
        per_example={c: [values[c][row] for row in rows] for c in columns if values[c]},
        constant=sorted({row for shard in shards for row in shard.constant}),
    )


def kept_scores(
    shards: Sequence[Dict[str, MethodShard]], row: int
) -> Dict[str, Tensor]:
    r"""Every method's kept scores of ``row``, from the ranks' shards by method."""
    return {
        name: shard.kept[row]
        for by_method in shards
        for name, shard in by_method.items()
        if row in shard.kept
    }


def metric_columns(metrics: Sequence[Any]) -> Dict[str, bool]:
    r"""Every column of ``metrics`` (registry specs, classifier or generation),
    in their order, and whether higher is better."""
    return {c: up for m in metrics for c, up in m.columns.items()}


def check_run_sizes(batch_size: int, n_examples: int, data: Examples) -> None:
    r"""A positive batch size, ``n_examples >= 0`` and some data, before any
    work."""
    check_positive_int(batch_size, "batch_size")
    if n_examples < 0:
        raise ValueError(f"n_examples must be >= 0, got {n_examples}")
    if len(data) == 0:
        raise ValueError("the data has no examples")


def run_config(
    model: nn.Module,
    data: Examples,
    methods: Sequence[MethodSpec],
    options: BenchmarkOptions,
    max_length: int,
    ctx: DistributedContext,
    truncated: int,
) -> Dict[str, Any]:
    r"""The run's ``config``: the task's size, data, model and settings, the
    device and the library versions."""
    import captum
    import transformers

    task = options.task
    return {
        "tasks": {task: len(data)},
        "data": {task: str(getattr(data, "source", task))},
        "model": {task: ModelSource.of(model).record()},
        "methods": [m.name for m in methods],
        "batch_size": options.batch_size,
        "max_length": {task: max_length},
        "truncated": {task: truncated},
        "ig_steps": IG_STEPS,
        "device": str(ctx.device),
        "world_size": ctx.world_size,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "captum": captum.__version__,
        "threads": torch.get_num_threads(),
    }
