#!/usr/bin/env python3
r"""Do the benchmark's time ratios survive a busy machine?

Times ``--methods`` against the forward pass on the default sentiment model's
held-out snippets (batches of 16, up to 64 tokens) twice in one run: as the
machine is, then with ``--load`` extra busy processes competing for the cores.
Each clock is measured with the engine's protocol
(:func:`captum_ext.evaluation.timing.time_paired`, median over batches of the
fastest method run over the fastest forward pass) and, for comparison, with
the single pair it replaced (one forward pass right before one method run).
Prints each ratio in both runs and their disagreement, |loaded / quiet - 1|
(target: below 15 %).

Usage::

    python -m benchmarks.bench_timing
    python -m benchmarks.bench_timing --methods NormXLogit AttCAT --load 3
"""

import argparse
import multiprocessing
import os
import statistics
import time
from typing import Dict, List

import torch
from captum_ext.defaults.data import load_split
from captum_ext.defaults.models import load_default_model, MAX_LENGTH
from captum_ext.evaluation._utils.threads import configure_threads
from captum_ext.evaluation.registry import METHODS
from captum_ext.evaluation.timing import time_paired
from captum_ext.evaluation.tokenized_batches import bucketed_batches

BATCH = 16
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _spin() -> None:
    while True:
        pass


def ratios(args: argparse.Namespace) -> Dict[str, float]:
    model, tokenizer = load_default_model("sentiment")
    texts = list(load_split("sentiment", "test").texts[: args.n])
    batches = bucketed_batches(
        tokenizer, texts, batch_size=BATCH, max_length=MAX_LENGTH
    )
    out: Dict[str, float] = {}
    for name in args.methods:
        explain = METHODS[name].factory(model, tokenizer)
        found: Dict[str, List[float]] = {}
        for batch in batches:
            ids, mask = batch.input_ids, batch.attention_mask
            with torch.no_grad():
                target = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)

            def forward() -> object:
                with torch.no_grad():
                    return model(input_ids=ids, attention_mask=mask).logits

            def method() -> object:
                return explain(ids, mask, target, None)

            for clock_name, clock in CLOCKS.items():
                _, timing = time_paired(forward, method, clock)
                found.setdefault(f"{clock_name} protocol", []).append(timing.ratio)
                single = timing.method[0] / timing.forward[0]
                found.setdefault(f"{clock_name} single pair", []).append(single)
        for how, values in found.items():
            out[f"{name:<20} {how:<17}"] = statistics.median(values)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["NormXLogit", "InputXGradient", "AttCAT", "IntegratedGradients"],
    )
    parser.add_argument("--n", type=int, default=48)
    parser.add_argument("--load", type=int, default=2)
    args = parser.parse_args()
    threads = configure_threads()
    print(f"{threads} torch threads; load average {os.getloadavg()[0]:.1f}")
    quiet = ratios(args)
    spinners = [multiprocessing.Process(target=_spin) for _ in range(args.load)]
    for spinner in spinners:
        spinner.start()
    try:
        loaded = ratios(args)
    finally:
        for spinner in spinners:
            spinner.terminate()
            spinner.join()
    print(f"ratios as the machine is, then with {args.load} busy processes:")
    for key, value in quiet.items():
        change = abs(loaded[key] / value - 1)
        print(f"{key} {value:7.2f} {loaded[key]:7.2f}  {100 * change:5.1f} %")


if __name__ == "__main__":
    main()
