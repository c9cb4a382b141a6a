#!/usr/bin/env python3
r"""Argument documentation shared by the perturbation-curve metrics."""

from typing import Callable, TypeVar

__all__ = ["with_common_args"]

F = TypeVar("F", bound=Callable)

_COMMON_ARGS = r"""
        forward_func (Callable): ``forward_func(input_ids, attention_mask, *rest)
                -> logits [batch, C]`` (pre-softmax), e.g.
                :func:`captum_ext.classifier_forward`. Probabilities are the
                softmax of these logits.
        inputs (Tensor): token ids ``[batch, pos]``, padded left or right.
        attributions (Tensor): one score per token, ``[batch, pos]``; higher =
                more important for ``target``.
        target (int, list or Tensor, optional): the class whose probability is
                tracked, one for all or one per example. None: the model's
                predicted class on the unperturbed input. Default: None
        additional_forward_args (Tensor or tuple, optional): ``attention_mask``
                or ``(attention_mask, token_type_ids, ...)``, passed to
                ``forward_func`` after the ids. The first item is the attention
                mask (1 = token, 0 = padding; None = no padding): perturbations
                update it. Tensors of shape ``[batch, pos]`` follow their
                tokens when tokens are deleted. Default: None
        preset (str or PerturbationProtocol, optional): None for the clean
                default, a paper's name (see above), or a
                :class:`PerturbationProtocol`. Default: None
        levels (sequence of float, optional): overrides the preset's levels.
        mode (str, optional): overrides the preset's mode: ``"delete"``,
                ``"mask"`` or ``"pad"``.
        attend_replaced (bool, optional): overrides whether replaced tokens keep
                attention mask 1.
        mask_token_id (int, optional): the [MASK] id; required by ``"mask"``.
        pad_token_id (int, optional): the [PAD] id; required by ``"pad"``, and
                used to fill the slots freed by ``"delete"`` (0 when None; pass
                it for causal classifiers, which find their last token by it).
        special_tokens_mask (Tensor, optional): ``[batch, pos]``, 1 on positions
                that are never perturbed, ranked or counted (special tokens, or
                any position to exclude). Default: None
        special_token_ids (iterable of int, optional): ids treated as special
                wherever they occur (e.g. ``tokenizer.all_special_ids``); joined
                with ``special_tokens_mask``. Default: None
        max_examples_per_batch (int, optional): most rows per forward pass. The
                (example, level) rows of all levels are evaluated together, in
                chunks of this many rows: the cost is at most one forward pass
                of the batch per level and curve, plus one; levels that change
                nothing reuse the unperturbed output. None: the batch size.
                Default: None
        show_progress (bool, optional): show a tqdm progress bar. Default: False"""


def with_common_args(func: F) -> F:
    r"""Replaces the line ``    {common_args}`` of ``func``'s docstring (indented
    like the rest, so that black leaves the docstring alone)."""
    doc = func.__doc__ or ""
    func.__doc__ = doc.replace("    {common_args}", _COMMON_ARGS[1:])
    return func
