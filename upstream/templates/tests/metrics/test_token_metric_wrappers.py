#!/usr/bin/env python3

import tempfile
import unittest
from typing import Any, Callable

import torch
import torch.distributed as dist
from captum.metrics import aopc, kendall_tau, sufficiency
from captum.testing.helpers import BaseTest
from captum.testing.helpers.basic import assertTensorAlmostEqual
from captum.testing.helpers.naive_token_curves import example_batch
from captum.testing.helpers.transformer_models import (
    tiny_transformer,
    TinyTransformerClassifier,
)
from torch import nn, Tensor


class _FailingForward(nn.Module):
    r"""Runs ``model``, raising on call ``fail_at`` (counting from 1)."""

    def __init__(self, model: nn.Module, fail_at: int) -> None:
        super().__init__()
        self.model = model
        self.fail_at = fail_at
        self.calls = 0

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("forward failed")
        return self.model(input_ids, attention_mask)


def _hook_count(model: nn.Module) -> int:
    return sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
        for m in model.modules()
    )


class Test(BaseTest):
    def _check_same_as_eager(
        self, wrapped: Callable[..., Tensor], model: TinyTransformerClassifier
    ) -> None:
        ids, mask, scores = example_batch(left_padded=model.causal)
        for metric in (aopc, sufficiency):
            expected = metric(model, ids, scores, None, (mask,))
            actual = metric(wrapped, ids, scores, None, (mask,))
            assertTensorAlmostEqual(
                self, actual.curve, expected.curve, delta=1e-9, mode="max"
            )
        table = (
            scores[:, None, :].expand(-1, 3, -1)
            * torch.tensor([1.0, -1.0, 0.5])[None, :, None]
        )
        assertTensorAlmostEqual(
            self,
            kendall_tau(wrapped, ids, table, None, (mask,)),
            kendall_tau(model, ids, table, None, (mask,)),
            delta=0,
        )

    def test_jit_scripted_forward(self) -> None:
        for causal in (False, True):
            model = tiny_transformer(causal)
            self._check_same_as_eager(torch.jit.script(model), model)

    def test_jit_traced_forward(self) -> None:
        # Traced on one length; the metrics run shorter inputs after deletion.
        model = tiny_transformer(True)
        ids, mask, _ = example_batch(left_padded=True)
        self._check_same_as_eager(torch.jit.trace(model, (ids, mask)), model)

    @unittest.skipIf(not torch.cuda.is_available(), "Skipping as CUDA unavailable")
    def test_data_parallel(self) -> None:
        model = tiny_transformer(False).cuda()
        ids, mask, scores = (t.cuda() for t in example_batch(left_padded=False))
        expected = aopc(model, ids, scores, None, (mask,))
        actual = aopc(nn.DataParallel(model), ids, scores, None, (mask,))
        assertTensorAlmostEqual(
            self, actual.curve, expected.curve, delta=1e-9, mode="max"
        )

    def test_distributed_data_parallel(self) -> None:
        # One process, gloo on CPU: the metrics call the DDP module's forward.
        with tempfile.NamedTemporaryFile() as store:
            dist.init_process_group(
                "gloo", init_method=f"file://{store.name}", rank=0, world_size=1
            )
            try:
                model = tiny_transformer(False)
                wrapped = nn.parallel.DistributedDataParallel(model)
                self._check_same_as_eager(wrapped, model)
            finally:
                dist.destroy_process_group()

    def test_mode_and_hooks_restored_after_errors(self) -> None:
        # Failing on the first pass (the unperturbed inputs) and on the second
        # (the first perturbed level); kendall_tau runs the model once.
        ids, mask, scores = example_batch(left_padded=False)
        cases: Any = (
            (1, lambda f: aopc(f, ids, scores, None, (mask,))),
            (2, lambda f: aopc(f, ids, scores, None, (mask,))),
            (1, lambda f: kendall_tau(f, ids, lambda t: scores, None, (mask,))),
        )
        for fail_at, call in cases:
            model = tiny_transformer(False).train()
            hooks = _hook_count(model)
            with self.assertRaisesRegex(RuntimeError, "forward failed"):
                with self.assertWarnsRegex(UserWarning, "training mode"):
                    call(_FailingForward(model, fail_at))
            self.assertTrue(all(m.training for m in model.modules()))
            self.assertEqual(_hook_count(model), hooks)
