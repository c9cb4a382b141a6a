#!/usr/bin/env python3
r"""Chunked forward passes over examples and over (example, level) rows.

Captum's ``_divide_and_aggregate_metrics`` splits only the perturbation samples
of a whole batch, so a chunk can never be smaller than the batch; here the
(example, level) rows themselves are chunked, so ``max_examples_per_batch``
bounds every forward pass.
"""

from contextlib import nullcontext
from typing import Any, Callable, ContextManager, Optional, Sequence, Tuple, Union

import torch
from captum._utils.common import _run_forward
from captum._utils.progress import NullProgress, progress, Progress
from torch import nn, Tensor

from captum_ext._utils.hooks import eval_semantics
from captum_ext.metrics._utils.inputs import TokenInputs
from captum_ext.metrics._utils.perturbation import (
    perturb_rows,
    PerturbationPlan,
    take_rows,
)
from captum_ext.metrics._utils.protocols import PerturbationProtocol

__all__ = ["Runner", "progress_bar"]


def progress_bar(show_progress: bool, desc: str, total: int) -> Progress:
    r"""A tqdm bar counting evaluated rows, or a no-op one."""
    if show_progress:
        return progress(desc=desc, total=total)
    return NullProgress()


class Runner:
    r"""Runs ``forward_func`` on chunks of at most ``max_examples_per_batch`` rows
    (None: the batch size) and returns log-probabilities (float64)."""

    def __init__(
        self,
        forward_func: Callable[..., Tensor],
        inputs: TokenInputs,
        max_examples_per_batch: Optional[int],
        bar: Union[Progress, NullProgress],
    ) -> None:
        if max_examples_per_batch is not None and max_examples_per_batch < 1:
            raise ValueError(
                f"max_examples_per_batch must be >= 1, got {max_examples_per_batch}"
            )
        self.forward_func = forward_func
        self.inputs = inputs
        # None: one pass per level over the batch's rows. Far larger passes are
        # slower per row on CPU (eager attention outgrows the caches) and risk
        # running out of memory.
        self.chunk = max_examples_per_batch or max(1, inputs.batch_size)
        self.bar = bar
        self.dtype = torch.get_default_dtype()

    def _eval_semantics(self) -> ContextManager[None]:
        r"""A ``forward_func`` that is a module (e.g. ``classifier_forward(model)``)
        runs in eval mode, with a warning if it was training (dropout would make
        every score random); a plain function is run as it is."""
        if isinstance(self.forward_func, nn.Module):
            return eval_semantics(self.forward_func)
        return nullcontext()

    def _chunks(self, rows: int) -> Sequence[Tuple[int, int]]:
        size = self.chunk
        return [(start, min(start + size, rows)) for start in range(0, rows, size)]

    def _log_probs(self, input_ids: Tensor, args: Tuple[Any, ...]) -> Tensor:
        with self._eval_semantics():
            logits = _run_forward(self.forward_func, input_ids, None, args)
        if not isinstance(logits, Tensor) or logits.dim() != 2:
            shape = tuple(logits.shape) if isinstance(logits, Tensor) else logits
            raise ValueError(
                f"forward_func must return logits [batch, classes], got {shape}"
            )
        if logits.dtype.is_floating_point:
            self.dtype = logits.dtype
        self.bar.update(len(input_ids))
        return logits.detach().double().log_softmax(-1)

    def base(self) -> Tensor:
        r"""``[batch, classes]`` on the unperturbed inputs."""
        inputs = self.inputs
        examples = torch.arange(inputs.batch_size, device=inputs.input_ids.device)
        parts = []
        for start, end in self._chunks(inputs.batch_size):
            rows = examples[start:end]
            args = tuple(
                take_rows(arg, rows, inputs.batch_size) for arg in inputs.forward_args()
            )
            parts.append(self._log_probs(inputs.input_ids[rows], args))
        return torch.cat(parts)

    def curve(
        self,
        plan: PerturbationPlan,
        protocol: PerturbationProtocol,
        base: Tensor,
        mask_token_id: Optional[int],
        pad_token_id: Optional[int],
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
        for start, end in self._chunks(len(examples)):
            rows_e, rows_l = examples[start:end], levels[start:end]
            perturbed = plan.perturbed(rows_e, rows_l)
            input_ids, args = perturb_rows(
                protocol, self.inputs, rows_e, perturbed, mask_token_id, pad_token_id
            )
            out[rows_e, rows_l] = self._log_probs(input_ids, args)
        return out
