#!/usr/bin/env python3
r"""The manifest of an attribution run (``_manifest.json``): its arguments, the
fingerprints of its data and model, and the package versions. A rerun whose
arguments, data or model differ refuses to add shards to the directory;
``batch_size`` and ``device`` are not recorded (scores do not depend on them
beyond floating-point noise) and other package versions only warn."""

import hashlib
import json
import platform
import warnings
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Dict

import torch
from torch import nn

from captum_ext.evaluation._utils.atomic import write_text_atomically
from captum_ext.evaluation.user_data import LoadedExamples
from captum_ext.evaluation.user_models import ModelSource

__all__ = [
    "MANIFEST",
    "ManifestMismatchError",
    "check_or_write_manifest",
    "data_fingerprint",
    "model_fingerprint",
    "run_manifest",
]

MANIFEST = "_manifest.json"  # "_" prefix: Parquet readers skip it
_FORMAT = 1
# The manifest entries a rerun must match to add shards to the same directory.
_MUST_MATCH = ("arguments", "data", "model")
_PACKAGES = ("captum_ext", "captum", "torch", "transformers", "datasets", "pyarrow")
_SAMPLED_VALUES = 4096  # per weight tensor, in the model fingerprint


class ManifestMismatchError(ValueError):
    r"""``out_dir`` holds outputs of a run with other arguments, data or model."""


def run_manifest(
    arguments: Dict[str, Any], model: nn.Module, tokenizer: Any, data: LoadedExamples
) -> Dict[str, Any]:
    r"""The manifest of a run of ``arguments`` (mode, methods, max_length,
    shard_size; for a classifier metrics and target, for a causal LM where its
    continuations come from) on ``data`` with ``model`` and ``tokenizer``; the
    data's source ``columns`` are recorded, not checked (a renamed column of
    the same data resumes)."""
    n_shards = -(-len(data) // arguments["shard_size"])
    return {
        "format": _FORMAT,
        "arguments": arguments,
        "data": {"examples": len(data), "fingerprint": data_fingerprint(data)},
        "model": {
            "class": type(model).__name__,
            "fingerprint": model_fingerprint(model, tokenizer),
        },
        "source": data.source,
        # Where the model came from (a directory, or a Hub id at its commit):
        # recorded, not checked, so a moved folder still resumes.
        "model_source": ModelSource.of(model).record(),
        "columns": data.columns,
        "shards": n_shards,
        "versions": _versions(),
    }


def check_or_write_manifest(out: Path, manifest: Dict[str, Any]) -> None:
    r"""Creates ``out`` with ``manifest``, or checks that the manifest there is
    the same run's (:class:`ManifestMismatchError` if not)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / MANIFEST
    if path.exists():
        _check_same_run(path, _read_manifest(path), manifest)
    elif any(out.glob("part-*.parquet")):
        raise ManifestMismatchError(
            f"{out} holds shards but no {MANIFEST}; choose an empty --out directory"
        )
    else:
        write_text_atomically(
            path, lambda handle: json.dump(manifest, handle, indent=2)
        )


def _read_manifest(path: Path) -> Dict[str, Any]:
    try:
        manifest = json.loads(path.read_text())
    except ValueError as error:
        raise _unreadable(path, str(error)) from error
    if not isinstance(manifest, dict):
        raise _unreadable(path, f"a JSON {type(manifest).__name__}, not an object")
    return manifest


def _unreadable(path: Path, why: str) -> ManifestMismatchError:
    return ManifestMismatchError(
        f"{path} is not a readable manifest ({why}); use another --out directory"
    )


def _check_same_run(path: Path, old: Dict[str, Any], new: Dict[str, Any]) -> None:
    differs = [
        f"{key}.{field}: {_entry(old, key).get(field)!r} before, {value!r} now"
        for key in _MUST_MATCH
        for field, value in new[key].items()
        if _entry(old, key).get(field) != value
    ]
    if differs:
        raise ManifestMismatchError(
            f"{path.parent} holds attributions of another run ("
            + "; ".join(differs)
            + "); use another --out directory, or the same arguments to resume"
        )
    before = _entry(old, "versions")
    versions = [
        f"{name} {before.get(name)} -> {now}"
        for name, now in new["versions"].items()
        if before.get(name) != now
    ]
    if versions:
        warnings.warn(
            f"resuming {path.parent} with other package versions "
            f"({', '.join(versions)}); scores of old and new shards may differ "
            "in the last digits"
        )


def _entry(manifest: Dict[str, Any], key: str) -> Dict[str, Any]:
    r"""``manifest[key]``, or an empty entry when it is missing or not an object
    (a hand-edited manifest then differs instead of raising a ``TypeError``)."""
    entry = manifest.get(key)
    return entry if isinstance(entry, dict) else {}


def data_fingerprint(data: LoadedExamples) -> str:
    r"""SHA-256 of the texts, pairs, labels, source rows and, when given,
    the continuations."""
    content = [data.texts, data.text_pairs, data.labels, data.rows]
    if data.continuations is not None:
        content.append(data.continuations)
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()


def model_fingerprint(model: nn.Module, tokenizer: Any) -> str:
    r"""Hash of the config (:func:`_config_content`), every tensor's name, shape
    and dtype with up to :data:`_SAMPLED_VALUES` evenly spaced values (exact
    bytes, so the same on any device, and a 7B model takes well under a
    second), and the tokenizer's vocabulary. Training or merging an adapter
    changes whole weight matrices, so sampled values see it. Where the model
    was loaded from is no part of it: the same model under another path,
    through a symlink or after a move resumes."""
    digest = hashlib.sha256()
    config = getattr(model, "config", None)
    if config is not None:
        digest.update(json.dumps(_config_content(config), sort_keys=True).encode())
    for name, tensor in model.state_dict().items():
        flat = tensor.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // _SAMPLED_VALUES)]
        digest.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}".encode())
        digest.update(sample.cpu().contiguous().view(torch.uint8).numpy().tobytes())
    vocabulary = sorted(tokenizer.get_vocab().items())
    digest.update(json.dumps([type(tokenizer).__name__, vocabulary]).encode())
    return digest.hexdigest()


def _config_content(config: Any) -> Dict[str, Any]:
    r"""The config's entries that shape the model's outputs: without the
    bookkeeping ``_``-prefixed entries (``_name_or_path``: where it was loaded
    from) and ``transformers_version`` (recorded, and only warned about, under
    ``versions``)."""
    content = json.loads(config.to_json_string(use_diff=False))
    return {
        key: value
        for key, value in content.items()
        if not key.startswith("_") and key != "transformers_version"
    }


def _versions() -> Dict[str, str]:
    found = {"python": platform.python_version()}
    for package in _PACKAGES:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found
