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

Usage::

    python -m benchmarks.bench_memory                 # default model if cached
    python -m benchmarks.bench_memory --model random  # same sizes, random weights
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import torch
from benchmarks.common import random_minilm
from captum.attr import LayerIntegratedGradients
from captum_ext import classifier_forward
from captum_ext._utils.cache import cache_root, is_complete
from captum_ext.attr import (
    AttCAT,
    CAT,
    DecodedLayerAttribution,
    DecodedLayerGradCam,
    EmbeddingDecoder,
    GlobEnc,
    LogAt,
    NormXLogit,
)
from torch import nn, Tensor

LENGTH = 512
WARM_UP_LENGTH = 32
MIDDLE_LAYER = 3  # of MiniLM's 6
IG_STEPS = 20
IG_INTERNAL_BATCH = 5
MMAP_THRESHOLD = 64 * 1024
DEFAULT_CACHE = "default-sentiment-v1"  # captum_ext.default_models' cache entry

# (input_ids, attention_mask, target) -> anything
Run = Callable[[Tensor, Tensor, Tensor], object]


def _attribute(method: object, **kwargs: object) -> Run:
    return lambda ids, mask, target: method.attribute(  # type: ignore[attr-defined]
        ids, target=target, additional_forward_args=(mask,), **kwargs
    )


def _forward(model: nn.Module) -> Run:
    def run(ids: Tensor, mask: Tensor, _target: Tensor) -> object:
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).logits

    return run


def _decoded_ig(model: nn.Module) -> Run:
    method = DecodedLayerAttribution(
        model, MIDDLE_LAYER, EmbeddingDecoder(model), LayerIntegratedGradients
    )
    return _attribute(method, n_steps=IG_STEPS, internal_batch_size=IG_INTERNAL_BATCH)


def _captum_ig(model: nn.Module) -> Run:
    r"""Captum's LayerIntegratedGradients on the word embeddings, for reference."""
    method = LayerIntegratedGradients(
        classifier_forward(model), model.get_input_embeddings()
    )
    return _attribute(method, n_steps=IG_STEPS, internal_batch_size=IG_INTERNAL_BATCH)


def _sweep(model: nn.Module) -> Run:
    method = DecodedLayerGradCam(model, MIDDLE_LAYER, EmbeddingDecoder(model))
    return lambda ids, mask, target: method.attribute_all_layers(ids, target, mask)


def method_table() -> Dict[str, Callable[[nn.Module], Run]]:
    r"""Name -> builder of ``run(input_ids, attention_mask, target)``; the first
    entry is the forward pass the others are compared with. Add a method here."""
    return {
        "forward": _forward,
        "LogAt": lambda m: _attribute(LogAt(m)),
        "NormXLogit": lambda m: _attribute(NormXLogit(m)),
        "CAT": lambda m: _attribute(CAT(m)),
        "AttCAT": lambda m: _attribute(AttCAT(m)),
        "GlobEnc": lambda m: _attribute(GlobEnc(m)),
        f"DecodedLayerGradCam(l={MIDDLE_LAYER})": lambda m: _attribute(
            DecodedLayerGradCam(m, MIDDLE_LAYER, EmbeddingDecoder(m))
        ),
        "DecodedLayerGradCam(all layers)": _sweep,
        f"DecodedLayerAttribution(LIG {IG_STEPS}/{IG_INTERNAL_BATCH})": _decoded_ig,
        f"Captum LayerIntegratedGradients({IG_STEPS}/{IG_INTERNAL_BATCH})": _captum_ig,
    }


# ------------------------------------------------------------------ worker
def _load(kind: str) -> nn.Module:
    if kind == "random":
        return random_minilm()
    from captum_ext.default_models import load_default_model

    return load_default_model("sentiment")[0]


def _inputs(model: nn.Module, length: int) -> Tuple[Tensor, Tensor]:
    config = model.config
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, config.vocab_size, (1, length), generator=generator)
    ids[:, 0], ids[:, -1] = config.cls_token_id, config.sep_token_id
    return ids, torch.ones_like(ids)


def _status_kib(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    if match is None:
        raise OSError(f"no {field} in /proc/self/status")
    return int(match.group(1))


def _reset_peak() -> bool:
    r"""Resets ``VmHWM`` to the current RSS; False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_kib(exact: bool) -> int:
    if exact:
        return _status_kib("VmHWM")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def worker(name: str, kind: str, threads: int) -> Dict[str, float]:
    r"""Runs one method in this (fresh) process; returns its peak memory."""
    torch.set_num_threads(threads)
    model = _load(kind)
    run = method_table()[name](model)
    ids, mask = _inputs(model, LENGTH)
    target = torch.zeros(1, dtype=torch.long)  # the cost does not depend on it
    short_ids, short_mask = _inputs(model, WARM_UP_LENGTH)
    run(short_ids, short_mask, target)
    exact = _reset_peak()
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    run(ids, mask, target)
    seconds = time.perf_counter() - start
    peak = _peak_kib(exact)
    return {"peak_mib": (peak - before) / 1024, "seconds": seconds, "exact": exact}


# -------------------------------------------------------------------- main
def _default_ready() -> bool:
    return is_complete(cache_root() / DEFAULT_CACHE)


def _measure(name: str, kind: str, threads: int) -> Dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.bench_memory", "--worker", name]
    command += ["--model", kind, "--threads", str(threads)]
    # A fixed mmap threshold: glibc serves every large block with mmap and unmaps
    # it when freed, so RSS follows the live tensors instead of keeping freed
    # heap pages that the next allocation reuses unseen.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)}
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _print_table(results: Dict[str, Dict[str, float]]) -> None:
    forward = results["forward"]["peak_mib"]
    print(f"{'method':<44} {'peak MiB':>9} {'x forward':>9} {'seconds':>8}")
    for name, result in results.items():
        ratio = result["peak_mib"] / forward
        print(
            f"{name:<44} {result['peak_mib']:9.1f} {ratio:9.2f} "
            f"{result['seconds']:8.2f}"
        )


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["auto", "default", "random"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.set_defaults(model="auto")
    args = parser.parse_args(argv)
    kind = args.model
    if kind == "auto":
        kind = "default" if _default_ready() else "random"
    if args.worker:
        print(json.dumps(worker(args.worker, kind, args.threads)))
        return
    print(f"model: {kind}; batch 1 x {LENGTH} tokens; {args.threads} thread(s), CPU")
    results = {name: _measure(name, kind, args.threads) for name in method_table()}
    if not all(result["exact"] for result in results.values()):
        print("note: /proc/self/clear_refs unavailable, peaks are ru_maxrss deltas")
    _print_table(results)


if __name__ == "__main__":
    main()
