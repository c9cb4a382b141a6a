#!/usr/bin/env python3
r"""Cost of the perturbation metrics relative to one forward pass.

AOPC over 11 levels (0 %, 10 %, ..., 100 %) on the first 128 test snippets of
``load_split("sentiment")`` with the default model
(``load_default_model("sentiment")``) must stay within 12 forward passes of
those 128 examples: every level of the batch is evaluated together, one forward
pass per level plus one for the unperturbed input. Prints the ratios in one run.

CPU timings are noisy on a shared machine: each ratio is the median over
``--repeats`` runs, each against forward passes timed just before and after it.

``--causal`` runs the same on a random-init decoder-only model (Llama layers of
the default model's width and depth, its tokenizer, texts padded on the left):
perturbation metrics on decoders must stay within the number of levels too.

Usage::

    python -m benchmarks.bench_metrics               # the default model
    python -m benchmarks.bench_metrics --untrained   # its encoder, new head
    python -m benchmarks.bench_metrics --causal      # a decoder of its size
"""

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import transformers
from captum_ext import classifier_forward
from captum_ext.metrics import aopc, get_protocol, sufficiency, TokenOptions

EXAMPLES = 128
ELEVEN_LEVELS = replace(get_protocol("aopc"), levels=[i / 10 for i in range(11)])
# The sizes the decoder of --causal takes from the default model's encoder.
_SIZES = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
)


def _seconds(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _ratio(
    run: Callable[[], object], one_pass: Callable[[], object], repeats: int
) -> Tuple[float, float]:
    r"""Median seconds of ``run`` and median of its ratio to ``one_pass``, each
    ratio taken against the mean of one pass timed just before and just after,
    so that the load of a shared machine affects both sides alike."""
    run()  # warm-up: allocator, first-call dispatch
    seconds, ratios = [], []
    for _ in range(repeats):
        before = _seconds(one_pass)
        elapsed = _seconds(run)
        after = _seconds(one_pass)
        seconds.append(elapsed)
        ratios.append(2 * elapsed / (before + after))
    return statistics.median(seconds), statistics.median(ratios)


def _causal_model(path: Path, tokenizer: Any) -> torch.nn.Module:
    r"""A random-init Llama classifier with the sizes of the encoder at ``path``
    (the default model's)."""
    encoder = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    sizes = {name: getattr(encoder, name) for name in _SIZES}
    config = transformers.LlamaConfig(**sizes, pad_token_id=tokenizer.pad_token_id)
    config.num_labels = 2
    torch.manual_seed(0)
    return transformers.AutoModelForSequenceClassification.from_config(
        config, attn_implementation="eager"
    ).eval()


def _model(untrained: bool, causal: bool) -> Tuple[torch.nn.Module, Any]:
    from captum_ext.defaults.models import base_model_path, load_default_model

    if not (untrained or causal):
        return load_default_model("sentiment")
    # The base encoder's tokenizer is the default model's (fine-tuning saves it
    # unchanged), without fine-tuning the default model on a first run.
    path = base_model_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    if causal:
        tokenizer.padding_side = "left"
        return _causal_model(path, tokenizer), tokenizer
    # The same encoder, tokenizer and cost, with a new (untrained) head; the
    # report about that head's missing weights is expected, so it is silenced.
    transformers.logging.set_verbosity_error()
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        path, num_labels=2, attn_implementation="eager", local_files_only=True
    )
    return model.eval(), tokenizer


def _inputs(tokenizer: object) -> Dict[str, torch.Tensor]:
    from captum_ext.defaults.data import load_split
    from captum_ext.defaults.models import MAX_LENGTH

    return dict(
        tokenizer(  # type: ignore[operator]
            load_split("sentiment").texts[:EXAMPLES],
            truncation=True,
            max_length=MAX_LENGTH,
            padding=True,
            return_tensors="pt",
            return_special_tokens_mask=True,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--untrained",
        action="store_true",
        help="the default model's encoder with an untrained head (same cost)",
    )
    parser.add_argument(
        "--causal",
        action="store_true",
        help="a random-init decoder-only model of the same size, left padding",
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model, tokenizer = _model(args.untrained, args.causal)
    batch = _inputs(tokenizer)
    tokens = TokenOptions.from_tokenizer(tokenizer, batch["special_tokens_mask"])
    forward = classifier_forward(model)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    scores = torch.randn(ids.shape, generator=torch.Generator().manual_seed(0))

    def one_pass() -> None:
        with torch.no_grad():
            forward(ids, mask)

    def metric(
        fn: Callable, chunk: Optional[int], **kwargs: object
    ) -> Callable[[], object]:
        return lambda: fn(
            forward,
            ids,
            scores,
            None,
            (mask,),
            tokens=tokens,
            internal_batch_size=chunk,
            **kwargs,
        )

    one_pass()  # warm-up
    print(
        f"{type(model).__name__}, {EXAMPLES} examples, width {ids.shape[1]}, "
        f"{torch.get_num_threads()} threads, one forward pass "
        f"{_seconds(one_pass) * 1000:.0f} ms"
    )
    cases = {
        "AOPC default, 11 levels, deletion": metric(aopc, None, preset=ELEVEN_LEVELS),
        "AOPC default, 11 levels, deletion, 32 rows/pass": metric(
            aopc, 32, preset=ELEVEN_LEVELS
        ),
        "AOPC normxlogit, 9 levels, [MASK]": metric(aopc, None, preset="normxlogit"),
        "sufficiency default, 10 levels, deletion": metric(sufficiency, None),
    }
    for name, run in cases.items():
        seconds, ratio = _ratio(run, one_pass, args.repeats)
        print(f"{name}: {seconds * 1000:.0f} ms = {ratio:.2f}x one forward pass")


if __name__ == "__main__":
    main()
