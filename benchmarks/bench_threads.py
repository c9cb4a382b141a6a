#!/usr/bin/env python3
r"""Torch's thread count and OpenMP's waiting policy on a busy CPU machine.

One fine-tuning step (forward, backward, AdamW on the default sentiment model,
16 snippets of up to 64 tokens) and one benchmark batch (a forward pass and
an InputXGradient attribution on 16 snippets) are timed in a fresh process per
setting: 1 or 2 torch threads, ``OMP_WAIT_POLICY`` unset (libgomp spins
waiting for work) or ``PASSIVE`` (it sleeps), and with ``--load N`` N extra
busy processes competing for the cores, as other jobs do on a shared machine.
Each cell is the median of ``--steps`` steps after one warm-up step.

The rule :func:`captum_ext.evaluation._utils.threads.configure_threads` applies
is measured as the setting ``rule``.

Usage::

    python -m benchmarks.bench_threads
    python -m benchmarks.bench_threads --load 0 1 2 --steps 3
"""

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
BATCH = 16

# setting -> (threads or None for the rule, OMP_WAIT_POLICY or None)
SETTINGS = {
    "1 thread": (1, None),
    "2 threads": (2, None),
    "2 threads passive": (2, "PASSIVE"),
    "1 thread passive": (1, "PASSIVE"),
    "rule": (None, None),
}


def child(threads: Optional[int], steps: int) -> Dict[str, List[float]]:
    r"""Runs in the measured process: the step times of both workloads."""
    if threads is None:
        from captum_ext.evaluation._utils.threads import configure_threads

        configure_threads()
    import torch
    from captum_ext.defaults.data import load_split
    from captum_ext.defaults.models import load_default_model, MAX_LENGTH
    from captum_ext.evaluation.registry import METHODS

    if threads is not None:
        torch.set_num_threads(threads)
    model, tokenizer = load_default_model("sentiment")
    split = load_split("sentiment", "train")
    encoded = tokenizer(
        list(split.texts[:BATCH]),
        truncation=True,
        max_length=MAX_LENGTH,
        padding=True,
        return_tensors="pt",
    )
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    labels = torch.tensor(split.labels[:BATCH])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-9)

    def train_step() -> None:
        model.train()
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        model.eval()

    explain = METHODS["InputXGradient"].factory(model, tokenizer)

    def benchmark_batch() -> None:
        with torch.no_grad():
            target = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
        explain(ids, mask, target, None)

    times: Dict[str, List[float]] = {"train": [], "benchmark": []}
    for name, work in (("train", train_step), ("benchmark", benchmark_batch)):
        work()  # warm-up
        for _ in range(steps):
            start = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - start)
    times["threads"] = [float(torch.get_num_threads())]
    return times


def _spin() -> None:
    while True:
        pass


def measure(setting: str, load: int, steps: int) -> Dict[str, List[float]]:
    threads, policy = SETTINGS[setting]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("OMP_WAIT_POLICY", None)
    env.pop("OMP_NUM_THREADS", None)
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    code = (
        "import json, sys; from benchmarks.bench_threads import child; "
        f"print(json.dumps(child({threads!r}, {steps})))"
    )
    spinners = [multiprocessing.Process(target=_spin) for _ in range(load)]
    for spinner in spinners:
        spinner.start()
    try:
        # The child's stderr goes through: a failure shows its traceback.
        out = subprocess.check_output([sys.executable, "-c", code], env=env, text=True)
    finally:
        for spinner in spinners:
            spinner.terminate()
            spinner.join()
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS))
    args = parser.parse_args()
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} before the "
        f"run; median of {args.steps} steps, seconds",
        flush=True,
    )
    for load in args.load:
        for setting in args.settings:
            times = measure(setting, load, args.steps)
            print(
                f"+{load} busy: {setting:<18} "
                f"({int(times['threads'][0])} threads)  "
                f"train step {statistics.median(times['train']):6.2f}  "
                f"benchmark batch {statistics.median(times['benchmark']):6.2f}  "
                f"(load avg {os.getloadavg()[0]:.1f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
