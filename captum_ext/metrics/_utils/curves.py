#!/usr/bin/env python3
r"""The driver shared by the perturbation-curve metrics (AOPC, log-odds,
sufficiency, hiding/revealing): parse, rank, perturb every level, run the model."""

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence, Tuple

import torch
from captum._utils.typing import TargetType
from torch import Tensor

from captum_ext._utils.common import resolve_target
from captum_ext.metrics._utils.batching import progress_bar, Runner
from captum_ext.metrics._utils.inputs import check_attributions, parse_inputs
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
    dtype: torch.dtype

    def target_base(self) -> Tensor:
        r"""``[batch]``: log-probability of the target on the unperturbed input."""
        return self.base.gather(1, self.target[:, None])[:, 0]

    def target_curve(self, index: int = 0) -> Tensor:
        r"""``[batch, levels]``: log-probability of the target at each level."""
        curve = self.curves[index]
        gather_index = self.target[:, None, None].expand(-1, curve.shape[1], 1)
        return curve.gather(2, gather_index)[..., 0]

    def result(self, curve: Tensor, score: Tensor) -> MetricResult:
        levels = torch.tensor(self.protocol.levels, device=curve.device)
        return MetricResult(
            score.to(self.dtype), curve.to(self.dtype), levels.to(self.dtype)
        )

    def mean(self, curve: Tensor, index: int = 0) -> Tensor:
        r"""Mean of ``curve`` over the active levels of each example; the
        protocol's ``empty_score`` when none is active, NaN when skipped."""
        plan = self.plans[index]
        active = plan.active
        total = torch.where(active, curve, torch.zeros_like(curve)).sum(1)
        count = active.sum(1)
        empty = self.protocol.empty_score
        fallback = float("nan") if empty is None else empty
        score = torch.where(count > 0, total / count.clamp(min=1), fallback)
        return torch.where(plan.included, score, float("nan"))


def evaluate_curves(
    forward_func: Callable[..., Tensor],
    inputs: Any,
    attributions: Any,
    target: TargetType,
    additional_forward_args: Any,
    protocol: PerturbationProtocol,
    keep_top: Sequence[bool],
    *,
    mask_token_id: Optional[int],
    pad_token_id: Optional[int],
    special_tokens_mask: Optional[Tensor],
    special_token_ids: Optional[Iterable[int]],
    max_examples_per_batch: Optional[int],
    show_progress: bool,
    desc: str,
) -> Curves:
    r"""Runs the unperturbed inputs and one curve per entry of ``keep_top``
    (False: perturb the top-ranked tokens; True: perturb all but them).

    Cost: one forward pass over the batch plus one per level and curve, each
    chunked into at most ``max_examples_per_batch`` rows.
    """
    check_token_ids(protocol, mask_token_id, pad_token_id)
    parsed = parse_inputs(
        inputs, additional_forward_args, special_tokens_mask, special_token_ids
    )
    scores = check_attributions(attributions, parsed)
    plans = tuple(plan_perturbations(protocol, parsed, scores, k) for k in keep_top)
    total = parsed.batch_size * (1 + len(protocol.levels) * len(plans))
    with torch.no_grad(), progress_bar(show_progress, desc, total) as bar:
        runner = Runner(forward_func, parsed, max_examples_per_batch, bar)
        base = runner.base()
        target_index = resolve_target(target, base)
        curves = tuple(
            runner.curve(plan, protocol, base, mask_token_id, pad_token_id)
            for plan in plans
        )
    return Curves(target_index, base, curves, plans, protocol, runner.dtype)
