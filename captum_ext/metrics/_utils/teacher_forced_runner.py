#!/usr/bin/env python3
r"""Teacher-forced passes of a causal LM over prompts and their continuations,
in chunks, for the metrics of generated text: the log-probability of every
target token (:class:`TeacherForcedRunner`), the logits' checks and the
vocabulary size."""

from typing import Any, Callable, Iterator, Optional

import torch
from torch import Tensor

from captum_ext._utils.finite import check_finite
from captum_ext._utils.hooks import eval_semantics
from captum_ext._utils.row_chunks import batch_slices, check_internal_batch_size
from captum_ext._utils.teacher_forcing import (
    IGNORE_INDEX,
    teacher_forced_batch,
    TeacherForcedBatch,
)
from captum_ext.metrics._utils.generated_text_inputs import GenerationInputs

__all__ = ["TeacherForcedRunner", "check_lm_logits", "probe_vocab_size"]


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
