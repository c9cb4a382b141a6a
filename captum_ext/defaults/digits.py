#!/usr/bin/env python3
r"""The default vision task: a small ViT trained here on scikit-learn's 8 x 8
handwritten digits (``sklearn.datasets.load_digits``: 1,797 images of 10
classes, Alpaydin & Kaynak, UCI; shipped inside the scikit-learn wheel, so
nothing is downloaded).

Each image is upsampled (nearest neighbour) to ``image_size`` and normalised
with the training split's pixel mean and standard deviation, so 0 is the mean
pixel: the baseline :class:`~captum_ext.metrics.PatchTokens` masks patches
with. Identical images are kept once and every image is ranked by the SHA-256
of ``"<seed>:<pixels>"``; the last ``test_fraction`` of the ranking is the
held-out split (the same on every machine, whatever the random number
generators). The model (``ViTForImageClassification`` from a config, random
initialisation, eager attention) is trained once with a fixed seed and cached
under :func:`captum_ext.defaults.cache.cache_root` as
``default-digits-<fingerprint>``: the fingerprint hashes the whole recipe, so a
changed recipe trains anew.
"""

import hashlib
import json
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import torch
from torch import Tensor

from captum_ext._utils.progress import Progress
from captum_ext.defaults.cache import cached_directory, recipe_fingerprint
from captum_ext.defaults.library_bars import quiet_library_bars

__all__ = [
    "DIGITS_RECIPE",
    "DigitImages",
    "DigitsRecipe",
    "digits_cache_name",
    "digits_split",
    "load_default_vit",
]

_CODE_VERSION = 1


@dataclass(frozen=True)
class DigitsRecipe:
    r"""The images, the ViT and its training: everything the cached model
    depends on."""

    image_size: int = 16  # the 8 x 8 digits upsampled
    patch_size: int = 4  # a 4 x 4 grid of patches
    hidden_size: int = 32
    layers: int = 2
    heads: int = 4
    intermediate_size: int = 64
    epochs: int = 60
    batch_size: int = 128
    lr: float = 4e-3
    weight_decay: float = 0.01
    test_fraction: float = 0.2
    seed: int = 0

    def fingerprint(self) -> str:
        r"""Hex digest of the recipe and the training code's version."""
        return recipe_fingerprint(_CODE_VERSION, asdict(self))

    @property
    def grid(self) -> Tuple[int, int]:
        side = self.image_size // self.patch_size
        return side, side


DIGITS_RECIPE = DigitsRecipe()


@dataclass(frozen=True)
class DigitImages:
    r"""``images`` ``[n, 1, size, size]`` (normalised) and their ``labels``."""

    images: Tensor
    labels: List[int]
    label_names: List[str]
    source: str

    def __len__(self) -> int:
        return len(self.labels)

    def head(self, n: int) -> "DigitImages":
        return DigitImages(
            self.images[:n], self.labels[:n], self.label_names, self.source
        )


def digits_cache_name(recipe: DigitsRecipe = DIGITS_RECIPE) -> str:
    r"""The cache directory's name for ``recipe``."""
    return f"default-digits-{recipe.fingerprint()}"


def digits_split(
    split: str = "test", recipe: DigitsRecipe = DIGITS_RECIPE
) -> DigitImages:
    r"""The ``"train"`` or ``"test"`` (held-out) digits of ``recipe``, as the
    model reads them."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    images, labels = _splits(recipe)[split]
    return DigitImages(
        images.clone(),
        list(labels),
        [str(d) for d in range(10)],
        f"scikit-learn digits, {split} split (seed {recipe.seed})",
    )


@lru_cache(maxsize=4)
def _splits(recipe: DigitsRecipe) -> Any:
    from sklearn.datasets import load_digits

    digits = load_digits()
    raw = torch.tensor(digits.images, dtype=torch.float32)  # [1797, 8, 8]
    order = _ranked(raw, recipe.seed)
    test = round(recipe.test_fraction * len(order))
    parts = {"train": order[: len(order) - test], "test": order[len(order) - test :]}
    scale = recipe.image_size // 8
    big = raw.repeat_interleave(scale, 1).repeat_interleave(scale, 2)[:, None]
    train = big[parts["train"]]
    mean, std = train.mean(), train.std()
    return {
        name: ((big[rows] - mean) / std, tuple(int(digits.target[r]) for r in rows))
        for name, rows in parts.items()
    }


def _ranked(raw: Tensor, seed: int) -> List[int]:
    r"""Indices of the distinct images (first occurrence kept), ranked by
    the SHA-256 of ``"<seed>:<pixels>"``."""
    first: Dict[bytes, int] = {}
    for index, image in enumerate(raw):
        first.setdefault(image.numpy().tobytes(), index)
    return sorted(
        first.values(),
        key=lambda i: hashlib.sha256(
            f"{seed}:".encode() + raw[i].numpy().tobytes()
        ).hexdigest(),
    )


def load_default_vit(
    device: Optional[Union[str, torch.device]] = None,
    recipe: DigitsRecipe = DIGITS_RECIPE,
) -> Any:
    r"""The default digits ViT (``ViTForImageClassification``, eval mode,
    eager attention) on ``device``, trained and cached first when needed
    (once; progress on stderr)."""
    from transformers import ViTForImageClassification

    quiet_library_bars()
    path = cached_directory(digits_cache_name(recipe), lambda out: _build(recipe, out))
    model: Any = ViTForImageClassification.from_pretrained(
        str(path), attn_implementation="eager"
    )
    return model.to(torch.device(device or "cpu")).eval()


def _model(recipe: DigitsRecipe) -> Any:
    from transformers import ViTConfig, ViTForImageClassification

    options: Dict[str, Any] = dict(
        image_size=recipe.image_size,
        patch_size=recipe.patch_size,
        num_channels=1,
        hidden_size=recipe.hidden_size,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        intermediate_size=recipe.intermediate_size,
        num_labels=10,
        id2label={d: str(d) for d in range(10)},
        label2id={str(d): d for d in range(10)},
        attn_implementation="eager",
    )
    return ViTForImageClassification(ViTConfig(**options))


def _build(recipe: DigitsRecipe, out: Path) -> None:
    torch.manual_seed(recipe.seed)
    model = _model(recipe)
    train = digits_split("train", recipe)
    start = time.perf_counter()
    _train(model, train, recipe)
    seconds = time.perf_counter() - start
    accuracy = evaluate_digits(model, digits_split("test", recipe))
    model.save_pretrained(str(out))
    record = {
        "recipe": asdict(recipe),
        "train_seconds": round(seconds, 1),
        "test_accuracy": accuracy,
        "train_images": len(train),
    }
    (out / "training.json").write_text(json.dumps(record, indent=1))


@contextmanager
def _one_thread() -> Iterator[None]:
    r"""Trains on one thread: the model is so small that a second thread
    costs more in synchronisation than it computes (measured on 2 shared
    cores: 10 s of CPU time on one thread, over 100 s on two)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@_one_thread()
def _train(model: Any, train: DigitImages, recipe: DigitsRecipe) -> None:
    generator = torch.Generator().manual_seed(recipe.seed)
    labels = torch.tensor(train.labels)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay
    )
    steps_per_epoch = -(-len(train) // recipe.batch_size)
    total = recipe.epochs * steps_per_epoch
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=recipe.lr, total_steps=total, pct_start=0.1
    )
    model.train()
    with Progress(total, "training the digits ViT (once)", "steps") as bar:
        for _ in range(recipe.epochs):
            order = torch.randperm(len(train), generator=generator)
            for rows in order.split(recipe.batch_size):
                output = model(pixel_values=train.images[rows], labels=labels[rows])
                optimizer.zero_grad()
                output.loss.backward()
                optimizer.step()
                schedule.step()
                bar.update()
    model.eval()


@torch.no_grad()
def evaluate_digits(model: Any, data: DigitImages) -> float:
    r"""Accuracy of ``model`` on ``data``."""
    logits = model(pixel_values=data.images).logits
    return float((logits.argmax(-1) == torch.tensor(data.labels)).float().mean())
