#!/usr/bin/env python3
r"""Peak CPU memory of every attribution method on one 512-token input, relative
to one forward pass.

The model is the default sentiment model when its cache is ready
(``load_default_model("sentiment")``, all-MiniLM-L6-v2: 512 positions), else a
BERT with the same sizes and random weights (``--model random``), which costs
the same; it is never fine-tuned here. The input is ``[CLS]``, 510 random
content ids and ``[SEP]``: the cost does not depend on the text.

How memory is measured: each method runs in a fresh subprocess that loads the
model, builds the input and runs the method once on a 32-token input (lazy
allocations, kernel caches); then the peak resident set size (``VmHWM``) is
reset through ``/proc/self/clear_refs`` and the method runs on the 512-token
input. The peak is ``VmHWM`` afterwards minus the resident size before the call.
glibc gets a fixed mmap threshold (``MALLOC_MMAP_THRESHOLD_``), so that freed
tensors leave the RSS instead of being reused unseen from the heap.
RSS sees every allocation (torch's CPU allocator, oneDNN scratch space, Python
objects), which ``tracemalloc`` does not and torch's profiler only partly
does, and a fresh process keeps one method's freed-but-cached memory out of
the next one's number. Where ``clear_refs`` is not writable, the peak is
``resource.getrusage``'s ``ru_maxrss``, which can hide a call's peak below the
loading peak. The forward pass is measured the same way (``torch.no_grad``).

A second table runs the methods whose memory grows with the batch on a batch of
``--chunk-batch`` (8) inputs of the same length, unchunked and with
``internal_batch_size`` 4, 2 and 1: the peak falls with the chunk size. The
forward pass of that batch, which has no ``internal_batch_size``, is measured
once and shown in every column for reference.

Usage::

    python -m benchmarks.bench_memory                 # default model if cached
    python -m benchmarks.bench_memory --model random  # same sizes, random weights
    python -m benchmarks.bench_memory --chunk-batch 0 # batch-1 table only
"""

import argparse
import json
from typing import Dict, List, Optional

import torch
from benchmarks.common import (
    attribute_run,
    Builder,
    captum_ext_methods,
    measure_in_subprocess,
    peak_of,
    random_ids,
    random_minilm,
    Run,
)
from captum.attr import LayerIntegratedGradients
from captum_ext import classifier_forward, get_adapter
from captum_ext.attr import DecodedLayerAttribution, EmbeddingDecoder
from captum_ext.defaults.cache import cache_root, is_complete
from torch import nn, Tensor

LENGTH = 512
WARM_UP_LENGTH = 32
MIDDLE_LAYER = 3  # of MiniLM's 6
IG_STEPS = 20
IG_INTERNAL_BATCH = 5
DEFAULT_CACHE = "default-sentiment-v1"  # captum_ext.defaults.models' cache entry


def _forward(model: nn.Module, _chunk: Optional[int]) -> Run:
    def run(ids: Tensor, mask: Tensor, _target: Tensor) -> object:
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).logits

    return run


def _decoded_ig(model: nn.Module, chunk: Optional[int]) -> Run:
    r"""Integrated Gradients' own ``internal_batch_size`` (rows per pass) is
    :data:`IG_INTERNAL_BATCH`, or ``chunk`` when given (which bounds both)."""
    method = DecodedLayerAttribution(
        model, MIDDLE_LAYER, EmbeddingDecoder(model), LayerIntegratedGradients
    )
    rows = IG_INTERNAL_BATCH if chunk is None else chunk
    return attribute_run(method, rows, n_steps=IG_STEPS)


def _captum_ig(model: nn.Module, _chunk: Optional[int]) -> Run:
    r"""Captum's LayerIntegratedGradients on the word embeddings, for reference."""
    method = LayerIntegratedGradients(
        classifier_forward(model), get_adapter(model).word_embeddings()
    )
    return attribute_run(method, IG_INTERNAL_BATCH, n_steps=IG_STEPS)


def method_table() -> Dict[str, Builder]:
    r"""Name -> builder of ``run(input_ids, attention_mask, target)`` from the
    model and an ``internal_batch_size`` (None: unchunked); the first entry is
    the forward pass the others are compared with. Add a method here or in
    :func:`benchmarks.common.captum_ext_methods`."""
    one_layer = f"DecodedLayerGradCam(l={MIDDLE_LAYER})"
    methods = captum_ext_methods(MIDDLE_LAYER).items()
    return {
        "forward": _forward,
        **{one_layer if n == "DecodedLayerGradCam" else n: b for n, b in methods},
        f"DecodedLayerAttribution(LIG {IG_STEPS}/{IG_INTERNAL_BATCH})": _decoded_ig,
        f"Captum LayerIntegratedGradients({IG_STEPS}/{IG_INTERNAL_BATCH})": _captum_ig,
    }


# The methods whose memory grows with the batch (gradients, per-layer tensors).
CHUNKED = (
    "CAT",
    "AttCAT",
    "GlobEnc",
    "DecodedLayerGradCam(all layers)",
    f"DecodedLayerAttribution(LIG {IG_STEPS}/{IG_INTERNAL_BATCH})",
)


# ------------------------------------------------------------------ worker
def _load(kind: str) -> nn.Module:
    if kind == "random":
        return random_minilm()
    from captum_ext.defaults.models import load_default_model

    return load_default_model("sentiment")[0]


def worker(
    name: str, kind: str, threads: int, batch: int, chunk: Optional[int]
) -> Dict[str, float]:
    r"""Runs one method in this (fresh) process; returns its peak memory."""
    torch.set_num_threads(threads)
    model = _load(kind)
    run = method_table()[name](model, chunk)
    ids = random_ids(model, batch, LENGTH)
    mask = torch.ones_like(ids)
    target = torch.zeros(batch, dtype=torch.long)  # the cost does not depend on it
    short_ids = random_ids(model, batch, WARM_UP_LENGTH)
    run(short_ids, torch.ones_like(short_ids), target)
    return peak_of(lambda: run(ids, mask, target))


# -------------------------------------------------------------------- main
def _default_ready() -> bool:
    return is_complete(cache_root() / DEFAULT_CACHE)


def _measure(
    name: str, kind: str, threads: int, batch: int = 1, chunk: Optional[int] = None
) -> Dict[str, float]:
    arguments = [name, "--model", kind, "--threads", str(threads)]
    arguments += ["--batch", str(batch)]
    arguments += [] if chunk is None else ["--chunk", str(chunk)]
    return measure_in_subprocess("benchmarks.bench_memory", arguments)


def _print_table(results: Dict[str, Dict[str, float]]) -> None:
    forward = results["forward"]["peak_mib"]
    print(f"{'method':<44} {'peak MiB':>9} {'x forward':>9} {'seconds':>8}")
    for name, result in results.items():
        ratio = result["peak_mib"] / forward
        print(
            f"{name:<44} {result['peak_mib']:9.1f} {ratio:9.2f} "
            f"{result['seconds']:8.2f}"
        )


def _print_chunks(kind: str, threads: int, batch: int, chunks: List[int]) -> None:
    r"""Peak MiB of the batch-sized methods for each ``internal_batch_size``."""
    print(f"\nbatch {batch} x {LENGTH} tokens: peak MiB by internal_batch_size")
    header = ["None"] + [str(chunk) for chunk in chunks]
    print(f"{'method':<44} " + " ".join(f"{h:>8}" for h in header))
    sizes: List[Optional[int]] = [None, *chunks]
    # The forward pass takes no internal_batch_size: one measurement of this
    # batch is the reference in every column.
    forward = _measure("forward", kind, threads, batch)["peak_mib"]
    print(f"{'forward':<44} " + " ".join(f"{forward:8.1f}" for _ in sizes))
    for name in CHUNKED:
        peaks = [
            _measure(name, kind, threads, batch, chunk)["peak_mib"] for chunk in sizes
        ]
        print(f"{name:<44} " + " ".join(f"{peak:8.1f}" for peak in peaks))


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["auto", "default", "random"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--chunk-batch",
        type=int,
        default=8,
        help="batch of the internal_batch_size sweep (0: no sweep)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--chunk", type=int, help=argparse.SUPPRESS)
    parser.set_defaults(model="auto")
    args = parser.parse_args(argv)
    kind = args.model
    if kind == "auto":
        kind = "default" if _default_ready() else "random"
    if args.worker:
        result = worker(args.worker, kind, args.threads, args.batch, args.chunk)
        print(json.dumps(result))
        return
    print(f"model: {kind}; batch 1 x {LENGTH} tokens; {args.threads} thread(s), CPU")
    results = {name: _measure(name, kind, args.threads) for name in method_table()}
    if not all(result["exact"] for result in results.values()):
        print("note: /proc/self/clear_refs unavailable, peaks are ru_maxrss deltas")
    _print_table(results)
    if args.chunk_batch:
        chunks = [c for c in (4, 2, 1) if c < args.chunk_batch]
        _print_chunks(kind, args.threads, args.chunk_batch, chunks)


if __name__ == "__main__":
    main()
