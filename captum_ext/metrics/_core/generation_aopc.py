#!/usr/bin/env python3

from typing import Callable, Optional, Union

from captum._utils.typing import TensorOrTupleOfTensorsGeneric
from torch import Tensor

from captum_ext._utils.log import log_usage
from captum_ext.metrics._utils.generated_text_inputs import GenerationCall
from captum_ext.metrics._utils.generation_results import GenerationMetricResult
from captum_ext.metrics._utils.hard_curves import evaluate_hard_curves
from captum_ext.metrics._utils.inputs import MetricCall, TokenOptions
from captum_ext.metrics._utils.protocols import PerturbationProtocol, resolve_protocol


@log_usage()
def generation_aopc(
    forward_func: Callable[..., Tensor],
    inputs: TensorOrTupleOfTensorsGeneric,
    attributions: TensorOrTupleOfTensorsGeneric,
    target: Tensor,
    additional_forward_args: Optional[object] = None,
    *,
    preset: Union[None, str, PerturbationProtocol] = None,
    tokens: Optional[TokenOptions] = None,
    internal_batch_size: Optional[int] = None,
    show_progress: bool = False,
) -> GenerationMetricResult:
    r"""
    Comprehensiveness / AOPC of an explanation of generated text: the mean drop
    of each target token's teacher-forced probability when the prompt's
    highest-attributed tokens are removed, over a grid of fractions :math:`G`:

    .. math::
        \mathrm{AOPC}_t(x) = \frac{1}{|G|} \sum_{g \in G}
        \left[ p(y_t \mid x, y_{<t}) - p(y_t \mid \tilde{x}^{(g)}_t, y_{<t}) \right]

    where :math:`\tilde{x}^{(g)}_t` is the prompt without its top :math:`k(g)`
    tokens by the attribution row of :math:`y_t` (or by the one ranking of a
    ``[batch, P]`` attribution); the continuation :math:`y_{<t}` is never
    perturbed. Higher is more faithful. Samek et al. (2017),
    https://arxiv.org/abs/1509.06321; DeYoung et al., ERASER (2020),
    https://arxiv.org/abs/1911.03429. ``sequence`` sums the targets' values.

    **Default** (``preset=None``): delete the top :math:`k = \mathrm{round}(g
    \cdot n)` of the :math:`n` non-special prompt tokens, :math:`g \in \{0.1,
    \dots, 1.0\}`, re-pack the prompt (still left-padded) and recompute the
    positions (``causal_lm_forward`` counts attended tokens); special tokens
    (BOS, a chat template's tokens: ``tokens``) are never removed, and a prompt
    needs one when every other token is deleted. Replacement instead of
    deletion: a :class:`~captum_ext.metrics.PerturbationProtocol` with
    ``mode="mask"`` and the replacement id as ``tokens.mask_token_id`` (any id:
    a causal LM has no [MASK]).

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
        preset (str or PerturbationProtocol, optional): None (the default
                above) or a :class:`~captum_ext.metrics.PerturbationProtocol`.
                Default: None
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
        ``[batch]``, ``curve`` ``[batch, T, levels]`` (the probability drops)
        and ``levels``.

    Examples::

        >>> forward = captum_ext.causal_lm_forward(model)
        >>> attr = method.attribute(ids, target=target, additional_forward_args=(mask,))
        >>> generation_aopc(forward, ids, attr, target, (mask,)).sequence
    """
    curves = evaluate_hard_curves(
        MetricCall(forward_func, inputs, attributions, target, additional_forward_args),
        GenerationCall(tokens, internal_batch_size, show_progress),
        resolve_protocol("generation_aopc", preset, PerturbationProtocol),
        keep_top=False,
        desc="generation AOPC",
    )
    return curves.result(curves.probability_drop())
