#!/usr/bin/env python3
r"""Decoded layer attribution built from ``forward_func`` on token ids, the
module whose states are decoded and a decoder onto the vocabulary."""

import inspect
from typing import Any, Callable, Dict, Optional, Tuple, Type, Union

import torch
from captum._utils.typing import TargetType
from captum.attr._core.layer.layer_gradient_x_activation import LayerGradientXActivation
from captum.attr._utils.attribution import LayerAttribution
from torch import nn, Tensor

from captum_ext._utils.hooks import HookSet
from captum_ext._utils.log import log_usage
from captum_ext._utils.target import resolve_target
from captum_ext._utils.token_ids import TokenBatch
from captum_ext.attr._utils.attribute_with_modules import forward_logits
from captum_ext.attr._utils.decoded_aggregation import (
    aggregate,
    check_aggregation_options,
)
from captum_ext.attr._utils.decoded_probabilities import (
    decoded_input_probabilities,
    Decoder,
)
from captum_ext.attr._utils.layer_token_attribution import LayerTokenAttribution
from captum_ext.attr._utils.result_dtype import result_dtype

__all__ = ["DecodedLayerAttribution", "LayerMethod"]

# The wrapped Captum layer method: its class, or an instance aimed at h_l.
LayerMethod = Union[Type[LayerAttribution], LayerAttribution]


class DecodedLayerAttribution(
    LayerTokenAttribution, LayerAttribution  # type: ignore[misc]  # untyped captum
):
    r"""
    Decoded layer attribution (Hou & Castanon, *Decoding Layer Saliency in
    Language Transformers*, ICML 2023), generalised from Grad-CAM to any
    Captum layer attribution method: a layer's per-position scores, moved onto
    the input tokens through the vocabulary.

    Let :math:`h_l` ``[n, d]`` be the output of ``layer`` and :math:`t_1 ..
    t_T` the unique token ids of the input.

    - :math:`\alpha` = ``method.attribute(...)`` on ``layer``, ``[n, d]``
      (for the default ``LayerGradientXActivation``, :math:`\alpha =
      (\partial y / \partial h_l) \odot h_l`, Eq. 1), and :math:`a_j =
      \sum_k \alpha[j, k]`.
    - :math:`D[i, j] = \mathrm{softmax}(\mathrm{decoder}(h_l[j]))[t_i]`
      ``[T, n]``: softmax over the full vocabulary (Eq. 4), then the columns
      of the input's unique tokens.
    - :math:`M[i, j] = 1` if :math:`D[i, j]` is among the top ``tau`` values
      of column :math:`j` (Alg. 1 l.8); ``tau=None`` keeps all.
    - ``relu="outside"`` (default, Eq. 6): :math:`s_i = \mathrm{ReLU}(\sum_j
      M_{ij} D_{ij} a_j)`; ``relu="inside"`` (Alg. 1 l.9 read literally):
      :math:`s_i = \sum_j M_{ij} D_{ij} \mathrm{ReLU}(a_j)`; ``relu=None``:
      the signed :math:`\sum_j M_{ij} D_{ij} a_j`.

    Every position holding :math:`t_i` gets :math:`s_i`. The decoder is any
    module or function mapping states ``[batch, pos, d]`` to vocabulary logits
    ``[batch, pos, vocab]``: a pre-trained masked-LM head (the paper's
    setting), the tied input embeddings, or a decoder fitted on the frozen
    model. The wrapped method receives the token ids, the resolved target and
    ``additional_forward_args``; the scores are those of the outputs of
    ``forward_func`` ``[batch, C]`` (target: by default each example's
    largest output). Scores come in float32 (float64 for a float64 model).

    More details can be found in the original paper:
    https://proceedings.mlr.press/v202/hou23a.html
    """

    needs_gradients = True

    def __init__(
        self,
        forward_func: Callable[..., Any],
        layer: Optional[nn.Module],
        decoder: Optional[Decoder],
        method: LayerMethod = LayerGradientXActivation,
        method_kwargs: Optional[Dict[str, Any]] = None,
    ) -> None:
        r"""
        Args:

            forward_func (Callable): ``forward_func(input_ids,
                        *additional_forward_args) -> [batch, C]``, with
                        ``layer`` one of its modules.
            layer (torch.nn.Module or None): The module whose output is
                        :math:`h_l` ``[batch, pos, d]``; a module returning a
                        tuple is read through its submodule that returns the
                        first element. None: the layer of the ``method``
                        instance.
            decoder (Callable): Maps ``[batch, pos, d]`` states to ``[batch,
                        pos, vocab]`` logits, whose vocabulary holds every
                        input id.
            method (type or LayerAttribution, optional): A Captum layer
                        attribution class, built as ``method(forward_func,
                        module, **method_kwargs)``, or an instance already
                        aimed at the module of :math:`h_l`.
                        Default: ``LayerGradientXActivation``
            method_kwargs (dict, optional): Constructor arguments of a
                        ``method`` class (e.g. ``{"multiply_by_inputs":
                        False}``).
                        Default: None
        """
        name = type(self).__name__
        if decoder is None:
            raise ValueError(
                f"{name} built from forward_func and a layer module needs "
                "decoder=: a module mapping its states to vocabulary logits"
            )
        self._set_method(method, method_kwargs)
        forward = method.forward_func if not isinstance(method, type) else forward_func
        LayerAttribution.__init__(self, forward, self._layer_module(layer, method))
        self.decoder = decoder

    def _set_method(
        self, method: LayerMethod, method_kwargs: Optional[Dict[str, Any]]
    ) -> None:
        r"""The wrapped method and its constructor arguments."""
        if method_kwargs and not isinstance(method, type):
            raise ValueError("method_kwargs apply only when method is a class")
        self._method = method
        self._method_kwargs = dict(method_kwargs or {})
        self._built: Dict[nn.Module, LayerAttribution] = {}

    @log_usage()
    def attribute(
        self,
        inputs: Tensor,
        target: TargetType = None,
        additional_forward_args: Any = None,
        *,
        tau: Optional[int] = None,
        relu: Optional[str] = "outside",
        internal_batch_size: Optional[int] = None,
        **attribute_kwargs: Any,
    ) -> Tensor:
        r"""
        Args:

            inputs (Tensor): Token ids ``[batch, pos]``, ``forward_func``'s
                        first argument.
            target (int, list, or Tensor, optional): The output explained: an
                        int or 0-d tensor for every example, or a list / 1-d
                        tensor with one index per example.
                        Default: None (the largest output of each example)
            additional_forward_args (Any, optional): ``forward_func``'s
                        arguments after ``inputs``; tensors with one row per
                        example are chunked with them.
                        Default: None
            tau (int, optional): Keep, per position, only the ``tau`` unique
                        input tokens it decodes to most probably (Alg. 1's
                        top-tau).
                        Default: None (no limit)
            relu (str, optional): ``"outside"`` (Eq. 6), ``"inside"`` (Alg. 1
                        read literally) or None (signed).
                        Default: "outside"
            internal_batch_size (int, optional): Run the batch in chunks of
                        at most this many examples (forward pass, wrapped
                        method and decoding per chunk); a wrapped method that
                        takes its own ``internal_batch_size`` gets the same
                        value.
                        Default: None (the whole batch at once)
            **attribute_kwargs (Any, optional): Passed to the wrapped
                        method's ``attribute`` (e.g. ``baselines``,
                        ``n_steps``); tensors with one row per example are
                        chunked with the inputs.

        Returns:
            *Tensor* of **attributions**:
            - **attributions** (*Tensor*): ``[batch, pos]``, one score per
                        position (positions holding the same token share it),
                        in float32 (float64 for a float64 model).

        Examples::

            >>> decoder = nn.Linear(d_model, vocab, bias=False)
            >>> decoder.weight = model.tokens.weight  # the tied embeddings
            >>> decoded = DecodedLayerAttribution(model, model.blocks[1], decoder)
            >>> attr = decoded.attribute(input_ids, target=1, tau=3)
        """
        check_aggregation_options(tau, relu)
        return self._attribute_modules(
            inputs,
            target,
            additional_forward_args,
            internal_batch_size,
            dict(
                tau=tau,
                relu=relu,
                internal_batch_size=internal_batch_size,
                **attribute_kwargs,
            ),
        )

    def _module_scores(
        self,
        inputs: Tensor,
        target: TargetType,
        args: Tuple[Any, ...],
        tau: Optional[int] = None,
        relu: Optional[str] = "outside",
        internal_batch_size: Optional[int] = None,
        **attribute_kwargs: Any,
    ) -> Tuple[Tensor, Tensor]:
        r"""The decoded scores of the token ids ``inputs`` ``[batch, pos]``
        (every position a real token), and ``forward_func``'s outputs
        ``[batch, C]``."""
        kwargs = dict(shared_options(attribute_kwargs))
        batch = TokenBatch(inputs, torch.ones_like(inputs))
        name = type(self).__name__
        with torch.no_grad():
            hidden, logits, module = self._captured(
                lambda: forward_logits(self.forward_func, inputs, args, name)
            )
        kwargs = self._with_batch_size(module, kwargs, internal_batch_size)
        index = resolve_target(target, logits)
        scores = self._position_scores(module, batch, index, kwargs, args)
        # The decoder's own vocabulary, which must hold every input id.
        decoded = decoded_input_probabilities(self.decoder, hidden, batch, None)
        return aggregate(decoded, scores, batch, tau, relu), logits

    def _layer_module(
        self, layer: Optional[nn.Module], method: LayerMethod
    ) -> nn.Module:
        r"""The module of :math:`h_l`: ``layer``, or the method instance's."""
        own = None if isinstance(method, type) else method.layer
        if own is not None and not isinstance(own, nn.Module):
            raise ValueError("the method instance must be aimed at one module")
        if layer is None:
            if own is None:
                raise ValueError("pass layer, or a method instance aimed at it")
            return own
        if own is not None and own is not layer:
            raise ValueError(
                f"the method instance is aimed at {type(own).__name__}, not at "
                f"the layer's module ({type(layer).__name__})"
            )
        return layer

    def _wrapped(self, module: nn.Module) -> LayerAttribution:
        r"""The layer method aimed at ``module`` (built once per module)."""
        if not isinstance(self._method, type):
            if module is not self._method.layer:
                raise ValueError(
                    f"the method instance is aimed at {type(self.layer).__name__}, "
                    "whose output is not a single tensor; pass the method class "
                    f"instead, or aim it at its submodule {type(module).__name__}"
                )
            return self._method
        if module not in self._built:
            self._built[module] = self._method(
                self.forward_func, module, **self._method_kwargs
            )
        return self._built[module]

    def _with_batch_size(
        self,
        module: nn.Module,
        kwargs: Dict[str, Any],
        internal_batch_size: Optional[int],
    ) -> Dict[str, Any]:
        r"""The wrapped method's options, with ``internal_batch_size`` where
        its ``attribute`` takes one (Integrated Gradients, Conductance)."""
        wrapped = self._wrapped(module)
        if internal_batch_size is None or not _takes_internal_batch_size(wrapped):
            return kwargs
        return {**kwargs, "internal_batch_size": internal_batch_size}

    def _captured(self, forward: Callable[[], Any]) -> Tuple[Tensor, Any, nn.Module]:
        r"""Runs ``forward()`` capturing :math:`h_l`: :math:`h_l` ``[batch, pos,
        d]``, what ``forward`` returned and the module whose tensor output is
        :math:`h_l`."""
        with HookSet() as hooks:
            outputs = _capture_all(hooks, self.layer)
            result = forward()
        module = _tensor_module(self.layer, outputs)
        return outputs[module], result, module

    def _method_inputs(
        self, batch: TokenBatch, kwargs: Dict[str, Any]
    ) -> Tuple[Tensor, Dict[str, Any]]:
        r"""What the wrapped method receives as inputs, and its options."""
        return batch.input_ids, kwargs

    def _position_scores(
        self,
        module: nn.Module,
        batch: TokenBatch,
        target: Union[int, Tensor],
        kwargs: Dict[str, Any],
        forward_args: Optional[Tuple[Any, ...]] = None,
    ) -> Tensor:
        r"""Runs the wrapped method; returns :math:`a_j = \sum_k \alpha[j, k]`,
        ``[batch, pos]``. ``forward_args``: the additional forward arguments
        (default: the masks)."""
        if kwargs.get("return_convergence_delta"):
            raise ValueError(
                "return_convergence_delta is not supported: the decoded scores use "
                "the wrapped method's attributions only; call the method itself "
                "for its delta"
            )
        inputs, kwargs = self._method_inputs(batch, kwargs)
        alpha = self._wrapped(module).attribute(
            inputs,
            target=target,
            additional_forward_args=(
                batch.forward_args() if forward_args is None else forward_args
            ),
            **kwargs,
        )
        shape = tuple(batch.input_ids.shape)
        if not isinstance(alpha, Tensor) or tuple(alpha.shape[:2]) != shape:
            got = tuple(alpha.shape) if isinstance(alpha, Tensor) else type(alpha)
            raise ValueError(
                f"the wrapped method returned {got}; decoding needs one tensor "
                f"[batch, pos, ...] with [batch, pos] = {list(shape)}"
            )
        alpha = alpha.detach().reshape(*shape, -1)  # [batch, pos, features]
        return alpha.to(result_dtype(alpha.dtype)).sum(-1)  # [batch, pos]


def shared_options(attribute_kwargs: Dict[str, Any]) -> Dict[str, Any]:
    r"""The wrapped method's options, which every example shares (a
    per-example tensor raises)."""
    for key, value in attribute_kwargs.items():
        if isinstance(value, Tensor) and value.dim() > 0:
            raise ValueError(
                f"{key}: per-example tensors are not supported on causal LMs (the "
                "method runs on prompt + continuation); pass a scalar instead"
            )
    return attribute_kwargs


def _capture_all(hooks: HookSet, module: nn.Module) -> Dict[nn.Module, Any]:
    r"""First output of ``module`` and of each of its submodules in the next
    forward pass, as they are (tensors or tuples)."""
    outputs: Dict[nn.Module, Any] = {}

    def hook(sub: nn.Module, _inputs: Tuple[Any, ...], output: Any) -> None:
        outputs.setdefault(sub, output)

    for sub in module.modules():
        hooks.forward(sub, hook)
    return outputs


def _tensor_module(module: nn.Module, outputs: Dict[nn.Module, Any]) -> nn.Module:
    r"""``module`` when its output is a tensor; else the first submodule whose
    output *is* its first output (e.g. DeBERTa's ``(hidden, None)`` blocks), so
    Captum's layer hooks see a plain tensor."""
    output = outputs.get(module)
    if isinstance(output, Tensor):
        return module
    if output is None:
        raise RuntimeError(
            f"{type(module).__name__} was not called in the forward pass (a "
            "TorchScript forward function runs no module hooks)"
        )
    first = output[0] if isinstance(output, (tuple, list)) and output else None
    for sub in module.modules():
        if sub is not module and first is not None and outputs.get(sub) is first:
            return sub
    raise ValueError(
        f"{type(module).__name__} returns {type(output).__name__} and no submodule "
        "returns its hidden state as a tensor; Captum's layer hooks need a module "
        "whose output is one tensor"
    )


def _takes_internal_batch_size(method: LayerAttribution) -> bool:
    return "internal_batch_size" in inspect.signature(method.attribute).parameters
