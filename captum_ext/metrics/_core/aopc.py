#!/usr/bin/env python3

from typing import Callable, Optional, Union

from captum._utils.typing import TargetType, TensorOrTupleOfTensorsGeneric
from torch import Tensor

from captum_ext._utils.log import log_usage
from captum_ext.metrics._utils.curves import evaluate_curves
from captum_ext.metrics._utils.inputs import MetricCall, MetricOptions, TokenOptions
from captum_ext.metrics._utils.protocols import PerturbationProtocol, resolve_protocol
from captum_ext.metrics._utils.results import MetricResult


@log_usage()
def aopc(
    forward_func: Callable[..., Tensor],
    inputs: TensorOrTupleOfTensorsGeneric,
    attributions: TensorOrTupleOfTensorsGeneric,
    target: TargetType = None,
    additional_forward_args: Optional[object] = None,
    *,
    preset: Union[None, str, PerturbationProtocol] = None,
    tokens: Optional[TokenOptions] = None,
    internal_batch_size: Optional[int] = None,
    show_progress: bool = False,
) -> MetricResult:
    r"""
    Area over the perturbation curve (AOPC), also called comprehensiveness: the
    mean drop of the target's probability when the highest-attributed tokens
    are removed, over a grid of fractions :math:`G`:

    .. math::
        \mathrm{AOPC}(x) = \frac{1}{|G|} \sum_{g \in G}
        \left[ p(y \mid x) - p(y \mid \tilde{x}^{(g)}) \right]

    where :math:`\tilde{x}^{(g)}` is :math:`x` without its top :math:`k(g)`
    tokens. Higher is more faithful. Samek et al. (2017),
    https://arxiv.org/abs/1509.06321; DeYoung et al., ERASER (2020),
    https://arxiv.org/abs/1911.03429.

    **Default** (``preset=None``): delete the top :math:`k = \mathrm{round}(g
    \cdot n)` of the :math:`n` non-special real tokens (half to even), :math:`g
    \in \{0.1, 0.2, \dots, 1.0\}`; special tokens and padding are never removed;
    signed difference of the target's softmax probability.

    **Presets** ``"attcat"``, ``"normxlogit"``, ``"ferret"``: the papers'
    protocols, each described in :ref:`the table of presets <metric-presets>`
    (:mod:`captum_ext.metrics`).

    ``forward_func``, ``inputs``, ``attributions``, ``additional_forward_args``,
    ``tokens``, ``internal_batch_size`` and ``show_progress`` are the
    :ref:`arguments every metric shares <metric-arguments>`
    (:mod:`captum_ext.metrics`).

    Args:

        target (int, list or Tensor, optional): the class whose probability drop
                is measured, one for all or one per example. Default: None (the
                predicted class)
        preset (str or PerturbationProtocol, optional): None (the default
                above), ``"attcat"``, ``"normxlogit"``, ``"ferret"``, or a
                :class:`~captum_ext.metrics.PerturbationProtocol`. Default: None

    Returns:
        MetricResult: ``score`` ``[batch]``, ``curve`` ``[batch, levels]`` (the
        probability differences) and ``levels``.

    Examples::

        >>> forward = captum_ext.classifier_forward(model)
        >>> attr = method.attribute(ids, additional_forward_args=(mask,))
        >>> aopc(forward, ids, attr, additional_forward_args=(mask,)).score
    """
    curves = evaluate_curves(
        MetricCall(forward_func, inputs, attributions, target, additional_forward_args),
        MetricOptions(tokens, internal_batch_size, show_progress),
        resolve_protocol("aopc", preset, PerturbationProtocol),
        keep_top=(False,),
        desc="AOPC",
    )
    drop = curves.probability_drop()
    if curves.protocol.absolute:
        drop = drop.abs()
    return curves.result(drop, curves.mean(drop))
