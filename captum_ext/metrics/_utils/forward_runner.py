#!/usr/bin/env python3
r"""Chunked forward passes over examples and over (example, level) rows.

Captum's ``_divide_and_aggregate_metrics`` splits only the perturbation samples
of a whole batch, so a chunk can never be smaller than the batch; here the
(example, level) rows themselves are chunked, so ``internal_batch_size`` bounds
every forward pass.
"""

from typing import Any, Callable, Optional, Tuple

import torch
from captum._utils.common import _run_forward
from torch import Tensor

from captum_ext._utils.finite import check_finite
from captum_ext._utils.hooks import eval_semantics
from captum_ext._utils.progress import Progress
from captum_ext._utils.row_chunks import (
    batch_slices,
    check_internal_batch_size,
    take_rows,
)
from captum_ext.metrics._utils.inputs import TokenInputs, TokenOptions
from captum_ext.metrics._utils.perturbation import perturb_rows, PerturbationPlan
from captum_ext.metrics._utils.protocols import PerturbationProtocol

__all__ = ["Runner", "progress_bar"]


def progress_bar(show_progress: bool, desc: str, total: int) -> Progress:
    r"""The shared reporter counting evaluated rows (nothing when
    ``show_progress`` is False)."""
    return Progress(total, desc, "rows", enabled=show_progress, summary=False)


class Runner:
    r"""Runs ``forward_func`` on chunks of at most ``internal_batch_size`` rows
    (None: the batch size) and returns float32 log-probabilities, whatever the
    model's dtype."""

    def __init__(
        self,
        forward_func: Callable[..., Tensor],
        inputs: TokenInputs,
        internal_batch_size: Optional[int],
        bar: Progress,
    ) -> None:
        self.forward_func = forward_func
        self.inputs = inputs
        # None: one pass per level over the batch's rows. Far larger passes are
        # slower per row on CPU (eager attention outgrows the caches) and risk
        # running out of memory.
        self.chunk = check_internal_batch_size(internal_batch_size)
        self.bar = bar

    def _log_probs(
        self, input_ids: Tensor, args: Tuple[Any, ...], examples: Tensor
    ) -> Tensor:
        r"""``[rows, classes]`` for the rows of ``examples`` (``[rows]``)."""
        # A module forward_func (e.g. classifier_forward(model)) runs in eval mode,
        # with a warning if it was training: dropout would make every score random.
        with eval_semantics(self.forward_func):
            logits: Tensor = _run_forward(self.forward_func, input_ids, None, args)
        _check_logits(logits)
        # Rows of one example may repeat (one per level): the error names
        # examples of the batch, not rows of the chunk.
        check_finite(logits, "the model's logits", examples)
        self.bar.update(len(input_ids))
        return logits.detach().float().log_softmax(-1)

    def base(self) -> Tensor:
        r"""``[batch, classes]`` on the unperturbed inputs."""
        inputs = self.inputs
        examples = torch.arange(inputs.batch_size, device=inputs.input_ids.device)
        parts = []
        for chunk in batch_slices(inputs.batch_size, self.chunk):
            rows = examples[chunk]
            args = tuple(
                take_rows(arg, rows, inputs.batch_size) for arg in inputs.forward_args()
            )
            parts.append(self._log_probs(inputs.input_ids[rows], args, rows))
        return torch.cat(parts)

    def curve(
        self,
        plan: PerturbationPlan,
        protocol: PerturbationProtocol,
        base: Tensor,
        tokens: TokenOptions,
    ) -> Tensor:
        r"""``[batch, levels, classes]``; NaN at skipped levels. Levels that perturb
        nothing reuse ``base`` instead of running the model again."""
        batch, num_levels = plan.counts.shape
        out = base.new_full((batch, num_levels, base.shape[1]), float("nan"))
        touches = plan.touches()
        unchanged = plan.active & ~touches
        out[unchanged] = base[:, None, :].expand_as(out)[unchanged]
        run = plan.active & touches
        self.bar.update(int((~run).sum()))  # reused or skipped rows
        # Level-major order: rows of one chunk have similar lengths after deletion,
        # so re-packing trims more padding.
        levels, examples = run.T.nonzero(as_tuple=True)
        for chunk in batch_slices(len(examples), self.chunk or batch):
            rows_e, rows_l = examples[chunk], levels[chunk]
            perturbed = plan.perturbed(rows_e, rows_l)
            input_ids, args = perturb_rows(
                protocol, self.inputs, rows_e, perturbed, tokens
            )
            out[rows_e, rows_l] = self._log_probs(input_ids, args, rows_e)
        return out


def _check_logits(logits: Any) -> None:
    if isinstance(logits, Tensor) and logits.dim() == 2:
        return
    got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
    raise ValueError(
        f"forward_func must return logits [batch, classes], got {got}; for a "
        "Hugging Face model pass captum_ext.classifier_forward(model), which "
        "returns its .logits"
    )
