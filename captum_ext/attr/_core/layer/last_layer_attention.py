#!/usr/bin/env python3
r"""Last-layer attention built from ``forward_func`` and the attention modules
it reads."""

from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
from captum._utils.typing import ModuleOrModuleList, TargetType
from captum.attr._utils.attribution import Attribution
from torch import nn, Tensor

from captum_ext._utils.attention_inputs import AttentionInputs
from captum_ext._utils.hooks import HookSet
from captum_ext._utils.target import resolve_target
from captum_ext.attr._utils.attention_statistics import rolled_out_attention_rows
from captum_ext.attr._utils.attribute_with_modules import forward_logits
from captum_ext.attr._utils.layer_states import as_modules, AttentionReader, row_index
from captum_ext.attr._utils.layer_token_attribution import LayerTokenAttribution
from captum_ext.attr._utils.result_dtype import result_dtype

__all__ = ["LastLayerAttention"]


class LastLayerAttention(LayerTokenAttribution):
    r"""
    Scores token :math:`i` with the attention the position the model classifies
    from, :math:`p` (a class token, or the last token of a causal model), pays
    to it in the last layer :math:`L`, averaged over the :math:`H` heads:

    .. math::
        \mathrm{Attention}(x_i) = \bar{A}^L[p, i], \qquad
        \bar{A}^l = \frac{1}{H} \sum_{h=1}^{H} A^l_h

    where :math:`A^l_h` ``[pos (query), pos (key)]`` are the attention
    probabilities of head :math:`h` that the l-th module of ``attention``
    returns.

    The method is class-agnostic: ``target`` is validated against
    ``forward_func``'s outputs but does not change the result. Scores are
    non-negative, sum to 1 over the keys, and are computed from one forward
    pass (per chunk of ``internal_batch_size`` examples) without gradients in
    float32 (float64 for a float64 model).

    This is the "Attention" baseline of the AttCAT paper (Qiang et al.,
    "AttCAT: Explaining Transformers via Attentive Class Activation Tokens",
    NeurIPS 2022):
    https://papers.nips.cc/paper_files/paper/2022/hash/20e45668fefa793bd9f2edf19be12c4b-Abstract-Conference.html
    """

    def __init__(
        self,
        forward_func: Callable[..., Any],
        attention: ModuleOrModuleList,
        position: Optional[int] = None,
    ) -> None:
        r"""
        Args:

            forward_func (Callable): ``forward_func(inputs,
                        *additional_forward_args) -> [batch, C]`` (its outputs
                        validate ``target``).
            attention (torch.nn.Module or list of torch.nn.Module): The
                        modules, first layer first, whose outputs are the
                        attention probabilities ``[batch, heads, pos, pos]``
                        (or a tuple ``(output, probabilities)``); the product
                        reads the last one alone (:class:`LastLayerAttention`)
                        or all of them (:class:`AttentionRollout`).
            position (int, optional): The position the model classifies
                        from, whose row is read (negative counts from the
                        end: -1 for a causal classifier).
                        Default: None (0, a class token)
        """
        Attribution.__init__(self, forward_func)
        self.position = 0 if position is None else position
        self.attention: Optional[List[nn.Module]] = as_modules(
            attention, "attention", type(self).__name__
        )

    def _module_scores(
        self, inputs: Tensor, target: TargetType, args: Tuple[Any, ...]
    ) -> Tuple[Tensor, Tensor]:
        r"""Row ``position`` of the rolled-out layers, ``[batch, pos]``, and
        ``forward_func``'s outputs ``[batch, C]``."""
        name = type(self).__name__
        assert self.attention is not None  # built from modules
        recorded_attention = self._recorded_attention()
        with HookSet() as hooks, recorded_attention as recorded:
            reader = AttentionReader(hooks, self.attention, recorded)
            logits = forward_logits(self.forward_func, inputs, args, name)
        resolve_target(target, logits)  # validated only: class-agnostic
        layers = reader.maps(name)
        positions = layers[0].num_keys
        row = torch.full((len(logits), 1), row_index(self.position, positions, name))
        rows = self._rows(layers, row.to(logits.device))  # [batch, 1, pos]
        return rows[:, 0], logits

    def _rows(self, layers: List[AttentionInputs], positions: Tensor) -> Tensor:
        r"""Rows ``positions`` ``[batch, rows]`` of the rolled-out layers'
        head-averaged attention, in float32 at least: bfloat16 sums of
        probabilities lose the small weights."""
        dtype = result_dtype(layers[0].dtype)
        return rolled_out_attention_rows(self._rolled_out(layers), positions, dtype)

    def _rolled_out(self, layers: Sequence[AttentionInputs]) -> List[AttentionInputs]:
        r"""The layers (first layer first) whose head-averaged attentions are
        multiplied: the last one alone."""
        return list(layers[-1:])
