#!/usr/bin/env python3
r"""Cost of the attribution methods relative to one forward pass: time and peak
memory, unchunked and with ``internal_batch_size``.

``--shape default`` (the default): a batch of 32 x 64 tokens of real text
(consecutive test snippets of ``load_split("sentiment")`` joined until every row
fills 64 tokens; random ids if the data cannot be loaded) explained on the
default sentiment model (``--tiny``: its architecture with random weights).
``--shape bert-base|roberta-base|llama-1b|llama-7b``: a random-init model of
that real shape built from its config (no download; Llama-1B is TinyLlama's
1.1B shape), on 8 x 512 random ids, built directly on ``--device`` in
``--dtype``; GlobEnc runs on the post-LN encoders only.

Every entry of the method table built by :func:`method_table` (a name and a
callable ``(input_ids, attention_mask, target) -> scores``) is timed and each
time divided by one plain forward pass (``torch.no_grad``) measured in the same
run; its peak memory above what was in use before the call
(``torch.cuda.max_memory_allocated`` on CUDA, the peak RSS on the CPU, see
:class:`benchmarks.common.PeakMemory`; in one process, so the CPU figures
are indicative: ``bench_memory`` measures each method in a fresh process) is
divided by the forward's. Each method runs unchunked and with
``internal_batch_size`` (``--internal-batch-size``, default a quarter of the
batch). Captum's ``LayerIntegratedGradients`` (``n_steps=50``, on the word
embeddings) runs with ``internal_batch_size`` = the batch (50 passes of one
batch) and, on CUDA, without it (all 50 x batch rows at once; "OOM" if that
does not fit). Targets on the default shape: NormXLogit <= 1.3x forward,
AttCAT <= 3.5x, GlobEnc <= 3x, the Decoded Grad-CAM sweep over all layers <=
4x, and every method at least 20x faster than Integrated Gradients.

CPU timings are noisy on a shared machine: after a warm-up, every run is timed
right after its own forward pass and the median of ``--repeats`` ratios is
reported (one run, no warm-up, for Integrated Gradients).

Usage::

    python -m benchmarks.bench_methods            # the default sentiment model
    python -m benchmarks.bench_methods --tiny     # same shape, random weights
    python -m benchmarks.bench_methods --device cuda --dtype bfloat16 \\
        --shape llama-7b
"""

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import transformers
from benchmarks.common import (
    captum_ext_methods,
    MMAP_ENV,
    MMAP_THRESHOLD,
    PeakMemory,
    random_ids,
    random_minilm,
    Run,
)
from captum.attr import LayerIntegratedGradients
from captum_ext import classifier_forward, get_adapter, UnsupportedModelError
from captum_ext.evaluation.user_models import DTYPES
from torch import nn, Tensor

BATCH = 32
LENGTH = 64
SHAPE_BATCH = 8
SHAPE_LENGTH = 512
IG_STEPS = 50
IG_NAME = f"LayerIntegratedGradients({IG_STEPS})"
# name -> most allowed (method time / forward time), on the default shape
TARGETS = {
    "NormXLogit": 1.3,
    "AttCAT": 3.5,
    "GlobEnc": 3.0,
    "DecodedGradCam all layers": 4.0,
}
MIN_SPEEDUP_OVER_IG = 20.0
# The rows, in order: the label printed (TARGETS' keys) -> the method's name in
# benchmarks.common.captum_ext_methods
ROWS = {
    "NormXLogit": "NormXLogit",
    "LogAt": "LogAt",
    "AttCAT": "AttCAT",
    "CAT": "CAT",
    "DecodedGradCam one layer": "DecodedLayerGradCam",
    "DecodedGradCam all layers": "DecodedLayerGradCam(all layers)",
    "GlobEnc": "GlobEnc",
}


_ENCODER_BASE = dict(
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    num_labels=2,
)
# shape -> (config class, its arguments): real models' shapes, random weights
_SHAPE_CONFIGS: Dict[str, Tuple[type, Dict[str, Any]]] = {
    "bert-base": (
        transformers.BertConfig,
        dict(_ENCODER_BASE, vocab_size=30522, pad_token_id=0, cls_token_id=101,
             sep_token_id=102),
    ),
    "roberta-base": (
        transformers.RobertaConfig,
        dict(_ENCODER_BASE, vocab_size=50265, max_position_embeddings=514,
             type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2),
    ),
    "llama-1b": (  # TinyLlama-1.1B
        transformers.LlamaConfig,
        dict(vocab_size=32000, hidden_size=2048, num_hidden_layers=22,
             num_attention_heads=32, num_key_value_heads=4,
             intermediate_size=5632, num_labels=2, pad_token_id=0),
    ),
    "llama-7b": (  # Llama-2-7B
        transformers.LlamaConfig,
        dict(vocab_size=32000, hidden_size=4096, num_hidden_layers=32,
             num_attention_heads=32, num_key_value_heads=32,
             intermediate_size=11008, num_labels=2, pad_token_id=0),
    ),
}  # fmt: skip
SHAPES = ("default", *_SHAPE_CONFIGS)


def method_table(model: nn.Module, chunk: Optional[int] = None) -> Dict[str, Run]:
    r"""Label -> ``run(input_ids, attention_mask, target)`` with
    ``internal_batch_size=chunk``; add a method to :data:`ROWS` (and
    :func:`benchmarks.common.captum_ext_methods`). GlobEnc is left out of
    models it does not support."""
    methods = captum_ext_methods()
    table = {}
    for label, name in ROWS.items():
        try:
            table[label] = methods[name](model, chunk)
        except UnsupportedModelError:
            if name != "GlobEnc":
                raise
    return table


def _integrated_gradients(model: nn.Module, chunked: bool = True) -> Run:
    r"""Captum's LayerIntegratedGradients on the word embeddings; ``chunked``:
    ``internal_batch_size`` = the batch (one batch of rows per pass)."""
    adapter = get_adapter(model)
    lig = LayerIntegratedGradients(classifier_forward(model), adapter.word_embeddings())
    pad = adapter.tokens.pad_token_id or 0

    def run(ids: Tensor, mask: Tensor, target: Tensor) -> Tensor:
        # Reference: [PAD] everywhere except the first and last token
        # ([CLS]/[SEP] on the encoders).
        baseline = torch.full_like(ids, pad)
        baseline[:, [0, -1]] = ids[:, [0, -1]]
        return lig.attribute(
            ids,
            baselines=baseline,
            target=target,
            additional_forward_args=(mask,),
            n_steps=IG_STEPS,
            internal_batch_size=len(ids) if chunked else None,
        )

    return run


def _seconds(run: Callable[[], object], device: str) -> float:
    start = time.perf_counter()
    run()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _median_ratio(
    run: Callable[[], object], forward: Callable[[], object], repeats: int, device: str
) -> Tuple[float, float]:
    r"""Median (seconds, seconds / forward seconds): each run is paired with a
    forward pass timed right before it, so slow drifts of the load cancel. A
    single run (Integrated Gradients) has no warm-up: it is 50 passes long."""
    if repeats > 1:
        run()  # warm-up: allocator, first-call dispatch
    times, ratios = [], []
    for _ in range(repeats):
        base = _seconds(forward, device)
        seconds = _seconds(run, device)
        times.append(seconds)
        ratios.append(seconds / base)
    return statistics.median(times), statistics.median(ratios)


def _real_text_ids(tokenizer: object) -> Tensor:
    r"""``[BATCH, LENGTH]`` ids: consecutive test snippets joined per row until the
    row fills LENGTH tokens, framed by the tokenizer ([CLS] ... [SEP])."""
    from captum_ext.defaults.data import load_split

    texts = iter(load_split("sentiment").texts)
    rows: List[List[int]] = []
    while len(rows) < BATCH:
        joined = next(texts)
        while len(tokenizer(joined)["input_ids"]) < LENGTH:  # type: ignore
            joined += " " + next(texts)
        encoded = tokenizer(joined, truncation=True, max_length=LENGTH)  # type: ignore
        rows.append(encoded["input_ids"])
    return torch.tensor(rows)


def _default_model() -> Tuple[nn.Module, Tensor]:
    from captum_ext.defaults.models import load_default_model

    model, tokenizer = load_default_model("sentiment")
    try:
        ids = _real_text_ids(tokenizer)
    except Exception as error:  # no data: the cost does not depend on the text
        print(f"real text unavailable ({error}); using random ids")
        ids = random_ids(model, BATCH, LENGTH)
    return model, ids


def _tiny_model() -> Tuple[nn.Module, Tensor]:
    r"""The default model's architecture (all-MiniLM-L6-v2) with random weights."""
    model = random_minilm()
    return model, random_ids(model, BATCH, LENGTH)


def _shape_model(
    shape: str, device: str, dtype: torch.dtype, batch: int, length: int
) -> Tuple[nn.Module, Tensor]:
    r"""A random-init classifier of a real model's shape, built on ``device`` in
    ``dtype`` (no float32 copy on the host first)."""
    torch.manual_seed(0)
    config_class, arguments = _SHAPE_CONFIGS[shape]
    with torch.device(device):
        model = transformers.AutoModelForSequenceClassification.from_config(
            config_class(**arguments), attn_implementation="eager", dtype=dtype
        )
    return model.eval(), random_ids(model, batch, length)


def _load(args: argparse.Namespace, dtype: torch.dtype) -> Tuple[nn.Module, Tensor]:
    if args.shape != "default":
        batch = args.batch or SHAPE_BATCH
        length = args.length or SHAPE_LENGTH
        return _shape_model(args.shape, args.device, dtype, batch, length)
    model, ids = _tiny_model() if args.tiny else _default_model()
    return model.to(device=args.device, dtype=dtype), ids


def _measure(
    run: Callable[[], object],
    forward: Callable[[], object],
    repeats: int,
    device: str,
) -> Tuple[float, float, float]:
    r"""(median seconds, median time ratio, peak MiB); "OOM" is raised as
    ``torch.cuda.OutOfMemoryError`` by the caller's run."""
    seconds, ratio = _median_ratio(run, forward, repeats, device)
    with PeakMemory(device) as peak:
        run()
    return seconds, ratio, peak.mib


def _row(name: str, seconds: float, ratio: float, mib: float, base_mib: float) -> str:
    limit = TARGETS.get(name.split(" [")[0])
    note = f"   (target <= {limit}x)" if limit and "[" not in name else ""
    memory = mib / base_mib if base_mib > 0 else float("nan")
    return (
        f"{name:<40} {seconds * 1e3:9.1f} ms {ratio:6.2f}x "
        f"{mib:9.1f} MiB {memory:6.2f}x{note}"
    )


def _runs(model: nn.Module, chunk: int, device: str) -> List[Tuple[str, Run, bool]]:
    r"""(name, run, single run?) of every row: each method unchunked and with
    ``internal_batch_size``, then Integrated Gradients."""
    rows = [(name, run, False) for name, run in method_table(model).items()]
    rows += [
        (f"{name} [ibs={chunk}]", run, False)
        for name, run in method_table(model, chunk).items()
    ]
    rows.append((f"{IG_NAME} [ibs=batch]", _integrated_gradients(model), True))
    if device.startswith("cuda"):
        rows.append((IG_NAME, _integrated_gradients(model, chunked=False), True))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="random weights")
    parser.add_argument("--shape", choices=SHAPES, default="default")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--batch", type=int, help="shapes other than default")
    parser.add_argument("--length", type=int, help="shapes other than default")
    parser.add_argument(
        "--internal-batch-size", type=int, help="default: a quarter of the batch"
    )
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not args.device.startswith("cuda") and MMAP_ENV not in os.environ:
        # glibc reads the threshold at start-up only: run again with it set, so
        # that freed tensors leave the RSS (see benchmarks.common.MMAP_ENV).
        environment = {**os.environ, MMAP_ENV: str(MMAP_THRESHOLD)}
        command = [sys.executable, "-m", "benchmarks.bench_methods", *sys.argv[1:]]
        os.execve(sys.executable, command, environment)

    model, ids = _load(args, DTYPES[args.dtype])
    ids = ids.to(args.device)
    mask = torch.ones_like(ids)
    chunk = args.internal_batch_size or max(1, len(ids) // 4)
    with torch.no_grad():
        target = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)

    def forward() -> None:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)

    device = args.device
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "CPU"
    print(
        f"shape {args.shape}, {args.dtype}, batch {tuple(ids.shape)}, {name}, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"{'':<40} {'time':>12} {'ratio':>7} {'peak':>13} {'ratio':>7}")
    seconds, _, base_mib = _measure(forward, forward, args.repeats, device)
    print(_row("forward", seconds, 1.0, base_mib, base_mib))
    ratios = {}
    for label, run, single in _runs(model, chunk, device):
        try:
            seconds, ratios[label], mib = _measure(
                lambda: run(ids, mask, target),
                forward,
                1 if single else args.repeats,
                device,
            )
        except torch.cuda.OutOfMemoryError:
            print(f"{label:<40} OOM")
            torch.cuda.empty_cache()
            continue
        print(_row(label, seconds, ratios[label], mib, base_mib))
    ig = ratios.pop(f"{IG_NAME} [ibs=batch]")
    for label, ratio in ratios.items():
        if "[" not in label:
            print(
                f"{label:<28} {ig / ratio:6.1f}x faster than LIG "
                f"(target >= {MIN_SPEEDUP_OVER_IG:.0f}x)"
            )


if __name__ == "__main__":
    main()
