#!/usr/bin/env python3

from typing import Callable, Iterable, Optional, Sequence, Union

from captum._utils.typing import TargetType, TensorOrTupleOfTensorsGeneric
from captum.log import log_usage
from torch import Tensor

from captum_ext.metrics._utils.curves import evaluate_curves
from captum_ext.metrics._utils.docs import with_common_args
from captum_ext.metrics._utils.protocols import PerturbationProtocol, resolve_protocol
from captum_ext.metrics._utils.results import MetricResult


@log_usage()
@with_common_args
def log_odds(
    forward_func: Callable[..., Tensor],
    inputs: TensorOrTupleOfTensorsGeneric,
    attributions: TensorOrTupleOfTensorsGeneric,
    target: TargetType = None,
    additional_forward_args: Optional[object] = None,
    *,
    preset: Union[None, str, PerturbationProtocol] = None,
    levels: Optional[Sequence[float]] = None,
    mode: Optional[str] = None,
    attend_replaced: Optional[bool] = None,
    mask_token_id: Optional[int] = None,
    pad_token_id: Optional[int] = None,
    special_tokens_mask: Optional[Tensor] = None,
    special_token_ids: Optional[Iterable[int]] = None,
    max_examples_per_batch: Optional[int] = None,
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

    **Presets**:

    - ``"attcat"`` (AttCAT, Qiang et al., NeurIPS 2022, Eq. 14,
      https://github.com/qiangyao1988/AttCAT, ``cal_logodds``): the AOPC
      ``"attcat"`` protocol (nine levels ``np.linspace(0, 1, 10)[1:]``,
      :math:`k = \mathrm{round}(g \cdot n)` with :math:`n` counting special
      tokens, special tokens and the lowest-ranked real token never replaced,
      examples with :math:`n < 10` NaN) with [PAD] replacement and the
      attention mask left on (``pad_token_id`` required). The reference tracks
      the gold label: pass ``target=labels``.

    Args:

    {common_args}

    Returns:
        MetricResult: ``score`` ``[batch]``, ``curve`` ``[batch, levels]`` (the
        log-ratios) and ``levels``.
    """
    protocol = resolve_protocol(
        "log_odds", preset, levels=levels, mode=mode, attend_replaced=attend_replaced
    )
    curves = evaluate_curves(
        forward_func,
        inputs,
        attributions,
        target,
        additional_forward_args,
        protocol,
        keep_top=(False,),
        mask_token_id=mask_token_id,
        pad_token_id=pad_token_id,
        special_tokens_mask=special_tokens_mask,
        special_token_ids=special_token_ids,
        max_examples_per_batch=max_examples_per_batch,
        show_progress=show_progress,
        desc="log-odds",
    )
    ratio = curves.target_curve() - curves.target_base()[:, None]
    return curves.result(ratio, curves.mean(ratio))
