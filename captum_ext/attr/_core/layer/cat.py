#!/usr/bin/env python3
r"""CAT built from ``forward_func`` and the modules whose states it reads."""

from typing import Any, Callable, List, Optional, Tuple

import torch
from captum._utils.typing import ModuleOrModuleList, TargetType
from captum.attr._utils.attribution import GradientAttribution
from torch import nn, Tensor

from captum_ext._utils.attention_inputs import AttentionInputs
from captum_ext._utils.hooks import HookSet
from captum_ext._utils.log import log_usage
from captum_ext._utils.target import resolve_target
from captum_ext.attr._utils.attribute_with_modules import forward_logits
from captum_ext.attr._utils.gradient_times_state import gradients_times_states
from captum_ext.attr._utils.layer_states import (
    as_modules,
    AttentionReader,
    capture_states,
    read_states,
    RecordedAttention,
)
from captum_ext.attr._utils.layer_token_attribution import LayerTokenAttribution

__all__ = ["CAT"]


class CAT(LayerTokenAttribution, GradientAttribution):  # type: ignore[misc]
    r"""
    Class Activation Tokens (CAT) score token :math:`i` with the gradient of the
    target output :math:`y^c` (e.g. a logit before softmax) times the token's
    hidden state :math:`h_i^l`, summed over the hidden dimension and over the
    layers :math:`l` given as ``layer``:

    .. math::
        \mathrm{CAT}_i^l = \sum_d \left(\frac{\partial y^c}{\partial h_i^l}
        \odot h_i^l\right)_d, \qquad \mathrm{CAT}_i = \sum_l \mathrm{CAT}_i^l

    :math:`h^l` ``[batch, pos, d]`` is the output (or, with
    ``attribute_to_layer_input``, the first input) of the l-th module of
    ``layer``, e.g. each block of a transformer (its input: the authors' code;
    its output: the AttCAT paper's Eq. 10; in a pre-LN block, what its
    attention reads, the first norm's output). Any model and input tensor
    works (token ids, embeddings, pixel values): the scores are over the
    sequence axis ``pos`` of the states. The scores keep their sign (the
    direction of the evidence).

    CAT is the AttCAT ablation without attention weights (:class:`AttCAT` with
    :math:`\alpha \equiv 1`). One forward and one backward pass per chunk of
    ``internal_batch_size`` examples; works with frozen parameters (a state
    outside the graph is made a leaf) and leaves every ``.grad`` untouched.
    The sum over :math:`d`, whose terms cancel strongly after a LayerNorm, is
    accumulated in float32 (float64 for a float64 model).

    More details can be found in the AttCAT paper (Qiang et al., "AttCAT:
    Explaining Transformers via Attentive Class Activation Tokens", NeurIPS
    2022):
    https://papers.nips.cc/paper_files/paper/2022/hash/20e45668fefa793bd9f2edf19be12c4b-Abstract-Conference.html
    """

    needs_gradients = True

    def __init__(
        self,
        forward_func: Callable[..., Any],
        layer: ModuleOrModuleList,
        attribute_to_layer_input: bool = False,
    ) -> None:
        r"""
        Args:

            forward_func (Callable): The forward function of the model:
                        ``forward_func(inputs, *additional_forward_args) ->
                        [batch, C]`` (e.g. logits; a module runs in eval
                        mode), whatever the inputs are (token ids,
                        embeddings, pixel values).
            layer (torch.nn.Module or list of torch.nn.Module): The L modules
                        whose outputs are the hidden states :math:`h^l`
                        ``[batch, pos, d]`` (or a tuple starting with them),
                        e.g. each block of a transformer.
            attribute_to_layer_input (bool, optional): Read each module's
                        first input instead of its output.
                        Default: False
        """
        GradientAttribution.__init__(self, forward_func)
        self.attribute_to_layer_input = attribute_to_layer_input
        self.layer: Optional[List[nn.Module]] = as_modules(
            layer, "layer", type(self).__name__
        )

    @log_usage()
    def attribute(
        self,
        inputs: Tensor,
        target: TargetType = None,
        additional_forward_args: Any = None,
        *,
        return_layers: bool = False,
        internal_batch_size: Optional[int] = None,
    ) -> Tensor:
        r"""
        Args:

            inputs (Tensor): ``forward_func``'s first argument ``[batch,
                        ...]`` (token ids, embeddings, pixel values).
            target (int, list, or Tensor, optional): The output whose
                        gradient is taken: an int or 0-d tensor for every
                        example, or a list / 1-d tensor with one index per
                        example; an out-of-range index raises.
                        Default: None (the largest output of each example)
            additional_forward_args (Any, optional): ``forward_func``'s
                        arguments after ``inputs``; tensors with one row per
                        example are chunked with them.
                        Default: None
            return_layers (bool, optional): Return each layer's scores
                        instead of their sum.
                        Default: False
            internal_batch_size (int, optional): Run the batch in chunks of
                        at most this many examples, one forward and one
                        backward pass per chunk; the scores are those of the
                        whole batch.
                        Default: None (the whole batch at once)

        Returns:
            *Tensor* of **attributions**:
            - **attributions** (*Tensor*): ``[batch, pos]`` signed scores (or
                        ``[batch, L, pos]`` with ``return_layers=True``, whose
                        sum over dim 1 is the default output) in float32
                        (float64 for a float64 model).

        Examples::

            >>> # a transformer whose blocks return [batch, pos, d]
            >>> cat = CAT(model, list(model.blocks))
            >>> attr = cat.attribute(input_ids, target=1)
        """
        scores = self._attribute_modules(
            inputs, target, additional_forward_args, internal_batch_size
        )  # [batch, L, pos]
        return scores if return_layers else scores.sum(-2)

    def _module_scores(
        self, inputs: Tensor, target: TargetType, args: Tuple[Any, ...]
    ) -> Tuple[Tensor, Tensor]:
        r"""One chunk's weighted gradient x state per layer, ``[batch, L,
        pos]`` (float32 or wider), and ``forward_func``'s outputs ``[batch,
        C]``, from one call of ``forward_func``."""
        name = type(self).__name__
        assert self.layer is not None  # built from modules
        recorded_attention = self._recorded_attention()
        with HookSet() as hooks, torch.enable_grad(), recorded_attention as recorded:
            stores = capture_states(
                hooks, self.layer, self.attribute_to_layer_input, requires_grad=True
            )
            attention = self._attention_reader(hooks, recorded)
            logits = forward_logits(self.forward_func, inputs, args, name)
        hidden = read_states(stores, len(logits), name)
        weights = None
        if attention is not None:
            maps = attention.maps(name, hidden[0].shape[1])
            valid = torch.ones(hidden[0].shape[:2], dtype=torch.bool)
            with torch.no_grad():
                weights = self._token_weights(valid.to(hidden[0].device), maps)
        return self._class_scores(logits, hidden, weights, target)

    def _attention_reader(
        self, hooks: HookSet, recorded: RecordedAttention
    ) -> Optional[AttentionReader]:
        r"""The captures of the attention modules; CAT reads none."""
        return None

    def _token_weights(
        self, valid: Tensor, layers: List[AttentionInputs]
    ) -> Optional[Tensor]:
        r"""Per-layer token weights ``[batch, L, pos]`` in float32, reduced from
        the forward pass's attention before the backward pass; CAT has none."""
        return None

    def _class_scores(
        self,
        logits: Tensor,
        hidden: Tuple[Tensor, ...],
        weights: Optional[Tensor],
        target: TargetType,
    ) -> Tuple[Tensor, Tensor]:
        r"""``sum_d (d logits[target] / d h^l) * h^l``, times the token weights
        where the method has them: ``[batch, L, pos]`` (float32), and the
        logits ``[batch, C]``."""
        with torch.enable_grad():
            index = resolve_target(target, logits)  # [batch]
            # Examples do not interact, so the gradient of the batch sum gives
            # every example its own gradient in a single backward pass.
            selected = logits.gather(1, index[:, None]).sum()
            grads = torch.autograd.grad(selected, hidden)
        with torch.no_grad():
            scores = gradients_times_states(hidden, grads)
            scores = scores if weights is None else scores * weights
        return scores, logits.detach()
