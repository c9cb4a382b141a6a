#!/usr/bin/env python3

from typing import Callable, List, Optional, Union

import torch
from captum._utils.typing import TargetType, TensorOrTupleOfTensorsGeneric
from torch import Tensor

from captum_ext._utils.log import log_usage
from captum_ext._utils.target import resolve_target
from captum_ext.metrics._utils.forward_runner import progress_bar, Runner
from captum_ext.metrics._utils.inputs import (
    check_attributions,
    parse_inputs,
    TokenInputs,
    TokenOptions,
)
from captum_ext.metrics._utils.protocols import KendallProtocol, resolve_protocol
from captum_ext.metrics._utils.ranking import descending_order, kendall_tau_b

AttributionFn = Callable[[Tensor], Tensor]


@log_usage()
def kendall_tau(
    forward_func: Callable[..., Tensor],
    inputs: TensorOrTupleOfTensorsGeneric,
    attributions: Union[Tensor, AttributionFn],
    target: TargetType = None,
    additional_forward_args: Optional[object] = None,
    *,
    preset: Union[None, str, KendallProtocol] = None,
    tokens: Optional[TokenOptions] = None,
    internal_batch_size: Optional[int] = None,
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
    the reference); over the real tokens, the special tokens of ``tokens`` left
    out.

    **Presets**:

    - ``"attcat"``: the reference code: one other class, :math:`c' = 1 - c`
      for two classes, else :math:`c' = 1` if :math:`c = 0` else :math:`c - 1`;
      every real token, special tokens included. The reference explains the
      gold label: pass ``target=labels``.

    Args:

        forward_func (Callable): ``forward_func(input_ids, attention_mask, *rest) ->
                logits [batch, C]``, e.g. :func:`captum_ext.classifier_forward`; a
                module runs in eval mode. Run on the inputs (for the predicted class and
                the number of classes) and, by the perturbation-curve metrics, on every
                perturbed level.
        inputs (Tensor): token ids ``[batch, pos]``, padded left or right.
        attributions (Tensor or Callable): the scores for every class, a tensor
                ``[batch, C, pos]``, or a function ``target -> [batch, pos]``
                taking a class index per example (``[batch]`` long tensor),
                e.g. ``lambda t: method.attribute(ids, target=t, ...)``. It is
                called once per class needed (every class for ``other="all"``,
                two for ``"reference"``), on the whole batch.
        target (int, list or Tensor, optional): the class :math:`c`. None: the
                model's predicted class. Default: None
        additional_forward_args (Tensor or tuple, optional): ``attention_mask`` or
                ``(attention_mask, *rest)``, passed to ``forward_func`` after the ids
                (the plausibility metrics read only the mask); ``[batch, pos]`` tensors
                follow their tokens when tokens are deleted. Default: None (no padding)
        preset (str or KendallProtocol, optional): None (the default above),
                ``"attcat"``, or a :class:`~captum_ext.metrics.KendallProtocol`
                (e.g. ``compare="scores"`` for :math:`\tau_b` between the two
                score vectors). Default: None
        tokens (TokenOptions, optional): the [MASK], [PAD] and special ids
                (:class:`TokenOptions`). Special positions are never perturbed, ranked
                or counted, unless a preset says otherwise. Default: None (no special
                position)
        internal_batch_size (int, optional): most rows per forward pass: examples, or
                (example, level) pairs of every curve; results do not depend on it.
                Default: None (the batch size)
        show_progress (bool, optional): a progress bar over the classes whose
                attributions are computed. Default: False

    Returns:
        Tensor: ``[batch]`` :math:`\tau` per example; NaN where it is undefined
        (fewer than two tokens, or all scores tied with ``"scores"``).
    """
    protocol = resolve_protocol("kendall_tau", preset, KendallProtocol)
    parsed = parse_inputs(inputs, additional_forward_args, tokens)
    runner = Runner(
        forward_func, parsed, internal_batch_size, progress_bar(False, "", 0)
    )
    with torch.no_grad():
        base = runner.base()
    num_classes = base.shape[1]
    if num_classes < 2:
        raise ValueError("kendall_tau compares classes: the model has one output")
    classes = resolve_target(target, base)
    include = parsed.valid if protocol.count_specials else parsed.content
    if protocol.other == "reference":
        others = _reference_other(classes, num_classes)
        scores = _class_scores(
            attributions, parsed, [classes, others], num_classes, show_progress
        )
        return _tau(scores[0], scores[1], include, protocol.compare).float()
    every = [torch.full_like(classes, c) for c in range(num_classes)]
    scores = _class_scores(attributions, parsed, every, num_classes, show_progress)
    own = scores[classes, torch.arange(len(classes), device=classes.device)]
    taus = torch.stack(
        [_tau(own, scores[c], include, protocol.compare) for c in range(num_classes)],
        dim=1,
    )
    is_other = classes[:, None] != torch.arange(num_classes, device=classes.device)
    mean = torch.where(is_other, taus, 0.0).sum(1) / (num_classes - 1)
    return mean.float()


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


def _tau(first: Tensor, second: Tensor, include: Tensor, compare: str) -> Tensor:
    if compare == "scores":
        return kendall_tau_b(first, second, include)
    # The reference correlates the two permutations argsort(-S) themselves:
    # entry r of each is the position ranked r-th.
    positions = torch.arange(include.shape[1], device=include.device)
    ranked = positions[None, :] < include.sum(1, keepdim=True)
    return kendall_tau_b(
        descending_order(first, include), descending_order(second, include), ranked
    )
