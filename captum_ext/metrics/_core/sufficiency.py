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
def sufficiency(
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
    Sufficiency: the mean drop of the target's probability when *only* the
    highest-attributed tokens are kept:

    .. math::
        \mathrm{Suff}(x) = \frac{1}{|G|} \sum_{g \in G}
        \left[ p(y \mid x) - p(y \mid x^{(g)}_{\mathrm{top}}) \right]

    where :math:`x^{(g)}_{\mathrm{top}}` keeps the top :math:`k(g)` tokens and
    perturbs the others. Lower is more faithful; keeping every token gives 0.
    DeYoung et al., ERASER (2020), https://arxiv.org/abs/1911.03429.

    **Default** (``preset=None``): keep the top :math:`k = \mathrm{round}(g
    \cdot n)` of the :math:`n` non-special real tokens and delete the other
    non-special ones, :math:`g \in \{0.1, \dots, 1.0\}`; special tokens are
    always kept; signed.

    **Presets**:

    - ``"normxlogit"`` (NormXLogit, Abbasi et al., EMNLP 2025,
      https://github.com/sinaabbasi1/NormXLogit): :math:`g \in \{0.1, \dots,
      0.9\}`; :math:`k = \lfloor g \cdot n \rfloor` with :math:`n` counting
      special tokens; every real token but the first ([CLS]) outside the top
      :math:`k` is replaced by [MASK], [SEP] included, attention mask kept
      (``mask_token_id`` required); signed.
    - ``"ferret"`` (``aopc_suff`` of ferret 0.5,
      https://github.com/g8a9/ferret): thresholds ``np.arange(0.1, 1.1, 0.1)``;
      the kept tokens are the positive-scored ones among the top
      :math:`\lfloor g \cdot n \rfloor` non-special tokens; every other
      non-special token is deleted; levels keeping nothing or the same tokens
      as the previous level are skipped (NaN, left out of the mean); score 1
      when every level is skipped; signed.

    Args:

    {common_args}

    Returns:
        MetricResult: ``score`` ``[batch]``, ``curve`` ``[batch, levels]`` (the
        probability differences) and ``levels``.
    """
    protocol = resolve_protocol(
        "sufficiency", preset, levels=levels, mode=mode, attend_replaced=attend_replaced
    )
    curves = evaluate_curves(
        forward_func,
        inputs,
        attributions,
        target,
        additional_forward_args,
        protocol,
        keep_top=(True,),
        mask_token_id=mask_token_id,
        pad_token_id=pad_token_id,
        special_tokens_mask=special_tokens_mask,
        special_token_ids=special_token_ids,
        max_examples_per_batch=max_examples_per_batch,
        show_progress=show_progress,
        desc="sufficiency",
    )
    drop = curves.target_base().exp()[:, None] - curves.target_curve().exp()
    return curves.result(drop, curves.mean(drop))
