#!/usr/bin/env python3
r"""LogAt, NormXLogit, EmbeddingNorm, LastLayerAttention and AttentionRollout
built Captum's way, from ``forward_func`` and the modules they read: plain
PyTorch transformers against naive references, and on the registered
classifier families the shortcut's numbers."""

from typing import Callable, Dict, List

import pytest
import torch
from captum_ext import classifier_forward, get_adapter
from captum_ext.attr import (
    AttentionRollout,
    EmbeddingNorm,
    LastLayerAttention,
    LogAt,
    NormXLogit,
)
from torch import nn, Tensor

from tests.attr.plain_transformers import plain_classifier, PLAIN_VARIANTS
from tests.helpers import ALL_FAMILIES, tiny_classifier


def _outputs(model: nn.Module, modules: List[nn.Module], ids: Tensor) -> List[Tensor]:
    r"""Each module's output (a tuple's second element: attention weights) on
    one plain forward pass."""
    seen: Dict[int, Tensor] = {}
    handles = [
        module.register_forward_hook(
            lambda _m, _i, out, k=k: seen.__setitem__(
                k, out[1] if isinstance(out, tuple) else out
            )
        )
        for k, module in enumerate(modules)
    ]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return [seen[k] for k in range(len(modules))]


def _rollout_row(maps: List[Tensor], position: int) -> Tensor:
    r"""Row ``position`` of ``mean_h(A^L) ... mean_h(A^1)``, ``[batch, pos]``."""
    product = maps[0].mean(1)
    for later in maps[1:]:
        product = later.mean(1) @ product
    return product[:, position]


@pytest.mark.parametrize("variant", list(PLAIN_VARIANTS))
def test_plain_pytorch_transformers_equal_naive_references(variant: str) -> None:
    model, ids = plain_classifier(variant)
    position = -1 if model.causal else 0
    probs = [block.attention.probabilities for block in model.blocks]
    final, embedded, *maps = _outputs(
        model, [model.final, model.embeddings, *probs], ids
    )
    target = [2, 0, 1]
    logits = model.head(final)  # [batch, pos, C]
    logat = logits[torch.arange(3), :, target]  # [batch, pos]
    norms = embedded.norm(dim=-1)
    expected = {
        "LogAt": (LogAt(model, model.final, head=model.head), logat),
        "NormXLogit": (
            NormXLogit(model, model.final, head=model.head, embedding=model.embeddings),
            norms * logat,
        ),
        "EmbeddingNorm": (EmbeddingNorm(model, model.embeddings), norms),
        "LastLayerAttention": (
            LastLayerAttention(model, probs, position),
            maps[-1].mean(1)[:, position],
        ),
        "AttentionRollout": (
            AttentionRollout(model, probs, position),
            _rollout_row(maps, position),
        ),
    }
    for name, (method, reference) in expected.items():
        scores = method.attribute(ids, target=target, internal_batch_size=2)
        torch.testing.assert_close(scores, reference, rtol=1e-10, atol=1e-12)
        assert scores.shape == (3, 7), name


class _HeadOnEveryPosition(nn.Module):
    def __init__(self, head: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.head = head

    def forward(self, hidden: Tensor) -> Tensor:
        return self.head(hidden)


# ALBERT's blocks share one module, called once per layer: no module's output
# is its last hidden state (test_cat_from_modules checks the clear error).
@pytest.mark.parametrize("family", [f for f in ALL_FAMILIES if f != "albert"])
def test_registered_families_give_the_shortcut_numbers(family: str) -> None:
    model = tiny_classifier(family, dtype=torch.float64)
    adapter = get_adapter(model)
    forward = classifier_forward(model)
    ids = torch.randint(5, 60, (2, 6))
    final = adapter.hidden_state_module(adapter.num_layers)
    embedding = adapter.hidden_state_module(0)
    head = _HeadOnEveryPosition(adapter.head_on_every_position)
    pairs = [
        (LogAt(model), LogAt(forward, final, head=head)),
        (
            NormXLogit(model),
            NormXLogit(forward, final, head=head, embedding=embedding),
        ),
        (EmbeddingNorm(model), EmbeddingNorm(forward, embedding)),
    ]
    for shortcut, explicit in pairs:
        expected = shortcut.attribute(ids, target=[1, 2])
        assert torch.equal(expected, explicit.attribute(ids, target=[1, 2]))


@pytest.mark.parametrize("family", ["bert", "roberta", "gpt2", "llama"])
def test_attention_baselines_give_the_shortcut_numbers(family: str) -> None:
    model = tiny_classifier(family, dtype=torch.float64, attn_implementation="eager")
    adapter = get_adapter(model)
    attention = [
        next(
            m
            for n, m in block.named_modules()
            if n in ("attention.self", "attn", "self_attn")
        )
        for block in adapter.blocks()
    ]
    ids = torch.randint(5, 60, (2, 6))
    position = -1 if adapter.is_causal else 0
    for method in (LastLayerAttention, AttentionRollout):
        explicit = method(classifier_forward(model), attention, position)
        assert torch.equal(method(model).attribute(ids), explicit.attribute(ids))


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda m: LogAt(m, m.final), "needs head="),
        (lambda m: LogAt(m, m.final, m.head), "decoder= belongs to the shortcut"),
        (lambda m: NormXLogit(m, m.final, head=m.head), "needs embedding="),
        (
            lambda m: NormXLogit(
                m, m.final, head=m.head, embedding=m.embeddings, norm="word_embedding"
            ),
            "name the module whose output is normed",
        ),
        (
            lambda m: LastLayerAttention(lambda x: m(x)),
            "needs the modules",
        ),
        (lambda m: EmbeddingNorm(lambda x: m(x)), "needs the modules"),
    ],
)
def test_constructor_errors_name_the_argument(build, message: str) -> None:
    model, _ = plain_classifier("pre-LN decoder")
    with pytest.raises((TypeError, ValueError), match=message):
        build(model)


def test_shortcut_only_arguments_are_refused_on_the_shortcut() -> None:
    model = tiny_classifier("bert")
    with pytest.raises(ValueError, match="head goes with a layer module"):
        LogAt(model, head=nn.Identity())
    with pytest.raises(ValueError, match="embedding goes with a layer module"):
        NormXLogit(model, embedding=nn.Identity())
    with pytest.raises(ValueError, match="position goes with attention modules"):
        LastLayerAttention(model, position=0)


def test_bad_heads_and_positions_are_refused() -> None:
    model, ids = plain_classifier("post-LN encoder")
    with pytest.raises(ValueError, match=r"head must map the states \(3, 7, 16\)"):
        LogAt(model, model.final, head=nn.Identity()).attribute(ids)
    probs = [block.attention.probabilities for block in model.blocks]
    with pytest.raises(IndexError, match="position 7 is out of range for 7"):
        AttentionRollout(model, probs, 7).attribute(ids)
    with pytest.raises(ValueError, match="attribute_generated explains"):
        AttentionRollout(model, probs).attribute(ids, attribute_generated=True)
