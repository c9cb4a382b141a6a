#!/usr/bin/env python3
r"""CAT and AttCAT built Captum's way, from ``forward_func`` and the modules they
read: plain-PyTorch transformers (pre-/post-LN, causal/bidirectional), a Hugging
Face family that is not in the adapter table, a vision transformer, and on
every registered classifier family the same numbers as the shortcut."""

from typing import Any, Callable, Dict, List, Optional, Sequence

import pytest
import torch
import transformers
from captum_ext import classifier_forward, get_adapter, UnsupportedModelError
from captum_ext.attr import AttCAT, CAT
from torch import nn, Tensor

from tests.attr.plain_transformers import plain_classifier, PLAIN_VARIANTS
from tests.helpers import (
    ALL_FAMILIES,
    assert_same_in_threads,
    tiny_classifier,
    tiny_vision,
)


def _leaf_hook(store: dict, key: str) -> Callable[..., Tensor]:
    def hook(_module: nn.Module, _inputs: tuple, output: Tensor) -> Tensor:
        state = output[0] if isinstance(output, tuple) else output
        store[key] = state.detach().requires_grad_()
        if isinstance(output, tuple):
            return (store[key], *output[1:])
        return store[key]

    return hook


def naive_scores(
    forward: Callable[[Tensor], Tensor],
    inputs: Tensor,
    target: Sequence[int],
    layers: Sequence[nn.Module],
    attention: Optional[Sequence[nn.Module]] = None,
) -> Tensor:
    r"""Per example and per layer, on its own forward pass: the layer's output
    made a leaf, ``sum_d grad * state``, times the mean over heads and query
    rows of the paired attention probabilities (AttCAT), summed over layers."""
    rows: List[Tensor] = []
    for b in range(len(inputs)):
        total = torch.zeros(())
        for index, layer in enumerate(layers):
            store: dict = {}
            handles = [layer.register_forward_hook(_leaf_hook(store, "h"))]
            if attention is not None:
                handles.append(
                    attention[index].register_forward_hook(
                        lambda _m, _i, out: store.__setitem__(
                            "a", out[1] if isinstance(out, tuple) else out
                        )
                    )
                )
            try:
                logit = forward(inputs[b : b + 1])[0, target[b]]
            finally:
                for handle in handles:
                    handle.remove()
            (grad,) = torch.autograd.grad(logit, store["h"])
            score = (grad * store["h"]).sum(-1)[0]  # [pos]
            if attention is not None:
                score = score * store["a"][0].mean(0).mean(0).detach()
            total = total + score
        rows.append(total)
    return torch.stack(rows)


@pytest.mark.parametrize("variant", list(PLAIN_VARIANTS))
def test_plain_pytorch_transformers_equal_the_naive_reference(variant: str) -> None:
    model, ids = plain_classifier(variant)
    target = [0, 2, 1]
    blocks = list(model.blocks)
    probs = [block.attention.probabilities for block in blocks]
    cat = CAT(model, blocks).attribute(ids, target=target)
    attcat = AttCAT(model, blocks, probs).attribute(ids, target=target)
    torch.testing.assert_close(
        cat, naive_scores(model, ids, target, blocks), rtol=1e-10, atol=1e-12
    )
    torch.testing.assert_close(
        attcat,
        naive_scores(model, ids, target, blocks, probs),
        rtol=1e-10,
        atol=1e-12,
    )
    assert cat.shape == (3, 7) and cat.dtype == torch.float64
    assert cat.abs().min() > 0  # every token scored, none silently zero


def test_layer_inputs_chunks_and_per_layer_scores() -> None:
    model, ids = plain_classifier("pre-LN decoder")
    norms = [block.ln1 for block in model.blocks]
    cat = CAT(model, [block for block in model.blocks], attribute_to_layer_input=True)
    per_layer = cat.attribute(ids, target=1, return_layers=True)  # [b, L, pos]
    # a pre-LN block's input is what its first norm reads
    via_norm_inputs = CAT(model, norms, attribute_to_layer_input=True)
    torch.testing.assert_close(
        per_layer, via_norm_inputs.attribute(ids, target=1, return_layers=True)
    )
    assert per_layer.shape == (3, 3, 7)
    torch.testing.assert_close(
        cat.attribute(ids, target=1, internal_batch_size=2), per_layer.sum(1)
    )
    torch.testing.assert_close(
        per_layer[:, 0], naive_scores(model, ids, [1] * 3, [model.embeddings])
    )


@pytest.mark.parametrize("family", [f for f in ALL_FAMILIES if f != "albert"])
def test_registered_families_give_the_shortcut_numbers(family: str) -> None:
    torch.manual_seed(0)
    model = tiny_classifier(family).double()
    adapter = get_adapter(model)
    ids = torch.randint(5, 60, (2, 6))
    states = [adapter.hidden_state_module(layer) for layer in range(adapter.num_layers)]
    forward = classifier_forward(model)
    shortcut = CAT(model).attribute(ids, target=[0, 1], return_layers=True)
    explicit = CAT(forward, states).attribute(ids, target=[0, 1], return_layers=True)
    assert torch.equal(shortcut, explicit)


def test_a_module_shared_by_every_layer_is_refused() -> None:
    model = tiny_classifier("albert")
    shared = model.get_submodule("albert.encoder.albert_layer_groups.0")
    with pytest.raises(RuntimeError, match="one call of layer 0 per forward pass"):
        CAT(classifier_forward(model), [shared]).attribute(torch.tensor([[5, 6, 7]]))


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_attcat_eager_families_give_the_shortcut_numbers(family: str) -> None:
    torch.manual_seed(0)
    model = tiny_classifier(family, attn_implementation="eager").double()
    adapter = get_adapter(model)
    ids = torch.randint(5, 60, (2, 6))
    blocks = adapter.blocks()
    attention = [_self_attention(block) for block in blocks]
    explicit = AttCAT(
        classifier_forward(model), blocks, attention, attribute_to_layer_input=True
    ).attribute(ids, target=1)
    assert torch.equal(AttCAT(model).attribute(ids, target=1), explicit)


def _self_attention(block: nn.Module) -> nn.Module:
    r"""The submodule of a block that returns ``(output, probabilities)``."""
    for name in ("attention.self", "attn", "self_attn"):
        try:
            return block.get_submodule(name)
        except AttributeError:
            continue
    raise AssertionError(f"no attention module in {type(block).__name__}")


def test_an_unregistered_hub_family_is_explained_by_naming_its_modules() -> None:
    torch.manual_seed(0)
    options: Dict[str, Any] = dict(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=2,
        ffn_dim=32,
        num_attention_heads=2,
        max_position_embeddings=32,
        word_embed_proj_dim=16,
        num_labels=3,
        pad_token_id=1,
        attn_implementation="eager",
    )
    config = transformers.OPTConfig(**options)
    model = transformers.OPTForSequenceClassification(config).double().eval()
    with pytest.raises(UnsupportedModelError, match="model_type='opt'"):
        CAT(model)
    ids = torch.randint(3, 64, (2, 5))

    def forward(input_ids: Tensor) -> Tensor:
        return model(input_ids=input_ids).logits

    layers = list(model.model.decoder.layers)
    attention = [layer.self_attn for layer in layers]
    torch.testing.assert_close(
        AttCAT(forward, layers, attention).attribute(ids, target=[2, 0]),
        naive_scores(forward, ids, [2, 0], layers, attention),
        rtol=1e-10,
        atol=1e-12,
    )


def test_a_vision_transformer_scores_cls_and_every_patch() -> None:
    model = tiny_vision("vit")
    pixels = torch.randn(2, 3, 8, 8, dtype=torch.float64)

    def forward(pixel_values: Tensor) -> Tensor:
        return model(pixel_values=pixel_values).logits

    layers = list(model.vit.layers)
    attention = [layer.attention for layer in layers]
    scores = AttCAT(forward, layers, attention).attribute(pixels, target=3)
    assert scores.shape == (2, 1 + 4)  # [CLS] and a 2 x 2 grid of patches
    torch.testing.assert_close(
        scores,
        naive_scores(forward, pixels, [3, 3], layers, attention),
        rtol=1e-10,
        atol=1e-12,
    )


def test_sdpa_attention_gives_a_clear_error() -> None:
    model = tiny_classifier("bert", attn_implementation="sdpa")
    blocks = get_adapter(model).blocks()
    attention = [block.attention.self for block in blocks]
    method = AttCAT(classifier_forward(model), blocks, attention)
    with pytest.raises(ValueError, match="attn_implementation='eager'"):
        method.attribute(torch.randint(5, 60, (1, 4)))


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda m, b: CAT(m, "inputs"), "layers='inputs' by keyword"),
        (lambda m, b: CAT(lambda x: m(x), None), "needs the modules it reads"),
        (lambda m, b: AttCAT(m, b), "needs attention="),
        (lambda m, b: AttCAT(m, b, b[:1]), "3 layer modules and 1 attention"),
        (lambda m, b: CAT(m, b, layers="outputs"), "not both"),
        (lambda m, b: CAT(m, [m.head, 3]), "layer must be a torch.nn.Module"),
        (lambda m, b: CAT(m, attribute_to_layer_input=True), "shortcut picks"),
    ],
)
def test_constructor_errors_name_the_argument(build, message: str) -> None:
    model, _ = plain_classifier("pre-LN encoder")
    with pytest.raises((TypeError, ValueError), match=message):
        build(model, list(model.blocks))


@pytest.mark.parametrize(
    "option",
    [
        {"attribute_generated": True},
        {"contrast_target": torch.zeros(3, 1, dtype=torch.long)},
        {"targets_per_backward": 2},
    ],
)
def test_generation_options_are_refused_by_name(option: dict) -> None:
    model, ids = plain_classifier("pre-LN decoder")
    with pytest.raises(ValueError, match=f"CAT's {next(iter(option))} explains"):
        CAT(model, list(model.blocks)).attribute(ids, **option)


def test_bad_states_and_outputs_are_refused() -> None:
    model, ids = plain_classifier("post-LN encoder")
    with pytest.raises(ValueError, match=r"shapes \[\(3, 7, 16\), \(3, 3\)\]"):
        CAT(model, [model.blocks[0], model.head]).attribute(ids, target=0)
    sequence = CAT(lambda x: model(x)[:, :, None], list(model.blocks))
    with pytest.raises(ValueError, match=r"got shape \(3, 3, 1\)"):
        sequence.attribute(ids)


def test_mode_grads_and_hooks_are_left_as_they_were_also_on_error() -> None:
    model, ids = plain_classifier("pre-LN encoder")
    model.train()
    blocks = list(model.blocks)
    probs = [block.attention.probabilities for block in blocks]
    with pytest.warns(UserWarning, match="training mode"):
        AttCAT(model, blocks, probs).attribute(ids)
    assert model.training and all(m.training for m in model.modules())
    assert all(p.grad is None for p in model.parameters())
    with pytest.raises(IndexError, match="out of range"):
        AttCAT(model.eval(), blocks, probs).attribute(ids, target=9)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_threads_on_one_model_give_single_threaded_results() -> None:
    model, ids = plain_classifier("pre-LN encoder")
    blocks = list(model.blocks)
    probs = [block.attention.probabilities for block in blocks]
    other = ids.flip(0)

    def plain(x: Tensor) -> Tensor:  # a plain function: no lock, no mode change
        return model(x)

    assert_same_in_threads(
        [
            lambda: CAT(model, blocks).attribute(ids, target=0),
            lambda: AttCAT(model, blocks, probs).attribute(other, target=2),
            lambda: CAT(plain, blocks).attribute(other, target=1),
        ]
    )
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
