#!/usr/bin/env python3
r"""The generation benchmark: methods that explain what a causal LM generates
(the registry's ``METHODS`` entries with ``causal_lm=True``) scored by the
metrics of generated text (``GENERATION_METRICS``) and, where the data knows
which prompt token decides each continuation token (planted evidence, e.g. the
key-value recall task), by how often they point at it.

Per batch of prompts (left-padded, sorted by length), the continuation is the
given one (teacher forcing) or the model's greedy one, generated once and shared
by every method. Each method's ``[batch, T, P]`` scores are timed against one
forward pass over prompt + continuation at the same batch size
(:func:`~captum_ext.evaluation.timing.time_paired`): the padded batch in one
pass for a method that runs the batch at once, each prompt alone (unpadded, one
pass after the other) for a method that runs one prompt at a time
(:attr:`~captum_ext.evaluation.registry.MethodSpec.one_prompt_at_a_time`,
Captum's LLM API), so that every ratio is the time per prompt over one forward
per prompt as the method itself would batch it. Then the scores are scored:

- every chosen metric with its default protocol
  (:func:`~captum_ext.metrics.generation_aopc`, ...), each example's value the
  mean over its target tokens (``GenerationMetricResult.score``), so prompts
  with longer continuations weigh the same;
- ``Evidence@1`` and ``Evidence@3``
  (:func:`~captum_ext.evaluation.planted_evidence.planted_evidence_accuracy`
  per example, ties counted in expectation, the tokenizer's special tokens
  such as BOS ranked below every other prompt token, as no metric ranks them),
  when the data has ``evidence``; ``EvidenceSet@1`` and ``EvidenceSet@3``,
  the share of each target's whole evidence set (every token it needs) in the
  top 1 or 3, when the data has ``evidence_sets``.

The table is sorted by ``Evidence@1`` when present. Under ``torchrun`` the
examples are dealt to the ranks as in the classifier engine
(:mod:`~captum_ext.evaluation.engine.skeleton`, this module being the
engine's causal-LM strategy, :class:`CausalLMStrategy`) and rank 0 gathers the
per-example values.
"""

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn, Tensor

from captum_ext._utils.model_forward import causal_lm_forward
from captum_ext._utils.teacher_forcing import IGNORE_INDEX, teacher_forced_batch
from captum_ext.adapters import get_adapter
from captum_ext.attr._utils.continuations import prompt_pad_id, right_padded
from captum_ext.evaluation.distributed import DistributedContext
from captum_ext.evaluation.engine.skeleton import (
    check_run_sizes,
    checked_max_length,
    EngineStrategy,
    kept_scores,
    MethodShard,
    metric_columns,
    no_signal,
    ranked_tokens,
    RankOutput,
    run_config,
    run_engine,
)
from captum_ext.evaluation.names import (
    check_names,
    GENERATION_METHOD_CHOICES,
    GENERATION_METRIC_NAMES,
)
from captum_ext.evaluation.options import GenerationBenchmarkOptions
from captum_ext.evaluation.planted_evidence import planted_evidence_accuracy
from captum_ext.evaluation.prompt_batches import (
    encode_prompts,
    EncodedPrompts,
    prompt_batches,
)
from captum_ext.evaluation.registry import (
    GENERATION_METRICS,
    GenerationMetricContext,
    GenerationMetricSpec,
    method_spec,
    MethodSpec,
    MetricValue,
)
from captum_ext.evaluation.results import BenchmarkResult, MethodResult
from captum_ext.evaluation.timing import clock_for, time_paired
from captum_ext.evaluation.user_data import LoadedExamples
from captum_ext.metrics import TokenOptions
from captum_ext.visualization import GenerationExplanation, special_token_mask

__all__ = [
    "CausalLMStrategy",
    "EVIDENCE_TOP_K",
    "evidence_column",
    "evidence_set_column",
    "run_generation_benchmark",
]

# Planted-evidence accuracy at these k (the recall sanity check's 1 and 3).
EVIDENCE_TOP_K = (1, 3)


def evidence_column(top_k: int) -> str:
    r"""The table column of planted-evidence accuracy at ``top_k``."""
    return f"Evidence@{top_k}"


def evidence_set_column(top_k: int) -> str:
    r"""The table column of evidence-set accuracy at ``top_k``."""
    return f"EvidenceSet@{top_k}"


@dataclass
class _PromptBatch:
    r"""One batch of prompts and the continuations every method explains."""

    rows: List[int]  # positions in the data
    input_ids: Tensor  # [batch, P], left-padded
    attention_mask: Tensor  # [batch, P]
    target: Tensor  # [batch, T], right-padded with -100
    evidence: Optional[Tensor]  # [batch, T, 1] positions in the padded prompt, -1 none
    evidence_sets: Optional[Tensor]  # [batch, T, S] the same, -1 after a set
    prompts: List[List[int]]  # each row's own prompt ids
    continuations: List[List[int]]  # each row's continuation ids

    def forward_inputs(self, pad_id: int, vocab_size: int) -> Tuple[Tensor, Tensor]:
        r"""``(input_ids, attention_mask)`` of one teacher-forced forward pass
        over prompt + continuation: the pass the time ratio divides by."""
        joined = teacher_forced_batch(
            self.input_ids, self.attention_mask, self.target, pad_id, vocab_size
        )
        return joined.model_inputs()

    def one_prompt_inputs(
        self, pad_id: int, vocab_size: int
    ) -> List[Tuple[Tensor, Tensor]]:
        r""":meth:`forward_inputs` of each prompt alone, unpadded (batch 1):
        the passes a one-prompt-at-a-time method's time is divided by."""
        inputs = []
        for b in range(len(self.rows)):
            prompt = self.input_ids[b][self.attention_mask[b].bool()][None]  # [1, P_b]
            target = self.target[b][self.target[b] != IGNORE_INDEX][None]  # [1, T_b]
            joined = teacher_forced_batch(
                prompt, torch.ones_like(prompt), target, pad_id, vocab_size
            )
            inputs.append(joined.model_inputs())
        return inputs


@dataclass
class _Encoded:
    r"""The data as token ids, checked before any work."""

    ids: EncodedPrompts
    evidence: Optional[List[List[List[int]]]]  # each step's one position, as a set
    evidence_sets: Optional[List[List[List[int]]]]


def _encoded(
    tokenizer: Any,
    data: LoadedExamples,
    max_length: int,
    options: GenerationBenchmarkOptions,
) -> _Encoded:
    ids = encode_prompts(tokenizer, data, max_length, options.max_new_tokens)
    evidence = None
    if data.evidence is not None:
        evidence = [[[position] for position in row] for row in data.evidence]
    for sets in (evidence, data.evidence_sets):
        if sets is not None:
            _check_evidence(data, ids.prompts, ids.given, sets)
    return _Encoded(ids, evidence, data.evidence_sets)


def _check_evidence(
    data: LoadedExamples,
    prompts: List[List[int]],
    given: Optional[List[List[int]]],
    evidence: List[List[List[int]]],
) -> None:
    if given is None:
        raise ValueError(
            "planted evidence marks the prompt tokens that decide the given "
            "continuations; the data gives none (add its continuations)"
        )
    for row, (prompt, steps, target) in enumerate(zip(prompts, evidence, given)):
        if len(steps) > len(target) or any(p >= len(prompt) for s in steps for p in s):
            raise ValueError(
                f"{data.source}: row {data.rows[row]}'s evidence positions "
                f"{list(steps)} do not fit its {len(prompt)} prompt and "
                f"{len(target)} continuation tokens"
            )


def _batches(
    model: nn.Module,
    tokenizer: Any,
    encoded: _Encoded,
    rows: List[int],
    batch_size: int,
    device: torch.device,
) -> List[_PromptBatch]:
    r"""``rows`` in batches of similar length; the greedy continuations, when
    none are given, generated here once for every method."""
    batches = []
    for batch in prompt_batches(
        model, tokenizer, encoded.ids, rows, batch_size, device
    ):
        target = right_padded(batch.continuations, device)
        batches.append(
            _PromptBatch(
                batch.rows,
                batch.input_ids,
                batch.attention_mask,
                target,
                _evidence(encoded.evidence, batch.rows, batch.prompts, target),
                _evidence(encoded.evidence_sets, batch.rows, batch.prompts, target),
                [prompt.tolist() for prompt in batch.prompts],
                [continuation.tolist() for continuation in batch.continuations],
            )
        )
    return batches


def _evidence(
    evidence: Optional[List[List[List[int]]]],
    chunk: List[int],
    prompts: List[Tensor],
    target: Tensor,
) -> Optional[Tensor]:
    r"""``[batch, T, S]`` evidence positions moved past each row's left
    padding."""
    if evidence is None:
        return None
    width = max(len(prompt) for prompt in prompts)
    size = max([len(s) for row in chunk for s in evidence[row]], default=1)
    out = torch.full((*target.shape, size), -1, dtype=torch.long)
    for b, (row, prompt) in enumerate(zip(chunk, prompts)):
        for t, positions in enumerate(evidence[row]):
            for s, position in enumerate(positions):
                if position >= 0:
                    out[b, t, s] = width - len(prompt) + position
    return out.to(target.device)


def _evidence_accuracy(
    scores: Tensor, batch: _PromptBatch, evidence: Tensor, ranked: Tensor, top_k: int
) -> Tensor:
    r"""``[batch]`` planted-evidence accuracy of each example (NaN for one
    without evidence) among the ``ranked`` ``[batch, P]`` prompt positions;
    ``evidence`` is ``[batch, T, S]``."""
    values = [
        (
            planted_evidence_accuracy(
                scores[b : b + 1], evidence[b : b + 1], ranked[b : b + 1], top_k
            )
            if bool((evidence[b] >= 0).any())
            else math.nan
        )
        for b in range(len(batch.rows))
    ]
    return torch.tensor(values, dtype=torch.float64)


def _unit_forward(
    run: "CausalLMStrategy", batch: _PromptBatch, one_prompt_at_a_time: bool
) -> Callable[[], Any]:
    r"""The forward work a method's time on ``batch`` is divided by: one pass
    over the padded batch, or, for a method that runs one prompt at a time,
    one pass per prompt alone (the same batch size as the method's own)."""
    forward = causal_lm_forward(run.model)
    pad_id = prompt_pad_id(run.tokenizer)
    vocab_size = get_adapter(run.model).word_embeddings().num_embeddings
    if not one_prompt_at_a_time:
        joined = batch.forward_inputs(pad_id, vocab_size)
        return torch.no_grad()(lambda: forward(*joined))
    singles = batch.one_prompt_inputs(pad_id, vocab_size)
    return torch.no_grad()(lambda: [forward(*one) for one in singles])


def _score_batch(
    explain: Any,
    run: "CausalLMStrategy",
    batch: _PromptBatch,
    shard: MethodShard,
    one_prompt_at_a_time: bool = False,
) -> None:
    r"""One method on one batch: timed against forward passes over prompt +
    continuation at the method's batch size (:func:`_unit_forward`), then
    every metric's and the evidence accuracy's values added to ``shard``, and
    the kept rows' ``[T_b, P_b]`` scores."""
    forward = causal_lm_forward(run.model)
    scores, timing = time_paired(
        _unit_forward(run, batch, one_prompt_at_a_time),
        lambda: explain(batch.input_ids, batch.attention_mask, batch.target),
        clock_for(batch.input_ids.device),
    )
    shard.add_timing(timing)
    context = GenerationMetricContext(
        forward,
        batch.input_ids,
        batch.attention_mask,
        batch.target,
        TokenOptions.from_tokenizer(run.tokenizer),
        explain,
        run.tokenizer,
    )
    # Special tokens (BOS, ...) compete for no place, as no metric ranks them.
    special = context.tokens.special_token_ids or ()
    ranked = ranked_tokens(batch.input_ids, batch.attention_mask, special)
    shard.mark_constant(batch.rows, no_signal(scores, ranked))
    for metric in run.metrics:
        for column, value in metric.compute(context, scores).items():
            shard.record(column, batch.rows, value)
    for evidence, column_of in (
        (batch.evidence, evidence_column),
        (batch.evidence_sets, evidence_set_column),
    ):
        if evidence is None:
            continue
        for k in EVIDENCE_TOP_K:
            accuracy = _evidence_accuracy(scores, batch, evidence, ranked, k)
            shard.record(column_of(k), batch.rows, MetricValue(accuracy))
    width = batch.input_ids.shape[1]
    for b, row in enumerate(batch.rows):
        if row in run.keep:
            steps, start = len(batch.continuations[b]), width - len(batch.prompts[b])
            shard.kept[row] = scores[b, :steps, start:].float().cpu()


# ------------------------------------------------------------------ strategy
@dataclass
class CausalLMStrategy(EngineStrategy[_PromptBatch]):
    r"""The engine's causal LM: left-padded prompts with their given or greedy
    continuations, each method's ``[batch, T, P]`` scores scored by the
    metrics of generated text and the planted evidence."""

    metrics: List[GenerationMetricSpec]
    encoded: _Encoded  # the data as token ids
    max_length: int  # prompt + continuation (:func:`checked_max_length`)

    def batches(self, rows: List[int], device: torch.device) -> List[_PromptBatch]:
        batch_size = self.options.batch_size
        return _batches(
            self.model, self.tokenizer, self.encoded, rows, batch_size, device
        )

    def rows_of(self, batch: _PromptBatch) -> List[int]:
        return batch.rows

    def rank_output(self, batches: List[_PromptBatch]) -> RankOutput:
        r"""The kept rows' prompt and continuation ids."""
        output = RankOutput()
        for batch in batches:
            for b, row in enumerate(batch.rows):
                if row in self.keep:
                    output.kept[row] = (batch.prompts[b], batch.continuations[b])
        return output

    def scorer(self, spec: MethodSpec) -> Callable[[_PromptBatch, MethodShard], None]:
        explain = spec.build_generation(self.model, self.tokenizer)

        def score(batch: _PromptBatch, shard: MethodShard) -> None:
            _score_batch(explain, self, batch, shard, spec.one_prompt_at_a_time)

        return score

    def result(
        self,
        outputs: List[RankOutput],
        rows: List[MethodResult],
        ctx: DistributedContext,
    ) -> BenchmarkResult:
        task, methods = self.options.task, self.methods
        generated = self.data.continuations is None
        examples = _examples(self.tokenizer, self.data, outputs, generated)
        config = run_config(
            self.model, self.data, methods, self.options, self.max_length, ctx, 0
        )
        config["generation"] = {
            task: {
                "continuations": (
                    "generated" if self.encoded.ids.given is None else "given"
                ),
                "max_new_tokens": self.encoded.ids.max_new_tokens,
                "metric_value": "mean over each example's target tokens",
                "one_prompt_at_a_time": [
                    spec.name for spec in methods if spec.one_prompt_at_a_time
                ],
            }
        }
        return BenchmarkResult(
            rows=_ranked(rows),
            metrics=self.columns,
            examples={},
            config=config,
            columns={task: list(self.columns)},
            generation_examples={task: examples},
        )


def _examples(
    tokenizer: Any, data: LoadedExamples, outputs: List[RankOutput], generated: bool
) -> List[GenerationExplanation]:
    r"""The kept rows' target x prompt scores of every method, in row order."""
    kept = {row: ids for out in outputs for row, ids in out.kept.items()}
    examples = []
    for row in sorted(kept):
        prompt, continuation = kept[row]
        scores = kept_scores([out.methods for out in outputs], row)
        examples.append(
            GenerationExplanation(
                prompt_tokens=tokenizer.convert_ids_to_tokens(prompt),
                target_tokens=tokenizer.convert_ids_to_tokens(continuation),
                scores=scores,
                prompt=data.texts[row],
                continuation=tokenizer.decode(continuation),
                generated=generated,
                special_mask=special_token_mask(tokenizer, prompt),
                evidence=None if data.evidence is None else list(data.evidence[row]),
            )
        )
    return examples


def _ranked(rows: List[MethodResult]) -> List[MethodResult]:
    r"""Rows by decreasing ``Evidence@1`` (unscored last), when it was scored,
    else by ``EvidenceSet@1``."""
    scored = [
        column
        for column in (evidence_column(1), evidence_set_column(1))
        if any(column in row.metrics for row in rows)
    ]
    if not scored:
        return rows
    column = scored[0]

    def key(row: MethodResult) -> float:
        value = row.metrics.get(column, math.nan)
        return -value if math.isfinite(value) else math.inf

    return sorted(rows, key=key)


def run_generation_benchmark(
    model: nn.Module,
    tokenizer: Any,
    data: LoadedExamples,
    options: GenerationBenchmarkOptions,
    extra_methods: Sequence[MethodSpec] = (),
) -> BenchmarkResult:
    r"""Scores methods that explain generated text on ``data``'s prompts: the
    faithfulness of each method's target x prompt scores, its planted-evidence
    accuracy where ``data.evidence`` is known, and its cost as a ratio to one
    forward pass over prompt + continuation.

    Under ``torchrun`` every rank must call it with the same arguments; every
    rank returns the full result.

    Args:
        model (nn.Module): a Hugging Face causal LM (e.g. from
            :func:`captum_ext.evaluation.user_models.load_causal_lm`); it is moved
            to ``options.device``.
        tokenizer (PreTrainedTokenizerBase): its tokenizer (prompts are encoded
            with its special tokens, BOS included where it adds one;
            continuations without).
        data (LoadedExamples): prompts (``texts``), optional ``continuations``
            (None: greedy ones, ``options.max_new_tokens`` tokens at most) and
            optional ``evidence`` (needs continuations).
        options (GenerationBenchmarkOptions): methods (default: every entry of
            ``GENERATION_METHOD_NAMES`` (or a named variant of
            ``VARIANT_METHOD_NAMES``); ``[]`` with ``extra_methods``: only
            those), metrics (default: every entry of
            ``GENERATION_METRIC_NAMES``), batch size, ``max_length`` (prompt
            + continuation), device, task label and kept examples.
        extra_methods (Sequence[MethodSpec], optional): methods from outside
            the registry with a ``generation`` factory (e.g. another tool's,
            wrapped by a benchmark script), run after ``options.methods`` on
            the same prompts, continuations, metrics and timing. Default: none.

    Returns:
        BenchmarkResult: one row per method (by decreasing ``Evidence@1`` when
        scored), with per-example values; ``generation_examples[task]`` holds
        the first ``options.n_examples`` prompts' ``[T, P]`` scores.
    """
    start = time.perf_counter()
    methods = _chosen_methods(options, extra_methods)
    metrics = [
        GENERATION_METRICS[name]
        for name in check_names(
            options.metrics, GENERATION_METRIC_NAMES, "metric for generated text"
        )
    ]
    check_run_sizes(options.batch_size, options.n_examples, data)
    get_adapter(model).require_causal_lm("the generation benchmark")
    max_length = checked_max_length(model, tokenizer, options.max_length)
    encoded = _encoded(tokenizer, data, max_length, options)
    columns = _columns(metrics, data)
    strategy = CausalLMStrategy(
        model,
        tokenizer,
        data,
        methods,
        columns,
        options,
        metrics=metrics,
        encoded=encoded,
        max_length=max_length,
    )
    return run_engine(strategy, start)


def _chosen_methods(
    options: GenerationBenchmarkOptions, extra_methods: Sequence[MethodSpec]
) -> List[MethodSpec]:
    r"""The registry's chosen methods, then the extra ones."""
    names: List[str] = []  # none chosen, with extras: those alone
    if not (extra_methods and options.methods is not None and not options.methods):
        names = check_names(
            options.methods, GENERATION_METHOD_CHOICES, "method for generated text"
        )
    methods = [method_spec(name) for name in names]
    for spec in extra_methods:
        if spec.generation is None or spec.name in [m.name for m in methods]:
            raise ValueError(
                f"extra method {spec.name!r} must explain generated text under a "
                "name of its own"
            )
        methods.append(spec)
    return methods


def _columns(
    metrics: List[GenerationMetricSpec], data: LoadedExamples
) -> Dict[str, bool]:
    r"""The table's columns (whether higher is better): the evidence
    accuracies the data can score, first, then the metrics'."""
    columns = metric_columns(metrics)
    for known, column in (
        (data.evidence_sets, evidence_set_column),
        (data.evidence, evidence_column),
    ):
        if known is not None:
            columns = {**{column(k): True for k in EVIDENCE_TOP_K}, **columns}
    return columns
