#!/usr/bin/env python3
r"""The classifier benchmark: chosen methods of the registry's ``METHODS``
scored by chosen metrics of its ``METRICS`` (:mod:`captum_ext.evaluation.registry`)
on any Hugging Face sequence classifier and any labelled or unlabelled texts,
each method timed against a forward pass on the same batch.

The engine's classifier strategy (:class:`ClassifierStrategy`): texts (and
text pairs) are tokenised into length-bucketed, right-padded batches, the
explained class is the model's prediction, and a method's scores on a batch
are scored by every metric with one forward pass per distinct input row
(:class:`~captum_ext.evaluation.engine.classifier_metrics.SharedForward`).
Under ``torchrun`` the examples are dealt to the ranks and rank 0 gathers the
per-example values (:mod:`~captum_ext.evaluation.engine.skeleton`); means are
taken over examples in row order, so the table equals a one-process run up to
the batch composition (padding invariance, within 1e-6).
"""

import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn, Tensor

from captum_ext._utils.model_forward import classifier_forward
from captum_ext.evaluation.distributed import DistributedContext
from captum_ext.evaluation.engine.classifier_metrics import (
    explain_batch,
    metric_values,
    SharedForward,
)
from captum_ext.evaluation.engine.skeleton import (
    check_run_sizes,
    checked_max_length,
    EngineStrategy,
    Examples,
    kept_scores,
    MethodShard,
    metric_columns,
    no_signal,
    ranked_tokens,
    RankOutput,
    run_config,
    run_engine,
)
from captum_ext.evaluation.image_tokens import ImageTokenizer
from captum_ext.evaluation.names import check_names
from captum_ext.evaluation.options import BenchmarkOptions
from captum_ext.evaluation.registry import (
    MethodFn,
    METHODS,
    MethodSpec,
    METRICS,
    MetricSpec,
)
from captum_ext.evaluation.results import BenchmarkResult, MethodResult
from captum_ext.evaluation.timing import clock_for, time_paired
from captum_ext.evaluation.tokenized_batches import bucketed_batches, EncodedBatch
from captum_ext.visualization import Explanation, special_token_mask

__all__ = ["ClassifierStrategy", "benchmark", "run_benchmark"]


# -------------------------------------------------------------------- timing
def _forward_for(model: nn.Module, tokenizer: Any) -> Callable[..., Tensor]:
    r"""The logits function every timing and metric uses (a seam for tests):
    on the images of an image task's patch token ids."""
    if isinstance(tokenizer, ImageTokenizer):
        return tokenizer.forward_func(model)
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
        lambda: explain_batch(explain, batch.encoded, batch.target),
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


# ------------------------------------------------------------------ strategy
@dataclass
class ClassifierStrategy(EngineStrategy[_Batch]):
    r"""The engine's classifier: right-padded token batches, the predicted
    class explained, every metric on one shared forward per distinct row."""

    metrics: List[MetricSpec]
    max_length: int  # resolved (:func:`checked_max_length`)
    # Texts the decoders are fitted on, when a chosen method needs them.
    decoder_texts: Optional[Sequence[str]] = None

    def batches(self, rows: List[int], device: torch.device) -> List[_Batch]:
        batches = _batches(
            self.tokenizer,
            self.data,
            rows,
            batch_size=self.options.batch_size,
            max_length=self.max_length,
            device=device,
        )
        forward = _forward_for(self.model, self.tokenizer)
        for batch in batches:
            _predict(forward, batch)
        return batches

    def rows_of(self, batch: _Batch) -> List[int]:
        return batch.encoded.rows

    def rank_output(self, batches: List[_Batch]) -> RankOutput:
        r"""Each row's explained class and its probability, the tokens of the
        rows the report shows, and how many texts were cut."""
        output = RankOutput()
        for batch in batches:
            mask = batch.encoded.attention_mask.bool()  # [batch, pos]
            for position, row in enumerate(batch.encoded.rows):
                target = int(batch.target[position])
                output.predictions[row] = (target, float(batch.probs[position, target]))
                if row in self.keep:
                    output.kept[row] = _attended(
                        batch.encoded, position, mask[position]
                    )
            output.truncated += sum(batch.encoded.truncated)
        return output

    def scorer(self, spec: MethodSpec) -> Callable[[_Batch, MethodShard], None]:
        explain = spec.build(self.model, self.tokenizer, self.decoder_texts)
        # One ranking for every class: nothing for a class-specific metric to compare.
        metrics = [
            m
            for m in self.metrics
            if not (spec.class_agnostic and m.explains_other_classes)
        ]
        forward = _forward_for(self.model, self.tokenizer)
        keep, tokenizer = self.keep, self.tokenizer

        def score(batch: _Batch, shard: MethodShard) -> None:
            scores = _score_batch(explain, forward, batch, tokenizer, metrics, shard)
            mask = batch.encoded.attention_mask
            for position, row in enumerate(batch.encoded.rows):
                if row in keep:
                    shard.kept[row] = scores[position, mask[position].bool()].cpu()

        return score

    def result(
        self,
        outputs: List[RankOutput],
        rows: List[MethodResult],
        ctx: DistributedContext,
    ) -> BenchmarkResult:
        task = self.options.task
        kept = {row: inputs for out in outputs for row, inputs in out.kept.items()}
        examples = _examples(self.model, self.tokenizer, self.data, outputs, kept)
        maps = {}
        if examples:
            shown = _confident_row(examples)
            maps = _layer_maps(self, examples[shown], kept[shown], ctx.device)
        truncated = sum(out.truncated for out in outputs)
        config = run_config(
            self.model,
            self.data,
            self.methods,
            self.options,
            self.max_length,
            ctx,
            truncated,
        )
        return BenchmarkResult(
            rows=rows,
            metrics=self.columns,
            examples={task: list(examples.values())},
            config=config,
            layer_maps={task: maps},
        )


# ---------------------------------------- rank 0: kept examples, layer maps
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
    outputs: List[RankOutput],
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
    strategy: ClassifierStrategy,
    example: Explanation,
    inputs: Tuple[List[int], Optional[List[int]]],
    device: torch.device,
) -> Dict[str, Tuple[List[str], Tensor]]:
    r"""The per-layer scores (``MethodSpec.layer_map``) of the chosen methods on
    one example, in the registry's order, from its attended token ids and (text
    pairs) token type ids; none fitted or run for a method that was not
    chosen."""
    chosen = {spec.name for spec in strategy.methods}
    model, tokenizer = strategy.model, strategy.tokenizer
    ids, types = inputs
    input_ids = torch.tensor([ids], device=device)  # [1, pos]
    mask = torch.ones_like(input_ids)
    token_types = None if types is None else torch.tensor([types], device=device)
    target = torch.tensor([example.target], device=device)
    maps = {}
    for name, spec in METHODS.items():
        if name in chosen and spec.layer_map is not None:
            layers = spec.build(model, tokenizer, strategy.decoder_texts, layers=True)
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
            ``label_names``), e.g. from
            :func:`captum_ext.evaluation.user_data.load_data`.
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
    check_run_sizes(options.batch_size, options.n_examples, data)
    _check_labels(metric_specs, data)
    decoder_texts = None
    if any(spec.needs_decoders for spec in method_specs):
        decoder_texts = options.decoder_texts or list(data.texts)
    strategy = ClassifierStrategy(
        model,
        tokenizer,
        data,
        method_specs,
        metric_columns(metric_specs),
        options,
        metrics=metric_specs,
        max_length=checked_max_length(model, tokenizer, options.max_length),
        decoder_texts=decoder_texts,
    )
    result = run_engine(strategy, start)
    truncated = result.config["truncated"][options.task]
    if truncated:
        warnings.warn(
            f"{truncated} of {len(data)} texts were cut to max_length="
            f"{strategy.max_length} tokens; their attributions cover the kept "
            "tokens only",
            stacklevel=stacklevel,
        )
    return result
