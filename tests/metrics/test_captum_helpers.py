#!/usr/bin/env python3
r"""Pins the behaviour of the private Captum helpers captum_ext.metrics relies on,
so that a Captum upgrade that changes them fails here, loudly."""

import io

import torch
from captum._utils.common import (
    _format_additional_forward_args,
    _format_tensor_into_tuples,
    _run_forward,
)
from captum._utils.progress import NullProgress, progress
from captum.log import log_usage


def test_format_additional_forward_args():
    mask = torch.ones(2, 3)
    assert _format_additional_forward_args(None) is None
    assert _format_additional_forward_args(mask)[0] is mask
    assert len(_format_additional_forward_args(mask)) == 1
    args = (mask, None)
    assert _format_additional_forward_args(args) is args


def test_format_tensor_into_tuples():
    ids = torch.zeros(2, 3, dtype=torch.long)
    assert _format_tensor_into_tuples(None) is None
    assert _format_tensor_into_tuples(ids)[0] is ids
    single = (ids,)
    assert _format_tensor_into_tuples(single) is single


def test_run_forward_passes_args_in_order_and_selects_nothing():
    seen = []

    def forward(input_ids, attention_mask, token_type_ids=None):
        seen.append((input_ids, attention_mask, token_type_ids))
        return torch.arange(6.0).view(2, 3)

    ids, mask, types = torch.zeros(2, 4), torch.ones(2, 4), torch.ones(2, 4)
    out = _run_forward(forward, ids, None, (mask, types))
    assert torch.equal(out, torch.arange(6.0).view(2, 3))
    assert seen[0][0] is ids and seen[0][1] is mask and seen[0][2] is types
    _run_forward(forward, ids, None, (mask,))
    assert seen[1][2] is None


def test_progress_helpers():
    stream = io.StringIO()
    with progress(desc="AOPC", total=4, file=stream, mininterval=0) as bar:
        bar.update(4)
    assert "AOPC" in stream.getvalue() and "4/4" in stream.getvalue()
    with NullProgress() as bar:
        assert bar.update(3) is None


def test_log_usage_keeps_name_and_doc():
    @log_usage()
    def metric(x):
        r"""Doc."""
        return x + 1

    assert metric(1) == 2
    assert metric.__name__ == "metric" and metric.__doc__ == "Doc."
