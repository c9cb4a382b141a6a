#!/usr/bin/env python3

import math
from typing import Callable, Optional, Sequence, Union

import torch
from captum._utils.typing import TargetType, TensorOrTupleOfTensorsGeneric
from torch import Tensor

from captum_ext._utils.log import log_usage
from captum_ext.metrics._utils.curves import Curves, evaluate_curves
from captum_ext.metrics._utils.inputs import MetricCall, MetricOptions, TokenOptions
from captum_ext.metrics._utils.protocols import PerturbationProtocol, resolve_protocol
from captum_ext.metrics._utils.results import HidingRevealingResult, MetricResult


@log_usage()
def hiding_revealing(
    forward_func: Callable[..., Tensor],
    inputs: TensorOrTupleOfTensorsGeneric,
    attributions: TensorOrTupleOfTensorsGeneric,
    target: TargetType = None,
    additional_forward_args: Optional[object] = None,
    *,
    labels: Optional[Union[Tensor, Sequence[int]]] = None,
    preset: Union[None, str, PerturbationProtocol] = None,
    tokens: Optional[TokenOptions] = None,
    internal_batch_size: Optional[int] = None,
    show_progress: bool = False,
) -> HidingRevealingResult:
    r"""
    Hiding and revealing curves: the accuracy of the model as the
    highest-attributed tokens are hidden one fraction at a time (hiding), and as
    they are revealed one fraction at a time starting from an input with every
    token hidden (revealing). Each is summarised by the area under its curve,
    by the trapezoid rule over ``levels``:

    .. math::
        \mathrm{AUC} = \sum_{j} \frac{g_{j+1} - g_j}{2}
        \left[ a(g_j) + a(g_{j+1}) \right],
        \quad a(g) = \mathbb{1}\left[\arg\max_c f_c(\tilde{x}^{(g)}) = y\right]

    Per example :math:`a(g)` is 0 or 1; the mean over examples is the accuracy
    curve, and the mean of the AUCs is its AUC. Hiding: lower is more faithful;
    revealing: higher is. Hou & Castanon, *Decoding Layer Saliency in Language
    Transformers*, ICML 2023.

    **Default** (``preset=None``): :math:`g \in \{0, 0.1, \dots, 1.0\}`; the top
    :math:`k = \mathrm{round}(g \cdot n)` of the :math:`n` non-special real
    tokens are deleted (hiding) or are the only non-special tokens not deleted
    (revealing); special tokens are never hidden; accuracy against ``labels``,
    or against ``target`` (by default the model's prediction on the
    unperturbed input) when ``labels`` is None.

    **Presets**:

    - ``"decoded"`` (Hou & Castanon, 2023; no reference code was published):
      :math:`g \in \{0, 0.1, \dots, 1.0\}` of the real length :math:`n`
      (special tokens counted), :math:`k = \mathrm{round}(g \cdot n)` capped at
      the number of non-special tokens; hidden tokens are replaced by [MASK]
      *and* get attention mask 0 (``tokens.mask_token_id`` required); special tokens
      are never hidden; most important first; accuracy against gold
      ``labels`` (required). The grid, the rounding and the special-token rule
      are the project's reading of the paper.

    Args:

        forward_func (Callable): ``forward_func(input_ids, attention_mask, *rest) ->
                logits [batch, C]``, e.g. :func:`captum_ext.classifier_forward`; a
                module runs in eval mode. Run on the inputs (for the predicted class and
                the number of classes) and, by the perturbation-curve metrics, on every
                perturbed level.
        inputs (Tensor): token ids ``[batch, pos]``, padded left or right.
        attributions (Tensor): one score per token ``[batch, pos]``; higher = more
                important for ``target``, where the metric has one. Sum embedding-level
                attributions over their last dimension first.
        target (int, list or Tensor, optional): the class the accuracy is taken
                against when ``labels`` is None, one for all or one per example.
                Default: None (the predicted class)
        additional_forward_args (Tensor or tuple, optional): ``attention_mask`` or
                ``(attention_mask, *rest)``, passed to ``forward_func`` after the ids
                (the plausibility metrics read only the mask); ``[batch, pos]`` tensors
                follow their tokens when tokens are deleted. Default: None (no padding)
        labels (Tensor or list of int, optional): gold labels ``[batch]`` the
                accuracy is taken against. Default: None (``target``)
        preset (str or PerturbationProtocol, optional): None (the default
                above), ``"decoded"``, or a
                :class:`~captum_ext.metrics.PerturbationProtocol`. Default: None
        tokens (TokenOptions, optional): the [MASK], [PAD] and special ids
                (:class:`TokenOptions`). Special positions are never perturbed, ranked
                or counted, unless a preset says otherwise. Default: None (no special
                position)
        internal_batch_size (int, optional): most rows per forward pass: examples, or
                (example, level) pairs of every curve; results do not depend on it.
                Default: None (the batch size)
        show_progress (bool, optional): progress on stderr: a bar on a terminal, plain
                lines with the time left in a log. Default: False

    Returns:
        HidingRevealingResult: ``hiding`` and ``revealing``, each a
        :class:`MetricResult` whose ``score`` is the AUC ``[batch]`` and
        ``curve`` the correctness ``[batch, levels]``.
    """
    if preset == "decoded" and labels is None:
        raise ValueError(
            "preset='decoded' measures accuracy against gold labels: pass labels="
        )
    curves = evaluate_curves(
        MetricCall(forward_func, inputs, attributions, target, additional_forward_args),
        MetricOptions(tokens, internal_batch_size, show_progress),
        resolve_protocol("hiding_revealing", preset, PerturbationProtocol),
        keep_top=(False, True),
        desc="hiding/revealing",
    )
    gold = curves.target if labels is None else _labels(labels, curves.target)
    return HidingRevealingResult(
        _accuracy_auc(curves, 0, gold), _accuracy_auc(curves, 1, gold)
    )


def _labels(labels: Union[Tensor, Sequence[int]], target: Tensor) -> Tensor:
    gold = torch.as_tensor(labels, device=target.device)
    if gold.shape != target.shape or gold.dtype.is_floating_point:
        raise ValueError(
            f"labels must be {target.shape[0]} integer class indices, got "
            f"{tuple(gold.shape)} of {gold.dtype}"
        )
    return gold.long()


def _accuracy_auc(curves: Curves, index: int, gold: Tensor) -> MetricResult:
    log_probs = curves.curves[index]
    correct = (log_probs.argmax(-1) == gold[:, None]).double()
    correct = torch.where(curves.plans[index].active, correct, float("nan"))
    levels = torch.tensor(curves.protocol.levels, dtype=torch.float64)
    auc = torch.trapezoid(correct, x=levels.to(correct.device), dim=1)
    return curves.result(correct, torch.where(curves.defined(index), auc, math.nan))
