#!/usr/bin/env python3
r"""Zhao & Aletras's soft erasure for the metrics of generated text (Soft-NC,
Soft-NS): each element of a content token's word embedding kept with a
probability set by its normalised attribution, under seeded Bernoulli draws."""

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from captum_ext._utils.hooks import HookSet
from captum_ext.metrics._utils.forward_runner import progress_bar
from captum_ext.metrics._utils.generated_text_inputs import (
    GenerationCall,
    GenerationInputs,
    parse_generation,
)
from captum_ext.metrics._utils.generation_results import (
    GenerationMetricResult,
    per_target_result,
)
from captum_ext.metrics._utils.inputs import MetricCall, TokenInputs, TokenOptions
from captum_ext.metrics._utils.teacher_forced_runner import (
    probe_vocab_size,
    TeacherForcedRunner,
)

__all__ = [
    "SoftErasure",
    "evaluate_soft_erasure",
    "normalized_importance",
    "retention_generator",
]


def retention_generator(seed: int, row: int, sample: int) -> torch.Generator:
    r"""The generator of the Bernoulli draw of ranking row ``row`` (example ``b``,
    target ``t``: ``row = b * R + t``) and sample ``sample``: seeded by
    ``hash((seed, row, sample))``, so a draw does not depend on chunking or
    padding."""
    return torch.Generator().manual_seed(hash((seed, row, sample)) % (1 << 63))


def normalized_importance(scores: Tensor, content: Tensor) -> Tensor:
    r"""Min-max normalised scores ``[rows, P]`` in [0, 1] over each row's content
    (non-special prompt) tokens; 0.5 where a row's scores are all equal."""
    inf = torch.full_like(scores, float("inf"))
    low = torch.where(content, scores, inf).amin(1, keepdim=True)
    high = torch.where(content, scores, -inf).amax(1, keepdim=True)
    spread = high - low
    normalized = (scores - low) / spread.clamp(min=torch.finfo(scores.dtype).tiny)
    return torch.where(spread > 0, normalized, torch.full_like(scores, 0.5))


@dataclass
class SoftErasure:
    r"""Log-probabilities of every target on the prompts (``base``), with every
    content token's word embedding zeroed (``empty``, both ``[batch, T]``), and
    under each Bernoulli draw (``samples``, ``[batch, T, n_samples]``)."""

    base: Tensor
    empty: Tensor
    samples: Tensor
    target: Tensor

    def result(self, values: Tensor) -> GenerationMetricResult:
        r"""Mean over the draws of ``values`` ``[batch, T, n_samples]``."""
        values = values.float()
        return per_target_result(values.mean(-1), values, self.target, None)

    def comprehensiveness_ratio(self) -> Tensor:
        r"""``[batch, T, n_samples]``: the soft comprehensiveness relative to the
        empty prompt's, :math:`r = \max(0, p(x) - p(x')) / \max(0, p(x) - p(0))`
        (Soft-NC is :math:`r`, Soft-NS :math:`1 - r`, both clipped to [0, 1]);
        NaN where the normaliser :math:`1 - S(x, 0)` is 0."""
        p_x, p_empty = self.base.exp()[..., None], self.empty.exp()[..., None]
        comprehensiveness = (p_x - self.samples.exp()).clamp(min=0)
        normaliser = (p_x - p_empty).clamp(min=0)  # 1 - S(x, 0)
        ratio = comprehensiveness / normaliser
        return ratio.masked_fill(normaliser == 0, float("nan"))


def evaluate_soft_erasure(
    call: MetricCall,
    options: GenerationCall,
    keep_important: bool,
    n_samples: int,
    seed: int,
    desc: str,
) -> SoftErasure:
    r"""Zhao & Aletras's soft erasure: each element of a content token's word
    embedding is kept with probability :math:`s_i` (``keep_important``, soft
    sufficiency) or :math:`1 - s_i` (soft comprehensiveness), :math:`s` the
    normalised attribution of the row's ranking; special tokens and the
    continuation are kept whole. Cost: two teacher-forced passes over the batch
    plus one per (ranking row, sample)."""
    embeddings = _word_embeddings(call.forward_func)
    if not isinstance(n_samples, int) or isinstance(n_samples, bool) or n_samples < 1:
        raise ValueError(f"n_samples must be a positive int, got {n_samples!r}")
    tokens = options.tokens or TokenOptions()
    with torch.no_grad():
        vocab = probe_vocab_size(call.forward_func, call.inputs)
        inputs = parse_generation(call, tokens, vocab)
        rows = inputs.rows
        importance = normalized_importance(inputs.scores.flatten(0, 1), rows.content)
        keep = importance if keep_important else 1 - importance  # [batch * R, P]
        n_rows = len(keep) * n_samples
        total = 2 * inputs.prompts.batch_size + n_rows
        with progress_bar(options.show_progress, desc, total) as bar:
            runner = TeacherForcedRunner(
                call.forward_func, inputs, options.internal_batch_size, bar
            )
            base = runner.base()
            scale = _EmbeddingScale(embeddings)
            with scale.hooked():
                empty = _empty_prompts(runner, inputs, scale)
                samples = _soft_samples(runner, inputs, scale, keep, n_samples, seed)
    return SoftErasure(base, empty, samples, inputs.target)


def _word_embeddings(forward_func: Any) -> torch.nn.Embedding:
    get = getattr(forward_func, "word_embeddings", None)
    if not callable(get):
        raise TypeError(
            "the soft metrics perturb the model's word embeddings: pass "
            "forward_func=captum_ext.causal_lm_forward(model)"
        )
    table: torch.nn.Embedding = get()
    return table


class _EmbeddingScale:
    r"""Multiplies the word embeddings' output by ``factor`` (``[rows, width,
    d]`` over the prompt columns; the continuation is left alone) while
    hooked."""

    def __init__(self, embeddings: torch.nn.Embedding) -> None:
        self.embeddings = embeddings
        self.factor: Optional[Tensor] = None

    def hooked(self) -> Any:
        hooks = HookSet()
        hooks.forward(self.embeddings, self._scale)
        return hooks

    def _scale(self, _module: Any, _inputs: Any, output: Tensor) -> Tensor:
        factor = self.factor
        assert factor is not None
        width = factor.shape[1]
        return torch.cat(
            [
                output[:, :width] * factor.to(output.device, output.dtype),
                output[:, width:],
            ],
            1,
        )


def _empty_prompts(
    runner: TeacherForcedRunner, inputs: GenerationInputs, scale: _EmbeddingScale
) -> Tensor:
    d = scale.embeddings.embedding_dim
    kept = (~inputs.prompts.content).to(torch.float64)[..., None].expand(-1, -1, d)

    def zero_content(rows: slice) -> None:
        scale.factor = kept[rows]

    return runner.base(zero_content)


def _soft_samples(
    runner: TeacherForcedRunner,
    inputs: GenerationInputs,
    scale: _EmbeddingScale,
    keep: Tensor,
    n_samples: int,
    seed: int,
) -> Tensor:
    rows_in = inputs.rows
    batch, steps = inputs.target.shape
    out = inputs.target.new_full(
        (batch, steps, n_samples), float("nan"), dtype=torch.float64
    )
    has_target = inputs.row_has_target()
    pairs = [
        (row, sample)
        for row in range(len(keep))
        if bool(has_target[row])
        for sample in range(n_samples)
    ]
    for chunk in runner.chunks(len(pairs)):
        rows = torch.tensor([row for row, _ in pairs[chunk]], dtype=torch.long)
        samples = torch.tensor([sample for _, sample in pairs[chunk]], dtype=torch.long)
        scale.factor = torch.stack(
            [
                _retention_mask(rows_in, keep, int(r), int(s), seed, scale)
                for r, s in zip(rows, samples)
            ]
        )
        log_probs = runner.log_probs(
            rows_in.input_ids[rows],
            rows_in.attention_mask[rows],
            inputs.row_targets(rows),
            rows // inputs.n_rankings,
        )
        (examples, step_index), values = inputs.read(rows, log_probs)
        sample_index = samples if values.dim() == 1 else samples[:, None]
        out[examples, step_index, sample_index.expand_as(step_index)] = values.double()
    return out


def _retention_mask(
    rows: TokenInputs,
    keep: Tensor,
    row: int,
    sample: int,
    seed: int,
    scale: _EmbeddingScale,
) -> Tensor:
    r"""``[P, d]``: 1 where an embedding element is kept. The draw covers the
    row's attended prompt tokens in order (``[n, d]`` uniforms), so padding
    changes nothing; special tokens are always kept."""
    valid = rows.valid[row]
    d = scale.embeddings.embedding_dim
    uniforms = torch.rand(
        (int(valid.sum()), d), generator=retention_generator(seed, row, sample)
    ).to(keep.device)
    probability = torch.where(rows.special[row], 1.0, keep[row])[valid]
    mask = torch.ones(valid.shape[0], d, dtype=torch.float64, device=keep.device)
    mask[valid] = (uniforms < probability[:, None]).double()
    return mask
