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
def log_odds(
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
    Log-odds (LOdds): the mean log-ratio of the target's probability after and
    before the highest-attributed tokens are removed or replaced:

    .. math::
        \mathrm{LOdds}(x) = \frac{1}{|G|} \sum_{g \in G}
        \log \frac{p(y \mid \tilde{x}^{(g)})}{p(y \mid x)}

    Lower (more negative) is more faithful. Shrikumar et al. (2017),
    https://arxiv.org/abs/1704.02685; Chen et al. (2020),
    https://arxiv.org/abs/2004.02015.

    **Default** (``preset=None``): as :func:`aopc`'s default: delete the top
    :math:`k = \mathrm{round}(g \cdot n)` of the :math:`n` non-special real
    tokens, :math:`g \in \{0.1, \dots, 1.0\}`.

    **Presets** ``"attcat"``: the papers' protocols, each described in
    :ref:`the table of presets <metric-presets>` (:mod:`captum_ext.metrics`).

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
        target (int, list or Tensor, optional): the class whose log-probability
                ratio is taken, one for all or one per example. Default: None
                (the predicted class)
        additional_forward_args (Tensor or tuple, optional): ``attention_mask`` or
                ``(attention_mask, *rest)``, passed to ``forward_func`` after the ids
                (the plausibility metrics read only the mask); ``[batch, pos]`` tensors
                follow their tokens when tokens are deleted. Default: None (no padding)
        preset (str or PerturbationProtocol, optional): None (the default
                above), ``"attcat"``, or a
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
        MetricResult: ``score`` ``[batch]``, ``curve`` ``[batch, levels]`` (the
        log-ratios) and ``levels``.
    """
    curves = evaluate_curves(
        MetricCall(forward_func, inputs, attributions, target, additional_forward_args),
        MetricOptions(tokens, internal_batch_size, show_progress),
        resolve_protocol("log_odds", preset, PerturbationProtocol),
        keep_top=(False,),
        desc="log-odds",
    )
    ratio = curves.log_ratio()
    return curves.result(ratio, curves.mean(ratio))
