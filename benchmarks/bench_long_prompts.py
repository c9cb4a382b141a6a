#!/usr/bin/env python3
r"""Peak CPU memory and time of explaining one long prompt's continuation, per
prompt length, relative to one sdpa forward pass over prompt + continuation.

The model is a random-init Llama (:func:`benchmarks.common.random_llama`: 4
layers x 256, vocabulary 8,192, positions enough for the longest prompt),
loaded with sdpa attention, float32. One prompt of each ``--lengths`` token
count (512 to 16,384 by default) and a continuation of ``--steps`` (16) target
ids are explained by each method (LogAt, NormXLogit, CAT, AttCAT, GlobEnc,
DecodedLayerGradCam at the middle layer with the model's own head,
LastLayerAttention, AttentionRollout), all T rows in one call, with the
methods' defaults. A method that raises is shown as ``n/a (reason)``.

The unit is one plain sdpa forward pass (``torch.no_grad``, logits of every
position) over prompt + continuation, measured in the same run at each
length. Columns: the peak MiB above the start, that peak over the forward's
peak, the growth of the peak per doubling of the length (from the previous
length: ``(peak_b / peak_a) ** (1 / log2(b / a))``; 2.0 is linear) and the
seconds over the forward's seconds.

How it is measured (as in ``benchmarks/bench_generation_memory.py``): every
figure comes from a fresh subprocess that builds the model and the input,
runs the call once on a 64-token prompt (lazy allocations), resets the peak
resident set size (``VmHWM``) and runs the call on the full prompt, with
glibc's fixed mmap threshold so that freed tensors leave the RSS. The time is
the process's CPU time of the fastest of up to 3 runs, stopping once 2
seconds have been spent (long calls run once; the forward and the methods
alike), the protocol of :mod:`captum_ext.evaluation.timing` (CPU time, as
other work on a shared machine only delays a run). One thread by default.

Targets (a PASS or "not met on this machine" line each): CAT's, AttCAT's and
DecodedLayerGradCam's peak at most 1.5x the forward's at every length (they
recompute one block at a time on a CPU, docs/generation.rst), CAT's and
AttCAT's growing at most 2.3x per doubling and their time ratio within
+-25 % of its value at the shortest length; GlobEnc's peak at most 6x the
forward's. Beside them, where the row "T gradients, plain autograd" ran, the
three gradient methods' time over that row's at every length (at most
1.25x): the row is gradient x input at the embeddings of each target step by
plain autograd, one backward pass per step after one forward that keeps its
whole graph, the floor of any exact per-target gradient method; CAT and
AttCAT take the same passes to each block's attention input. Its own time
ratio grows with the prompt as backward passes through attention cost more
forwards than those through a linear layer: where CAT's and AttCAT's growth
comes from. The rows "CAT, whole graph", "AttCAT, whole graph" and
"DecodedLayerGradCam, whole graph" (``recompute=False``, run when named in
``--methods``) show what the recomputation saves.

On a GPU (``--device cuda``) every cell runs in one process (the caching
allocator's ``max_memory_allocated`` is exact per call, and building a large
model once per cell would cost more than the cells): the model is built on the
device in ``--dtype``, ``--shape llama-7b`` gives Llama-2-7B's shape (32 layers
x 4,096, 32 heads, MLP 11,008, vocabulary 32,000), times are wall-clock
seconds of one run after a warm-up (synchronised), an out-of-memory cell reads
``n/a (OutOfMemoryError)``, and a "forward with gradients" row (one forward
pass that keeps its graph, logits of the predicting positions only) shows
what any gradient method needs at least. Cells stop once ``--budget`` seconds
have passed; the peaks are above what the process held before each call
(the weights), and ``--memory-cap-gib`` caps what it may allocate
(``torch.cuda.set_per_process_memory_fraction``: an 80 GB card's 78 GiB on a
larger one).

CAT's target steps per backward pass: its default chooses by device and
length (one per pass on a CPU and past 4,096 tokens, up to 16 batched on
shorter prompts on an accelerator); the row "CAT, 1 target
per backward" (shown by default on an accelerator) and "CAT, targets batched"
(all T in one pass batched over the targets, ``is_grads_batched``) measure
either choice on any device when named in ``--methods``.

Usage::

    python -m benchmarks.bench_long_prompts
    python -m benchmarks.bench_long_prompts --lengths 1024 2048 4096
    python -m benchmarks.bench_long_prompts --quick  # 256 and 512 tokens, T = 2
    python -m benchmarks.bench_long_prompts --lengths 512 2048 \
        --methods CAT "CAT, targets batched"
    python -m benchmarks.bench_long_prompts --device cuda --dtype bfloat16 \
        --shape llama-7b --lengths 8192 32768
    python -m benchmarks.bench_long_prompts --layers 32 --hidden 128 \
        --lengths 2048 8192 --methods CAT AttCAT DecodedLayerGradCam \
        "T gradients, plain autograd"  # issue 42's CPU targets
    python -m benchmarks.bench_long_prompts --device cuda --dtype bfloat16 \
        --shape llama-7b --lengths 32768 --memory-cap-gib 78 \
        --methods CAT AttCAT DecodedLayerGradCam
"""

import argparse
import csv
import gc
import json
import math
import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple

import torch
import transformers
from benchmarks.common import (
    attribute_run,
    Builder,
    causal_lm_forward,
    causal_lm_methods,
    continuation,
    measure_in_subprocess,
    PeakMemory,
    random_llama,
    Run,
)
from captum_ext._utils.teacher_forcing import predicted_log_probs
from captum_ext.adapters import get_adapter
from captum_ext.attr import (
    AttCAT,
    AttentionRollout,
    CAT,
    DecodedLayerGradCam,
    LastLayerAttention,
)
from captum_ext.attr._utils.teacher_forced_attribution import target_gradients
from captum_ext.evaluation._utils.atomic import write_text_atomically
from torch import nn, Tensor

MODULE = "benchmarks.bench_long_prompts"
LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
QUICK_LENGTHS = (256, 512)
WARM_UP_LENGTH = 64
# Llama-2-7B's shape, for --shape llama-7b.
LLAMA_7B: Dict[str, Any] = dict(
    hidden_size=4096,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    intermediate_size=11008,
    vocab_size=32000,
)
FORWARD_WITH_GRADIENTS = "forward with gradients"
# Gradient x input of each target step by plain autograd: the T backward passes
# every exact per-target gradient method pays, with no method around them.
PLAIN_GRADIENTS = "T gradients, plain autograd"
# CAT's two choices of target steps per backward pass, beside its default (one
# per pass on a CPU, batched on an accelerator): rows to request on the CPU,
# the other choice shown on an accelerator.
CAT_ONE_TARGET_PER_PASS = "CAT, 1 target per backward"
CAT_TARGETS_BATCHED = "CAT, targets batched"
CAT_CHOICES = (CAT_ONE_TARGET_PER_PASS, CAT_TARGETS_BATCHED)
ALL_TARGETS = 1 << 20  # more target steps than any run has: one batched pass
# The gradient methods without per-block recomputation (recompute=False).
WHOLE_GRAPH_ROWS = (
    "CAT, whole graph",
    "AttCAT, whole graph",
    "DecodedLayerGradCam, whole graph",
)
DTYPES = ("float32", "bfloat16", "float16", "float64")
# Timing: the fastest of at most TIME_RUNS runs, none started after TIME_BUDGET_S.
TIME_RUNS = 3
TIME_BUDGET_S = 2.0
# (methods, limit of peak / forward peak, of growth per doubling, of the time
# ratio's spread around the shortest length's, whether the time over the plain
# gradients' is judged)
TARGETS = (
    (("CAT", "AttCAT"), 1.5, 2.3, 0.25, True),
    (("DecodedLayerGradCam",), 1.5, None, None, True),
    (("GlobEnc",), 6.0, None, None, False),
)
# The gradient methods' time over the T plain gradients' (their floor), at most.
OVER_PLAIN_GRADIENTS = 1.3  # issue 42: time over the plain gradients


def builders() -> Dict[str, Builder]:
    r"""Name -> builder: the forward pass (the unit), every method and CAT's
    two choices of target steps per backward pass (not run unless named)."""
    return {
        "forward": causal_lm_forward,
        **causal_lm_methods(),
        "LastLayerAttention": lambda m, c: attribute_run(LastLayerAttention(m), c),
        "AttentionRollout": lambda m, c: attribute_run(AttentionRollout(m), c),
        CAT_ONE_TARGET_PER_PASS: lambda m, c: attribute_run(
            CAT(m), c, targets_per_backward=1
        ),
        CAT_TARGETS_BATCHED: lambda m, c: attribute_run(
            CAT(m), c, targets_per_backward=ALL_TARGETS
        ),
        PLAIN_GRADIENTS: _plain_gradients,
        **dict(zip(WHOLE_GRAPH_ROWS, _whole_graph_builders())),
    }


def _whole_graph_builders() -> Tuple[Builder, ...]:
    r"""CAT, AttCAT and DecodedLayerGradCam (middle layer, as in
    :func:`~benchmarks.common.captum_ext_methods`) with ``recompute=False``."""

    def grad_cam(model: nn.Module) -> DecodedLayerGradCam:
        return DecodedLayerGradCam(model, get_adapter(model).num_layers // 2)

    return (
        lambda m, c: attribute_run(CAT(m), c, recompute=False),
        lambda m, c: attribute_run(AttCAT(m), c, recompute=False),
        lambda m, c: attribute_run(grad_cam(m), c, recompute=False),
    )


def _teacher_forced(ids: Tensor, mask: Tensor, target: Tensor) -> Tuple[Tensor, Tensor]:
    r"""The model's inputs under teacher forcing: prompt + ``y_<T`` and its mask."""
    previous = target[:, :-1]
    return torch.cat([ids, previous], 1), torch.cat(
        [mask, torch.ones_like(previous)], 1
    )


def _forward_with_gradients(model: nn.Module, _chunk: Optional[int] = None) -> Run:
    r"""One forward pass over prompt + continuation that keeps its graph (the
    logits of the ``T`` predicting positions only): what every gradient method
    holds at least."""

    def run(ids: Tensor, mask: Tensor, target: Tensor) -> object:
        joined, joined_mask = _teacher_forced(ids, mask, target)
        with torch.enable_grad():
            output = model(
                input_ids=joined,
                attention_mask=joined_mask,
                logits_to_keep=target.shape[1],
            )
        return output.logits

    return run


def _plain_gradients(model: nn.Module, _chunk: Optional[int] = None) -> Run:
    r"""Gradient x input of each target step's log-probability at the input
    embeddings, one backward pass per step after one forward pass that keeps
    its graph: the cost of ``T`` exact per-target gradients, the floor under
    CAT and AttCAT (which take the same ``T`` passes to each block's attention
    input)."""
    embedding = get_adapter(model).word_embeddings()

    def run(ids: Tensor, mask: Tensor, target: Tensor) -> object:
        joined, joined_mask = _teacher_forced(ids, mask, target)
        steps = target.shape[1]
        with torch.enable_grad():
            embeds = embedding(joined).detach().requires_grad_()  # [1, pos, d]
            logits = model(
                inputs_embeds=embeds,
                attention_mask=joined_mask,
                logits_to_keep=steps,
            ).logits  # [1, T, vocab]
            log_probs = predicted_log_probs(logits, target)  # [1, T]
        every_step = torch.ones_like(target, dtype=torch.bool)
        gradients = target_gradients(
            log_probs, (embeds,), every_step, targets_per_backward=1
        )  # T x ([1, P + T - 1, d_model],)
        scores = [(gradient * embeds.detach()).sum(-1) for (gradient,) in gradients]
        return torch.stack(scores, 1)  # [1, T, P + T - 1]

    return run


def _model(options: argparse.Namespace) -> nn.Module:
    positions = max(options.lengths) + options.steps
    dtype = getattr(torch, options.dtype)
    if options.shape == "llama-7b":
        config = transformers.LlamaConfig(**LLAMA_7B, max_position_embeddings=positions)
        torch.manual_seed(0)
        with torch.device(options.device):  # initialised where it runs
            model = transformers.AutoModelForCausalLM.from_config(
                config, attn_implementation="sdpa", dtype=dtype
            )
        return model.eval()
    model = random_llama(
        options.layers, options.hidden, positions, options.vocab, attention="sdpa"
    )
    return model.to(options.device, dtype)


def _peak_and_time(run: Callable[[], object]) -> Dict[str, Any]:
    r"""The peak memory of the first call of ``run`` and the CPU time of the
    fastest of up to :data:`TIME_RUNS` calls (the first included), more runs
    only while they took under :data:`TIME_BUDGET_S` in all."""
    times: List[float] = []
    with PeakMemory() as peak:
        times.append(_cpu_seconds(run))
    while len(times) < TIME_RUNS and sum(times) < TIME_BUDGET_S:
        times.append(_cpu_seconds(run))
    return {"peak_mib": peak.mib, "seconds": min(times), "exact": peak.exact}


def _cpu_seconds(run: Callable[[], object]) -> float:
    # CPU time of the process: the waits for a core that other work holds
    # (this machine is shared) do not count.
    start = time.process_time()
    run()
    return time.process_time() - start


def worker(name: str, options: argparse.Namespace) -> Dict[str, Any]:
    r"""Runs one (method, length) in this (fresh) process: its peak memory
    and time, or ``{"error": reason}`` if the method raises."""
    torch.set_num_threads(options.threads)
    model = _model(options)
    data = continuation(model, 1, options.length, options.steps)
    warm = continuation(model, 1, WARM_UP_LENGTH, options.steps)
    try:
        run = builders()[name](model, None)
        run(warm["ids"], warm["mask"], warm["target"])
        return _peak_and_time(lambda: run(data["ids"], data["mask"], data["target"]))
    except Exception as error:  # the table shows why a method cannot run
        return {"error": f"{type(error).__name__}: {error}"}


def _measure(name: str, length: int, options: argparse.Namespace) -> Dict[str, Any]:
    arguments = [name, "--length", str(length), "--steps", str(options.steps)]
    arguments += ["--lengths", *map(str, options.lengths)]
    arguments += ["--layers", str(options.layers), "--hidden", str(options.hidden)]
    arguments += ["--vocab", str(options.vocab), "--threads", str(options.threads)]
    arguments += ["--dtype", options.dtype]
    try:
        return measure_in_subprocess(MODULE, arguments)
    except subprocess.CalledProcessError as error:  # e.g. killed out of memory
        return {"error": f"worker exited with {error.returncode}"}


def _growth(peaks: Sequence[Optional[float]], lengths: Sequence[int]) -> List[str]:
    r"""Per length: the peak's growth per doubling from the previous length."""
    cells = [""]
    for (a, peak_a), (b, peak_b) in zip(
        zip(lengths, peaks), zip(lengths[1:], peaks[1:])
    ):
        if peak_a is None or peak_b is None or peak_a <= 0 or peak_b <= 0:
            cells.append("")
            continue
        cells.append(f"{(peak_b / peak_a) ** (1 / math.log2(b / a)):.2f}")
    return cells


def table(options: argparse.Namespace) -> Dict[str, List[Dict[str, Any]]]:
    r"""Measures and prints every (method, length); returns name -> results
    per length (the forward's under ``"forward"``)."""
    lengths = options.lengths
    names = ["forward", *options.methods]
    results: Dict[str, List[Dict[str, Any]]] = {}
    width = max(map(len, names))
    print(
        f"{'':<{width}} {'tokens':>6} {'peak':>9} {'peak':>6} {'peak':>6} {'time':>7}"
    )
    print(f"{'':<{width}} {'':>6} {'MiB':>9} {'x fwd':>6} {'per 2x':>6} {'x fwd':>7}")
    for name in names:
        results[name] = [_measure(name, length, options) for length in lengths]
        peaks = [result.get("peak_mib") for result in results[name]]
        growth = _growth(peaks, lengths)
        for length, result, step in zip(lengths, results[name], growth):
            unit = results["forward"][lengths.index(length)]
            print(f"{name:<{width}} {length:>6} {_cells(result, unit, step)}")
    if not all(r.get("exact", True) for rows in results.values() for r in rows):
        print("note: /proc/self/clear_refs unavailable, peaks are ru_maxrss deltas")
    return results


def device_table(options: argparse.Namespace) -> Dict[str, List[Dict[str, Any]]]:
    r"""Every (length, method) in this process on an accelerator, printed as
    it is measured (a run cut short still shows what it measured); returns
    name -> results per length, as :func:`table` does."""
    _cap_device_memory(options)
    model = _model(options)
    runs = {**builders(), FORWARD_WITH_GRADIENTS: _forward_with_gradients}
    names = ["forward", FORWARD_WITH_GRADIENTS, *options.methods]
    results: Dict[str, List[Dict[str, Any]]] = {name: [] for name in names}
    width = max(map(len, names))
    start = time.perf_counter()
    for length in options.lengths:
        data = _on_device(continuation(model, 1, length, options.steps), options)
        warm = _on_device(
            continuation(model, 1, WARM_UP_LENGTH, options.steps), options
        )
        for name in names:
            if time.perf_counter() - start > options.budget:
                result: Dict[str, Any] = {"error": "skipped: --budget spent"}
            else:
                result = _device_cell(runs[name](model, None), warm, data, options)
            results[name].append(result)
            unit = results["forward"][-1]
            print(f"{name:<{width}} {length:>6} {_cells(result, unit, '')}", flush=True)
    return results


def _cap_device_memory(options: argparse.Namespace) -> None:
    r"""At most ``--memory-cap-gib`` GiB for this process on the device."""
    if options.memory_cap_gib is None:
        return
    device = torch.device(options.device)
    total = torch.cuda.get_device_properties(device).total_memory
    fraction = min(1.0, options.memory_cap_gib * 2**30 / total)
    torch.cuda.set_per_process_memory_fraction(fraction, device)


def _on_device(
    data: Dict[str, Tensor], options: argparse.Namespace
) -> Dict[str, Tensor]:
    return {key: value.to(options.device) for key, value in data.items()}


def _device_cell(
    run: Run,
    warm: Dict[str, Tensor],
    data: Dict[str, Tensor],
    options: argparse.Namespace,
) -> Dict[str, Any]:
    r"""Peak and wall-clock seconds of one synchronised call after a warm-up
    call on a short prompt; ``{"error": ...}`` where the call raises."""
    try:
        run(warm["ids"], warm["mask"], warm["target"])
        with PeakMemory(options.device) as peak:
            began = time.perf_counter()
            run(data["ids"], data["mask"], data["target"])
            torch.cuda.synchronize()
            seconds = time.perf_counter() - began
        return {"peak_mib": peak.mib, "seconds": seconds, "exact": True}
    except Exception as error:  # out of memory included: the table says why
        return {"error": f"{type(error).__name__}: {str(error)[:120]}"}
    finally:
        gc.collect()
        torch.cuda.empty_cache()


def _ratio(value: float, unit: float) -> Optional[float]:
    r"""``value / unit``; None where the unit was too small to measure."""
    return value / unit if unit > 0 else None


def _cells(result: Dict[str, Any], unit: Dict[str, Any], growth: str) -> str:
    if "error" in result:
        return f"n/a ({result['error'][:200]})"
    peak, seconds = result["peak_mib"], result["seconds"]
    ratio = None if "error" in unit else _ratio(peak, unit["peak_mib"])
    speed = None if "error" in unit else _ratio(seconds, unit["seconds"])
    shown = ["" if x is None else f"{x:.2f}" for x in (ratio, speed)]
    return f"{peak:9.1f} {shown[0]:>6} {growth:>6} {shown[1]:>7}"


def verdicts(
    results: Dict[str, List[Dict[str, Any]]], lengths: Sequence[int]
) -> List[str]:
    r"""One line per target and method: PASS or "not met on this machine"
    (n/a where a run failed or the forward's peak was too small to measure)."""
    forward = results["forward"]
    lines = []
    for methods, peak_limit, growth_limit, time_spread, over_plain in TARGETS:
        for name in (name for name in methods if name in results):
            rows = results[name]
            if any("error" in row for row in rows + forward):
                lines.append(f"{name}: n/a (a run failed)")
                continue
            measured = [
                _ratio(r["peak_mib"], f["peak_mib"]) for r, f in zip(rows, forward)
            ]
            peaks = [peak for peak in measured if peak is not None]
            if len(peaks) < len(measured):
                lines.append(
                    f"{name}: n/a (the forward's peak is too small to measure)"
                )
                continue
            lines.append(
                _verdict(name, f"peak <= {peak_limit}x forward", peaks, peak_limit)
            )
            if growth_limit is not None:
                growth = _growth([r["peak_mib"] for r in rows], lengths)[1:]
                lines.append(
                    _verdict(
                        name,
                        f"peak growth <= {growth_limit}x per doubling",
                        [float(g) for g in growth if g],
                        growth_limit,
                    )
                )
            if time_spread is not None:
                times = [r["seconds"] / f["seconds"] for r, f in zip(rows, forward)]
                lines.append(
                    _verdict(
                        name,
                        f"time / forward within +-{time_spread:.0%} of "
                        f"{lengths[0]} tokens'",
                        [abs(t / times[0] - 1) for t in times],
                        time_spread,
                    )
                )
            if over_plain:
                lines += _over_plain_gradients(name, rows, results)
    return lines


def _over_plain_gradients(
    name: str, rows: List[Dict[str, Any]], results: Dict[str, List[Dict[str, Any]]]
) -> List[str]:
    r"""The method's time over the :data:`PLAIN_GRADIENTS` row's at every
    length, where that row ran: what the method adds to the ``T`` exact
    gradients it cannot do without (none where the row is absent or failed)."""
    floor = results.get(PLAIN_GRADIENTS, [])
    if not floor or any("error" in row for row in floor):
        return []
    over = [_ratio(r["seconds"], f["seconds"]) for r, f in zip(rows, floor)]
    target = f"time / {PLAIN_GRADIENTS}'s <= {OVER_PLAIN_GRADIENTS}"
    return [_verdict(name, target, [x for x in over if x], OVER_PLAIN_GRADIENTS)]


def write_results(
    results: Dict[str, List[Dict[str, Any]]], options: argparse.Namespace
) -> None:
    r"""``--out``/results.csv for :mod:`benchmarks.render_tables`: a task per
    prompt length (``"2048"``), a row per method with its peak over the
    forward's, its time over the forward's and over the plain gradients' row
    (empty where that row did not run), written then renamed."""
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    columns = ["task", "method", "n", "peak_mib", "peak_ratio", "time_ratio"]
    columns.append("time_over_plain_gradients")
    rows = []
    for index, length in enumerate(options.lengths):
        forward = results["forward"][index]
        plain = results.get(PLAIN_GRADIENTS, [{}] * len(options.lengths))[index]
        for name, measured in results.items():
            result = measured[index]
            ok = "error" not in result and "error" not in forward
            rows.append(
                {
                    "task": str(length),
                    "method": name,
                    "n": 1,
                    "peak_mib": result.get("peak_mib", "nan"),
                    "peak_ratio": _ratio_cell(result, forward, "peak_mib", ok),
                    "time_ratio": _ratio_cell(result, forward, "seconds", ok),
                    "time_over_plain_gradients": _ratio_cell(
                        result, plain, "seconds", ok and "seconds" in plain
                    ),
                }
            )
    write_text_atomically(out / "results.csv", partial(_write_csv, columns, rows))


def _write_csv(columns: List[str], rows: List[Dict[str, Any]], handle: TextIO) -> None:
    writer = csv.DictWriter(handle, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)


def _ratio_cell(
    result: Dict[str, Any], unit: Dict[str, Any], key: str, ok: bool
) -> Any:
    ratio = _ratio(result[key], unit[key]) if ok else None
    return "nan" if ratio is None else ratio


def _verdict(name: str, target: str, values: Sequence[float], limit: float) -> str:
    worst = max(values) if values else 0.0
    outcome = "PASS" if worst <= limit else "not met on this machine"
    return f"{name}: {target}: worst {worst:.2f}: {outcome}"


def main(argv: Optional[List[str]] = None) -> None:
    methods = [name for name in builders() if name != "forward"]
    optional = (*CAT_CHOICES, *WHOLE_GRAPH_ROWS)
    cpu_default = [name for name in methods if name not in optional]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--steps", type=int, default=16, help="target tokens T")
    parser.add_argument(
        "--quick", action="store_true", help="256 and 512 tokens, 2 targets"
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=methods,
        help="default: every method (on an accelerator also CAT with one target "
        "per backward pass, its CPU choice)",
    )
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:n]")
    parser.add_argument("--dtype", default="float32", choices=DTYPES)
    parser.add_argument(
        "--shape",
        default="small",
        choices=("small", "llama-7b"),
        help="small: --layers x --hidden; llama-7b: Llama-2-7B's shape",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=math.inf,
        help="accelerator runs: seconds after which no new cell starts",
    )
    parser.add_argument(
        "--memory-cap-gib",
        type=float,
        help="accelerator runs: GiB this process may allocate at most",
    )
    parser.add_argument(
        "--out", help="folder for results.csv (benchmarks.render_tables' input)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.quick:
        options.lengths, options.steps = list(QUICK_LENGTHS), 2
    if options.methods is None:
        on_cpu = options.device == "cpu"
        options.methods = cpu_default + ([] if on_cpu else [CAT_ONE_TARGET_PER_PASS])
    options.lengths = sorted(set(options.lengths))
    if options.worker:
        print(json.dumps(worker(options.worker, options)))
        return
    if options.device != "cpu":
        name = torch.cuda.get_device_name(torch.device(options.device))
        cap = options.memory_cap_gib
        print(
            f"random Llama, {options.shape} shape, {options.dtype}, sdpa; 1 prompt "
            f"+ {options.steps} target tokens; {name}; wall-clock time"
            + ("" if cap is None else f"; capped at {cap:g} GiB")
        )
        results = device_table(options)
    else:
        print(
            f"random Llama {options.layers} x {options.hidden}, vocabulary "
            f"{options.vocab}, sdpa; 1 prompt + {options.steps} target tokens; "
            f"{options.threads} thread(s), CPU"
        )
        results = table(options)
    for line in verdicts(results, options.lengths):
        print(line)
    if options.out:
        write_results(results, options)


if __name__ == "__main__":
    main()
