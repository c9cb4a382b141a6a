#!/usr/bin/env python3
r"""Cost of explaining generated text, relative to one forward pass.

Random-init causal LMs (no download): GPT-2 with 6 layers x 384 and Llama with 4
layers x 256, eager attention, float32. A left-padded batch of 64-token prompts
with 16 target tokens each is explained by captum_ext's methods on causal LMs
(docs/generation.rst), for batch 1 and batch 8; each time is divided by one
plain forward pass (``torch.no_grad``) over prompt + continuation of the same
batch, timed in the same run right before it. Targets (issue 22): LogAt and
NormXLogit <= 1.2x (all T targets from that one forward), CAT, AttCAT and
decoded Grad-CAM <= (2 + T)x (one forward and T backward passes).

CPU timings are noisy on a shared machine: after a warm-up, the median of
``--repeats`` ratios is reported. Captum's LLM baselines are not timed here.

Usage::

    python -m benchmarks.bench_generation
    python -m benchmarks.bench_generation --repeats 5 --batches 1 8
"""

import argparse
import statistics
import time
from typing import Any, Callable, Dict, List

import torch
import transformers
from captum_ext.attr import AttCAT, CAT, DecodedLayerGradCam, LogAt, NormXLogit
from torch import nn, Tensor

PROMPT, STEPS = 64, 16

# name -> (model, prompts, mask, target) -> scores
METHODS: Dict[str, Callable[[nn.Module, Tensor, Tensor, Tensor], Tensor]] = {
    "LogAt": lambda m, ids, mask, y: LogAt(m).attribute(
        ids, target=y, additional_forward_args=(mask,)
    ),
    "NormXLogit": lambda m, ids, mask, y: NormXLogit(m).attribute(
        ids, target=y, additional_forward_args=(mask,)
    ),
    "CAT": lambda m, ids, mask, y: CAT(m).attribute(
        ids, target=y, additional_forward_args=(mask,)
    ),
    "AttCAT": lambda m, ids, mask, y: AttCAT(m).attribute(
        ids, target=y, additional_forward_args=(mask,)
    ),
    "DecodedLayerGradCam": lambda m, ids, mask, y: DecodedLayerGradCam(
        m, _config(m).num_hidden_layers // 2
    ).attribute(ids, target=y, additional_forward_args=(mask,)),
}


def _config(model: nn.Module) -> Any:
    return model.config


def random_models() -> Dict[str, nn.Module]:
    r"""The two random-init causal LMs, in eval mode."""
    torch.manual_seed(0)
    gpt2 = transformers.GPT2Config(n_layer=6, n_embd=384, n_head=6)
    llama = transformers.LlamaConfig(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=1024,
    )
    return {
        name: transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="eager"
        ).eval()
        for name, config in (("gpt2 6x384", gpt2), ("llama 4x256", llama))
    }


def continuation(model: nn.Module, batch: int) -> Dict[str, Tensor]:
    r"""Left-padded random prompts (row ``b`` loses ``b`` tokens of padding) and
    16 random target ids per row."""
    generator = torch.Generator().manual_seed(0)
    vocab = _config(model).vocab_size
    ids = torch.randint(10, vocab, (batch, PROMPT), generator=generator)
    mask = torch.ones_like(ids)
    for row in range(batch):
        mask[row, :row] = 0
    target = torch.randint(10, vocab, (batch, STEPS), generator=generator)
    return {"ids": ids, "mask": mask, "target": target}


def _seconds(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def forward_once(model: nn.Module, data: Dict[str, Tensor]) -> None:
    r"""One forward pass over prompt + continuation (the ratios' unit)."""
    ids = torch.cat([data["ids"], data["target"]], 1)
    mask = torch.cat([data["mask"], torch.ones_like(data["target"])], 1)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, position_ids=positions)


def ratios(model: nn.Module, batch: int, repeats: int) -> Dict[str, float]:
    r"""Median time ratio of each method to one forward pass."""
    data = continuation(model, batch)
    args = (model, data["ids"], data["mask"], data["target"])
    result = {}
    for name, method in METHODS.items():
        method(*args)  # warm-up
        measured: List[float] = []
        for _ in range(repeats):
            forward = _seconds(lambda: forward_once(model, data))
            measured.append(_seconds(lambda: method(*args)) / forward)
        result[name] = statistics.median(measured)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    options = parser.parse_args()
    print(f"prompt {PROMPT} tokens, {STEPS} targets; time / one forward pass")
    print(f"targets: LogAt, NormXLogit <= 1.2x; CAT, AttCAT, decoded <= {2 + STEPS}x")
    for model_name, model in random_models().items():
        for batch in options.batches:
            row = ratios(model, batch, options.repeats)
            cells = "  ".join(f"{name} {value:5.2f}x" for name, value in row.items())
            print(f"{model_name:12s} batch {batch}:  {cells}")


if __name__ == "__main__":
    main()
