#!/usr/bin/env python3
r"""Target steps per backward pass (``target_gradients``, CAT's and AttCAT's
``targets_per_backward``): batched passes give the one-step-per-pass
gradients, steps that no row has stay zero, the device's choice and its
fallbacks when a batched pass does not fit or cannot be batched."""

from functools import partial
from typing import Any, Callable, Dict, List, Tuple

import pytest
import torch
from captum_ext import UnsupportedModelError
from captum_ext.attr import AttCAT, CAT
from captum_ext.attr._utils import teacher_forced_attribution
from captum_ext.attr._utils.teacher_forced_attribution import target_gradients
from torch import nn, Tensor

from tests.helpers import continuation_batch, tiny_causal_lm, tiny_classifier

METHODS: Dict[str, Callable[[nn.Module], CAT]] = {
    "CAT": CAT,
    "AttCAT rollout": AttCAT,
    "AttCAT received": partial(AttCAT, alpha="received"),
}


def _attribute(name: str, family: str, **options: Any) -> Tensor:
    # Llama in sdpa: Llama's float64 eager forward puts NaN on left-padded rows.
    implementation = "eager" if family == "gpt2" else "sdpa"
    model = tiny_causal_lm(
        family, dtype=torch.float64, attn_implementation=implementation
    )
    # Ragged continuations: step 3 only in the first row, none has a step 4.
    batch = continuation_batch((5, 3, 7), (4, 1, 2))
    target = torch.cat([batch["target"], torch.full((3, 1), -100)], 1)
    return METHODS[name](model).attribute(
        batch["input_ids"],
        target=target,
        additional_forward_args=(batch["attention_mask"],),
        attribute_generated=True,
        return_layers=True,
        **options,
    )


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("per_pass", [2, 3, 16])
def test_batched_passes_give_one_step_per_pass(
    name: str, family: str, per_pass: int
) -> None:
    one = _attribute(name, family, targets_per_backward=1)
    batched = _attribute(name, family, targets_per_backward=per_pass)
    assert one[:, 4].abs().max() == 0  # a step no row has
    assert one[:, :4].abs().amax((1, 2, 3)).min() > 0
    torch.testing.assert_close(batched, one, atol=1e-12, rtol=1e-9)


def test_the_default_on_a_cpu_is_one_step_per_pass_bit_for_bit() -> None:
    torch.testing.assert_close(
        _attribute("CAT", "llama"),
        _attribute("CAT", "llama", targets_per_backward=1),
        atol=0,
        rtol=0,
    )


def _objective() -> Tuple[Tensor, Tensor]:
    r"""``log_probs [2, 5]`` of one input ``x [2, 3]`` (every step in every
    row), the same at every call."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, dtype=torch.float64, generator=generator)
    weights = torch.randn(3, 5, dtype=torch.float64, generator=generator)
    x.requires_grad_(True)
    return (x @ weights).tanh(), x


def _gradients(per_pass: Any, accelerator: bool, monkeypatch: Any) -> List[Tensor]:
    if accelerator:  # the device's choice as on an accelerator
        monkeypatch.setattr(
            teacher_forced_attribution, "_targets_per_backward", lambda _: 4
        )
    log_probs, x = _objective()
    mask = torch.ones(2, 5, dtype=torch.bool)
    return [g for (g,) in target_gradients(log_probs, (x,), mask, per_pass)]


def _fail_batches_above(limit: int, error: Exception, monkeypatch: Any) -> List[int]:
    r"""Makes every batched pass over more than ``limit`` steps raise ``error``;
    returns the list of batch sizes tried."""
    real, tried = torch.autograd.grad, []

    def grad(outputs: Tensor, *args: Any, **kwargs: Any) -> Any:
        size = outputs.numel() if kwargs.get("is_grads_batched") else 1
        tried.append(size)
        if size > limit:
            raise error
        return real(outputs, *args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", grad)
    return tried


def _by_hand() -> List[Tensor]:
    log_probs, x = _objective()
    return [
        torch.autograd.grad(log_probs[:, step].sum(), x, retain_graph=True)[0]
        for step in range(5)
    ]


def test_steps_equal_autograd_by_hand_at_every_pass_size(monkeypatch: Any) -> None:
    for per_pass in (1, 2, 5, 8):
        got = _gradients(per_pass, False, monkeypatch)
        torch.testing.assert_close(got, _by_hand(), atol=1e-12, rtol=0)


def test_an_accelerator_halves_a_pass_that_does_not_fit(monkeypatch: Any) -> None:
    tried = _fail_batches_above(2, torch.OutOfMemoryError("no room"), monkeypatch)
    got = _gradients(None, True, monkeypatch)
    assert tried == [4, 2, 2, 1]  # 4 fails; steps 0-1, 2-3, then 4 alone
    torch.testing.assert_close(got, _by_hand(), atol=1e-12, rtol=0)


def test_an_accelerator_goes_one_step_per_pass_without_a_batching_rule(
    monkeypatch: Any,
) -> None:
    tried = _fail_batches_above(1, RuntimeError("vmap: not supported"), monkeypatch)
    got = _gradients(None, True, monkeypatch)
    assert tried == [4, 1, 1, 1, 1, 1]
    torch.testing.assert_close(got, _by_hand(), atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    "error", [torch.OutOfMemoryError("no room"), RuntimeError("vmap: not supported")]
)
def test_a_size_the_caller_chose_is_not_changed(
    error: Exception, monkeypatch: Any
) -> None:
    _fail_batches_above(1, error, monkeypatch)
    with pytest.raises(type(error), match=str(error)):
        _gradients(2, True, monkeypatch)


def test_a_genuine_error_surfaces_from_one_step_per_pass(monkeypatch: Any) -> None:
    tried = _fail_batches_above(0, RuntimeError("broken model"), monkeypatch)
    with pytest.raises(RuntimeError, match="broken model"):
        _gradients(None, True, monkeypatch)
    assert tried == [4, 1]


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_bad_targets_per_backward_is_refused(value: Any) -> None:
    batch = continuation_batch()
    with pytest.raises((TypeError, ValueError), match="targets_per_backward"):
        CAT(tiny_causal_lm("gpt2")).attribute(
            batch["input_ids"], target=batch["target"], targets_per_backward=value
        )


def test_targets_per_backward_on_a_classifier_is_refused() -> None:
    ids = continuation_batch()["input_ids"]
    with pytest.raises(UnsupportedModelError, match="targets_per_backward"):
        CAT(tiny_classifier("gpt2")).attribute(ids, targets_per_backward=2)
