#!/usr/bin/env python3
r"""Pieces the benchmark scripts share: the default model's architecture with
random weights, random causal LMs with left-padded prompts and continuations,
random and tokenised batches, captum_ext's methods as
``run(input_ids, attention_mask, target)`` callables, peak memory of a block
(also measured in a fresh subprocess), and gradient x activation at the
embedding output (the reference saliency of GlobEnc's protocol and the paper's
layer-0 Grad-CAM)."""

import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import transformers
from captum.attr import LayerGradientXActivation
from captum_ext import classifier_forward, get_adapter
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

# glibc's fixed mmap threshold for CPU memory runs: every large block is served
# with mmap and unmapped when freed, so the RSS follows the live tensors instead
# of keeping freed heap pages that the next allocation reuses unseen. glibc reads
# it at start-up only: set it in the environment of a new process.
MMAP_ENV = "MALLOC_MMAP_THRESHOLD_"
MMAP_THRESHOLD = 64 * 1024

# (input_ids, attention_mask, target) -> anything
Run = Callable[[Tensor, Tensor, Tensor], object]
# (model, internal_batch_size or None for the whole batch) -> Run
Builder = Callable[[nn.Module, Optional[int]], Run]


def random_minilm() -> nn.Module:
    r"""all-MiniLM-L6-v2's sizes (512 positions) with random weights, eager
    attention, in eval mode."""
    config = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
        max_position_embeddings=512,
        num_labels=2,  # type: ignore[call-arg]  # a PreTrainedConfig kwarg
        pad_token_id=0,
        cls_token_id=101,
        sep_token_id=102,
    )
    return _random_eager(transformers.AutoModelForSequenceClassification, config)


def random_causal_lms(
    positions: Optional[int] = None, vocab: Optional[int] = None
) -> Dict[str, nn.Module]:
    r"""Random-init causal LMs, name -> model, eager attention, in eval mode:
    GPT-2 with 6 layers x 384 and Llama with 4 layers x 256 (the configs'
    default vocabularies, 50257 and 32000, and positions, 1024 and 2048, unless
    ``vocab`` / ``positions`` are given)."""
    sizes: Dict[str, Any] = {}
    if vocab is not None:
        sizes["vocab_size"] = vocab
    gpt2 = transformers.GPT2Config(n_layer=6, n_embd=384, n_head=6, **sizes)
    if positions is not None:
        gpt2.n_positions = positions
    return {
        "gpt2 6x384": _random_eager(transformers.AutoModelForCausalLM, gpt2),
        "llama 4x256": random_llama(positions=positions, vocab=vocab),
    }


def random_llama(
    layers: int = 4,
    hidden: int = 256,
    positions: Optional[int] = None,
    vocab: Optional[int] = None,
    attention: str = "eager",
) -> nn.Module:
    r"""Random-init Llama causal LM, ``layers`` x ``hidden`` (4 heads, MLP 4 x
    hidden), the config's default vocabulary (32000) and positions (2048)
    unless ``vocab`` / ``positions`` are given, ``attention`` implementation,
    in eval mode."""
    sizes: Dict[str, Any] = {}
    if vocab is not None:
        sizes["vocab_size"] = vocab
    if positions is not None:
        sizes["max_position_embeddings"] = positions
    config = transformers.LlamaConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=4 * hidden,
        **sizes,
    )
    return _random_eager(transformers.AutoModelForCausalLM, config, attention)


def _random_eager(
    auto_class: Any, config: transformers.PretrainedConfig, attention: str = "eager"
) -> nn.Module:
    r"""``auto_class``'s model for ``config``, random weights from seed 0,
    ``attention`` implementation (eager by default), in eval mode."""
    torch.manual_seed(0)
    return auto_class.from_config(config, attn_implementation=attention).eval()


def continuation(
    model: nn.Module, batch: int, prompt: int, steps: int
) -> Dict[str, Tensor]:
    r"""Random ``prompt``-token prompts ``ids`` ``[batch, prompt]``, left-padded
    (row ``b`` loses ``b`` tokens to padding; ``mask``), and ``steps`` random
    target ids per row (``target`` ``[batch, steps]``), ids from 10 up."""
    config: Any = model.config
    vocab = config.vocab_size
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(10, vocab, (batch, prompt), generator=generator)
    mask = torch.ones_like(ids)
    for row in range(batch):
        mask[row, :row] = 0
    target = torch.randint(10, vocab, (batch, steps), generator=generator)
    return {"ids": ids, "mask": mask, "target": target}


def causal_lm_forward(model: nn.Module, _chunk: Optional[int] = None) -> Run:
    r"""One plain forward pass (``torch.no_grad``) over prompt + continuation,
    position ids counted over attended tokens: the unit of the generation
    benchmarks, as a :data:`Run` (a :data:`Builder`; a forward pass has no
    ``internal_batch_size``)."""

    def run(ids: Tensor, mask: Tensor, target: Tensor) -> object:
        joined = torch.cat([ids, target], 1)
        joined_mask = torch.cat([mask, torch.ones_like(target)], 1)
        positions = (joined_mask.cumsum(-1) - 1).clamp_min(0)
        with torch.no_grad():
            return model(
                input_ids=joined, attention_mask=joined_mask, position_ids=positions
            ).logits

    return run


def random_ids(model: nn.Module, batch: int, length: int) -> Tensor:
    r"""Random ids ``[batch, length]`` (seeded, from id 1000 up), framed by the
    config's [CLS]/[SEP] (or <s>/</s>) where it has them."""
    config: Any = model.config
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, config.vocab_size, (batch, length), generator=generator)
    first = getattr(config, "cls_token_id", None) or getattr(
        config, "bos_token_id", None
    )
    last = getattr(config, "sep_token_id", None) or getattr(
        config, "eos_token_id", None
    )
    if first is not None and last is not None:
        ids[:, 0], ids[:, -1] = first, last
    return ids


def encode(
    tokenizer: object, texts: Sequence[str], max_length: int
) -> Tuple[Tensor, Tensor]:
    r"""``(input_ids, attention_mask)``, ``[batch, pos]``, right-padded to the
    longest text, truncated to ``max_length``."""
    encoded = tokenizer(  # type: ignore[operator]
        list(texts),
        truncation=True,
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    )
    return encoded["input_ids"], encoded["attention_mask"]


def embedding_grad_x_activation(
    model: nn.Module, input_ids: Tensor, mask: Tensor
) -> Tensor:
    r"""``(d logit_pred / d h0) * h0``, ``[batch, pos, d]``: ``h0`` is the
    embedding-layer output and ``pred`` each example's predicted class."""
    forward = classifier_forward(model)
    with torch.no_grad():
        target = forward(input_ids, mask).argmax(-1)
    layer = get_adapter(model).embedding_output_module()
    attribution = LayerGradientXActivation(forward, layer).attribute(
        input_ids, target=target, additional_forward_args=(mask,)
    )
    return attribution.detach()


def attribute_run(
    method: object,
    chunk: Optional[int] = None,
    entry: str = "attribute",
    **kwargs: object,
) -> Run:
    r"""``method.<entry>`` as a :data:`Run`, with ``internal_batch_size=chunk``
    (None, the methods' default: the whole batch at once) and ``kwargs``."""
    call = getattr(method, entry)
    return lambda ids, mask, target: call(
        ids,
        target=target,
        additional_forward_args=(mask,),
        internal_batch_size=chunk,
        **kwargs,
    )


def captum_ext_methods(layer: Optional[int] = None) -> Dict[str, Builder]:
    r"""captum_ext's methods, name -> :data:`Builder`: the classes' names, and
    ``"DecodedLayerGradCam(all layers)"`` for its sweep over every layer.
    ``layer``: DecodedLayerGradCam's layer; None: the model's middle one
    (``num_layers // 2``). GlobEnc's builder raises
    :class:`~captum_ext.UnsupportedModelError` on models it does not support."""

    def grad_cam(model: nn.Module) -> DecodedLayerGradCam:
        adapter = get_adapter(model)
        at = adapter.num_layers // 2 if layer is None else layer
        # A causal LM decodes with its own final norm + LM head (decoder None).
        decoder = None if adapter.is_causal_lm else EmbeddingDecoder(model)
        return DecodedLayerGradCam(model, at, decoder)

    return {
        "LogAt": lambda m, c: attribute_run(LogAt(m), c),
        "NormXLogit": lambda m, c: attribute_run(NormXLogit(m), c),
        "CAT": lambda m, c: attribute_run(CAT(m), c),
        "AttCAT": lambda m, c: attribute_run(AttCAT(m), c),
        "GlobEnc": lambda m, c: attribute_run(GlobEnc(m), c),
        "DecodedLayerGradCam": lambda m, c: attribute_run(grad_cam(m), c),
        # The tied-embedding decoder costs what a fitted head costs (the
        # full-vocabulary softmax at every position and layer dominates).
        "DecodedLayerGradCam(all layers)": lambda m, c: attribute_run(
            grad_cam(m), c, "attribute_all_layers"
        ),
    }


# captum_ext's methods that explain generated text (docs/generation.rst).
GENERATION_METHODS = (
    "LogAt",
    "NormXLogit",
    "CAT",
    "AttCAT",
    "DecodedLayerGradCam",
    "GlobEnc",
)


def causal_lm_methods() -> Dict[str, Builder]:
    r"""The :data:`GENERATION_METHODS` from :func:`captum_ext_methods`, for
    causal LMs (DecodedLayerGradCam at the middle layer, the model's own head as
    decoder)."""
    methods = captum_ext_methods()
    return {name: methods[name] for name in GENERATION_METHODS}


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


class PeakMemory:
    r"""Peak memory of a ``with`` block above what was in use when it began, in
    MiB (``.mib``): ``torch.cuda.max_memory_allocated`` on CUDA, the peak RSS
    (``VmHWM``, reset through ``/proc/self/clear_refs``) on the CPU. ``.exact``
    is False where the RSS peak could not be reset (then ``ru_maxrss``)."""

    def __init__(self, device: str = "cpu") -> None:
        self.cuda = device.startswith("cuda")
        self.mib = 0.0
        self.exact = True
        self._before = 0

    def __enter__(self) -> "PeakMemory":
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._before = torch.cuda.memory_allocated()
        else:
            self.exact = _reset_peak()
            self._before = _status_kib("VmRSS") * 1024
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
        else:
            peak = _peak_kib(self.exact) * 1024
        self.mib = (peak - self._before) / 2**20


def measure_in_subprocess(module: str, arguments: List[str]) -> Dict[str, Any]:
    r"""Runs ``python -m module --worker ... arguments`` in a fresh process with
    glibc's fixed mmap threshold (:data:`MMAP_ENV`) and returns the JSON object
    on the last line it prints (a worker's :class:`PeakMemory` result)."""
    command = [sys.executable, "-m", module, "--worker", *arguments]
    env = {**os.environ, MMAP_ENV: str(MMAP_THRESHOLD)}
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def peak_of(run: Callable[[], object]) -> Dict[str, Any]:
    r"""Peak memory above the start (MiB, :class:`PeakMemory` on the CPU), the
    seconds and whether the peak is exact, of one call of ``run``, as a
    worker prints it for :func:`measure_in_subprocess`."""
    start = time.perf_counter()
    with PeakMemory() as peak:
        run()
    seconds = time.perf_counter() - start
    return {"peak_mib": peak.mib, "seconds": seconds, "exact": peak.exact}
