#!/usr/bin/env python3
r"""Decoders fitted on a frozen encoder, for models without a masked-LM head.

Decoded layer attribution (Hou & Castanon, ICML 2023,
https://proceedings.mlr.press/v202/hou23a.html) needs ``f_lm``: a map from the
hidden states ``h_l`` to vocabulary logits. When the model has no pre-trained
MLM head, one small head per layer ``l`` is fitted by minimising the paper's
Eq. 3 with ``t`` = the input tokens themselves (reconstruction):

    ``min_theta  - sum_j log softmax(f_theta(h_l[j]))[t_j]``

over real text, with the encoder frozen. Each head is
``LayerNorm -> dense -> E^T + b``, ``E`` being the model's own (frozen, shared)
word-embedding matrix and ``dense`` starting as a scaled identity (the tied
decoder), so only ``d^2 + 3d + V`` parameters per layer are trained. On
all-MiniLM-L6-v2 this linear head reconstructed held-out tokens better at every
layer than the BERT MLM head's shape (``dense -> gelu -> LayerNorm -> E^T + b``)
with the same budget (1000 texts, 60 steps: 0.94 vs 0.78 top-1 at the last
layer).

Cost: one forward pass over the texts gives the hidden states of all layers at
once; each head then trains on sampled positions for a few steps. The softmax
over the full vocabulary dominates.
"""

import hashlib
import json
import math
import pickle
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn, Tensor

from captum_ext._utils.hooks import eval_semantics
from captum_ext._utils.progress import Progress
from captum_ext.adapters import get_adapter, ModelAdapter
from captum_ext.defaults.cache import cached_directory

__all__ = [
    "DecoderHead",
    "FitConfig",
    "FittedDecoders",
    "fit_decoders",
    "load_fitted_decoder",
    "load_fitted_decoders",
]

_RECIPE_VERSION = "v1"
_REPORT = "report.json"


@dataclass(frozen=True)
class FitConfig:
    r"""How the decoders are fitted.

    Args:
        fit_texts (int): texts whose positions train the heads (the first ones).
        held_out_texts (int): the next texts, for the reported accuracy.
        max_length (int): tokens per text, specials included.
        steps (int): optimiser steps per layer.
        batch_positions (int): positions sampled per step.
        lr (float): Adam learning rate, decayed linearly to 0.
        text_batch (int): texts per encoder forward pass.
        seed (int): sampling and initialisation seed.
    """

    fit_texts: int = 400
    held_out_texts: int = 150
    max_length: int = 64
    steps: int = 40
    batch_positions: int = 256
    lr: float = 3e-3
    text_batch: int = 64
    seed: int = 0


class DecoderHead(nn.Module):
    r"""``h -> (W LayerNorm(h) + c) @ E^T + b``: ``[..., d] -> [..., V]``.

    ``E`` (``[V, e]``) is the model's word-embedding matrix, shared and frozen (a
    non-persistent buffer: it is not saved with the head). ``W`` starts as the
    identity over the mean row norm of ``E`` (when ``d = e``), i.e. from the
    tied-embedding decoder.

    Args:
        hidden_size (int): ``d``.
        embedding (Tensor): ``E``, ``[vocab, e]``.
    """

    def __init__(self, hidden_size: int, embedding: Tensor) -> None:
        super().__init__()
        vocab, width = embedding.shape
        self.layer_norm = nn.LayerNorm(hidden_size)
        self.dense = nn.Linear(hidden_size, width)
        if hidden_size == width:  # start as LayerNorm + tied decoder, rows of E
            # scaled to unit mean norm so the first logits are neither flat nor
            # extreme whatever the embeddings' scale
            scale = 1 / embedding.norm(dim=1).mean().item()
            with torch.no_grad():
                self.dense.weight.copy_(torch.eye(width) * scale)
            nn.init.zeros_(self.dense.bias)
        self.bias = nn.Parameter(torch.zeros(vocab))
        self.register_buffer("embedding", embedding.detach(), persistent=False)

    def forward(self, hidden: Tensor) -> Tensor:
        features = self.dense(self.layer_norm(hidden))  # [..., e]
        return features @ self.embedding.T + self.bias  # [..., V]


@dataclass
class FittedDecoders:
    r"""One fitted head per layer ``0..L`` and how well it reconstructs.

    Args:
        heads (list[DecoderHead]): ``heads[l]`` decodes ``hidden_states[l]``.
        accuracy (list[float]): held-out top-1 reconstruction accuracy per layer,
            over non-special tokens.
        fit_seconds (float): wall time of the fit (encoder pass included).
    """

    heads: List[DecoderHead]
    accuracy: List[float]
    fit_seconds: float


def _check_vocab(adapter: ModelAdapter, tokenizer: object) -> None:
    config: Any = adapter.config  # a Hugging Face config: attributes per family
    vocab = int(config.vocab_size)
    tokens = len(tokenizer)  # type: ignore[arg-type]
    rows = adapter.word_embeddings().weight.shape[0]
    if not tokens == vocab == rows:
        raise ValueError(
            f"vocabulary sizes differ: tokenizer {tokens}, model config {vocab}, "
            f"word embeddings {rows}; a decoder must predict exactly the model's "
            "tokens, so use the model's own tokenizer"
        )


def _check_texts(texts: Sequence[str]) -> None:
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, got one str")
    wrong = next((t for t in texts if not isinstance(t, str)), None)
    if wrong is not None:
        raise TypeError(
            f"texts must be a sequence of strings, got an item {type(wrong).__name__}"
        )
    if not any(t.strip() for t in texts):
        raise ValueError(
            "texts is empty: fitting a decoder needs real text in the model's "
            "language (e.g. the training texts of the task the model was "
            "fine-tuned on)"
        )


def _batches(texts: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(texts), size):
        yield texts[start : start + size]


@torch.no_grad()
def _hidden_states(
    adapter: ModelAdapter, tokenizer: object, texts: Sequence[str], config: FitConfig
) -> Tuple[Tensor, Tensor, Tensor]:
    r"""One forward pass per text batch, all layers at once.

    Returns:
        ``[N, L + 1, d]`` hidden states of every real token, their ids ``[N]``
        and whether each is a special token ``[N]``.
    """
    states, ids = [], []
    device = next(adapter.model.parameters()).device
    for chunk in _batches(texts, config.text_batch):
        encoded = tokenizer(  # type: ignore[operator]
            list(chunk),
            padding=True,
            truncation=True,
            max_length=config.max_length,
            return_tensors="pt",
        ).to(device)
        output = adapter.model(**encoded, output_hidden_states=True)
        valid = encoded["attention_mask"].bool()
        states.append(torch.stack([h[valid] for h in output.hidden_states], dim=1))
        ids.append(encoded["input_ids"][valid])
    token_ids = torch.cat(ids)
    special = torch.tensor(adapter.tokens.special_token_ids(tokenizer), device=device)
    return torch.cat(states).float(), token_ids, torch.isin(token_ids, special)


def _train_head(
    states: Tensor,
    ids: Tensor,
    embedding: Tensor,
    config: FitConfig,
    progress: Progress,
) -> DecoderHead:
    r"""Fits one head on ``states`` ``[N, d]`` to predict ``ids`` ``[N]``."""
    generator = torch.Generator().manual_seed(config.seed)
    with torch.random.fork_rng(devices=[]):  # seeded init, global RNG untouched
        torch.manual_seed(config.seed)
        head = DecoderHead(states.shape[1], embedding).to(states.device)
    optimizer = torch.optim.Adam(head.parameters(), lr=config.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 1 - step / config.steps
    )
    for _ in range(config.steps):
        rows = torch.randint(len(ids), (config.batch_positions,), generator=generator)
        rows = rows.to(states.device)
        loss = F.cross_entropy(head(states[rows]), ids[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        progress.update(postfix=f"loss {loss.item():.2f}")
    return head.eval()


@torch.no_grad()
def _accuracy(head: DecoderHead, states: Tensor, ids: Tensor) -> float:
    if len(ids) == 0:
        return float("nan")
    predicted = torch.cat([head(part).argmax(-1) for part in states.split(4096)])
    return (predicted == ids).float().mean().item()


def fit_decoders(
    model: nn.Module,
    tokenizer: object,
    texts: Sequence[str],
    config: FitConfig = FitConfig(),
) -> FittedDecoders:
    r"""Fits one :class:`DecoderHead` per layer ``0..L`` on the frozen encoder
    (Eq. 3 with ``t`` = the input tokens), without caching; see
    :func:`load_fitted_decoders`.

    Args:
        model (nn.Module): a Hugging Face model (not changed).
        tokenizer (PreTrainedTokenizerBase): its tokenizer.
        texts (sequence of str): the first ``config.fit_texts`` train the heads,
            the next ``config.held_out_texts`` measure their accuracy.
        config (FitConfig, optional): the recipe.

    Returns:
        FittedDecoders: heads in eval mode, with held-out accuracy per layer.
    """
    if config.steps < 1 or config.fit_texts < 1 or config.batch_positions < 1:
        raise ValueError(f"steps, fit_texts and batch_positions must be >= 1: {config}")
    _check_texts(texts)
    adapter = get_adapter(model)
    _check_vocab(adapter, tokenizer)
    start = time.perf_counter()
    fit_part, held_part = _split(texts, config)
    with eval_semantics(model):
        states, ids, _ = _hidden_states(adapter, tokenizer, fit_part, config)
        held = (
            _hidden_states(adapter, tokenizer, held_part, config) if held_part else None
        )
    embedding = adapter.word_embeddings().weight.detach()
    layers = states.shape[1]
    heads, accuracy = [], []
    total = layers * config.steps
    with Progress(total, "fitting decoders", "steps") as progress:
        for layer in range(layers):
            head = _train_head(states[:, layer], ids, embedding, config, progress)
            heads.append(head)
            accuracy.append(_held_out_accuracy(head, held, layer))
    return FittedDecoders(heads, accuracy, time.perf_counter() - start)


def _split(
    texts: Sequence[str], config: FitConfig
) -> Tuple[Sequence[str], Sequence[str]]:
    r"""The texts that fit the heads and the held-out ones. With no more texts
    than ``config.fit_texts`` a fifth of them (at least one, when there are two)
    is held out, and a warning says the decoders will be weak."""
    fit = config.fit_texts
    if len(texts) <= fit:
        warnings.warn(
            f"fitting decoders on {len(texts)} texts (the recipe uses "
            f"{config.fit_texts + config.held_out_texts}); pass more real text for "
            "decoders that reconstruct the input well",
            stacklevel=3,
        )
        fit = max(1, len(texts) - max(1, len(texts) // 5))
    return texts[:fit], texts[fit : fit + config.held_out_texts]


def _held_out_accuracy(
    head: DecoderHead, held: Optional[Tuple[Tensor, Tensor, Tensor]], layer: int
) -> float:
    r"""Top-1 reconstruction accuracy on the held-out content tokens; NaN when
    no text was held out."""
    if held is None:
        return math.nan
    states, ids, special = held
    return _accuracy(head, states[~special, layer], ids[~special])


def _fingerprint(model: nn.Module, tokenizer: object, texts: Sequence[str]) -> str:
    r"""Digest of the weights, the tokenizer's vocabulary and the texts."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(
            tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
        )
    vocab = tokenizer.get_vocab()  # type: ignore[attr-defined]
    digest.update(json.dumps(vocab, sort_keys=True).encode())
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _save(fitted: FittedDecoders, config: FitConfig, directory: Path) -> None:
    for layer, head in enumerate(fitted.heads):
        torch.save(head.state_dict(), directory / f"layer_{layer}.pt")
    report = {
        "accuracy": fitted.accuracy,
        "fit_seconds": fitted.fit_seconds,
        "config": asdict(config),
    }
    (directory / _REPORT).write_text(json.dumps(report, indent=1))


def _load_state(path: Path) -> dict:
    r"""A head's saved tensors. ``weights_only=True``: a cache file is data, and
    unpickling anything else (a file planted in the cache) could run code."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise pickle.UnpicklingError(
            f"refused to load {path}: it holds more than tensors (weights_only=True "
            "rejected it), so it was not written by captum_ext; delete the "
            f"directory {path.parent} to fit the decoders anew"
        ) from error


def _load(directory: Path, adapter: ModelAdapter) -> FittedDecoders:
    report = json.loads((directory / _REPORT).read_text())
    embedding = adapter.word_embeddings().weight.detach()
    heads = []
    for layer in range(len(report["accuracy"])):
        head = DecoderHead(adapter.hidden_size, embedding).to(embedding.device)
        head.load_state_dict(_load_state(directory / f"layer_{layer}.pt"))
        heads.append(head.eval())
    return FittedDecoders(heads, report["accuracy"], report["fit_seconds"])


def load_fitted_decoders(
    model: nn.Module,
    tokenizer: object,
    texts: Sequence[str],
    config: FitConfig = FitConfig(),
) -> FittedDecoders:
    r"""The fitted decoders of every layer ``0..L``: fitted once with
    :func:`fit_decoders`, then cached (keyed by the model's weights, the
    tokenizer's vocabulary, the texts and ``config``).

    Args:
        model (nn.Module): a Hugging Face model (not changed).
        tokenizer (PreTrainedTokenizerBase): its tokenizer; its vocabulary must be
            the model's.
        texts (sequence of str): real text in the model's language, e.g. the
            training texts of the task the model was fine-tuned on (for the
            default models, :func:`captum_ext.defaults.data.load_split` ``(task,
            "train").texts``); the first ``config.fit_texts +
            config.held_out_texts`` are used and are part of the cache key.
        config (FitConfig, optional): the recipe.

    Returns:
        FittedDecoders: ``heads[l]`` decodes ``hidden_states[l]``.
    """
    _check_texts(texts)
    adapter = get_adapter(model)
    _check_vocab(adapter, tokenizer)
    used = list(texts[: config.fit_texts + config.held_out_texts])
    key = _fingerprint(model, tokenizer, used) + json.dumps(asdict(config))
    name = hashlib.sha256(key.encode()).hexdigest()[:16]

    def build(directory: Path) -> None:
        _save(fit_decoders(model, tokenizer, used, config), config, directory)

    directory = cached_directory(f"fitted-decoder-{_RECIPE_VERSION}-{name}", build)
    return _load(directory, adapter)


def load_fitted_decoder(
    model: nn.Module,
    tokenizer: object,
    layer: int,
    texts: Sequence[str],
    config: FitConfig = FitConfig(),
) -> DecoderHead:
    r"""The fitted decoder of ``hidden_states[layer]`` (see
    :func:`load_fitted_decoders`; all layers are fitted and cached together,
    because one encoder pass serves them all).

    Args:
        model (nn.Module): a Hugging Face model (not changed).
        tokenizer (PreTrainedTokenizerBase): its tokenizer.
        layer (int): index into ``hidden_states`` (0 = embedding output).
        texts (sequence of str): real text in the model's language (see
            :func:`load_fitted_decoders`).
        config (FitConfig, optional): the recipe.

    Returns:
        DecoderHead: ``[..., d] -> [..., vocab]`` logits, in eval mode.
    """
    layer = get_adapter(model).check_layer(layer)
    return load_fitted_decoders(model, tokenizer, texts, config).heads[layer]
