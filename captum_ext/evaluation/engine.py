#!/usr/bin/env python3
r"""The benchmark engine: chosen methods of the registry's ``METHODS`` scored
by chosen metrics of its ``METRICS`` (:mod:`captum_ext.evaluation.registry`) on any
Hugging Face sequence classifier and any labelled or unlabelled texts, each method
timed against a forward pass on the same batch.

Under ``torchrun`` the examples are dealt to the ranks
(:meth:`DistributedContext.shard`), every rank scores its share and rank 0
gathers the per-example values; means are taken over examples in row order, so
the table equals a one-process run up to the batch composition (padding
invariance, within 1e-6).
"""

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    Protocol,
    Sequence,
    Tuple,
)

import torch
from torch import nn, Tensor

from captum_ext._utils.common import classifier_forward, TokenBatch
from captum_ext._utils.progress import Progress
from captum_ext._utils.row_chunks import check_internal_batch_size
from captum_ext.adapters import get_adapter, UnsupportedModelError
from captum_ext.evaluation.distributed import distributed_context, DistributedContext
from captum_ext.evaluation.names import check_names
from captum_ext.evaluation.options import BenchmarkOptions
from captum_ext.evaluation.registry import (
    IG_STEPS,
    MethodFn,
    METHODS,
    MethodSpec,
    MetricContext,
    METRICS,
    MetricSpec,
    MetricValue,
)
from captum_ext.evaluation.results import BenchmarkResult, MethodResult
from captum_ext.evaluation.timing import clock_for, PairedTiming, time_paired
from captum_ext.evaluation.tokenized_batches import bucketed_batches, EncodedBatch
from captum_ext.evaluation.user_models import ModelSource
from captum_ext.metrics._utils.ranking import no_signal
from captum_ext.visualization import Explanation, special_token_mask

__all__ = [
    "Examples",
    "MethodShard",
    "SharedForward",
    "benchmark",
    "check_options",
    "checked_max_length",
    "default_max_length",
    "kept_scores",
    "merge_method",
    "metric_values",
    "no_signal",
    "ranked_tokens",
    "run_benchmark",
    "run_config",
]

# Longest input the engine feeds a model whose tokenizer states no limit.
FALLBACK_MAX_LENGTH = 512


class Examples(Protocol):
    r"""What the engine reads from any examples (the user's
    :class:`~captum_ext.evaluation.data.LoadedExamples`, a built-in task's
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
    check_internal_batch_size(max_length, "max_length")
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


# --------------------------------------------------------------- shared forward
class SharedForward:
    r"""Logits memoised per input row, for all metrics of all methods on one
    batch.

    The default protocols perturb the same inputs more than once: AOPC, LOdds
    and hiding delete the same top-ranked tokens, sufficiency and revealing keep
    the same ones, every metric re-runs the unperturbed batch, and the extreme
    levels (every content token removed or kept) are the same for every method.
    Each distinct row runs once, which makes the metrics about 3x cheaper. A
    row's key is its tokens, mask and segment ids up to its last attended
    position: trailing padding, which the metrics trim differently per chunk,
    does not change the logits.
    """

    def __init__(self, forward: Callable[..., Tensor]) -> None:
        self.forward = forward
        self.rows: Dict[Tuple[bytes, ...], Tensor] = {}

    def remember(
        self,
        logits: Tensor,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Optional[Tensor] = None,
    ) -> None:
        keys = _row_keys(input_ids, attention_mask, token_type_ids)
        self.rows.update(zip(keys, logits.detach()))

    def __call__(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Optional[Tensor] = None,
    ) -> Tensor:
        keys = _row_keys(input_ids, attention_mask, token_type_ids)
        missing = {key: row for row, key in enumerate(keys) if key not in self.rows}
        if missing:
            rows = torch.tensor(list(missing.values()), device=input_ids.device)
            ids, mask = input_ids[rows], attention_mask[rows]
            types = None if token_type_ids is None else token_type_ids[rows]
            self.remember(self.forward(ids, mask, types), ids, mask, types)
        return torch.stack([self.rows[key] for key in keys])


def _row_keys(
    input_ids: Tensor, attention_mask: Tensor, token_type_ids: Optional[Tensor] = None
) -> List[Tuple[bytes, ...]]:
    ends = (attention_mask.cumsum(-1) * attention_mask).argmax(-1) + 1  # [batch]
    parts = [input_ids, attention_mask]
    parts += [] if token_type_ids is None else [token_type_ids]
    arrays = [part.cpu().numpy() for part in parts]
    return [
        tuple(array[row, :end].tobytes() for array in arrays)
        for row, end in enumerate(ends.tolist())
    ]


# -------------------------------------------------------------------- timing
def _forward_for(model: nn.Module) -> Callable[..., Tensor]:
    r"""The logits function every timing and metric uses (a seam for tests)."""
    return classifier_forward(model)


# ------------------------------------------------------------------- batches
@dataclass
class _Batch:
    r"""One batch of the dataset and what the engine learns about it."""

    encoded: EncodedBatch
    labels: Optional[Tensor]  # [batch] gold labels
    target: Tensor = field(default_factory=lambda: torch.empty(0))  # [batch]
    probs: Tensor = field(default_factory=lambda: torch.empty(0))  # [batch, C]
    shared: Optional[SharedForward] = None

    def logits(self, forward: Callable[..., Tensor]) -> Tensor:
        e = self.encoded
        return forward(e.input_ids, *e.forward_args())  # [batch, C]


def _batches(
    tokenizer: Any,
    data: Examples,
    rows: List[int],
    *,
    batch_size: int,
    max_length: int,
    device: torch.device,
) -> List[_Batch]:
    pairs = getattr(data, "text_pairs", None)
    labels = getattr(data, "labels", None)
    encoded = bucketed_batches(
        tokenizer,
        [data.texts[r] for r in rows],
        None if pairs is None else [pairs[r] for r in rows],
        batch_size=batch_size,
        max_length=max_length,
    )
    batches = []
    for batch in encoded:
        batch.rows = [rows[i] for i in batch.rows]  # positions in ``data``
        gold = None if labels is None else torch.tensor([labels[r] for r in batch.rows])
        batches.append(_Batch(batch.to(device), gold))
    return batches


@torch.no_grad()
def _predict(forward: Callable[..., Tensor], batch: _Batch) -> None:
    r"""Sets the batch's predicted class (the explained target)."""
    logits = batch.logits(forward)  # [batch, C]
    batch.probs = logits.float().softmax(-1)
    batch.target = logits.argmax(-1)
    batch.shared = SharedForward(forward)
    batch.shared.remember(
        logits, batch.encoded.input_ids, *batch.encoded.forward_args()
    )


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


def _other_classes(
    explain: MethodFn, batch: TokenBatch, target: Tensor, scores: Tensor
) -> Callable[[Tensor], Tensor]:
    r"""``explain(classes)`` for Kendall-tau: rows asking for the class already
    explained (``target``) reuse their ``scores``; only the other rows run the
    method again."""

    def explain_for(classes: Tensor) -> Tensor:
        out = scores.clone()
        redo = (classes != target).nonzero().flatten()
        if len(redo):
            rows = batch.select(redo)
            out[redo] = _explain(explain, rows, classes[redo]).detach().float()
        return out

    return explain_for


def _explain(explain: MethodFn, batch: TokenBatch, target: Tensor) -> Tensor:
    r"""A registry method's scores ``[batch, pos]`` on ``batch``."""
    return explain(batch.input_ids, batch.attention_mask, target, batch.token_type_ids)


def metric_values(
    metrics: Sequence[MetricSpec],
    forward: Callable[..., Tensor],
    batch: TokenBatch,
    target: Tensor,
    scores: Tensor,
    explain: MethodFn,
    tokenizer: Any,
    labels: Optional[Tensor] = None,
) -> Iterator[Tuple[str, MetricValue]]:
    r"""``(column, value)`` of every metric on one batch's ``scores``
    ``[batch, pos]`` for ``target`` ``[batch]``; ``forward`` is the batch's
    :class:`SharedForward`, shared by every metric and method of the batch."""
    other_classes = _other_classes(explain, batch, target, scores)
    context = MetricContext(
        forward,
        batch.input_ids,
        batch.attention_mask,
        target,
        tokenizer,
        other_classes,
        batch.token_type_ids,
        labels,
    )
    for metric in metrics:
        yield from metric.compute(context, scores).items()


def _score_batch(
    explain: MethodFn,
    forward: Callable[..., Tensor],
    batch: _Batch,
    tokenizer: Any,
    metrics: Sequence[MetricSpec],
    shard: MethodShard,
) -> Tensor:
    r"""Runs the method on one batch, timed against forward passes on the same
    batch interleaved with it (:func:`~captum_ext.evaluation.timing.time_paired`),
    and adds every metric's per-example values to ``shard``."""
    scores, timing = time_paired(
        torch.no_grad()(lambda: batch.logits(forward)),
        lambda: _explain(explain, batch.encoded, batch.target),
        clock_for(batch.encoded.input_ids.device),
    )
    scores = scores.detach().float()  # [batch, pos]
    shard.add_timing(timing)
    e = batch.encoded
    real = ranked_tokens(e.input_ids, e.attention_mask, tokenizer.all_special_ids)
    shard.mark_constant(e.rows, no_signal(scores, real))
    assert batch.shared is not None
    for column, value in metric_values(
        metrics,
        batch.shared,
        batch.encoded,
        batch.target,
        scores,
        explain,
        tokenizer,
        batch.labels,
    ):
        shard.record(column, batch.encoded.rows, value)
    return scores


def _score_method(
    explain: MethodFn,
    model: nn.Module,
    tokenizer: Any,
    batches: List[_Batch],
    metrics: Sequence[MetricSpec],
    keep: Sequence[int],
    progress: Progress,
) -> MethodShard:
    forward = _forward_for(model)
    shard = MethodShard()
    for batch in batches:
        scores = _score_batch(explain, forward, batch, tokenizer, metrics, shard)
        mask = batch.encoded.attention_mask
        for position, row in enumerate(batch.encoded.rows):
            if row in keep:
                shard.kept[row] = scores[position, mask[position].bool()].cpu()
        progress.update(len(batch.encoded.rows))
    progress.close()
    return shard


@dataclass
class _RankOutput:
    r"""What a rank sends to rank 0."""

    methods: Dict[str, MethodShard]
    predictions: Dict[int, Tuple[int, float]]  # row -> (target, probability)
    # row -> the attended token ids and, for text pairs, their token type ids
    kept: Dict[int, Tuple[List[int], Optional[List[int]]]]
    truncated: int


def _predictions(batches: List[_Batch], keep: Sequence[int]) -> _RankOutput:
    r"""Each row's explained class and its probability, the tokens of the rows
    the report shows, and how many texts were cut."""
    output = _RankOutput({}, {}, {}, 0)
    for batch in batches:
        mask = batch.encoded.attention_mask.bool()  # [batch, pos]
        for position, row in enumerate(batch.encoded.rows):
            target = int(batch.target[position])
            output.predictions[row] = (target, float(batch.probs[position, target]))
            if row in keep:
                output.kept[row] = _attended(batch.encoded, position, mask[position])
        output.truncated += sum(batch.encoded.truncated)
    return output


@dataclass(frozen=True)
class _Job:
    r"""One benchmark run as the engine executes it: the chosen methods' and
    metrics' specs and the options, ``max_length`` resolved."""

    methods: List[MethodSpec]
    metrics: List[MetricSpec]
    options: BenchmarkOptions
    max_length: int
    # Texts the decoders are fitted on, when a chosen method needs them.
    decoder_texts: Optional[Sequence[str]] = None


def _run_shard(
    model: nn.Module,
    tokenizer: Any,
    data: Examples,
    job: _Job,
    ctx: DistributedContext,
) -> _RankOutput:
    options = job.options
    rows = ctx.shard(list(range(len(data))))
    batches = _batches(
        tokenizer,
        data,
        rows,
        batch_size=options.batch_size,
        max_length=job.max_length,
        device=ctx.device,
    )
    forward = _forward_for(model)
    for batch in batches:
        _predict(forward, batch)
    keep = list(range(min(options.n_examples, len(data))))
    output = _predictions(batches, keep)
    metrics = job.metrics
    for spec in job.methods:
        label = f"{options.task}: {spec.name}"
        if ctx.is_distributed:
            label += f" (rank {ctx.rank})"
        progress = Progress(len(rows), label, "examples", enabled=options.progress)
        explain = spec.build(model, tokenizer, job.decoder_texts)
        # One ranking for every class: nothing for a class-specific metric to compare.
        method_metrics = [
            m for m in metrics if not (spec.class_agnostic and m.explains_other_classes)
        ]
        output.methods[spec.name] = _score_method(
            explain, model, tokenizer, batches, method_metrics, keep, progress
        )
    return output


# ---------------------------------------------------------------- rank 0 merge
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


def _label_names(model: nn.Module, data: Examples) -> List[str]:
    r"""The data's class names, else the model's ``id2label``."""
    names = getattr(data, "label_names", None)
    if names:
        return list(names)
    config: Any = model.config
    id2label = getattr(config, "id2label", None) or {}
    return [str(id2label.get(i, i)) for i in range(config.num_labels)]


def _attended(
    encoded: EncodedBatch, position: int, attended: Tensor
) -> Tuple[List[int], Optional[List[int]]]:
    r"""One row's attended token ids and token type ids (None without)."""
    types = encoded.token_type_ids
    return (
        encoded.input_ids[position, attended].tolist(),
        None if types is None else types[position, attended].tolist(),
    )


def _examples(
    model: nn.Module,
    tokenizer: Any,
    data: Examples,
    outputs: List[_RankOutput],
    kept: Dict[int, Tuple[List[int], Optional[List[int]]]],
) -> Dict[int, Explanation]:
    r"""The kept rows' explanations, by row, in row order."""
    labels = getattr(data, "labels", None)
    names = _label_names(model, data)
    examples = {}
    predictions = {row: p for out in outputs for row, p in out.predictions.items()}
    for row in sorted(kept):
        ids = kept[row][0]
        target, prob = predictions[row]
        scores = kept_scores([out.methods for out in outputs], row)
        examples[row] = Explanation(
            tokens=tokenizer.convert_ids_to_tokens(ids),
            scores=scores,
            label_names=names,
            pred_class=target,
            pred_prob=prob,
            target=target,
            true_class=None if labels is None else int(labels[row]),
            special_mask=special_token_mask(tokenizer, ids),
            text=data.texts[row],
        )
    return examples


def _confident_row(examples: Dict[int, Explanation]) -> int:
    r"""The row the heatmaps show: the most confidently predicted among the
    correctly classified ones (all of them when none is, or without labels)."""
    correct = [r for r, e in examples.items() if e.true_class in (None, e.pred_class)]
    return max(correct or examples, key=lambda row: examples[row].pred_prob)


def _layer_maps(
    model: nn.Module,
    tokenizer: Any,
    example: Explanation,
    inputs: Tuple[List[int], Optional[List[int]]],
    job: _Job,
    device: torch.device,
) -> Dict[str, Tuple[List[str], Tensor]]:
    r"""The per-layer scores (``MethodSpec.layer_map``) of the chosen methods on
    one example, in the registry's order, from its attended token ids and (text
    pairs) token type ids; none fitted or run for a method that was not
    chosen."""
    chosen = {spec.name for spec in job.methods}
    ids, types = inputs
    input_ids = torch.tensor([ids], device=device)  # [1, pos]
    mask = torch.ones_like(input_ids)
    token_types = None if types is None else torch.tensor([types], device=device)
    target = torch.tensor([example.target], device=device)
    maps = {}
    for name, spec in METHODS.items():
        if name in chosen and spec.layer_map is not None:
            layers = spec.build(model, tokenizer, job.decoder_texts, layers=True)
            scores = layers(input_ids, mask, target, token_types)[0]  # [layers, pos]
            maps[name] = (example.tokens, scores.cpu())
    return maps


def _check_labels(metrics: Sequence[MetricSpec], data: Examples) -> None:
    needing = [m.name for m in metrics if m.needs_labels]
    if needing and getattr(data, "labels", None) is None:
        raise ValueError(
            f"metric(s) {needing} score against gold labels and the data has none: "
            "give a label column (--label-column) or choose other metrics"
        )


def check_options(batch_size: int, n_examples: int, data: Examples) -> None:
    r"""A positive batch size, ``n_examples >= 0`` and some data, before any
    work."""
    check_internal_batch_size(batch_size, "batch_size")
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


def benchmark(
    model: nn.Module,
    tokenizer: Any,
    data: Examples,
    methods: Optional[Sequence[str]] = None,
    metrics: Optional[Sequence[str]] = None,
    *,
    task: str = "data",
    batch_size: int = 16,
    max_length: Optional[int] = None,
    device: Optional[Any] = None,
    progress: bool = True,
    n_examples: int = 3,
    decoder_texts: Optional[Sequence[str]] = None,
) -> BenchmarkResult:
    r"""Scores ``methods`` with ``metrics`` on ``data``: the faithfulness of each
    method's token attributions for ``model``'s predicted class, averaged over
    examples, and each method's cost as a ratio to one forward pass.

    The time ratio of a method is the median over batches of
    ``t_method(batch) / t_forward(batch)``, each the fastest of repetitions
    interleaved on the same batch (:mod:`captum_ext.evaluation.timing`).

    Under ``torchrun`` every rank must call it with the same arguments; the
    examples are dealt to the ranks and rank 0 gathers the values. Every rank
    returns the full result.

    Args:
        model (nn.Module): a Hugging Face sequence classifier (see
            :func:`captum_ext.evaluation.load_classifier`); it is moved to
            ``device``.
        tokenizer (PreTrainedTokenizerBase): its tokenizer.
        data (Examples): texts (and optional ``text_pairs``, gold ``labels`` and
            ``label_names``), e.g. from :func:`captum_ext.evaluation.data.load_data`.
        methods (Sequence[str], optional): names in ``METHODS``. Default: all.
        metrics (Sequence[str], optional): names in ``METRICS``. Default: all.
        task (str, optional): the label of the result rows. Default: ``"data"``.
        batch_size (int, optional): examples per attribution call. Default: 16.
        max_length (int, optional): tokens per example; longer texts are cut
            (a warning counts them). Default: :func:`default_max_length`.
        device (str or torch.device, optional): where the model and inputs go.
            Default: the model's device (``cuda:LOCAL_RANK`` under ``torchrun``
            with ``"cuda"``).
        progress (bool, optional): progress on stderr. Default: True.
        n_examples (int, optional): first rows kept with every method's scores
            for the report's highlights. Default: 3.
        decoder_texts (Sequence[str], optional): texts to fit Decoded
            Grad-CAM's decoders on (only when that method is chosen). Default:
            the data's texts.

    Returns:
        BenchmarkResult: one row per method, with per-example values
        (``MethodResult.per_example``), ``to_csv``/``to_json``.
    """
    options = BenchmarkOptions(
        methods=methods,
        metrics=metrics,
        batch_size=batch_size,
        max_length=max_length,
        device=device,
        progress=progress,
        decoder_texts=decoder_texts,
        task=task,
        n_examples=n_examples,
    )
    return run_benchmark(model, tokenizer, data, options, stacklevel=3)


def run_benchmark(
    model: nn.Module,
    tokenizer: Any,
    data: Examples,
    options: BenchmarkOptions,
    stacklevel: int = 2,
) -> BenchmarkResult:
    r""":func:`benchmark` with its options as one record (what the command line
    builds).

    Args:
        model (nn.Module): a Hugging Face sequence classifier.
        tokenizer (PreTrainedTokenizerBase): its tokenizer.
        data (Examples): texts (and optional ``text_pairs``, gold ``labels`` and
            ``label_names``).
        options (BenchmarkOptions): the run's methods, metrics, batch size and
            the rest (see :class:`~captum_ext.evaluation.options.BenchmarkOptions`).
        stacklevel (int, optional): of the warning that counts cut texts.

    Returns:
        BenchmarkResult: as :func:`benchmark`'s.
    """
    start = time.perf_counter()
    method_specs = [METHODS[n] for n in check_names(options.methods, METHODS, "method")]
    metric_specs = [METRICS[n] for n in check_names(options.metrics, METRICS, "metric")]
    check_options(options.batch_size, options.n_examples, data)
    _check_labels(metric_specs, data)
    decoder_texts = None
    if any(spec.needs_decoders for spec in method_specs):
        decoder_texts = options.decoder_texts or list(data.texts)
    job = _Job(
        methods=method_specs,
        metrics=metric_specs,
        options=options,
        max_length=checked_max_length(model, tokenizer, options.max_length),
        decoder_texts=decoder_texts,
    )
    default_device = next(model.parameters()).device
    with distributed_context(str(options.device or default_device)) as ctx:
        model.to(ctx.device)
        output = _run_shard(model, tokenizer, data, job, ctx)
        gathered = ctx.gather(output)
        result = None
        if gathered is not None:
            result = _merge(model, tokenizer, data, gathered, job=job, ctx=ctx)
            result.wall_seconds = time.perf_counter() - start
        result = ctx.broadcast(result)
    truncated = result.config["truncated"][options.task]
    if truncated:
        warnings.warn(
            f"{truncated} of {len(data)} texts were cut to max_length="
            f"{job.max_length} tokens; their attributions cover the kept "
            "tokens only",
            stacklevel=stacklevel,
        )
    return result


def _merge(
    model: nn.Module,
    tokenizer: Any,
    data: Examples,
    outputs: List[_RankOutput],
    *,
    job: _Job,
    ctx: DistributedContext,
) -> BenchmarkResult:
    task, methods = job.options.task, job.methods
    columns = {c: up for m in job.metrics for c, up in m.columns.items()}
    rows = [
        merge_method(
            spec, [out.methods[spec.name] for out in outputs], task, list(columns)
        )
        for spec in methods
    ]
    ids = getattr(data, "rows", None)
    if ids:  # positions -> the data's own row ids (e.g. rows of the file)
        for row in rows:
            row.rows = [ids[position] for position in row.rows]
    kept = {row: inputs for out in outputs for row, inputs in out.kept.items()}
    examples = _examples(model, tokenizer, data, outputs, kept)
    maps = {}
    if examples:
        shown = _confident_row(examples)
        maps = _layer_maps(
            model, tokenizer, examples[shown], kept[shown], job, ctx.device
        )
    truncated = sum(out.truncated for out in outputs)
    return BenchmarkResult(
        rows=rows,
        metrics=columns,
        examples={task: list(examples.values())},
        config=run_config(
            model, data, job.methods, job.options, job.max_length, ctx, truncated
        ),
        layer_maps={task: maps},
    )
