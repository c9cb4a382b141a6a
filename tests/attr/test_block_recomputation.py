#!/usr/bin/env python3
r"""Per-block recomputation (``recompute=``) of CAT, AttCAT and
DecodedLayerGradCam on causal LMs: the whole graph's scores (float64, relative
1e-10) on every causal family, with padding, generated columns, contrast
targets and ``return_layers``; blocks really run twice; the default; the
fall-back where blocks do not chain; clear errors; the model left as it was."""

from contextlib import contextmanager
from functools import partial
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
import torch
from captum.attr import LayerGradientXActivation
from captum_ext import get_adapter, UnsupportedModelError
from captum_ext.attr import AttCAT, CAT, DecodedLayerAttribution, DecodedLayerGradCam
from captum_ext.attr._utils import (
    backward_passes,
    block_recomputation,
    recomputed_scores as recomputed,
)
from torch import nn, Tensor

from tests.helpers import (
    assert_same_in_threads,
    assert_same_state,
    CAUSAL_LM_FAMILIES,
    continuation_batch,
    model_state,
    tiny_causal_lm,
    tiny_classifier,
)

CAT_METHODS: Dict[str, Callable[[nn.Module], Any]] = {
    "CAT": CAT,
    "CAT inputs": partial(CAT, layers="inputs"),
    "CAT outputs": partial(CAT, layers="outputs", objective="logit"),
    "AttCAT rollout": AttCAT,
    "AttCAT received": partial(AttCAT, alpha="received"),
    "AttCAT row": partial(AttCAT, alpha="row"),
}


def _model(family: str) -> Any:
    # GPT-2 in eager (AttCAT reads its maps); the Llama-style families in sdpa
    # (their float64 eager forward puts NaN on left-padded rows).
    implementation = "eager" if family == "gpt2" else "sdpa"
    return tiny_causal_lm(
        family, dtype=torch.float64, attn_implementation=implementation
    )


def _batch() -> Dict[str, Tensor]:
    r"""Left-padded prompts, ragged continuations, a step no row has."""
    batch = continuation_batch((5, 3, 7), (4, 1, 2))
    batch["target"] = torch.cat([batch["target"], torch.full((3, 1), -100)], 1)
    foils = (batch["target"] + 1) % 50
    batch["contrast"] = foils.masked_fill(batch["target"] == -100, -100)
    return batch


def _kwargs(batch: Dict[str, Tensor], contrast: bool) -> Dict[str, Any]:
    return dict(
        target=batch["target"],
        additional_forward_args=(batch["attention_mask"],),
        attribute_generated=True,
        contrast_target=batch["contrast"] if contrast else None,
    )


@contextmanager
def _module_calls(model: nn.Module) -> Iterator[List[int]]:
    r"""How many times the blocks and the final norm run while the ``with``
    block does."""
    calls: List[int] = []
    adapter = get_adapter(model)
    modules = [*adapter.blocks(), adapter.hidden_state_module(adapter.num_layers)]
    handles = [
        module.register_forward_pre_hook(lambda *_: calls.append(1))
        for module in modules
    ]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def _both(run: Callable[..., Tensor], model: Any) -> "tuple[Tensor, Tensor]":
    r"""``run(recompute=False)`` and ``run(recompute=True)``, checking that the
    blocks and the final norm ran more often in the second (the forward pass
    without a graph, then the walk)."""
    with _module_calls(model) as whole_calls:
        whole = run(recompute=False)
    with _module_calls(model) as walk_calls:
        walked = run(recompute=True)
    assert len(walk_calls) > len(whole_calls) >= model.config.num_hidden_layers + 1
    return whole, walked


def _assert_exact(walked: Tensor, whole: Tensor) -> None:
    assert whole.abs().max() > 0
    assert not torch.equal(whole, torch.zeros_like(whole))
    scale = float(whole.abs().max())
    torch.testing.assert_close(walked, whole, rtol=1e-10, atol=1e-10 * scale)


@pytest.mark.parametrize("family", CAUSAL_LM_FAMILIES)
@pytest.mark.parametrize("name", CAT_METHODS)
@pytest.mark.parametrize("contrast", [False, True])
def test_cat_and_attcat_recomputed_equal_the_whole_graph(
    family: str, name: str, contrast: bool
) -> None:
    model, batch = _model(family), _batch()
    method = CAT_METHODS[name](model)
    run = partial(
        method.attribute,
        batch["input_ids"],
        return_layers=True,
        **_kwargs(batch, contrast),
    )
    whole, walked = _both(run, model)
    assert whole.shape == (3, 5, model.config.num_hidden_layers, 7 + 5)
    assert whole[:, 4].abs().max() == 0  # the step no row has
    _assert_exact(walked, whole)


def _grad_cam_layers(model: nn.Module) -> Dict[str, Any]:
    adapter = get_adapter(model)
    return {
        "embeddings": 0,
        "block 1": 1,
        "last": adapter.num_layers,
        "attention input 2": adapter.attention_input_modules()[1],
    }


@pytest.mark.parametrize("family", CAUSAL_LM_FAMILIES)
@pytest.mark.parametrize(
    "layer", ["embeddings", "block 1", "last", "attention input 2"]
)
@pytest.mark.parametrize("tau", [None, 2])
def test_decoded_layer_grad_cam_recomputed_equals_the_whole_graph(
    family: str, layer: str, tau: Any
) -> None:
    model, batch = _model(family), _batch()
    method = DecodedLayerGradCam(model, _grad_cam_layers(model)[layer])
    run = partial(
        method.attribute,
        batch["input_ids"],
        tau=tau,
        relu=None,
        **_kwargs(batch, contrast=tau is not None),
    )
    whole, walked = _both(run, model)
    _assert_exact(walked, whole)


@pytest.mark.parametrize("per_pass", [2, 3])
def test_batched_steps_through_a_recomputed_block(per_pass: int) -> None:
    model, batch = _model("llama"), _batch()
    run = partial(
        AttCAT(model).attribute,
        batch["input_ids"],
        return_layers=True,
        recompute=True,
        **_kwargs(batch, contrast=False),
    )
    _assert_exact(run(targets_per_backward=per_pass), run(targets_per_backward=1))


def test_the_default_on_a_cpu_recomputes() -> None:
    model, batch = _model("gpt2"), _batch()
    run = partial(CAT(model).attribute, batch["input_ids"], **_kwargs(batch, False))
    with _module_calls(model) as calls:
        default = run()
    assert len(calls) == 2 * (model.config.num_hidden_layers + 1)
    torch.testing.assert_close(default, run(recompute=True), rtol=0, atol=0)


def test_the_default_on_an_accelerator_recomputes_what_would_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    adapter = get_adapter(_model("llama"))  # 2 layers x 32, float64
    monkeypatch.setattr(adapter, "input_device", lambda: torch.device("cuda"))
    # The whole graph of 1,000 tokens: 24 x 1,000 x 2 x 32 x 8 bytes = 12.3 MB.
    free: Dict[str, Optional[int]] = {"bytes": 100_000_000}
    monkeypatch.setattr(recomputed, "free_device_memory", lambda _: free["bytes"])
    assert not recomputed.recompute_by_default(adapter, 1000)
    free["bytes"] = 20_000_000  # more than half of it
    assert recomputed.recompute_by_default(adapter, 1000)
    free["bytes"] = None  # unknown
    assert recomputed.recompute_by_default(adapter, 1000)


def test_targets_per_backward_by_device_length_and_free_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    choose = backward_passes.choose_targets_per_backward
    cuda = torch.device("cuda")
    monkeypatch.setattr(backward_passes, "free_device_memory", lambda _: None)
    assert choose(torch.device("cpu"), 512, 1) == 1
    assert choose(cuda, 4096, 1) == 16
    assert choose(cuda, 4097, 1) == 1  # a long prompt: batching does not pay
    monkeypatch.setattr(backward_passes, "free_device_memory", lambda _: 1000)
    assert choose(cuda, 512, 100) == 8  # 16 x 100 bytes would not fit
    assert choose(cuda, 512, 10_000) == 1


def _unchained(model: nn.Module) -> Any:
    r"""A pre-hook that hands block 2 a copy of block 1's output (the values
    unchanged), as a user's steering hook would."""
    block = get_adapter(model).blocks()[1]
    return block.register_forward_pre_hook(lambda _m, args: (args[0] * 1.0,))


def test_blocks_that_do_not_chain_fall_back_or_raise() -> None:
    model, batch = _model("llama"), _batch()
    run = partial(CAT(model).attribute, batch["input_ids"], **_kwargs(batch, False))
    expected = run(recompute=False)
    handle = _unchained(model)
    try:
        before = model_state(model)
        torch.testing.assert_close(run(), expected, rtol=0, atol=0)
        with pytest.raises(UnsupportedModelError, match="recompute=False"):
            run(recompute=True)
        assert_same_state(before, model_state(model))
    finally:
        handle.remove()


def test_a_failing_walk_leaves_the_model_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, batch = _model("gpt2"), _batch()
    before = model_state(model)

    def broken(*_args: Any) -> Any:
        raise RuntimeError("broken backward")

    monkeypatch.setattr(block_recomputation, "batched_vjp", broken)
    with pytest.raises(RuntimeError, match="broken backward"):
        AttCAT(model).attribute(
            batch["input_ids"], recompute=True, **_kwargs(batch, False)
        )
    assert_same_state(before, model_state(model))


def test_recomputation_in_threads_gives_each_calls_result() -> None:
    model, batch = _model("llama"), _batch()
    runs = [
        partial(method(model).attribute, batch["input_ids"], **_kwargs(batch, c))
        for method, c in ((CAT, False), (AttCAT, True))
    ]
    assert_same_in_threads(runs)


@pytest.mark.parametrize("value", [1, "yes", 0.5])
def test_bad_recompute_is_refused(value: Any) -> None:
    batch = _batch()
    for method in (CAT, partial(DecodedLayerGradCam, layer=1)):
        with pytest.raises(TypeError, match="recompute"):
            method(_model("gpt2")).attribute(
                batch["input_ids"], target=batch["target"], recompute=value
            )


def test_recompute_on_a_classifier_is_refused() -> None:
    ids = continuation_batch()["input_ids"]
    with pytest.raises(UnsupportedModelError, match="recompute"):
        CAT(tiny_classifier("gpt2")).attribute(ids, recompute=True)


def test_a_generic_captum_method_takes_no_recompute() -> None:
    model, batch = _model("gpt2"), _batch()
    method = DecodedLayerAttribution(model, 1, method=LayerGradientXActivation)
    run = partial(method.attribute, batch["input_ids"], **_kwargs(batch, False))
    with pytest.raises(ValueError, match="recompute=True"):
        run(recompute=True)
    torch.testing.assert_close(run(), run(recompute=False), rtol=0, atol=0)
