#!/usr/bin/env python3

from typing import Any, Dict, List

import torch
from captum.attr import BlockParts, GlobEnc
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.plain_transformers import plain_classifier
from torch import nn, Tensor

VARIANTS = ("N", "N_res", "N_resln", "N_enc")


def _globenc(model: Any, forward: Any = None, position: Any = None) -> GlobEnc:
    blocks = list(model.blocks)
    parts = [
        BlockParts(b.attention.value, b.attention.out, b.ln1, b.ln2) for b in blocks
    ]
    probabilities = [b.attention.probabilities for b in blocks]
    return GlobEnc(forward or model, blocks, probabilities, parts, position)


def _captured(model: Any, ids: Tensor) -> List[Dict[str, Tensor]]:
    r"""Per block: its input ``x``, attention ``a`` and both LayerNorms' real
    inputs ``p1``, ``p2``, from one plain forward pass."""
    seen: List[Dict[str, Tensor]] = [{} for _ in model.blocks]
    handles = []
    for block, store in zip(model.blocks, seen):

        def keep(name: str, store: Dict[str, Tensor] = store) -> Any:
            return lambda _m, inputs, *out: store.__setitem__(
                name, (out[0] if out else inputs[0]).detach()
            )

        handles += [
            block.register_forward_pre_hook(keep("x")),
            block.attention.probabilities.register_forward_hook(keep("a")),
            block.ln1.register_forward_pre_hook(keep("p1")),
            block.ln2.register_forward_pre_hook(keep("p2")),
        ]
    try:
        model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _layer_norm(v: Tensor, real: Tensor, norm: nn.LayerNorm) -> Tensor:
    r"""The LayerNorm as the linear map fixed by its real input's variance."""
    std = (real.var(unbiased=False) + norm.eps).sqrt()
    return norm.weight * (v - v.mean()) / std


def _naive_matrix(block: Any, seen: Dict[str, Tensor], b: int, variant: str) -> Tensor:
    r"""``N[i, j]``: the norm of source ``j``'s vector at ``i``, built one
    ``(i, j, head)`` at a time (Modarressi et al. 2022, Eq. 4-7)."""
    attention = block.attention
    heads, pos = seen["a"].shape[1], seen["a"].shape[-1]
    x, values = seen["x"][b], attention.value(seen["x"][b]).detach()
    w_out = attention.out.weight.detach()
    dh = w_out.shape[0] // heads
    matrix = torch.zeros(pos, pos, dtype=x.dtype)
    for i in range(pos):
        for j in range(pos):
            z = sum(
                seen["a"][b, h, i, j]
                * values[j, h * dh : (h + 1) * dh]
                @ w_out[:, h * dh : (h + 1) * dh].T
                for h in range(heads)
            )
            if variant != "N" and i == j:
                z = z + x[i]
            if variant in ("N_resln", "N_enc"):
                z = _layer_norm(z, seen["p1"][b, i], block.ln1)
            if variant == "N_enc":
                z = _layer_norm(z, seen["p2"][b, i], block.ln2)
            matrix[i, j] = z.norm()
    return matrix


def _naive_rows(model: Any, ids: Tensor, variant: str, position: int) -> Tensor:
    r"""Row ``position`` of ``N^L ... N^1``, one example at a time."""
    captured = _captured(model, ids)
    rows = []
    for b in range(len(ids)):
        rollout = None
        for block, seen in zip(model.blocks, captured):
            matrix = _naive_matrix(block, seen, b, variant)
            rollout = matrix if rollout is None else matrix @ rollout
        assert rollout is not None
        rows.append(rollout[position])
    return torch.stack(rows)


class Test(BaseTest):
    def test_equal_the_naive_decomposition_rolled_out(self) -> None:
        model, ids = plain_classifier("post-LN encoder")
        for variant in VARIANTS:
            expected = _naive_rows(model, ids, variant, 0)
            actual = _globenc(model).attribute(
                ids, variant=variant, internal_batch_size=2
            )
            assertTensorAlmostEqual(self, actual, expected, delta=1e-9, mode="max")

    def test_the_decomposed_vectors_sum_to_the_first_layer_norm_input(self) -> None:
        # sum_j z_ij + b_O is the real input of LN1: the decomposition the
        # naive reference uses loses nothing but the output bias.
        model, ids = plain_classifier("post-LN encoder")
        block, seen = model.blocks[1], _captured(model, ids)[1]
        attention = block.attention
        values = attention.value(seen["x"]).detach()  # [batch, pos, d]
        heads, d = seen["a"].shape[1], values.shape[-1]
        per_head = values.view(*values.shape[:2], heads, d // heads)
        mixed = torch.einsum("bhij,bjhk->bihk", seen["a"], per_head)
        total = attention.out(mixed.reshape(values.shape)) + seen["x"]
        assertTensorAlmostEqual(self, total, seen["p1"], delta=1e-12, mode="max")

    def test_without_rollout_is_the_last_layer_at_the_position(self) -> None:
        model, ids = plain_classifier("post-LN encoder")
        captured = _captured(model, ids)
        expected = torch.stack(
            [
                _naive_matrix(model.blocks[-1], captured[-1], b, "N_enc")[3]
                for b in range(len(ids))
            ]
        )
        actual = _globenc(model, position=3).attribute(ids, rollout=False)
        assertTensorAlmostEqual(self, actual, expected, delta=1e-12, mode="max")

    def test_the_target_is_validated_but_changes_nothing(self) -> None:
        model, ids = plain_classifier("post-LN encoder")
        globenc = _globenc(model)
        assertTensorAlmostEqual(
            self, globenc.attribute(ids, 0), globenc.attribute(ids, [2, 1, 0]), delta=0
        )
        with self.assertRaises((IndexError, ValueError)):
            globenc.attribute(ids, target=3)

    def test_bad_arguments_are_named(self) -> None:
        model, ids = plain_classifier("post-LN encoder")
        blocks = list(model.blocks)
        with self.assertRaisesRegex(ValueError, "attention="):
            GlobEnc(model, blocks, None, [])
        with self.assertRaisesRegex(ValueError, "one attention module"):
            probabilities = [b.attention.probabilities for b in blocks]
            GlobEnc(model, blocks, probabilities, [])
        with self.assertRaisesRegex(ValueError, "variant must be one of"):
            _globenc(model).attribute(ids, variant="N_dec")
