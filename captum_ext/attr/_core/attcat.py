#!/usr/bin/env python3
r"""AttCAT: class activation tokens weighted by the attention each token receives."""

from typing import Any, Callable, List, Optional

import torch
from captum._utils.typing import ModuleOrModuleList
from torch import Tensor

from captum_ext._utils.attention_inputs import AttentionInputs
from captum_ext._utils.teacher_forcing import TeacherForcedBatch
from captum_ext.adapters import ModelAdapter
from captum_ext.attr._core.cat import CAT
from captum_ext.attr._core.layer.attcat import AttCAT as LayerAttCAT
from captum_ext.attr._utils.attention_statistics import (
    attention_received_until,
    attention_rows_per_layer,
)
from captum_ext.attr._utils.result_dtype import result_dtype

__all__ = ["AttCAT"]

# Causal LMs: which attention weighs block l's scores of target t (``alpha``).
ALPHAS = ("received", "row", "rollout")


class AttCAT(CAT, LayerAttCAT):
    r"""
    Attentive Class Activation Tokens (AttCAT) weight each token's gradient times
    hidden state (:class:`CAT`) by the attention the token receives, per layer,
    and sum over layers:

    .. math::
        \mathrm{AttCAT}_i = \sum_l \mathbb{E}_H\left(\alpha_{h,i}^l\right)
        \, \mathrm{CAT}_i^l, \qquad
        \mathrm{CAT}_i^l = \sum_d \left(\frac{\partial y^c}{\partial h_i^l}
        \odot h_i^l\right)_d

    :math:`y^c` is the target logit before softmax (by default the model's
    predicted class) and :math:`\alpha_{h,i}^l` the attention token :math:`i`
    receives from head :math:`h` of block :math:`l`: the post-softmax attention
    averaged over the valid (non-pad) query rows, so that

    .. math::
        \mathbb{E}_H\left(\alpha_{h,i}^l\right) = \frac{1}{H\,n}
        \sum_{h=1}^{H} \sum_{q\ \mathrm{valid}} A^l_{h,q,i},

    the column mean as in the authors' code (not the [CLS] row), with :math:`n`
    valid rows. The paper's Eq. 11-12 average over heads after the product with
    the per-dimension CAT and sum over :math:`d` last; :math:`\alpha` does not
    depend on :math:`d`, so the order does not matter. Scores keep their sign.
    Special tokens such as [CLS]/[SEP] are never masked out of the attention
    (the authors' code does, which changes the prediction being explained).

    Layers: ``layers="inputs"`` (the default on classifiers, the authors' code)
    pairs the input of block :math:`l`, ``hidden_states[l-1]``, with block
    :math:`l`'s attention;
    ``layers="outputs"`` (the paper's Eq. 10) pairs its output,
    ``hidden_states[l]``, with the same attention; ``layers="attention_inputs"``
    (the default on causal LMs) pairs what that attention reads (a pre-LN
    decoder's first norm's output, see :class:`CAT`).

    For causal models the attention is causal, so token :math:`i` is attended
    only by queries :math:`q \geq i`; the column mean over the valid query rows
    is still defined and is smaller for later tokens. This is the formula
    applied as is, not a choice of the paper.

    **Causal LMs** (docs/generation.rst): row :math:`t` differentiates
    :math:`\log p(y_t)` (see :class:`CAT`; ``objective="logit"`` the logit),
    and :math:`\alpha` of key :math:`i` for target :math:`t` is by default
    (``alpha="rollout"``) row :math:`p_t` (the predicting position of
    :math:`y_t`) of the raw attention rollout from the last block down to
    block :math:`l` (as :class:`AttentionRollout`), how much of token
    :math:`i` at block :math:`l` reaches :math:`p_t` through attention alone:

    .. math::
        \alpha_{t,i}^l = \left(\bar{A}^L \bar{A}^{L-1} \cdots
        \bar{A}^l\right)[p_t, i], \qquad
        \bar{A}^l = \frac{1}{H} \sum_{h=1}^{H} A^l_h

    ``alpha="row"`` reads the predicting position's own row of each block,
    :math:`\alpha_{t,i}^l = \bar{A}^l[p_t, i]`; ``alpha="received"`` the
    attention key :math:`i` receives from the queries that both see it and
    take part in predicting :math:`y_t`, averaged over heads and those
    :math:`p_t - i + 1` queries:

    .. math::
        \alpha_{t,i}^l = \frac{1}{H\,(p_t - i + 1)} \sum_{h=1}^{H}
        \sum_{q=i}^{p_t} A^l_{h,q,i}

    Each reads no query after :math:`p_t` (they read :math:`y_t` itself and
    do not take part in predicting it), so row :math:`t` equals the
    single-target run on ``prompt + y_<t`` (the consistency law).

    Any attention implementation works (eager, sdpa, flash): with sdpa and
    flash :math:`\alpha` is recomputed from the model's own query and key, a
    block of query rows at a time without gradients
    (:class:`~captum_ext.adapters.AttentionCapture`), while the model's forward
    and backward passes keep their memory-efficient kernel. One forward and one
    backward pass per chunk of ``internal_batch_size`` examples; works with
    frozen parameters and leaves every ``.grad`` untouched. Of the attention
    only the column means, ``[batch, L, pos]`` in float32, are kept past the
    forward pass.

    More details can be found in the original paper (Qiang et al., "AttCAT:
    Explaining Transformers via Attentive Class Activation Tokens", NeurIPS
    2022):
    https://papers.nips.cc/paper_files/paper/2022/hash/20e45668fefa793bd9f2edf19be12c4b-Abstract-Conference.html
    and the authors' code: https://github.com/qiangyao1988/AttCAT
    """

    reads_attention = True

    def __init__(
        self,
        forward_func: Callable[..., Any],
        layer: Optional[ModuleOrModuleList] = None,
        attention: Optional[ModuleOrModuleList] = None,
        attribute_to_layer_input: bool = False,
        *,
        layers: Optional[str] = None,
        objective: str = "log_prob",
        alpha: str = "rollout",
    ) -> None:
        r"""
        Args:

            forward_func (Callable): ``forward_func(inputs,
                        *additional_forward_args) -> [batch, C]`` with
                        ``layer``, else a Hugging Face model, as in
                        :class:`CAT`.
            layer (torch.nn.Module or list of torch.nn.Module, optional): The
                        L modules whose outputs are the hidden states
                        :math:`h^l` ``[batch, pos, d]``, as in :class:`CAT`.
                        Default: None (the shortcut)
            attention (nn.Module or list of nn.Module, optional): With
                        ``layer``: the L modules whose outputs are the
                        attention probabilities :math:`A^l` ``[batch, heads,
                        pos, pos]`` paired with ``layer`` (or a tuple
                        ``(output, probabilities)``, as a Hugging Face
                        attention module returns in eager attention).
                        Default: None (required with ``layer``)
            attribute_to_layer_input (bool, optional): With ``layer``: read
                        each layer module's first input instead of its output.
                        Default: False
            layers (str, optional): The shortcut's hidden states,
                        ``"inputs"``, ``"outputs"`` or ``"attention_inputs"``,
                        as in :class:`CAT`.
                        Default: None (``"attention_inputs"`` on a causal
                        LM, ``"inputs"`` on a classifier)
            objective (str, optional): Causal LMs: ``"log_prob"`` or
                        ``"logit"`` of ``y_t``, as in :class:`CAT`.
                        Default: ``"log_prob"``
            alpha (str, optional): Causal LMs: ``"received"`` (mean over the
                        queries ``i <= q <= p_t``), ``"row"`` (the predicting
                        position's own attention row) or ``"rollout"`` (its
                        row of the attention rollout from the top down to
                        block ``l``); classifiers always use the column mean.
                        Default: ``"rollout"`` (chosen by measurement,
                        docs/generation.rst)
        """
        if alpha not in ALPHAS:
            raise ValueError(f"alpha must be one of {ALPHAS}, got {alpha!r}")
        self.alpha = alpha
        self.attention = attention  # the modules' list once built from them
        CAT.__init__(
            self,
            forward_func,
            layer,
            attribute_to_layer_input,
            layers=layers,
            objective=objective,
        )
        if self.layer is None:
            self._refuse_shortcut_attention()

    def _from_modules(
        self,
        forward_func: Callable[..., Any],
        layer: ModuleOrModuleList,
        attribute_to_layer_input: bool,
    ) -> None:
        LayerAttCAT.__init__(
            self, forward_func, layer, self.attention, attribute_to_layer_input
        )

    def _image_modules(self, adapter: ModelAdapter) -> None:
        self._refuse_shortcut_attention()
        CAT._image_modules(self, adapter)
        self.attention = adapter.attention_modules()

    def _refuse_shortcut_attention(self) -> None:
        if self.attention is not None:
            raise ValueError(
                "AttCAT's attention modules go with layer modules (and "
                "forward_func); the shortcut finds a Hugging Face model's "
                "attention itself"
            )

    def _generated_token_weights(
        self, forced: TeacherForcedBatch, layers: List[AttentionInputs]
    ) -> Tensor:
        r"""Causal LMs: :math:`\alpha_{t,i}^l`, ``[batch, T, L, pos]`` in float32:
        rows of the predicting positions, or (``"received"``) a cumulative sum
        over queries read at each predicting position."""
        work = result_dtype(layers[0].dtype)
        predicting = forced.predicting_positions()  # [T]
        if self.alpha != "received":
            positions = predicting.expand(len(forced.target), -1)  # [batch, T]
            rollout = self.alpha == "rollout"
            return attention_rows_per_layer(layers, positions, work, rollout)
        # Left-padding rows attend nothing real: they are left out.
        queries = forced.model_inputs()[1].to(work)  # [batch, q]
        keys = torch.arange(queries.shape[1], device=predicting.device)
        # p_t - i + 1 queries see key i and predict y_t (clamped where i > p_t,
        # whose sums are zero anyway).
        counts = (predicting[:, None] - keys[None, :] + 1).clamp(min=1).to(work)
        # Causal: A[q, i] = 0 for q < i, so the sum over q <= p_t is the sum
        # over i <= q <= p_t.
        received = attention_received_until(layers, queries, predicting)
        return received / counts[:, None]  # [batch, T, L, k]
