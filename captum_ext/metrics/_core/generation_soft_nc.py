#!/usr/bin/env python3

from typing import Callable, Optional

from captum._utils.typing import TensorOrTupleOfTensorsGeneric
from torch import Tensor

from captum_ext._utils.log import log_usage
from captum_ext.metrics._utils.generated_text_inputs import GenerationCall
from captum_ext.metrics._utils.generation_results import GenerationMetricResult
from captum_ext.metrics._utils.inputs import MetricCall, TokenOptions
from captum_ext.metrics._utils.soft_erasure import evaluate_soft_erasure


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
    <soft-erasure>`.

    Args:

        forward_func (Callable): a causal LM's ``forward_func(input_ids, attention_mask)
                -> logits [batch, pos, vocab]``: :func:`captum_ext.causal_lm_forward`
                ``(model)`` (position ids from the mask, so re-packed prompts get their
                own positions).
        inputs (Tensor): prompt token ids ``[batch, P]``, padded on the left.
        attributions (Tensor): ``[batch, T, P]``, one row per target token (a method's
                result on a causal LM; only the prompt's columns), or ``[batch, P]``,
                one ranking for the whole continuation (e.g. Captum's ``seq_attr``).
        target (Tensor): the continuation's ids ``[batch, T]``, right-padded with -100.
        additional_forward_args (Tensor or tuple, optional): ``attention_mask`` or
                ``(attention_mask,)``. Default: None (no padding)
        n_samples (int, optional): Bernoulli draws per target. Default: 1
        seed (int, optional): seed of the draws. Default: 0
        tokens (TokenOptions, optional): the special ids (BOS, chat-template tokens:
                never perturbed, ranked or counted) and, for replacement, the
                replacement id as ``mask_token_id``. Default: None (no special position)
        internal_batch_size (int, optional): most rows (prompts, or perturbed prompt x
                target rows) per forward pass; results do not depend on it. Default:
                None (the batch size)
        show_progress (bool, optional): progress on stderr: a bar on a terminal, plain
                lines with the time left in a log. Default: False

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
