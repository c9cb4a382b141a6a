#!/usr/bin/env python3
r"""The base of the token methods built Captum's way, from ``forward_func`` and
the modules they read."""

from contextlib import nullcontext
from functools import partial
from typing import Any, ContextManager, Mapping, Optional, Tuple

import torch
from captum._utils.typing import TargetType
from captum.attr._utils.attribution import Attribution
from torch import Tensor

from captum_ext._utils.log import log_usage
from captum_ext.attr._utils.attribute_with_modules import attribute_with_modules
from captum_ext.attr._utils.layer_states import RecordedAttention

__all__ = ["LayerTokenAttribution"]


class LayerTokenAttribution(Attribution):  # type: ignore[misc]  # untyped captum
    r"""
    A method that scores the positions of the states its modules give, from
    one call of ``forward_func`` per chunk of examples: the inputs (any
    tensor: token ids, embeddings, pixel values) and every per-example tensor
    of ``additional_forward_args`` run in chunks of ``internal_batch_size``
    examples, a module ``forward_func`` in eval mode (its mode restored), and
    the outputs and scores are checked for NaN/inf. A method implements
    :meth:`_module_scores`.
    """

    #: The method runs backward passes (else it runs under ``torch.no_grad``).
    needs_gradients: bool = False

    @log_usage()
    def attribute(
        self,
        inputs: Tensor,
        target: TargetType = None,
        additional_forward_args: Any = None,
        *,
        internal_batch_size: Optional[int] = None,
    ) -> Tensor:
        r"""
        Args:

            inputs (Tensor): ``forward_func``'s first argument ``[batch,
                        ...]`` (token ids, embeddings, pixel values).
            target (int, list, or Tensor, optional): The output explained (what
                        the score reads of it is in the class docstring): an
                        int or 0-d tensor for every example, or a list / 1-d
                        tensor with one index per example; an out-of-range
                        index raises. A class-agnostic method only validates
                        it: its result is the same for every target.
                        Default: None (the largest output of each example)
            additional_forward_args (Any, optional): ``forward_func``'s
                        arguments after ``inputs``; tensors with one row per
                        example are chunked with them.
                        Default: None
            internal_batch_size (int, optional): Run the batch in chunks of
                        at most this many examples, one forward pass per
                        chunk; the scores are those of the whole batch.
                        Default: None (the whole batch at once)

        Returns:
            *Tensor* of **attributions**:
            - **attributions** (*Tensor*): ``[batch, pos]`` scores (their sign
                        and range are in the class docstring) in float32
                        (float64 for a float64 model), ``pos`` the sequence
                        axis of the states read.

        Examples::

            >>> # a transformer whose blocks' attention modules return the
            >>> # probabilities [batch, heads, pos, pos]
            >>> attention = [block.attention.probabilities for block in blocks]
            >>> attr = AttentionRollout(model, attention).attribute(input_ids)
        """
        return self._attribute_modules(
            inputs, target, additional_forward_args, internal_batch_size
        )

    def _attribute_modules(
        self,
        inputs: Tensor,
        target: TargetType,
        additional_forward_args: Any,
        internal_batch_size: Optional[int],
        options: Optional[Mapping[str, Any]] = None,
    ) -> Tensor:
        r"""The scores of :meth:`_module_scores` (given ``options`` as keyword
        arguments) on every chunk, concatenated."""
        grad = nullcontext() if self.needs_gradients else torch.no_grad()
        with grad:
            return attribute_with_modules(
                self.forward_func,
                inputs,
                target,
                additional_forward_args,
                internal_batch_size,
                partial(self._module_scores, **(options or {})),
                type(self).__name__,
            )

    def _module_scores(
        self, inputs: Tensor, target: TargetType, args: Tuple[Any, ...]
    ) -> Tuple[Tensor, Tensor]:
        r"""One chunk's scores ``[batch, ..., pos]`` in float32 or wider and
        ``forward_func``'s outputs ``[batch, C]``."""
        raise NotImplementedError

    def _recorded_attention(self) -> ContextManager[RecordedAttention]:
        r"""Entered around the forward pass: what gives the attention after
        it where the attention modules return none; None here (they do)."""
        return nullcontext()
