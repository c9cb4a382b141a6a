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

    ``forward_func``, ``inputs``, ``attributions``, ``additional_forward_args``,
    ``tokens``, ``internal_batch_size`` and ``show_progress`` are the
    :ref:`arguments every metric shares <metric-arguments>`
    (:mod:`captum_ext.metrics`).

    Args:

        target (int, list or Tensor, optional): the class the accuracy is taken
                against when ``labels`` is None, one for all or one per example.
                Default: None (the predicted class)
        preset (str or PerturbationProtocol, optional): None (the default
                above), ``"decoded"``, or a
                :class:`~captum_ext.metrics.PerturbationProtocol`. Default: None
        labels (Tensor or list of int, optional): gold labels ``[batch]`` the
                accuracy is taken against. Default: None (``target``)

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
