#!/usr/bin/env python3
r"""The hard perturbation curves of the metrics of generated text (AOPC,
sufficiency, log-odds): the top-ranked prompt tokens deleted or replaced (or
all but them) at every level, every target token's log-probability read."""

from dataclasses import dataclass

import torch
from torch import Tensor

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
from captum_ext.metrics._utils.inputs import MetricCall, TokenOptions
from captum_ext.metrics._utils.perturbation import (
    check_token_ids,
    perturb_rows,
    PerturbationPlan,
    plan_perturbations,
)
from captum_ext.metrics._utils.protocols import PerturbationProtocol
from captum_ext.metrics._utils.teacher_forced_runner import (
    probe_vocab_size,
    TeacherForcedRunner,
)

__all__ = ["HardCurves", "evaluate_hard_curves"]


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
