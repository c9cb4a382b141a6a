#!/usr/bin/env python3
r"""Attention probabilities of any attention implementation, read from the query
and key the model itself computes, in blocks of query rows.

``attn_implementation="eager"`` returns every block's attention map
(``output_attentions=True``), but it holds ``[batch, heads, pos, pos]`` per layer
and is not how ``from_pretrained`` loads a model by default. Every family whose
attention goes through transformers' attention interface
(``ALL_ATTENTION_FUNCTIONS``: ``sdpa``, the flash kernels, ...) hands its
attention function the post-rotary query, the key (grouped-query heads not yet
repeated), the mask, the scaling and, where it has one, the sliding window.
:class:`AttentionCapture` wraps that function for the duration of one forward
pass, keeps those inputs (:class:`AttentionInputs`, detached: no graph, no
copy) and lets the model's own kernel compute its output as always. A method
then recomputes the probabilities it needs with
:meth:`AttentionInputs.probability_blocks`, a block of query rows at a time and
without gradients, so no ``[heads, pos, pos]`` map of a whole layer ever exists.

The wrapper is installed in transformers' attention registry only while a
capture is open (reference-counted across threads) and records only the calls
of the thread that opened the capture, for the modules of its model: other
models and other threads run the original function untouched. The model's
``config`` and attention implementation are never changed.
"""

import threading
from contextlib import ExitStack
from typing import Any, Callable, Dict, List, Optional, Tuple

from torch import nn, Tensor

from captum_ext._utils.attention_inputs import AttentionInputs
from captum_ext.adapters.errors import UnsupportedModelError

__all__ = ["AttentionCapture", "AttentionInputs", "attention_implementation"]


def attention_implementation(config: Any) -> str:
    r"""The attention implementation the model runs (``"eager"`` when unset)."""
    return getattr(config, "_attn_implementation", None) or "eager"


# --- the wrapper in transformers' attention registry --------------------------

_ACTIVE = threading.local()  # .captures: the open captures of this thread
_REGISTRY_LOCK = threading.Lock()
_INSTALLED: Dict[str, Tuple[int, Callable[..., Any], bool]] = {}


def _registry() -> Any:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS


def _open_captures() -> List["AttentionCapture"]:
    captures: Optional[List[AttentionCapture]] = getattr(_ACTIVE, "captures", None)
    if captures is None:
        captures = _ACTIVE.captures = []
    return captures


def _recording(original: Callable[..., Any]) -> Callable[..., Any]:
    def attention(
        module: nn.Module,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Optional[Tensor],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        for capture in _open_captures():
            if capture.owns(module):
                capture.record(module, query, key, attention_mask, kwargs)
                break
        return original(module, query, key, value, attention_mask, *args, **kwargs)

    return attention


def _install(name: str) -> None:
    registry = _registry()
    with _REGISTRY_LOCK:
        if name in _INSTALLED:
            count, original, was_local = _INSTALLED[name]
            _INSTALLED[name] = (count + 1, original, was_local)
            return
        if name not in registry:
            raise UnsupportedModelError(
                f"attn_implementation={name!r} is not in transformers' attention "
                "interface, so captum_ext cannot read its attention; load the model "
                "with attn_implementation='eager' or 'sdpa'"
            )
        original, was_local = registry[name], name in registry._local_mapping
        registry[name] = _recording(original)
        _INSTALLED[name] = (1, original, was_local)


def _uninstall(name: str) -> None:
    registry = _registry()
    with _REGISTRY_LOCK:
        count, original, was_local = _INSTALLED[name]
        if count > 1:
            _INSTALLED[name] = (count - 1, original, was_local)
            return
        del _INSTALLED[name]
        if was_local:
            registry[name] = original
        else:
            del registry[name]  # the global entry shows through again


class AttentionCapture:
    r"""Context manager around forward passes of one model that collects, per
    block, the :class:`AttentionInputs` of its attention (first block first).

    With eager attention the model returns its maps: run the forward pass with
    ``output_attentions=`` :attr:`output_attentions` and read them with
    :meth:`layers`. With any other implementation of transformers' attention
    interface the query and key are recorded as the model computes them (see
    the module docstring); :meth:`layers` raises
    :class:`UnsupportedModelError` if some block's attention did not go through
    the interface (a family that computes attention its own way).
    """

    def __init__(self, model: nn.Module, num_layers: int, method: str) -> None:
        self.implementation = attention_implementation(getattr(model, "config"))
        self.output_attentions = self.implementation == "eager"
        self._modules = {id(module) for module in model.modules()}
        self._num_layers = num_layers
        self._method = method
        self._recorded: List[AttentionInputs] = []
        self._stack = ExitStack()

    def __enter__(self) -> "AttentionCapture":
        if not self.output_attentions:
            _install(self.implementation)
            self._stack.callback(_uninstall, self.implementation)
            _open_captures().append(self)
            self._stack.callback(_open_captures().remove, self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def owns(self, module: nn.Module) -> bool:
        return id(module) in self._modules

    def record(
        self,
        module: nn.Module,
        query: Tensor,
        key: Tensor,
        mask: Optional[Tensor],
        kwargs: Dict[str, Any],
    ) -> None:
        causal = kwargs.get("is_causal")
        if causal is None:
            causal = getattr(module, "is_causal", False)
        if kwargs.get("position_bias") is not None:
            raise UnsupportedModelError(
                f"{self._method}: this model's attention adds a position bias, which "
                "captum_ext cannot read from the query and key; load it with "
                "attn_implementation='eager'"
            )
        self._recorded.append(
            AttentionInputs(
                query=query.detach(),
                key=key.detach(),
                mask=None if mask is None else mask.detach(),
                scaling=kwargs.get("scaling"),
                causal=bool(causal),
                sliding_window=kwargs.get("sliding_window"),
                softcap=kwargs.get("softcap"),
            )
        )

    def layers(self, output: Any) -> List[AttentionInputs]:
        r"""Every block's :class:`AttentionInputs` of the one forward pass run
        inside the capture (``output`` is its Hugging Face output)."""
        if self.output_attentions:
            return [AttentionInputs(probabilities=a) for a in output.attentions]
        recorded, self._recorded = self._recorded, []
        if len(recorded) != self._num_layers:
            raise UnsupportedModelError(
                f"{self._method} reads attention, but {len(recorded)} of this "
                f"model's {self._num_layers} blocks ran their attention through "
                "transformers' attention interface "
                f"(attn_implementation={self.implementation!r}); load the model with "
                "attn_implementation='eager'"
            )
        return recorded
