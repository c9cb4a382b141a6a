#!/usr/bin/env python3
r"""Every attribution method of ``tests/attr/method_configs.py`` on every family
it supports, with tiny random models: batch and padding invariance, determinism,
model-state hygiene (also when a call fails halfway), training mode, float64,
bfloat16, CUDA, ``internal_batch_size``, non-finite values, and property-based
checks over random batches. The per-method
tests in ``tests/attr/`` check each method's formula; this is the cross-cutting
layer."""

import copy
from functools import lru_cache
from typing import Any, Callable, Dict, List, Optional, Sequence

import pytest
import torch
from captum_ext import classifier_forward, get_adapter, UnsupportedModelError
from captum_ext.attr import AttCAT, DecodedLayerGradCam, EmbeddingDecoder, GlobEnc
from hypothesis import given, HealthCheck, settings, strategies as st
from torch import nn, Tensor
from torch.nn.modules import module as torch_module

from tests.attr.method_configs import config_family_pairs, METHOD_CONFIGS, MethodConfig
from tests.helpers import (
    ALL_FAMILIES,
    assert_same_state,
    is_causal,
    model_state,
    tiny_classifier,
    token_batch,
)

PAIRS = config_family_pairs()
GRADIENT_PAIRS = config_family_pairs(lambda c, f: c.needs_gradients)
# Families whose logits, as the methods compute them (the adapter's keyword
# arguments: position ids from the mask for decoder-only families), do not change
# when the input is padded on the left. Encoders read position 0 (a pad when
# left-padded) and number positions from the first column whatever the mask says,
# so the model itself gives another output for a left-padded input.
LEFT_PAD_INVARIANT = ("gpt2", "llama")
LEFT_PAIRS = config_family_pairs(lambda c, f: f in LEFT_PAD_INVARIANT)
LENGTHS = (7, 4, 9)
TARGETS = [2, 0, 1]
RELATIVE_TOLERANCE = 1e-5  # of the largest score, float32

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@lru_cache(maxsize=None)
def _shared_model(family: str, dtype: torch.dtype = torch.float32) -> nn.Module:
    r"""One model per family and dtype for the checks that leave it untouched."""
    return tiny_classifier(family, dtype=dtype)


def _fresh_model(family: str) -> nn.Module:
    r"""A copy for the checks that change the model's mode or gradients."""
    return copy.deepcopy(_shared_model(family))


def _batch(family: str, lengths: Sequence[int] = LENGTHS, **kwargs: Any) -> Dict:
    return token_batch(tuple(lengths), causal=is_causal(family), **kwargs)


def _scores(
    config: MethodConfig,
    model: nn.Module,
    batch: Dict[str, Tensor],
    target: Any = TARGETS,
) -> Tensor:
    method = config.factory(model)
    return method(batch["input_ids"], batch["attention_mask"], target)


def _assert_equals_one_at_a_time(
    config: MethodConfig, family: str, batch: Dict, target: Optional[List[int]]
) -> None:
    r"""Scores of the padded batch equal each example's scores computed alone
    and unpadded (to 1e-5 of the largest score), and are zero on padding. In
    float32, or float64 where float32 rounding alone exceeds that
    (:meth:`MethodConfig.invariance_dtype`)."""
    model = _shared_model(family, config.invariance_dtype(family))
    method = config.factory(model)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    scores = method(ids, mask, target)
    valid = mask.bool()
    assert scores.shape == ids.shape
    assert torch.all(scores[~valid] == 0)
    tolerance = RELATIVE_TOLERANCE * float(scores.abs().max())
    for row in range(len(ids)):
        one = None if target is None else target[row]
        alone = method(ids[row][valid[row]][None], None, one)
        torch.testing.assert_close(
            scores[row][valid[row]], alone[0], atol=tolerance, rtol=0
        )


# ------------------------------------------------------------------ invariance
@pytest.mark.parametrize("config, family", PAIRS)
def test_batch_invariance(config: MethodConfig, family: str) -> None:
    batch = _batch(family, (8, 8, 8), seed=1)  # no padding
    _assert_equals_one_at_a_time(config, family, batch, None)


@pytest.mark.parametrize("config, family", PAIRS)
def test_right_padding_invariance(config: MethodConfig, family: str) -> None:
    _assert_equals_one_at_a_time(config, family, _batch(family), TARGETS)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_which_models_are_left_padding_invariant(family: str) -> None:
    r"""The model's logits, run as the methods run it
    (:func:`captum_ext.classifier_forward`), decide where left-padding invariance
    can be asked of a method: only for :data:`LEFT_PAD_INVARIANT`."""
    forward = classifier_forward(_shared_model(family))
    with torch.no_grad():
        left, right = (
            forward(batch["input_ids"], batch["attention_mask"])
            for batch in (_batch(family, pad_side="left"), _batch(family))
        )
    invariant = torch.allclose(left, right, atol=1e-5, rtol=0)
    assert invariant == (family in LEFT_PAD_INVARIANT)


@pytest.mark.parametrize("config, family", LEFT_PAIRS)
def test_left_padding_invariance(config: MethodConfig, family: str) -> None:
    batch = _batch(family, pad_side="left")
    _assert_equals_one_at_a_time(config, family, batch, TARGETS)


@pytest.mark.parametrize("config, family", PAIRS)
def test_deterministic(config: MethodConfig, family: str) -> None:
    model, batch = _shared_model(family), _batch(family)
    assert torch.equal(_scores(config, model, batch), _scores(config, model, batch))


# ------------------------------------------------------------- model state
class InjectedFailure(Exception):
    r"""Raised by the test's own hook, halfway through a method's call."""


def _last_block(model: nn.Module) -> nn.Module:
    adapter = get_adapter(model)
    try:
        return adapter.hidden_state_module(adapter.num_layers)
    except UnsupportedModelError:  # ALBERT: one block shared by every layer
        return adapter.base_model.encoder


def _fail_in_forward(*_: Any) -> None:
    raise InjectedFailure("forward")


def _fail_in_backward(_module: nn.Module, _inputs: Any, output: Any) -> None:
    r"""Makes the backward pass through this output raise (forward passes run
    without gradients, such as the decoded methods' probe, go through)."""
    hidden = output if isinstance(output, Tensor) else output[0]  # tuple, ModelOutput

    def fail(_grad: Tensor) -> None:
        raise InjectedFailure("backward")

    if hidden.requires_grad:
        hidden.register_hook(fail)


def _full_state(model: nn.Module) -> Dict[str, Any]:
    r""":func:`model_state` plus parameter tensor hooks and global module hooks."""
    state = model_state(model)
    state["param_hooks"] = [len(p._backward_hooks or {}) for p in model.parameters()]
    state["global_hooks"] = [
        len(torch_module._global_forward_hooks),
        len(torch_module._global_forward_pre_hooks),
        len(torch_module._global_backward_hooks),
    ]
    return state


def _assert_same_full_state(before: Dict, after: Dict) -> None:
    assert_same_state(before, after)
    assert before["param_hooks"] == after["param_hooks"]
    assert before["global_hooks"] == after["global_hooks"]


def _check_state_when_failing(
    config: MethodConfig, family: str, hook: Callable[..., Any]
) -> None:
    model = _fresh_model(family)
    first = next(model.parameters())
    first.grad = torch.ones_like(first)  # a user's gradient must survive
    batch = _batch(family)
    before = _full_state(model)
    _scores(config, model, batch)
    _assert_same_full_state(before, _full_state(model))
    handle = _last_block(model).register_forward_hook(hook)
    try:
        with_hook = _full_state(model)
        with pytest.raises(InjectedFailure):
            _scores(config, model, batch)
        _assert_same_full_state(with_hook, _full_state(model))
    finally:
        handle.remove()
    _assert_same_full_state(before, _full_state(model))


@pytest.mark.parametrize("config, family", PAIRS)
def test_state_kept_when_forward_fails(config: MethodConfig, family: str) -> None:
    _check_state_when_failing(config, family, _fail_in_forward)


@pytest.mark.parametrize("config, family", GRADIENT_PAIRS)
def test_state_kept_when_backward_fails(config: MethodConfig, family: str) -> None:
    _check_state_when_failing(config, family, _fail_in_backward)


@pytest.mark.parametrize("config, family", PAIRS)
def test_training_mode_warns_and_uses_eval_semantics(
    config: MethodConfig, family: str
) -> None:
    model = _fresh_model(family).train()
    batch = _batch(family)
    before = _full_state(model)
    with pytest.warns(UserWarning, match="training mode"):
        scores = _scores(config, model, batch)
    expected = _scores(config, _shared_model(family), batch)  # eval mode
    torch.testing.assert_close(scores, expected, atol=0, rtol=0)
    _assert_same_full_state(before, _full_state(model))
    assert all(m.training for m in model.modules())


@pytest.mark.parametrize("config, family", PAIRS)
def test_gradient_mode(config: MethodConfig, family: str) -> None:
    r"""Gradient methods work inside ``torch.no_grad()`` with every parameter
    frozen; the others run under ``torch.inference_mode()`` and build no graph."""
    model, batch = _fresh_model(family), _batch(family)
    expected = _scores(config, model, batch)
    if config.needs_gradients:
        model.requires_grad_(False)
        with torch.no_grad():
            scores = _scores(config, model, batch)
    else:
        with torch.inference_mode():
            scores = _scores(config, model, batch)
        assert expected.grad_fn is None
    torch.testing.assert_close(scores, expected, atol=0, rtol=0)


# ------------------------------------------------------------------- dtypes
@pytest.mark.parametrize("config, family", PAIRS)
def test_float64(config: MethodConfig, family: str) -> None:
    batch = _batch(family)
    exact = _scores(config, _shared_model(family, torch.float64), batch)
    single = _scores(config, _shared_model(family), batch)
    assert exact.dtype == torch.float64
    tolerance = 1e-4 * float(exact.abs().max())
    torch.testing.assert_close(exact.float(), single, atol=tolerance, rtol=0)


@pytest.mark.parametrize("config, family", PAIRS)
def test_bfloat16(config: MethodConfig, family: str) -> None:
    r"""Finite, zero on padding, within the config's relative L2 error of the
    float32 scores, and float32 (the precision policy: results in float32
    whatever the model's dtype)."""
    batch = _batch(family)
    low = _scores(config, _shared_model(family, torch.bfloat16), batch)
    single = _scores(config, _shared_model(family), batch)
    assert low.dtype == single.dtype == torch.float32
    assert torch.isfinite(low).all()
    assert torch.all(low[~batch["attention_mask"].bool()] == 0)
    error = (low.float() - single).norm() / single.norm()
    assert error <= config.bfloat16_limit(family)


@requires_cuda
@pytest.mark.parametrize("config, family", PAIRS)
def test_cuda_matches_cpu(config: MethodConfig, family: str) -> None:
    batch = _batch(family)
    on_cpu = _scores(config, _shared_model(family), batch)
    model = _fresh_model(family).cuda()
    on_gpu = _scores(config, model, {k: v.cuda() for k, v in batch.items()})
    assert on_gpu.is_cuda
    tolerance = 1e-4 * float(on_cpu.abs().max())
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, atol=tolerance, rtol=1e-4)


# ----------------------------------------------------- internal_batch_size
@pytest.mark.parametrize("chunk", [1, 2, len(LENGTHS)])
@pytest.mark.parametrize("config, family", PAIRS)
def test_internal_batch_size_gives_the_whole_batch_scores(
    config: MethodConfig, family: str, chunk: int
) -> None:
    r"""Chunks of 1, 2 and all examples (per-example targets sliced along) give
    the unchunked scores, to 1e-5 of the largest one (float64 where float32
    rounding alone exceeds that, :meth:`MethodConfig.invariance_dtype`)."""
    model = _shared_model(family, config.invariance_dtype(family))
    method = config.factory(model)
    batch = _batch(family)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    whole = method(ids, mask, TARGETS)
    chunked = method(ids, mask, TARGETS, internal_batch_size=chunk)
    tolerance = RELATIVE_TOLERANCE * float(whole.abs().max())
    torch.testing.assert_close(chunked, whole, atol=tolerance, rtol=0)


def _all_layer_entry_points(model: nn.Module) -> Dict[str, Callable[..., Tensor]]:
    r"""The entry points that return every layer: name -> ``run(batch, **options)``."""
    decoder = EmbeddingDecoder(model)
    return {
        "AttCAT.return_layers": lambda b, **o: AttCAT(model).attribute(
            b["input_ids"], None, (b["attention_mask"],), return_layers=True, **o
        ),
        "GlobEnc.attribute_matrices": lambda b, **o: GlobEnc(model).attribute_matrices(
            b["input_ids"], additional_forward_args=(b["attention_mask"],), **o
        ),
        "DecodedLayerGradCam.attribute_all_layers": lambda b, **o: DecodedLayerGradCam(
            model, 1, decoder
        ).attribute_all_layers(
            b["input_ids"], None, (b["attention_mask"],), relu=None, **o
        ),
    }


@pytest.mark.parametrize("chunk", [1, 2])
@pytest.mark.parametrize(
    "name", list(_all_layer_entry_points(_shared_model("bert")).keys())
)
def test_internal_batch_size_of_the_all_layer_entry_points(
    name: str, chunk: int
) -> None:
    model = _shared_model("bert", torch.float64)
    run = _all_layer_entry_points(model)[name]
    batch = _batch("bert")
    whole = run(batch)
    tolerance = RELATIVE_TOLERANCE * float(whole.abs().max())
    chunked = run(batch, internal_batch_size=chunk)
    torch.testing.assert_close(chunked, whole, atol=tolerance, rtol=0)


@pytest.mark.parametrize(
    "bad, error",
    [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)],
)
@pytest.mark.parametrize("config", METHOD_CONFIGS, ids=str)
def test_bad_internal_batch_size(config: MethodConfig, bad: Any, error: type) -> None:
    method = config.factory(_shared_model("bert"))
    batch = _batch("bert")
    with pytest.raises(error, match="internal_batch_size must be a positive int"):
        method(
            batch["input_ids"], batch["attention_mask"], None, internal_batch_size=bad
        )


# ------------------------------------------------------- non-finite values
def _nan_in_example(example: Tensor) -> Callable[..., Tensor]:
    r"""A forward hook (``with_kwargs=True``) on the embedding module that puts
    NaN into the rows of its output whose token ids are ``example``'s, whichever
    chunk of the batch they come in."""

    def hook(_module: nn.Module, args: Any, kwargs: Any, output: Tensor) -> Tensor:
        ids = args[0] if args else kwargs["input_ids"]  # [rows, pos]
        rows = (ids == example).all(-1)[:, None, None]
        return torch.where(rows, torch.full_like(output, float("nan")), output)

    return hook


@pytest.mark.parametrize(
    "config, family",
    config_family_pairs(lambda c, f: f in ("bert", "llama")),
)
def test_nan_in_the_forward_pass_names_the_example(
    config: MethodConfig, family: str
) -> None:
    r"""NaN in example 1's embeddings raises FloatingPointError naming example 1,
    also when the batch runs in chunks of one (the row is the caller's)."""
    model = _fresh_model(family)
    batch = _batch(family)
    method = config.factory(model)
    module = get_adapter(model).embedding_output_module()
    hook = _nan_in_example(batch["input_ids"][1])
    handle = module.register_forward_hook(hook, with_kwargs=True)
    try:
        for chunk in (None, 1):
            with pytest.raises(FloatingPointError, match=r"example\(s\) \[1\]"):
                method(
                    batch["input_ids"],
                    batch["attention_mask"],
                    None,
                    internal_batch_size=chunk,
                )
    finally:
        handle.remove()


# ---------------------------------------------------------- property-based
@st.composite
def _random_batches(draw: st.DrawFn, config: MethodConfig) -> Dict[str, Any]:
    family = draw(st.sampled_from(config.families))
    shortest = 1 if is_causal(family) else 3  # [CLS] content [SEP]
    size = draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(shortest, 12), min_size=size, max_size=size))
    sides = ["right", "left"] if family in LEFT_PAD_INVARIANT else ["right"]
    batch = _batch(
        family,
        lengths,
        pad_side=draw(st.sampled_from(sides)),
        seed=draw(st.integers(0, 2**16)),
    )
    targets = st.lists(st.integers(0, 2), min_size=size, max_size=size)
    return dict(family=family, batch=batch, target=draw(st.none() | targets))


@pytest.mark.parametrize("config", METHOD_CONFIGS, ids=str)
@settings(
    max_examples=4,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_random_batches(config: MethodConfig, data: st.DataObject) -> None:
    drawn = data.draw(_random_batches(config))
    family, batch = drawn["family"], drawn["batch"]
    _assert_equals_one_at_a_time(config, family, batch, drawn["target"])
