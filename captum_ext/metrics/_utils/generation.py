#!/usr/bin/env python3
r"""What the faithfulness metrics of generated text share: parsing a prompt batch,
its continuation and the attributions; one teacher-forced pass over perturbed
prompts in chunks; the hard perturbation curves.

**Rows.** Attributions ``[batch, T, P]`` give one ranking of the prompt per
target token: row ``(b, t)`` perturbs prompt ``b`` by ranking ``t`` and reads
:math:`\log p(y_t \mid \tilde x, y_{<t})` (the continuation is cut after
:math:`y_t`: later steps cannot change it). Attributions ``[batch, P]`` (a
sequence-level explanation, e.g. Captum's ``seq_attr``) give one ranking per
prompt: one perturbed prompt per level, read at every target. Either way the
metric has one value per target token, ``[batch, T]``.
"""

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from captum_ext._utils.finite import check_finite
from captum_ext._utils.hooks import eval_semantics, HookSet
from captum_ext._utils.row_chunks import batch_slices, check_internal_batch_size
from captum_ext._utils.teacher_forcing import (
    IGNORE_INDEX,
    teacher_forced_batch,
    TeacherForcedBatch,
)
from captum_ext.metrics._utils.forward_runner import progress_bar
from captum_ext.metrics._utils.inputs import (
    MetricCall,
    parse_inputs,
    TokenInputs,
    TokenOptions,
)
from captum_ext.metrics._utils.perturbation import (
    check_token_ids,
    perturb_rows,
    PerturbationPlan,
    plan_perturbations,
)
from captum_ext.metrics._utils.protocols import PerturbationProtocol

__all__ = [
    "GenerationCall",
    "GenerationMetricResult",
    "HardCurves",
    "evaluate_hard_curves",
    "evaluate_soft_erasure",
    "normalized_importance",
    "retention_generator",
    "parse_generation",
]


class GenerationMetricResult(NamedTuple):
    r"""Per-target values of a faithfulness metric of generated text.

    Attributes:
        score (Tensor): ``[batch, T]``, one value per target token; NaN where a
            row has no target (a shorter continuation) or the protocol skips it.
        sequence (Tensor): ``[batch]``, the sum of ``score`` over each row's
            targets (NaN if one of them is NaN).
        curve (Tensor): ``[batch, T, levels]``, the value at each level (the
            soft metrics: ``[batch, T, n_samples]``, one value per Bernoulli
            draw).
        levels (Tensor, optional): ``[levels]``, the fractions of prompt tokens
            perturbed (or kept, for sufficiency); None for the soft metrics.
    """

    score: Tensor
    sequence: Tensor
    curve: Tensor
    levels: Optional[Tensor]


def per_target_result(
    score: Tensor, curve: Tensor, target: Tensor, levels: Optional[Tensor]
) -> GenerationMetricResult:
    r"""``score`` ``[batch, T]`` and ``curve`` ``[batch, T, k]`` in float32, NaN
    where a row has no target, and ``sequence``: the sum of ``score`` over each
    row's targets."""
    has_target = target != IGNORE_INDEX
    score = torch.where(has_target, score, float("nan")).float()
    curve = torch.where(has_target[..., None], curve, float("nan")).float()
    sequence = torch.where(has_target, score, torch.zeros_like(score)).sum(1)
    return GenerationMetricResult(score, sequence, curve, levels)


class GenerationCall(NamedTuple):
    r"""The keyword-only options every generation metric shares."""

    tokens: Optional[TokenOptions]
    internal_batch_size: Optional[int]
    show_progress: bool


@dataclass
class GenerationInputs:
    r"""A parsed call: the prompts (as rows of rankings), the continuation and
    the rankings' scores."""

    prompts: TokenInputs  # [batch, P], left-padded
    target: Tensor  # [batch, T], IGNORE_INDEX-padded
    scores: Tensor  # [batch, R, P] float64; R = T (per target) or 1 (shared)
    pad_token_id: int
    vocab_size: int
    rows: TokenInputs = field(init=False)  # [batch * R, P]: one per ranking

    def __post_init__(self) -> None:
        repeats = self.scores.shape[1]
        prompts = self.prompts

        def repeat(t: Tensor) -> Tensor:
            return t.repeat_interleave(repeats, 0)

        self.rows = TokenInputs(
            repeat(prompts.input_ids),
            repeat(prompts.attention_mask),
            (),
            special=repeat(prompts.special),
            prompts_of_causal_lm=True,
        )

    @property
    def n_rankings(self) -> int:
        return self.scores.shape[1]

    def row_targets(self, rows: Tensor) -> Tensor:
        r"""``[rows, T]``: the continuation each ranking row reads (per target:
        cut after its own target)."""
        examples = rows // self.n_rankings
        target = self.target[examples]
        if self.n_rankings == 1:
            return target
        steps = torch.arange(target.shape[1], device=target.device)
        after = steps[None, :] > (rows % self.n_rankings)[:, None]
        return target.masked_fill(after, IGNORE_INDEX)

    def row_has_target(self) -> Tensor:
        r"""``[batch * R]``: the ranking row has a target to read."""
        if self.n_rankings == 1:
            return torch.ones_like(self.target[:, 0], dtype=torch.bool)
        return (self.target != IGNORE_INDEX).flatten()

    def read(
        self, rows: Tensor, log_probs: Tensor
    ) -> Tuple[Tuple[Tensor, Tensor], Tensor]:
        r"""Where the rows' log-probabilities ``[rows, T']`` go in a
        ``[batch, T]`` table: ``(examples, steps)`` indices and the values."""
        examples = rows // self.n_rankings
        if self.n_rankings == 1:
            width = log_probs.shape[1]
            steps = torch.arange(width, device=rows.device).expand(len(rows), -1)
            return (examples[:, None].expand(-1, width), steps), log_probs
        steps = rows % self.n_rankings
        picked = log_probs.gather(1, steps[:, None])[:, 0]
        return (examples, steps), picked


def parse_generation(
    call: MetricCall, tokens: Optional[TokenOptions], vocab_size: int
) -> GenerationInputs:
    r"""Checks prompts, continuation and attributions (see the module docstring)."""
    tokens = tokens or TokenOptions()
    prompts = parse_inputs(call.inputs, call.additional_forward_args, tokens)
    if prompts.extra_args:
        raise ValueError(
            "the generation metrics take additional_forward_args=(attention_mask,) "
            f"only; got {len(prompts.extra_args) + 1} items"
        )
    pad = 0 if tokens.pad_token_id is None else tokens.pad_token_id
    # Checks the target and the left padding once, with teacher forcing's messages.
    joined = teacher_forced_batch(
        prompts.input_ids, prompts.attention_mask, call.target, pad, vocab_size
    )
    scores = _check_scores(call.attributions, prompts, joined.target.shape[1])
    return GenerationInputs(prompts, joined.target, scores, pad, vocab_size)


def _check_scores(attributions: Any, prompts: TokenInputs, steps: int) -> Tensor:
    if isinstance(attributions, tuple) and len(attributions) != 1:
        raise ValueError(
            "attributions as a tuple must hold one tensor (Captum's form of one "
            f"input), got {len(attributions)}"
        )
    scores = attributions[0] if isinstance(attributions, tuple) else attributions
    batch, width = prompts.input_ids.shape
    if not isinstance(scores, Tensor):
        raise TypeError(f"attributions must be a tensor, got {type(scores)}")
    given = tuple(scores.shape)
    if scores.dim() == 2:
        scores = scores[:, None]
    if tuple(scores.shape) != (batch, scores.shape[1], width) or scores.shape[
        1
    ] not in (
        1,
        steps,
    ):
        hint = (
            "; attributions with attribute_generated=True cover the continuation "
            f"too: pass attributions[..., :{width}]"
            if scores.dim() == 3 and scores.shape[-1] == width + steps
            else ""
        )
        raise ValueError(
            f"attributions must be [batch, T, P] = {(batch, steps, width)} (one row "
            f"per target token) or [batch, P] = {(batch, width)}, got "
            f"{given}{hint}"
        )
    scores = scores.detach().to(prompts.input_ids.device).double()
    valid = prompts.valid[:, None].expand_as(scores)
    if not bool(torch.isfinite(scores[valid]).all()):
        raise ValueError("attributions hold NaN or infinite scores at prompt tokens")
    return scores


class TeacherForcedRunner:
    r"""Runs ``forward_func`` on joined prompt + continuation rows in chunks of at
    most ``internal_batch_size`` rows and returns ``log p(y_t | ...)`` in float32
    (float64 for a float64 model)."""

    def __init__(
        self,
        forward_func: Callable[..., Tensor],
        inputs: GenerationInputs,
        internal_batch_size: Optional[int],
        bar: Any,
    ) -> None:
        self.forward_func = forward_func
        self.inputs = inputs
        self.chunk = check_internal_batch_size(internal_batch_size)
        self.bar = bar

    def chunks(self, n_rows: int) -> Iterator[slice]:
        return iter(batch_slices(n_rows, self.chunk or self.inputs.prompts.batch_size))

    def log_probs(
        self, ids: Tensor, mask: Tensor, target: Tensor, examples: Tensor
    ) -> Tensor:
        r"""``[rows, T']`` for prompts ``ids`` / ``mask`` and their targets."""
        empty = (~mask.bool().any(1)).nonzero().flatten()
        if len(empty):
            named = torch.unique(examples[empty]).tolist()
            raise ValueError(
                f"example(s) {named} lose every prompt "
                "token at some level; a causal LM needs one to predict from: keep "
                "a BOS token (a special token, tokens.special_token_ids) or use "
                "levels below 1.0 or a replacement mode"
            )
        used = (target != IGNORE_INDEX).any(0)
        target = target[:, : int(used.nonzero().max()) + 1]
        joined = teacher_forced_batch(
            ids, mask, target, self.inputs.pad_token_id, self.inputs.vocab_size
        )
        logits = self.forward(joined, examples)
        self.bar.update(len(ids))
        return joined.target_log_probs(logits.detach())

    def forward(self, joined: TeacherForcedBatch, examples: Tensor) -> Tensor:
        model_ids, model_mask = joined.model_inputs()
        with eval_semantics(self.forward_func):
            logits = self.forward_func(model_ids, model_mask)
        check_lm_logits(logits)
        check_finite(logits, "the model's logits", examples)
        return logits

    def base(self, before_chunk: Optional[Callable[[slice], None]] = None) -> Tensor:
        r"""``[batch, T]`` on the prompts; ``before_chunk(rows)`` runs before each
        chunk's pass (the soft metrics set their embedding scale there)."""
        prompts = self.inputs.prompts
        out = []
        for rows in self.chunks(prompts.batch_size):
            if before_chunk is not None:
                before_chunk(rows)
            examples = torch.arange(prompts.batch_size)[rows]
            log_probs = self.log_probs(
                prompts.input_ids[rows],
                prompts.attention_mask[rows],
                self.inputs.target[rows],
                examples,
            )
            out.append(_pad_steps(log_probs, self.inputs))
        return torch.cat(out)


def _pad_steps(values: Tensor, inputs: GenerationInputs) -> Tensor:
    missing = inputs.target.shape[1] - values.shape[1]
    return torch.nn.functional.pad(values, (0, missing)) if missing else values


def check_lm_logits(logits: Any) -> None:
    r"""Raises unless ``logits`` are a causal LM's ``[batch, pos, vocab]``."""
    if isinstance(logits, Tensor) and logits.dim() == 3:
        return
    got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
    raise ValueError(
        f"forward_func must return a causal LM's logits [batch, pos, vocab], got "
        f"{got}; for a Hugging Face model pass captum_ext.causal_lm_forward(model)"
    )


def probe_vocab_size(forward_func: Callable[..., Tensor], inputs: Any) -> int:
    r"""The vocabulary size, from ``forward_func`` on one token (checks the
    logits' shape before any target id is looked up)."""
    if isinstance(forward_func, torch.nn.Module) and callable(
        getattr(forward_func, "generate", None)
    ):
        # A Hugging Face model takes past_key_values, not the mask, second and
        # returns an output object: it would fail inside its own forward.
        raise TypeError(
            f"forward_func is the model itself ({type(forward_func).__name__}); "
            "pass captum_ext.causal_lm_forward(model), which returns its logits"
        )
    ids = inputs[0] if isinstance(inputs, tuple) else inputs
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.numel() == 0:
        return torch.iinfo(torch.long).max  # parse_inputs raises the real error
    with torch.no_grad(), eval_semantics(forward_func):
        logits = forward_func(ids[:1, -1:], torch.ones_like(ids[:1, -1:]))
    check_lm_logits(logits)
    return int(logits.shape[-1])


@dataclass
class HardCurves:
    r"""Log-probabilities of every target on the unperturbed prompts (``base``,
    ``[batch, T]``) and at every level (``curve``, ``[batch, T, levels]``; NaN
    at skipped levels and missing targets), with the perturbation plan."""

    base: Tensor
    curve: Tensor
    active: Tensor  # [batch, T, levels]
    perturbable: Tensor  # [batch, T]: the ranking row has a token to perturb
    target: Tensor
    protocol: PerturbationProtocol

    def probability_drop(self) -> Tensor:
        r"""``[batch, T, levels]``: :math:`p(y_t \mid x, y_{<t}) - p(y_t \mid
        \tilde{x}, y_{<t})` at each level (AOPC, sufficiency)."""
        return self.base.exp()[..., None] - self.curve.exp()

    def log_ratio(self) -> Tensor:
        r"""``[batch, T, levels]``: :math:`\log p(y_t \mid \tilde{x}, y_{<t}) -
        \log p(y_t \mid x, y_{<t})` at each level (log-odds)."""
        return self.curve - self.base[..., None]

    def result(self, curve: Tensor) -> GenerationMetricResult:
        r"""The mean of ``curve`` over the active levels (the protocol's
        ``empty_score`` when none is, NaN without one); NaN for a prompt
        without a token to perturb (only special tokens): every level would
        leave it as it is and score it as a perfect explanation."""
        active = self.active
        total = torch.where(active, curve, torch.zeros_like(curve)).sum(-1)
        count = active.sum(-1)
        empty = self.protocol.empty_score
        fallback = float("nan") if empty is None else empty
        score = torch.where(count > 0, total / count.clamp(min=1), fallback)
        score = score.masked_fill(~self.perturbable, float("nan"))
        levels = torch.tensor(self.protocol.levels, device=curve.device).float()
        return per_target_result(score, curve, self.target, levels)


def evaluate_hard_curves(
    call: MetricCall,
    options: GenerationCall,
    protocol: PerturbationProtocol,
    keep_top: bool,
    desc: str,
) -> HardCurves:
    r"""Deletes or replaces the top-ranked prompt tokens (or all but them, with
    ``keep_top``) at every level of ``protocol`` and reads every target's
    log-probability. Cost: one teacher-forced pass over the batch plus one per
    (ranking row, level) that perturbs something, in chunks of at most
    ``internal_batch_size`` rows."""
    tokens = options.tokens or TokenOptions()
    check_token_ids(protocol, tokens)
    with torch.no_grad():
        vocab = probe_vocab_size(call.forward_func, call.inputs)
        inputs = parse_generation(call, tokens, vocab)
        plan = plan_perturbations(
            protocol, inputs.rows, inputs.scores.flatten(0, 1), keep_top
        )
        total = inputs.prompts.batch_size + plan.counts.numel()
        with progress_bar(options.show_progress, desc, total) as bar:
            runner = TeacherForcedRunner(
                call.forward_func, inputs, options.internal_batch_size, bar
            )
            base = runner.base()
            curve = _curve(runner, inputs, plan, protocol, tokens, base)
    active = _per_target(plan.active, inputs)
    perturbable = _per_target((plan.num_perturbable > 0)[:, None], inputs)[..., 0]
    return HardCurves(base, curve, active, perturbable, inputs.target, protocol)


def _per_target(values: Tensor, inputs: GenerationInputs) -> Tensor:
    r"""``[batch * R, levels]`` ranking-row values as ``[batch, T, levels]``."""
    batch, steps = inputs.target.shape
    values = values.reshape(batch, inputs.n_rankings, -1)
    return values.expand(-1, steps, -1) if inputs.n_rankings == 1 else values


def _curve(
    runner: TeacherForcedRunner,
    inputs: GenerationInputs,
    plan: PerturbationPlan,
    protocol: PerturbationProtocol,
    tokens: TokenOptions,
    base: Tensor,
) -> Tensor:
    n_levels = plan.counts.shape[1]
    out = base.new_full((*base.shape, n_levels), float("nan"))  # [batch, T, levels]
    unchanged = _per_target(plan.active & ~plan.touches(), inputs)
    out[unchanged] = base[..., None].expand_as(out)[unchanged]
    # [batch * R, levels]; rows of missing targets read nothing.
    run = plan.active & plan.touches() & inputs.row_has_target()[:, None]
    runner.bar.update(int((~run).sum()))
    levels, rows = run.T.nonzero(as_tuple=True)  # level-major: similar lengths
    for chunk in runner.chunks(len(rows)):
        rows_c, levels_c = rows[chunk], levels[chunk]
        perturbed = plan.perturbed(rows_c, levels_c)
        ids, (mask,) = perturb_rows(protocol, inputs.rows, rows_c, perturbed, tokens)
        log_probs = runner.log_probs(
            ids, mask, inputs.row_targets(rows_c), rows_c // inputs.n_rankings
        )
        (examples, steps), values = inputs.read(rows_c, log_probs)
        level_index = levels_c if values.dim() == 1 else levels_c[:, None]
        out[examples, steps, level_index.expand_as(steps)] = values
    return out


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
