#!/usr/bin/env python3
r"""LogAt built from ``forward_func``, the module whose states its head reads
and that head."""

from typing import Any, Callable, List, Optional, Tuple

from captum._utils.typing import TargetType
from captum.attr._utils.attribution import Attribution
from torch import nn, Tensor

from captum_ext._utils.hooks import HookSet
from captum_ext._utils.target import resolve_target
from captum_ext.attr._utils.at_target import at_target
from captum_ext.attr._utils.attribute_with_modules import forward_logits
from captum_ext.attr._utils.layer_states import capture_states, read_states
from captum_ext.attr._utils.layer_token_attribution import LayerTokenAttribution
from captum_ext.attr._utils.result_dtype import result_dtype

__all__ = ["LogAt"]


class LogAt(LayerTokenAttribution):
    r"""
    LogAt ("logit attribution") scores token :math:`i` with the logit the
    model's own head-on-top (HoT) gives when it reads token :math:`i`'s final
    hidden state :math:`x_i^L` (the output of ``layer``) instead of the
    classification position's:

    .. math::
        \mathrm{LogAt}(x_i) = \mathrm{HoT}(x_i^L)[c]

    where :math:`c` is the target class (by default the model's predicted
    class) and the logit is taken before softmax; ``head`` is the HoT applied
    to every position. With an earlier layer's states (and the final norm in
    ``head`` where the model has one) this is the per-layer variant; with a
    vocabulary decoder as ``head`` and a vocabulary id as ``target``, the
    decoded logit.

    Scores are signed, computed in the model's dtype from one forward pass
    (per chunk of ``internal_batch_size`` examples) without gradients and
    returned in float32 (float64 for a float64 model). A model with a single
    output (regression) is refused: its LogAt needs the classification
    position.

    More details can be found in the NormXLogit paper, which defines LogAt
    (Abbasi, Modarres and Pilehvar, "NormXLogit: The Head-on-Top Never Lies",
    EMNLP 2025): https://aclanthology.org/2025.emnlp-main.1769/ (arXiv:
    https://arxiv.org/abs/2411.16252)
    """

    def __init__(
        self,
        forward_func: Callable[..., Any],
        layer: nn.Module,
        head: Optional[nn.Module],
    ) -> None:
        r"""
        Args:

            forward_func (Callable): ``forward_func(inputs,
                        *additional_forward_args) -> [batch, C]`` (e.g.
                        logits; a module runs in eval mode).
            layer (torch.nn.Module): The module whose output is the final
                        hidden states ``[batch, pos, d]`` the ``head`` reads.
            head (torch.nn.Module): The model's own head applied to every
                        position, ``[batch, pos, d] -> [batch, pos, C]``,
                        ``C`` the outputs of ``forward_func``.
        """
        Attribution.__init__(self, forward_func)
        if head is None:
            raise ValueError(
                f"{type(self).__name__} built from a layer module needs head=: "
                "the model's head applied to every position, [batch, pos, d] -> "
                "[batch, pos, C]"
            )
        self.layer_module: Optional[nn.Module] = layer
        self.head: Optional[nn.Module] = head

    def _module_scores(
        self, inputs: Tensor, target: TargetType, args: Tuple[Any, ...]
    ) -> Tuple[Tensor, Tensor]:
        r"""The head on every position of the ``layer``
        module's output, at the target class, ``[batch, pos]``, and
        ``forward_func``'s outputs ``[batch, C]``."""
        name = type(self).__name__
        with HookSet() as hooks:
            stores = capture_states(hooks, self._read_modules(), False, False)
            logits = forward_logits(self.forward_func, inputs, args, name)
        states = read_states(stores, len(logits), name)
        assert self.head is not None  # checked by the constructor
        per_position = _head_outputs(self.head, states[0], logits, name)
        scores = at_target(per_position, resolve_target(target, logits))
        scores = scores.to(result_dtype(scores.dtype))  # [batch, pos]
        factor = self._module_factor(states)
        return (scores if factor is None else factor * scores), logits

    def _read_modules(self) -> List[nn.Module]:
        r"""The modules whose outputs :meth:`_module_scores` reads: the final
        states (NormXLogit adds the embedding output)."""
        assert self.layer_module is not None  # the route built from modules
        return [self.layer_module]

    def _module_factor(self, states: Tuple[Tensor, ...]) -> Optional[Tensor]:
        r"""A per-position factor ``[batch, pos]`` of the route built from
        modules (NormXLogit's norms); LogAt has none."""
        return None


def _head_outputs(
    head: nn.Module, states: Tensor, logits: Tensor, method: str
) -> Tensor:
    r"""``head(states)`` ``[batch, pos, C]``, checked to give one output per
    class of ``forward_func`` (``logits`` ``[batch, C]``, ``C > 1``: a
    single-output model's LogAt reads the classification position, which only
    the shortcut knows)."""
    outputs: Tensor = head(states)
    expected = (*states.shape[:2], logits.shape[1])
    if tuple(outputs.shape) != expected or logits.shape[1] < 2:
        raise ValueError(
            f"{method}'s head must map the states {tuple(states.shape)} to one "
            f"output per class of forward_func, {expected} with at least 2 "
            f"classes, got {tuple(outputs.shape)}"
        )
    return outputs
