#!/usr/bin/env python3
r"""Peak CPU memory of explaining generated text at 2,048 tokens, bounded by
``internal_batch_size``, relative to one forward pass.

The model is a random-init causal LM of modest size with 2,048 positions
(:func:`benchmarks.common.random_causal_lms`: Llama 4 layers x 256 by default,
or GPT-2 6 x 384, ``--family``; vocabulary ``--vocab`` 8192, so that the
logits of a forward pass, ``batch x 2048 x vocab`` floats, do not drown the
methods' own memory), eager attention, float32. A batch of ``--batch`` (4)
sequences of ``--length`` (2048) tokens, a prompt of ``length - steps`` tokens
(left-padded: row b has b padding tokens) and a continuation of ``--steps``
(16) target ids, is explained by each of captum_ext's methods on causal LMs
(LogAt, NormXLogit, CAT, AttCAT, DecodedLayerGradCam at the middle layer with
the model's own head, GlobEnc), all T rows in one call, with
``internal_batch_size`` None (the whole batch at once) and 1.

The unit is one plain forward pass (``torch.no_grad``) over prompt +
continuation of the whole batch; a forward pass over one sequence is shown
for reference (what ``internal_batch_size=1`` can at best approach, plus the
result and the method's own buffers).

How memory is measured (as in ``benchmarks/bench_memory.py``): every number
comes from a fresh subprocess that builds the model and the input, runs the
call once on a 64-token version of the batch (lazy allocations), then resets
the peak resident set size (``VmHWM``, through ``/proc/self/clear_refs``) and
runs it on the full batch; the peak is ``VmHWM`` minus the resident size before
the call (:class:`benchmarks.common.PeakMemory`), with glibc's fixed mmap
threshold so that freed tensors leave the RSS. One thread by default.

Usage::

    python -m benchmarks.bench_generation_memory
    python -m benchmarks.bench_generation_memory --length 256 --steps 4  # quick
    python -m benchmarks.bench_generation_memory --family gpt2
"""

import argparse
import json
from typing import Any, Dict, List, Optional

import torch
from benchmarks.common import (
    Builder,
    causal_lm_forward,
    causal_lm_methods,
    continuation,
    measure_in_subprocess,
    peak_of,
    random_causal_lms,
)
from torch import nn

POSITIONS = 2048
WARM_UP_LENGTH = 64
FAMILIES = {"llama": "llama 4x256", "gpt2": "gpt2 6x384"}
CHUNKS = (None, 1)


def builders() -> Dict[str, Builder]:
    r"""Name -> builder: the forward pass (the unit) and every method."""
    return {"forward": causal_lm_forward, **causal_lm_methods()}


def _model(family: str, vocab: int) -> nn.Module:
    return random_causal_lms(POSITIONS, vocab)[FAMILIES[family]]


def worker(name: str, options: argparse.Namespace) -> Dict[str, Any]:
    r"""Runs one call in this (fresh) process; returns its peak memory."""
    torch.set_num_threads(options.threads)
    model = _model(options.family, options.vocab)
    run = builders()[name](model, options.chunk)
    prompt = options.length - options.steps
    data = continuation(model, options.batch, prompt, options.steps)
    warm = continuation(model, options.batch, WARM_UP_LENGTH, options.steps)
    run(warm["ids"], warm["mask"], warm["target"])
    return peak_of(lambda: run(data["ids"], data["mask"], data["target"]))


def _measure(
    name: str, options: argparse.Namespace, batch: int, chunk: Optional[int]
) -> Dict[str, Any]:
    arguments = [name, "--batch", str(batch), "--threads", str(options.threads)]
    arguments += ["--family", options.family, "--vocab", str(options.vocab)]
    arguments += ["--length", str(options.length), "--steps", str(options.steps)]
    arguments += [] if chunk is None else ["--chunk", str(chunk)]
    return measure_in_subprocess("benchmarks.bench_generation_memory", arguments)


def table(options: argparse.Namespace) -> None:
    r"""Prints the forward passes and every method's peak for each chunk size."""
    batch = options.batch
    forward = _measure("forward", options, batch, None)
    single = _measure("forward", options, 1, None)
    unit = forward["peak_mib"]
    columns = "".join(
        f" {'ibs=' + str(chunk) + ' MiB':>12} {'x fwd':>6} {'s':>6}" for chunk in CHUNKS
    )
    print(f"{'':<24}{columns}")
    results: List[Dict[str, Any]] = [forward, single]
    for label, result in (
        (f"forward (batch {batch})", forward),
        ("forward (1)", single),
    ):
        print(f"{label:<24} {_cell(result, unit)}")
    for name in causal_lm_methods():
        measured = [_measure(name, options, batch, chunk) for chunk in CHUNKS]
        results += measured
        print(f"{name:<24}" + "".join(f" {_cell(one, unit)}" for one in measured))
    if not all(result["exact"] for result in results):
        print("note: /proc/self/clear_refs unavailable, peaks are ru_maxrss deltas")


def _cell(result: Dict[str, Any], unit: float) -> str:
    peak = result["peak_mib"]
    return f"{peak:12.1f} {peak / unit:6.2f} {result['seconds']:6.1f}"


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=sorted(FAMILIES), default="llama")
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=POSITIONS)
    parser.add_argument("--steps", type=int, default=16, help="target tokens T")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--chunk", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if not options.steps < options.length <= POSITIONS:
        parser.error(f"need --steps < --length <= {POSITIONS}")
    if options.worker:
        print(json.dumps(worker(options.worker, options)))
        return
    print(
        f"{FAMILIES[options.family]}, vocabulary {options.vocab}; batch "
        f"{options.batch} x {options.length} tokens (prompt "
        f"{options.length - options.steps} + continuation {options.steps}); "
        f"{options.threads} thread(s), CPU"
    )
    print("peak MiB above the start by internal_batch_size (ibs), x forward")
    print(f"(batch {options.batch}) and seconds")
    table(options)


if __name__ == "__main__":
    main()
