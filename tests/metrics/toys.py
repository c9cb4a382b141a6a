#!/usr/bin/env python3
r"""Models and batches for the metric tests: a bag-of-words classifier whose
exact token contributions are known, and tiny transformers re-initialised so that
their outputs vary visibly with the input; and the one table of every metric."""

from dataclasses import replace
from functools import lru_cache, partial
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

import torch
from captum_ext import classifier_forward
from captum_ext.metrics import (
    aopc,
    average_precision,
    dot_product,
    get_protocol,
    hiding_revealing,
    kendall_tau,
    log_odds,
    PerturbationProtocol,
    sufficiency,
    token_overlap,
    TokenOptions,
)
from captum_ext.metrics._utils.protocols import CurveMetric
from torch import nn, Tensor

from tests.helpers import CLS_ID, PAD_ID, SEP_ID, tiny_classifier, token_batch, VOCAB

MASK_ID = 4
SPECIALS = (CLS_ID, SEP_ID)
TOKENS = TokenOptions(MASK_ID, PAD_ID, SPECIALS)
# (model, padding side) pairs whose output does not depend on the padding side;
# the model names are those of ``case_forward``.
PAD_INVARIANT_CASES = [
    ("bow", "right"),
    ("bow", "left"),
    ("bert", "right"),
    ("llama", "right"),
    ("llama", "left"),
]
# Every metric, in the groups of captum_ext.metrics' docstring: faithfulness
# (perturbation curves), class sensitivity, plausibility (no model).
PERTURBATION_METRICS = (aopc, log_odds, sufficiency, hiding_revealing)
CLASS_METRICS = (kendall_tau, token_overlap)
PLAUSIBILITY_METRICS = (average_precision, dot_product)
ALL_METRICS = PERTURBATION_METRICS + CLASS_METRICS + PLAUSIBILITY_METRICS
# Every preset of each perturbation metric, None (the clean default) first;
# tests/metrics/test_options.py checks it against the library's preset table.
CURVE_PRESETS = {
    aopc: (None, "attcat", "normxlogit", "ferret"),
    log_odds: (None, "attcat"),
    sufficiency: (None, "normxlogit", "ferret"),
    hiding_revealing: (None, "decoded"),
}
PRESET_CASES = [(m, p) for m in PERTURBATION_METRICS for p in CURVE_PRESETS[m]]

Result = TypeVar("Result")


class BagOfWords(nn.Module):
    r"""``logits = bias + sum of weights[token]`` over attended tokens."""

    def __init__(self, weights: Tensor, bias: Tensor) -> None:
        super().__init__()
        self.weights = weights
        self.bias = bias
        self.eval()  # like a loaded model; metrics warn about training mode

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Optional[Tensor] = None,
    ) -> Tensor:
        contributions = self.weights[input_ids] * attention_mask[..., None]
        return self.bias + contributions.sum(1)


def protocol(
    metric: CurveMetric, preset: Optional[str] = None, **changes: Any
) -> PerturbationProtocol:
    r"""A preset of ``metric`` with ``changes`` (``levels``, ``mode``, ...)."""
    return replace(get_protocol(metric, preset), **changes)


def bag_of_words(num_labels: int = 2, seed: int = 0) -> BagOfWords:
    r"""Random weights; [PAD], [MASK], [CLS] and [SEP] weigh nothing."""
    generator = torch.Generator().manual_seed(seed)
    weights = torch.randn(VOCAB, num_labels, generator=generator)
    weights[[PAD_ID, MASK_ID, CLS_ID, SEP_ID]] = 0.0
    return BagOfWords(weights, torch.randn(num_labels, generator=generator))


@lru_cache(maxsize=None)
def lively_forward(family: str, num_labels: int = 3, seed: int = 0):
    r"""``forward_func`` of a tiny model whose weights have unit-scale variance
    (the default 0.02 makes every output nearly the same)."""
    model = tiny_classifier(family, num_labels=num_labels, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() >= 2:
                scale = 2.0 / parameter.shape[1] ** 0.5
                noise = torch.randn(parameter.shape, generator=generator)
                parameter.copy_(noise * scale)
    return classifier_forward(model)


def exact_attributions(
    model: BagOfWords, batch: Dict[str, Tensor]
) -> Tuple[Tensor, Tensor]:
    r"""For a 2-class ``model``: the class it predicts ``[batch]`` and the logit
    margin each token adds to that class ``[batch, pos]``, which decides its
    probability exactly (the best possible attributions)."""
    target = predicted_class(model, batch)
    margin = model.weights[:, 1] - model.weights[:, 0]  # [vocab]
    sign = torch.where(target == 1, 1.0, -1.0)[:, None]  # [batch, 1]
    return target, margin[batch["input_ids"]] * sign


def shuffled_rows(scores: Tensor, seed: int, count: int = 30) -> Iterator[Tensor]:
    r"""``count`` copies of ``scores`` ``[batch, pos]``, each row in a random
    order: rankings other than the one of ``scores``."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(count):
        yield torch.stack(
            [row[torch.randperm(len(row), generator=generator)] for row in scores]
        )


def case_forward(name: str) -> Callable[..., Tensor]:
    r"""The model of a test case: ``"bow"`` is a 3-class ``bag_of_words``, any
    other name the ``lively_forward`` of that model family."""
    return bag_of_words(3) if name == "bow" else lively_forward(name)


def batch_with_scores(
    lengths: Tuple[int, ...],
    pad_side: str = "right",
    seed: int = 0,
) -> Dict[str, Tensor]:
    r"""``token_batch`` ([CLS] ... [SEP], for causal models too) plus random
    ``scores`` ``[batch, pos]`` and the ``special`` tokens mask."""
    batch = token_batch(lengths, pad_side=pad_side, seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    batch["scores"] = torch.randn(batch["input_ids"].shape, generator=generator)
    batch["special"] = torch.isin(batch["input_ids"], torch.tensor(SPECIALS))
    return batch


def example(batch: Dict[str, Tensor], row: int) -> Tuple[List[int], List[float]]:
    r"""The real tokens of one row and their scores, without padding."""
    keep = batch["attention_mask"][row].bool()
    return (
        batch["input_ids"][row][keep].tolist(),
        batch["scores"][row][keep].tolist(),
    )


def probabilities(
    forward, ids: List[int], attention: Optional[List[int]] = None
) -> Tensor:
    r"""Softmax output ``[C]`` (float64) on one unpadded sequence."""
    input_ids = torch.tensor([ids])
    mask = torch.tensor([attention if attention is not None else [1] * len(ids)])
    with torch.no_grad():
        return forward(input_ids, mask)[0].double().softmax(-1)


def per_example(
    forward: Callable[..., Tensor],
    batch: Dict[str, Tensor],
    target: Union[Tensor, Sequence[int]],
    curve_fn: Callable[..., Any],
    score_fn: Callable[[float, Any], Any],
) -> Tensor:
    r"""The reference loop, one unpadded row of ``batch`` at a time: the row's
    ``curve_fn(prob, ids, scores, target)`` (a curve of
    :mod:`tests.metrics.reference`) and its score ``score_fn(base, curve)``,
    ``base`` the target probability of the whole row; float64 ``[batch, ...]``."""
    prob = partial(probabilities, forward)
    scores = []
    for row in range(len(batch["input_ids"])):
        ids, row_scores = example(batch, row)
        t = int(target[row])
        curve = curve_fn(prob, ids, row_scores, t)
        scores.append(score_fn(float(prob(ids)[t]), curve))
    return torch.tensor(scores, dtype=torch.float64)


def assert_scores(actual: Tensor, expected: Tensor) -> None:
    r"""Equal up to float32 noise, NaN (a skipped example) included."""
    torch.testing.assert_close(
        actual.double(), expected.double(), atol=1e-5, rtol=0, equal_nan=True
    )


def predicted_class(forward: Callable[..., Tensor], batch: Dict[str, Tensor]) -> Tensor:
    r"""The class ``[batch]`` that ``forward`` predicts for each row of ``batch``."""
    with torch.no_grad():
        return forward(batch["input_ids"], batch["attention_mask"]).argmax(-1)


def check_reference_loop(
    metric: Callable[..., Result],
    name: str,
    batch: Dict[str, Tensor],
    chunk: Optional[int],
    curve_fn: Callable[..., Any],
    score_fn: Callable[[float, Any], float],
    target: Union[Tensor, Sequence[int], None] = None,
    **kwargs,
) -> Result:
    r"""``metric`` with the model of case ``name`` on ``batch`` (``run_metric``,
    ``kwargs`` passed on) scores what :func:`per_example` does with
    ``curve_fn`` and ``score_fn``, for ``target`` (None: the predicted class).
    Returns the metric's result."""
    forward = case_forward(name)
    result = run_metric(metric, forward, batch, chunk, target=target, **kwargs)
    labels = predicted_class(forward, batch) if target is None else target
    expected = per_example(forward, batch, labels, curve_fn, score_fn)
    assert_scores(result.score, expected)  # type: ignore[attr-defined]
    return result


def gold_labels(metric: Callable[..., Any], batch: Dict[str, Tensor]) -> Dict:
    r"""``labels`` (classes 0, 1, 2, 0, ... by row) for ``hiding_revealing``, whose
    ``"decoded"`` preset needs gold labels; nothing for the other metrics."""
    if metric is not hiding_revealing:
        return {}
    return {"labels": [row % 3 for row in range(len(batch["input_ids"]))]}


def run_metric(
    metric: Callable[..., Result],
    forward: Callable[..., Tensor],
    batch: Dict[str, Tensor],
    chunk: Optional[int] = None,
    **kwargs,
) -> Result:
    r"""``metric`` on a ``batch_with_scores`` batch: its ``scores`` as the
    attributions, its attention mask as the extra forward argument, its
    ``special`` tokens mask with the [MASK] and [PAD] ids, and ``chunk`` rows per
    forward pass; ``kwargs`` (``target``, ``preset``, ...) are passed on."""
    return metric(
        forward,
        batch["input_ids"],
        batch["scores"],
        additional_forward_args=(batch["attention_mask"],),
        tokens=TokenOptions(MASK_ID, PAD_ID, special_tokens_mask=batch["special"]),
        internal_batch_size=chunk,
        **kwargs,
    )
