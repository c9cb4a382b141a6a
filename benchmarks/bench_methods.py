#!/usr/bin/env python3
r"""Cost of the attribution methods relative to one forward pass.

A batch of 32 x 64 tokens of real text (consecutive test snippets of
``load_split("sentiment")`` joined until every row fills 64 tokens; random ids if
the data cannot be loaded) is explained by every entry of the method table and
each time is divided by one plain forward pass (``torch.no_grad``) measured in
the same run. Targets: NormXLogit <= 1.3x forward, AttCAT <= 3.5x, GlobEnc <= 3x,
the Decoded Grad-CAM sweep over all layers <= 4x, and
every method at least 20x faster than Captum's ``LayerIntegratedGradients``
(``n_steps=50``, on the word embeddings).

CPU timings are noisy on a shared machine: after a warm-up, every run is timed
right after its own forward pass and the median of ``--repeats`` ratios is
reported (one run, no warm-up, for Integrated Gradients).

A method is one entry of the table built by :func:`method_table`: a name and a
callable ``(input_ids, attention_mask, target) -> scores``.

Usage::

    python -m benchmarks.bench_methods            # the default sentiment model
    python -m benchmarks.bench_methods --tiny     # same shape, random weights
    python -m benchmarks.bench_methods --device cuda
"""

import argparse
import statistics
import time
from typing import Callable, Dict, List, Tuple

import torch
from benchmarks.common import random_minilm
from captum.attr import LayerIntegratedGradients
from captum_ext import classifier_forward
from captum_ext.attr import (
    AttCAT,
    CAT,
    DecodedLayerGradCam,
    EmbeddingDecoder,
    GlobEnc,
    LogAt,
    NormXLogit,
)
from torch import nn, Tensor

BATCH = 32
LENGTH = 64
IG_STEPS = 50
# name -> most allowed (method time / forward time)
TARGETS = {
    "NormXLogit": 1.3,
    "AttCAT": 3.5,
    "GlobEnc": 3.0,
    "DecodedGradCam all layers": 4.0,
}
MIN_SPEEDUP_OVER_IG = 20.0

Method = Callable[[Tensor, Tensor, Tensor], object]


def method_table(model: nn.Module) -> Dict[str, Method]:
    r"""Name -> ``run(input_ids, attention_mask, target)``; add a method here."""

    def captum_ext_method(method: object) -> Method:
        return lambda ids, mask, target: method.attribute(  # type: ignore
            ids, target=target, additional_forward_args=(mask,)
        )

    return {
        "NormXLogit": captum_ext_method(NormXLogit(model)),
        "LogAt": captum_ext_method(LogAt(model)),
        "AttCAT": captum_ext_method(AttCAT(model)),
        "CAT": captum_ext_method(CAT(model)),
        "GlobEnc": captum_ext_method(GlobEnc(model)),
        "DecodedGradCam all layers": _decoded_sweep(model),
        f"LayerIntegratedGradients({IG_STEPS})": _integrated_gradients(model),
    }


def _decoded_sweep(model: nn.Module) -> Method:
    r"""Decoded Grad-CAM of every layer 0..L in one forward + one backward pass;
    the tied-embedding decoder costs what a fitted head costs (the full-vocabulary
    softmax at every position and layer dominates)."""
    method = DecodedLayerGradCam(model, 0, EmbeddingDecoder(model))
    return lambda ids, mask, target: method.attribute_all_layers(
        ids, target=target, additional_forward_args=(mask,)
    )


def _integrated_gradients(model: nn.Module) -> Method:
    lig = LayerIntegratedGradients(
        classifier_forward(model), model.get_input_embeddings()
    )
    special = torch.tensor(
        [model.config.cls_token_id, model.config.sep_token_id], dtype=torch.long
    )

    def run(ids: Tensor, mask: Tensor, target: Tensor) -> Tensor:
        # Reference: [PAD] everywhere except [CLS]/[SEP].
        keep = torch.isin(ids, special.to(ids.device))
        baseline = torch.where(keep, ids, model.config.pad_token_id)
        return lig.attribute(
            ids,
            baselines=baseline,
            target=target,
            additional_forward_args=(mask,),
            n_steps=IG_STEPS,
            # 50 x 32 sequences at once need several GB; batch-sized chunks
            # cost the same arithmetic.
            internal_batch_size=len(ids),
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
    from captum_ext.datasets import load_split

    texts = iter(load_split("sentiment").texts)
    rows: List[List[int]] = []
    while len(rows) < BATCH:
        joined = next(texts)
        while len(tokenizer(joined)["input_ids"]) < LENGTH:  # type: ignore
            joined += " " + next(texts)
        encoded = tokenizer(joined, truncation=True, max_length=LENGTH)  # type: ignore
        rows.append(encoded["input_ids"])
    return torch.tensor(rows)


def _random_ids(model: nn.Module) -> Tensor:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(
        1000, model.config.vocab_size, (BATCH, LENGTH), generator=generator
    )
    ids[:, 0], ids[:, -1] = model.config.cls_token_id, model.config.sep_token_id
    return ids


def _default_model() -> Tuple[nn.Module, Tensor]:
    from captum_ext.default_models import load_default_model

    model, tokenizer = load_default_model("sentiment")
    try:
        ids = _real_text_ids(tokenizer)
    except Exception as error:  # no data: the cost does not depend on the text
        print(f"real text unavailable ({error}); using random ids")
        ids = _random_ids(model)
    return model, ids


def _tiny_model() -> Tuple[nn.Module, Tensor]:
    r"""The default model's architecture (all-MiniLM-L6-v2) with random weights."""
    model = random_minilm()
    return model, _random_ids(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="random weights")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    model, ids = _tiny_model() if args.tiny else _default_model()
    model = model.to(args.device)
    ids = ids.to(args.device)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        target = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)

    def forward() -> None:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)

    print(f"batch {tuple(ids.shape)}, {torch.get_num_threads()} threads, {args.device}")
    seconds, _ = _median_ratio(forward, forward, args.repeats, args.device)
    print(f"{'forward':<28} {seconds * 1e3:9.1f} ms   1.00x")
    ratios = {}
    for name, run in method_table(model).items():
        repeats = 1 if name.startswith("LayerIntegrated") else args.repeats
        seconds, ratios[name] = _median_ratio(
            lambda: run(ids, mask, target), forward, repeats, args.device
        )
        limit = TARGETS.get(name)
        note = f"   (target <= {limit}x)" if limit else ""
        print(f"{name:<28} {seconds * 1e3:9.1f} ms {ratios[name]:6.2f}x{note}")
    ig = ratios.pop(f"LayerIntegratedGradients({IG_STEPS})")
    for name, ratio in ratios.items():
        print(
            f"{name:<12} {ig / ratio:6.1f}x faster than LIG "
            f"(target >= {MIN_SPEEDUP_OVER_IG:.0f}x)"
        )


if __name__ == "__main__":
    main()
