#!/usr/bin/env python3
r"""The driver shared by the perturbation-curve metrics (AOPC, log-odds,
sufficiency, hiding/revealing): parse, rank, perturb every level, run the model."""

from dataclasses import dataclass
from typing import Sequence, Tuple

import torch
from torch import Tensor

from captum_ext._utils.target import resolve_target
from captum_ext.metrics._utils.forward_runner import progress_bar, Runner
from captum_ext.metrics._utils.inputs import (
    check_attributions,
    MetricCall,
    MetricOptions,
    parse_inputs,
    TokenOptions,
)
from captum_ext.metrics._utils.perturbation import (
    check_token_ids,
    PerturbationPlan,
    plan_perturbations,
)
from captum_ext.metrics._utils.protocols import PerturbationProtocol
from captum_ext.metrics._utils.results import MetricResult

__all__ = ["Curves", "evaluate_curves"]


@dataclass
class Curves:
    r"""Log-probabilities on the unperturbed inputs (``base``, ``[batch, C]``) and
    on every level of each requested curve (``[batch, levels, C]``)."""

    target: Tensor
    base: Tensor
    curves: Tuple[Tensor, ...]
    plans: Tuple[PerturbationPlan, ...]
    protocol: PerturbationProtocol

    def target_base(self) -> Tensor:
        r"""``[batch]``: log-probability of the target on the unperturbed input."""
        return self.base.gather(1, self.target[:, None])[:, 0]

    def target_curve(self, index: int = 0) -> Tensor:
        r"""``[batch, levels]``: log-probability of the target at each level."""
        curve = self.curves[index]
        gather_index = self.target[:, None, None].expand(-1, curve.shape[1], 1)
        return curve.gather(2, gather_index)[..., 0]

    def probability_drop(self) -> Tensor:
        r"""``[batch, levels]``: :math:`p(y \mid x) - p(y \mid \tilde{x})` at each
        level (AOPC, sufficiency)."""
        return self.target_base().exp()[:, None] - self.target_curve().exp()

    def log_ratio(self) -> Tensor:
        r"""``[batch, levels]``: :math:`\log p(y \mid \tilde{x}) - \log p(y \mid
        x)` at each level (log-odds)."""
        return self.target_curve() - self.target_base()[:, None]

    def result(self, curve: Tensor, score: Tensor) -> MetricResult:
        levels = torch.tensor(self.protocol.levels, device=curve.device)
        return MetricResult(score.float(), curve.float(), levels.float())

    def mean(self, curve: Tensor, index: int = 0) -> Tensor:
        r"""Mean of ``curve`` over the active levels of each example; the
        protocol's ``empty_score`` when none is active or no token can be
        perturbed, NaN when skipped."""
        plan = self.plans[index]
        active = plan.active
        total = torch.where(active, curve, torch.zeros_like(curve)).sum(1)
        count = active.sum(1)
        empty = self.protocol.empty_score
        fallback = float("nan") if empty is None else empty
        has_curve = (count > 0) & (plan.num_perturbable > 0)
        score = torch.where(has_curve, total / count.clamp(min=1), fallback)
        return torch.where(plan.included, score, float("nan"))

    def defined(self, index: int = 0) -> Tensor:
        r"""``[batch]``: the example is scored and has a token to perturb. An
        example without one (only special or unknown tokens) has no curve: every
        level would leave it as it is and score it as a perfect explanation."""
        plan = self.plans[index]
        return plan.included & (plan.num_perturbable > 0)


def evaluate_curves(
    call: MetricCall,
    options: MetricOptions,
    protocol: PerturbationProtocol,
    keep_top: Sequence[bool],
    desc: str,
) -> Curves:
    r"""Runs the unperturbed inputs and one curve per entry of ``keep_top``
    (False: perturb the top-ranked tokens; True: perturb all but them).

    Cost: one forward pass over the batch plus one per level and curve, each
    chunked into at most ``internal_batch_size`` rows.
    """
    tokens = options.tokens or TokenOptions()
    check_token_ids(protocol, tokens)
    parsed = parse_inputs(call.inputs, call.additional_forward_args, tokens)
    scores = check_attributions(call.attributions, parsed)
    plans = tuple(plan_perturbations(protocol, parsed, scores, k) for k in keep_top)
    total = parsed.batch_size * (1 + len(protocol.levels) * len(plans))
    with torch.no_grad(), progress_bar(options.show_progress, desc, total) as bar:
        runner = Runner(call.forward_func, parsed, options.internal_batch_size, bar)
        base = runner.base()
        target_index = resolve_target(call.target, base)
        curves = tuple(runner.curve(plan, protocol, base, tokens) for plan in plans)
    return Curves(target_index, base, curves, plans, protocol)
