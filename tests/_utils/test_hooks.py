#!/usr/bin/env python3
r"""``single_call``: the one tensor a hook captured in one forward pass, or a
clear error naming the method and the module's part."""

import pytest
import torch
from captum_ext._utils.hooks import HookSet, single_call
from torch import nn


def test_single_call_returns_the_one_captured_output() -> None:
    layer = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    with HookSet() as hooks:
        store = hooks.capture_output(layer)
        expected = layer(x)
    assert single_call(store, "CAT", "block 1's attention input") is store[0]
    torch.testing.assert_close(store[0], expected, rtol=0, atol=0)


@pytest.mark.parametrize("calls", (0, 2))
def test_a_module_run_other_than_once_is_named(calls: int) -> None:
    layer = nn.Linear(3, 2)
    with HookSet() as hooks:
        store = hooks.capture_output(layer)
        for _ in range(calls):
            layer(torch.randn(1, 3))
    with pytest.raises(RuntimeError) as error:
        single_call(store, "GlobEnc", "block 2's value projection")
    assert str(error.value) == (
        "GlobEnc expected one call of block 2's value projection per forward "
        f"pass, saw {calls}; the model reuses or skips the module (a "
        "TorchScript forward function runs no module hooks)"
    )
