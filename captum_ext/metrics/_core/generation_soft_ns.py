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
def generation_soft_ns(
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
    Soft normalised sufficiency (Soft-NS) of an explanation of generated text:
    how well each target token's probability survives when the prompt's word
    embeddings are *kept* element-wise with probability equal to their
    normalised importance, relative to the empty prompt:

    .. math::
        \mathrm{Soft\text{-}S}(x, x') = 1 - \max\left(0,\; p(x) - p(x')\right),
        \qquad e_i \sim \mathrm{Bernoulli}(s_i)

    .. math::
        \mathrm{Soft\text{-}NS}(x, x') = \frac{\mathrm{Soft\text{-}S}(x, x') -
        S(x, 0)}{1 - S(x, 0)}

    Higher is more faithful (the important tokens alone keep :math:`p`).

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
        keep_important=True,
        n_samples=n_samples,
        seed=seed,
        desc="Soft-NS",
    )
    ratio = soft.comprehensiveness_ratio()
    return soft.result((1 - ratio).clamp(0, 1))
