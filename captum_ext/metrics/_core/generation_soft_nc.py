#!/usr/bin/env python3

from typing import Callable, Optional

from captum._utils.typing import TensorOrTupleOfTensorsGeneric
from torch import Tensor

from captum_ext._utils.log import log_usage
from captum_ext.metrics._utils.generation import (
    evaluate_soft_erasure,
    GenerationCall,
    GenerationMetricResult,
)
from captum_ext.metrics._utils.inputs import MetricCall, TokenOptions


@log_usage()
def generation_soft_nc(
    forward_func: Callable[..., Tensor],
    inputs: TensorOrTupleOfTensorsGeneric,
    attributions: TensorOrTupleOfTensorsGeneric,
    target: Tensor,
    additional_forward_args: Optional[object] = None,
    *,
    n_samples: int = 1,
    seed: int = 0,
    tokens: Optional[TokenOptions] = None,
    internal_batch_size: Optional[int] = None,
    show_progress: bool = False,
) -> GenerationMetricResult:
    r"""
    Soft normalised comprehensiveness (Soft-NC) of an explanation of generated
    text: the drop of each target token's probability when the prompt's word
    embeddings are zeroed element-wise with probability equal to their
    normalised importance, relative to the drop of the empty prompt:

    .. math::
        \mathrm{Soft\text{-}C}(x, x') = \max\left(0,\; p(x) - p(x')\right),
        \qquad e_i \sim \mathrm{Bernoulli}(1 - s_i)

    .. math::
        \mathrm{Soft\text{-}NC}(x, x') = \frac{\mathrm{Soft\text{-}C}(x, x')}
        {1 - S(x, 0)}

    Higher is more faithful (erasing the important tokens more strongly
    lowers :math:`p` more).

    :math:`s_i` is the min-max normalised attribution of prompt token
    :math:`i` and :math:`S(x, 0)` the sufficiency of the empty prompt; the
    draws, the normaliser, the paper and ``forward_func``: :ref:`soft erasure
    <soft-erasure>`; the other arguments: :ref:`arguments every generation
    metric shares <generation-metric-arguments>` (:mod:`captum_ext.metrics`).

    Args:

        n_samples (int, optional): Bernoulli draws per target. Default: 1
        seed (int, optional): seed of the draws. Default: 0

    Returns:
        GenerationMetricResult: ``score`` ``[batch, T]``, ``sequence``
        ``[batch]``, ``curve`` ``[batch, T, n_samples]`` (one value per draw)
        and ``levels`` None.
    """
    soft = evaluate_soft_erasure(
        MetricCall(forward_func, inputs, attributions, target, additional_forward_args),
        GenerationCall(tokens, internal_batch_size, show_progress),
        keep_important=False,
        n_samples=n_samples,
        seed=seed,
        desc="Soft-NC",
    )
    ratio = soft.comprehensiveness_ratio()
    return soft.result(ratio.clamp(0, 1))
