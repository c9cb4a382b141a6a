#!/usr/bin/env python3
r"""AttCAT built from ``forward_func`` and the modules whose states and
attention it reads."""

from typing import Any, Callable, List, Optional

from captum._utils.typing import ModuleOrModuleList
from torch import nn, Tensor

from captum_ext._utils.attention_inputs import AttentionInputs
from captum_ext._utils.hooks import HookSet
from captum_ext.attr._core.layer.cat import CAT
from captum_ext.attr._utils.attention_statistics import attention_received
from captum_ext.attr._utils.layer_states import (
    as_modules,
    AttentionReader,
    RecordedAttention,
)
from captum_ext.attr._utils.result_dtype import result_dtype

__all__ = ["AttCAT"]


class AttCAT(CAT):
    r"""
    Attentive Class Activation Tokens (AttCAT) weight each token's gradient
    times hidden state (:class:`CAT`) by the attention the token receives, per
    layer, and sum over layers:

    .. math::
        \mathrm{AttCAT}_i = \sum_l \mathbb{E}_H\left(\alpha_{h,i}^l\right)
        \, \mathrm{CAT}_i^l, \qquad
        \mathrm{CAT}_i^l = \sum_d \left(\frac{\partial y^c}{\partial h_i^l}
        \odot h_i^l\right)_d

    :math:`y^c` is the target output (e.g. a logit before softmax),
    :math:`h^l` the output of the l-th module of ``layer`` and
    :math:`\alpha_{h,i}^l` the attention token :math:`i` receives from head
    :math:`h` of the l-th module of ``attention``, averaged over the :math:`n`
    query rows:

    .. math::
        \mathbb{E}_H\left(\alpha_{h,i}^l\right) = \frac{1}{H\,n}
        \sum_{h=1}^{H} \sum_{q} A^l_{h,q,i},

    the column mean as in the authors' code (not the [CLS] row). The paper's
    Eq. 11-12 average over heads after the product with the per-dimension CAT
    and sum over :math:`d` last; :math:`\alpha` does not depend on :math:`d`,
    so the order does not matter. Scores keep their sign. In a causal model
    token :math:`i` is attended only by queries :math:`q \geq i`; the column
    mean is still defined and is smaller for later tokens (the formula applied
    as is).

    One forward and one backward pass per chunk of ``internal_batch_size``
    examples; of the attention only the column means ``[batch, L, pos]`` (in
    float32, float64 for a float64 model) are kept past the forward pass.

    More details can be found in the original paper (Qiang et al., "AttCAT:
    Explaining Transformers via Attentive Class Activation Tokens", NeurIPS
    2022):
    https://papers.nips.cc/paper_files/paper/2022/hash/20e45668fefa793bd9f2edf19be12c4b-Abstract-Conference.html
    and the authors' code: https://github.com/qiangyao1988/AttCAT
    """

    def __init__(
        self,
        forward_func: Callable[..., Any],
        layer: ModuleOrModuleList,
        attention: Optional[ModuleOrModuleList],
        attribute_to_layer_input: bool = False,
    ) -> None:
        r"""
        Args:

            forward_func (Callable): ``forward_func(inputs,
                        *additional_forward_args) -> [batch, C]``, as in
                        :class:`CAT`.
            layer (torch.nn.Module or list of torch.nn.Module): The L modules
                        whose outputs are the hidden states :math:`h^l`
                        ``[batch, pos, d]``, as in :class:`CAT`.
            attention (torch.nn.Module or list of torch.nn.Module): The L
                        modules whose outputs are the attention
                        probabilities :math:`A^l` ``[batch, heads, pos, pos]``
                        paired with ``layer`` (or a tuple ``(output,
                        probabilities)``).
            attribute_to_layer_input (bool, optional): Read each layer
                        module's first input instead of its output.
                        Default: False
        """
        CAT.__init__(self, forward_func, layer, attribute_to_layer_input)
        if attention is None:
            raise ValueError(
                "AttCAT built from layer modules needs attention=: the modules "
                "whose outputs are each layer's attention probabilities"
            )
        self.attention: Optional[List[nn.Module]] = as_modules(
            attention, "attention", "AttCAT"
        )
        assert self.layer is not None
        if len(self.attention) != len(self.layer):
            raise ValueError(
                f"AttCAT pairs each layer with its attention: got {len(self.layer)} "
                f"layer modules and {len(self.attention)} attention modules"
            )

    def _attention_reader(
        self, hooks: HookSet, recorded: RecordedAttention
    ) -> Optional[AttentionReader]:
        assert self.attention is not None  # built from modules
        return AttentionReader(hooks, self.attention, recorded)

    def _token_weights(self, valid: Tensor, layers: List[AttentionInputs]) -> Tensor:
        r"""Attention received per block and token, :math:`\alpha`:
        ``[batch, L, pos]`` in float32 (float64 for a float64 model), averaged
        over the ``valid`` query rows ``[batch, q]``."""
        work = result_dtype(layers[0].dtype)
        valid = valid.to(work)  # [batch, q]
        row_weights = valid / valid.sum(-1, keepdim=True)  # mean over valid rows
        return attention_received(layers, row_weights)
