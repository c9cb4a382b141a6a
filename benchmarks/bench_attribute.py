#!/usr/bin/env python3
r"""Throughput of ``attribute_dataset`` against the model's own cost, and its
speed-up under ``torchrun``.

On the default sentiment model and the first ``--n`` (2,000) held-out movie
snippets, measured in one run:

- examples/s of ``attribute_dataset(methods=["NormXLogit"])`` over examples/s of
  a plain batched ``no_grad`` forward loop (target >= 80 %);
- examples/s with ``["AttCAT"]`` over a forward+backward loop (gradient of each
  predicted logit w.r.t. the word embeddings; target >= 80 %);
- and, to separate the job's own cost from the method's, each over the method
  called alone on the same batches.

The loops run on the same length-bucketed batches (same batch size and
``max_length``), tokenised before the clock starts, so the ratios charge
tokenisation, bucketing, Parquet writing and the job's bookkeeping to
``attribute_dataset``. Loop and job alternate ``--rounds`` times; the median
ratio is reported (CPU timings on a shared machine are noisy).

With ``--torchrun`` the NormXLogit job also runs under ``torchrun
--nproc-per-node 1`` and ``2`` (gloo on CPU, one thread per process when two
share the cores; NCCL with ``--device cuda``) and prints the speed-up.

Usage::

    python -m benchmarks.bench_attribute
    python -m benchmarks.bench_attribute --torchrun
    python -m benchmarks.bench_attribute --methods AttCAT --n 640 --rounds 1
    python -m benchmarks.bench_attribute --device cuda --n 2000
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Tuple

import pandas as pd
import torch
from captum_ext import classifier_forward, get_adapter
from captum_ext.defaults.data import load_split
from captum_ext.defaults.models import load_default_model, MAX_LENGTH
from captum_ext.evaluation.attribute import attribute_dataset
from captum_ext.evaluation.registry import METHODS
from captum_ext.evaluation.tokenized_batches import bucketed_batches, EncodedBatch
from captum_ext.evaluation.user_data import load_data, LoadedExamples

BATCH_SIZE = 32
ROOT = Path(__file__).resolve().parents[1]


def snippets(n: int) -> LoadedExamples:
    split = load_split("sentiment", "test")
    if len(split.texts) < n:
        raise SystemExit(f"the held-out split has {len(split.texts)} snippets")
    return LoadedExamples(
        "sentiment test", list(split.texts[:n]), labels=split.labels[:n]
    )


def forward_loop(model, batches: List[EncodedBatch]) -> None:
    forward = classifier_forward(model)
    with torch.no_grad():
        for batch in batches:
            forward(batch.input_ids, *batch.forward_args())


def forward_backward_loop(model, batches: List[EncodedBatch]) -> None:
    forward = classifier_forward(model, inputs_embeds=True)
    embed = get_adapter(model).word_embeddings()
    for batch in batches:
        embeddings = embed(batch.input_ids).detach().requires_grad_()
        logits = forward(embeddings, *batch.forward_args())  # [batch, classes]
        predicted = logits.gather(1, logits.argmax(-1, keepdim=True)).sum()
        torch.autograd.grad(predicted, embeddings)


# method -> the loop over the model's own work it is compared with
LOOPS = {"NormXLogit": forward_loop, "AttCAT": forward_backward_loop}


def seconds(work: Callable[[], object]) -> Tuple[float, float]:
    r"""Wall-clock and CPU seconds (this process, all threads) of ``work()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def job_seconds(
    model, tokenizer, data: LoadedExamples, method: str, device: str, out: str
) -> Tuple[float, float]:
    return seconds(
        lambda: attribute_dataset(
            model,
            tokenizer,
            data,
            [method],
            out,
            batch_size=BATCH_SIZE,
            max_length=MAX_LENGTH,
            device=device,
            progress=False,
        )
    )


def ratios(args: argparse.Namespace) -> None:
    model, tokenizer = load_default_model("sentiment")
    model.to(args.device)
    data = snippets(args.n)
    batches = [
        batch.to(args.device)
        for batch in bucketed_batches(
            tokenizer, data.texts, batch_size=BATCH_SIZE, max_length=MAX_LENGTH
        )
    ]
    forward_loop(model, batches[:2])  # warm-up
    for method in args.methods:
        explain = METHODS[method].factory(model, tokenizer)
        rounds = [
            _round(args, model, tokenizer, data, batches, method, explain)
            for _ in range(args.rounds)
        ]
        baselines = {
            f"the {LOOPS[method].__name__}": 0,
            f"{method} alone over the same batches": 1,
        }
        for against, column in baselines.items():
            wall = statistics.median(r[column][0] / r[2][0] for r in rounds)
            cpu = statistics.median(r[column][1] / r[2][1] for r in rounds)
            print(
                f"{method}: attribute_dataset at {100 * wall:.0f} % of {against}'s "
                f"examples/s, {100 * cpu:.0f} % by CPU time (median of "
                f"{args.rounds})",
                flush=True,
            )


def _round(args, model, tokenizer, data, batches, method, explain) -> List:
    r"""Wall and CPU seconds of the model's loop, the method's loop (its own
    batched calls, classes from its forward pass) and the job, in that order."""
    loop = seconds(lambda: LOOPS[method](model, batches))
    alone = seconds(
        lambda: [explain(b.input_ids, b.attention_mask, None) for b in batches]
    )
    with tempfile.TemporaryDirectory() as out:
        job = job_seconds(model, tokenizer, data, method, args.device, out)
    print(
        f"  {method} ex/s: loop {args.n / loop[0]:.1f}, alone {args.n / alone[0]:.1f},"
        f" attribute {args.n / job[0]:.1f}; CPU s: {loop[1]:.1f}, {alone[1]:.1f}, "
        f"{job[1]:.1f}",
        flush=True,
    )
    return [loop, alone, job]


def torchrun_speedup(args: argparse.Namespace) -> None:
    r"""1 and 2 processes alternate ``--rounds`` times; median speed-up."""
    with tempfile.TemporaryDirectory() as scratch:
        data_file = Path(scratch) / "snippets.csv"
        pd.DataFrame({"text": snippets(args.n).texts}).to_csv(data_file, index=False)
        speedups = []
        for round_ in range(args.rounds):
            timings = {}
            for processes in (1, 2):
                out = Path(scratch) / f"out{processes}-{round_}"
                timings[processes] = torchrun_seconds(processes, data_file, out, args)
                print(
                    f"  torchrun --nproc-per-node {processes}: "
                    f"{args.n / timings[processes]:.1f} ex/s",
                    flush=True,
                )
            speedups.append(timings[1] / timings[2])
        print(
            f"torchrun --nproc-per-node 2 speed-up over 1: "
            f"{statistics.median(speedups):.2f}x (median of {args.rounds}; "
            f"{os.cpu_count()} CPU cores, device {args.device})"
        )


def torchrun_seconds(
    processes: int, data_file: Path, out: Path, args: argparse.Namespace
) -> float:
    r"""Seconds of the NormXLogit job under ``torchrun`` (rank 0's clock), the
    cores split evenly between the processes."""
    threads = max(1, (os.cpu_count() or 1) // processes)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(processes),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(29_500 + processes),
        str(Path(__file__).resolve()),
        "--worker",
        str(data_file),
        str(out),
        "--device",
        args.device,
    ]
    environment = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT))
    done = subprocess.run(command, env=environment, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return float(done.stdout.strip().splitlines()[-1])


def worker(data_file: str, out: str, device: str) -> None:
    r"""One rank under torchrun: load, attribute, print the job's seconds
    (rank 0, after every rank finished)."""
    model, tokenizer = load_default_model("sentiment")
    data = load_data(data_file)
    spent, _ = job_seconds(model, tokenizer, data, "NormXLogit", device, out)
    if os.environ.get("RANK", "0") == "0":
        print(spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--methods", nargs="*", default=list(LOOPS), choices=LOOPS)
    parser.add_argument("--torchrun", action="store_true")
    parser.add_argument("--worker", nargs=2, metavar=("DATA", "OUT"))
    args = parser.parse_args()
    if args.worker:
        data_file, out = args.worker
        worker(data_file, out, args.device)
        return
    if args.methods:
        ratios(args)
    if args.torchrun:
        torchrun_speedup(args)


if __name__ == "__main__":
    main()
