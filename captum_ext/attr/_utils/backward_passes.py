#!/usr/bin/env python3
r"""Target steps per backward pass on a causal LM: how many steps share one
pass batched over them (:func:`choose_targets_per_backward`), and the passes
(:func:`backward_passes`), with fewer steps after a pass that does not fit.

Batching ``k`` steps into one pass (``is_grads_batched``) holds ``k``
gradients of everything the pass differentiates at once. It pays only where
one pass does not fill the device: on a short prompt on an accelerator. On a
CPU, and on an accelerator past :data:`BATCHED_TARGETS_MAX_TOKENS` tokens, it
costs memory and buys no time (docs/generation.rst, "Target steps per
backward pass"), so the default takes one step per pass there."""

from typing import Callable, Iterator, List, Optional, Tuple

import torch
from torch import Tensor

__all__ = [
    "ACCELERATOR_TARGETS_PER_BACKWARD",
    "BATCHED_TARGETS_MAX_TOKENS",
    "backward_passes",
    "batched_vjp",
    "choose_targets_per_backward",
    "free_device_memory",
]

# Target steps per backward pass on an accelerator where batching pays.
ACCELERATOR_TARGETS_PER_BACKWARD = 16
# Tokens (examples x positions) up to which batched steps are the default on an
# accelerator. Issue 42's H200 figures (random Llama, bf16): one pass for 16
# steps took 4.4 forwards' time against 11.1 at 512 tokens (2.5x faster) and
# 13.5 against 23.2 on an 8 x 1024 Llama at 4,096 tokens (1.7x faster), but
# 20.6 against 20.5 at 8,192 tokens on Llama-7B's shape, at 1.7x the peak:
# past this count the 1.3x memory it costs is not bought by 1.3x the speed.
BATCHED_TARGETS_MAX_TOKENS = 4096

# (steps of one pass) -> one tensor [len(steps), *shape] per differentiated tensor
GroupGradients = Callable[[List[int]], Tuple[Tensor, ...]]


def choose_targets_per_backward(
    device: torch.device, tokens: int, bytes_per_target: int
) -> int:
    r"""The default steps per backward pass: 1 on a CPU and past
    :data:`BATCHED_TARGETS_MAX_TOKENS` ``tokens``; else up to
    :data:`ACCELERATOR_TARGETS_PER_BACKWARD`, halved while that many
    ``bytes_per_target`` (the estimated extra memory of one more step in a
    pass) exceed the device's free memory, so the default does not run into an
    out-of-memory error where fewer steps fit."""
    if device.type == "cpu" or tokens > BATCHED_TARGETS_MAX_TOKENS:
        return 1
    per_pass = ACCELERATOR_TARGETS_PER_BACKWARD
    free = free_device_memory(device)
    while free is not None and per_pass > 1 and per_pass * bytes_per_target > free:
        per_pass //= 2
    return per_pass


def free_device_memory(device: torch.device) -> Optional[int]:
    r"""Bytes a CUDA device can still give this process (free on the device
    plus what PyTorch's caching allocator holds unused); None where unknown."""
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(free + cached)


def backward_passes(
    gradients: GroupGradients, steps: List[int], per_pass: int, adapt: bool
) -> Iterator[Tuple[Tensor, ...]]:
    r"""The gradients of each of ``steps`` in order, from ``gradients(group)``
    over groups of ``per_pass`` steps (with ``adapt``: fewer after a pass that
    did not fit or could not be batched)."""
    while steps:
        group = steps[:per_pass]
        try:
            grads = gradients(group)
        except RuntimeError as error:  # OutOfMemoryError is one
            if not adapt or len(group) == 1:
                raise
            # Half the steps where they did not fit; one step per pass, which
            # needs no batching rule, where the pass could not be batched.
            out_of_memory = isinstance(error, torch.OutOfMemoryError)
            per_pass = len(group) // 2 if out_of_memory else 1
            continue
        steps = steps[len(group) :]
        for index in range(len(group)):
            yield tuple(grad[index] for grad in grads)


def batched_vjp(
    output: Tensor, wrt: Tuple[Tensor, ...], grad_outputs: Tensor
) -> Tuple[Tensor, ...]:
    r"""``[k, *tensor.shape]`` per tensor of ``wrt``: the vector-Jacobian
    products of ``output`` with each of the ``k`` rows of ``grad_outputs``
    ``[k, *output.shape]``, in one backward pass through ``output``'s retained
    graph (batched over the rows; a plain pass for ``k = 1``)."""
    with torch.enable_grad():  # the caller may consume this under no_grad
        if len(grad_outputs) == 1:
            grads = torch.autograd.grad(output, wrt, grad_outputs[0], retain_graph=True)
            return tuple(grad[None] for grad in grads)
        return torch.autograd.grad(
            output, wrt, grad_outputs, retain_graph=True, is_grads_batched=True
        )
