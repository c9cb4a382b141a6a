#!/usr/bin/env python3

from typing import Callable, Dict, Iterable, List, Optional, Union

import torch
from captum._utils.progress import NullProgress
from captum._utils.typing import TargetType, TensorOrTupleOfTensorsGeneric
from captum.log import log_usage
from torch import Tensor

from captum_ext._utils.common import resolve_target
from captum_ext.metrics._utils.batching import progress_bar, Runner
from captum_ext.metrics._utils.inputs import (
    check_attributions,
    parse_inputs,
    TokenInputs,
)
from captum_ext.metrics._utils.ranking import descending_order, kendall_tau_b

AttributionFn = Callable[[Tensor], Tensor]

_PRESETS: Dict[Optional[str], Dict[str, object]] = {
    None: {"other": "all", "compare": "argsort", "specials": False},
    "attcat": {"other": "reference", "compare": "argsort", "specials": True},
}


@log_usage()
def kendall_tau(
    forward_func: Callable[..., Tensor],
    inputs: TensorOrTupleOfTensorsGeneric,
    attributions: Union[Tensor, AttributionFn],
    target: TargetType = None,
    additional_forward_args: Optional[object] = None,
    *,
    other: Optional[str] = None,
    compare: Optional[str] = None,
    preset: Optional[str] = None,
    special_tokens_mask: Optional[Tensor] = None,
    special_token_ids: Optional[Iterable[int]] = None,
    max_examples_per_batch: Optional[int] = None,
    show_progress: bool = False,
) -> Tensor:
    r"""
    Class-vs-other-classes confidence: Kendall's :math:`\tau` between the token
    ranking an attribution method gives for the target class :math:`c` and the
    ranking it gives for another class :math:`c'`:

    .. math::
        \tau_{c, c'}(x) = \tau\left(\mathrm{argsort}(-S_c),\;
        \mathrm{argsort}(-S_{c'})\right)

    A class-specific explanation ranks tokens differently for different
    classes, so lower is better. :math:`\tau` is :math:`\tau_b`
    (``scipy.stats.kendalltau``'s default, ties accounted for). AttCAT, Qiang et
    al., NeurIPS 2022, Eq. 15, https://github.com/qiangyao1988/AttCAT
    (``cal_kendaltau``).

    **Default** (``preset=None``): the mean of :math:`\tau_{c, c'}` over all
    classes :math:`c' \neq c`; :math:`\tau` of the two index permutations (as
    the reference); over the real tokens, special tokens left out when
    ``special_tokens_mask`` or ``special_token_ids`` is given.

    **Presets**:

    - ``"attcat"``: the reference code: one other class, :math:`c' = 1 - c`
      for two classes, else :math:`c' = 1` if :math:`c = 0` else :math:`c - 1`;
      every real token, special tokens included. The reference explains the
      gold label: pass ``target=labels``.

    Args:

        forward_func (Callable): ``forward_func(input_ids, attention_mask,
                *rest) -> logits [batch, C]``; run once, for the number of
                classes and, when ``target`` is None, the predicted class.
        inputs (Tensor): token ids ``[batch, pos]``, padded left or right.
        attributions (Tensor or Callable): the scores for every class, a tensor
                ``[batch, C, pos]``, or a function ``target -> [batch, pos]``
                taking a class index per example (``[batch]`` long tensor),
                e.g. ``lambda t: method.attribute(ids, target=t, ...)``. It is
                called once per class needed (every class for ``other="all"``,
                two for ``"reference"``), on the whole batch.
        target (int, list or Tensor, optional): the class :math:`c`. None: the
                model's predicted class. Default: None
        additional_forward_args (Tensor or tuple, optional): ``attention_mask``
                or ``(attention_mask, token_type_ids, ...)`` for
                ``forward_func``; the mask marks the real tokens. Default: None
        other (str, optional): ``"all"`` (mean over every :math:`c' \neq c`)
                or ``"reference"`` (the reference code's single :math:`c'`).
                Default: the preset's.
        compare (str, optional): ``"argsort"``: :math:`\tau` between the index
                permutations, as the reference; ``"scores"``: :math:`\tau_b`
                between the two score vectors (a rank correlation of the
                scores). Default: the preset's.
        preset (str, optional): None or ``"attcat"``. Default: None
        special_tokens_mask (Tensor, optional): ``[batch, pos]``, 1 on positions
                left out (not with ``preset="attcat"``). Default: None
        special_token_ids (iterable of int, optional): ids left out wherever
                they occur (not with ``preset="attcat"``). Default: None
        max_examples_per_batch (int, optional): most examples per forward pass.
                Default: None (the whole batch)
        show_progress (bool, optional): a progress bar over the classes whose
                attributions are computed. Default: False

    Returns:
        Tensor: ``[batch]`` :math:`\tau` per example; NaN where it is undefined
        (fewer than two tokens, or all scores tied with ``"scores"``).
    """
    settings = _settings(preset, other, compare)
    parsed = parse_inputs(
        inputs,
        additional_forward_args,
        None if settings["specials"] else special_tokens_mask,
        None if settings["specials"] else special_token_ids,
    )
    runner = Runner(forward_func, parsed, max_examples_per_batch, NullProgress())
    with torch.no_grad():
        base = runner.base()
    num_classes = base.shape[1]
    if num_classes < 2:
        raise ValueError("kendall_tau compares classes: the model has one output")
    classes = resolve_target(target, base)
    include = parsed.valid if settings["specials"] else parsed.content
    if settings["other"] == "reference":
        others = _reference_other(classes, num_classes)
        scores = _class_scores(
            attributions, parsed, [classes, others], num_classes, show_progress
        )
        tau = _tau(scores[0], scores[1], include, settings["compare"])
        return tau.to(runner.dtype)
    every = [torch.full_like(classes, c) for c in range(num_classes)]
    scores = _class_scores(attributions, parsed, every, num_classes, show_progress)
    own = scores[classes, torch.arange(len(classes), device=classes.device)]
    taus = torch.stack(
        [
            _tau(own, scores[c], include, settings["compare"])
            for c in range(num_classes)
        ],
        dim=1,
    )
    is_other = classes[:, None] != torch.arange(num_classes, device=classes.device)
    mean = torch.where(is_other, taus, 0.0).sum(1) / (num_classes - 1)
    return mean.to(runner.dtype)


def _settings(
    preset: Optional[str], other: Optional[str], compare: Optional[str]
) -> Dict[str, object]:
    if preset not in _PRESETS:
        raise ValueError(
            f"kendall_tau has no preset {preset!r}; available: None, 'attcat'"
        )
    settings = dict(_PRESETS[preset])
    for name, value, allowed in (
        ("other", other, ("all", "reference")),
        ("compare", compare, ("argsort", "scores")),
    ):
        if value is not None:
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
            settings[name] = value
    return settings


def _reference_other(classes: Tensor, num_classes: int) -> Tensor:
    if num_classes == 2:
        return 1 - classes
    return torch.where(classes == 0, torch.ones_like(classes), classes - 1)


def _class_scores(
    attributions: Union[Tensor, AttributionFn],
    parsed: TokenInputs,
    targets: List[Tensor],
    num_classes: int,
    show_progress: bool,
) -> Tensor:
    r"""``[len(targets), batch, pos]``: the scores for each class index tensor."""
    if isinstance(attributions, Tensor):
        table = _check_table(attributions, parsed, num_classes)
        rows = torch.arange(parsed.batch_size, device=table.device)
        return torch.stack([table[rows, t] for t in targets])
    if not callable(attributions):
        raise TypeError(
            "attributions must be a [batch, classes, pos] tensor or a callable "
            f"target -> [batch, pos], got {type(attributions)}"
        )
    scores = []
    with progress_bar(show_progress, "Kendall tau", len(targets)) as bar:
        for t in targets:
            with torch.no_grad():
                attr = attributions(t)
            scores.append(check_attributions(attr, parsed, "attributions(target)"))
            bar.update()
    return torch.stack(scores)


def _check_table(attributions: Tensor, parsed: TokenInputs, num_classes: int) -> Tensor:
    batch, pos = parsed.input_ids.shape
    shape = tuple(attributions.shape)
    if shape != (batch, num_classes, pos):
        raise ValueError(
            "kendall_tau needs the scores of every class: a tensor [batch, "
            f"classes, pos] = [{batch}, {num_classes}, {pos}] or a callable target -> "
            f"[batch, pos]; got a tensor of shape {shape}"
        )
    return torch.stack(
        [
            check_attributions(attributions[:, c], parsed, f"attributions[:, {c}]")
            for c in range(shape[1])
        ],
        dim=1,
    )


def _tau(first: Tensor, second: Tensor, include: Tensor, compare: object) -> Tensor:
    if compare == "scores":
        return kendall_tau_b(first, second, include)
    # The reference correlates the two permutations argsort(-S) themselves:
    # entry r of each is the position ranked r-th.
    positions = torch.arange(include.shape[1], device=include.device)
    ranked = positions[None, :] < include.sum(1, keepdim=True)
    return kendall_tau_b(
        descending_order(first, include), descending_order(second, include), ranked
    )
