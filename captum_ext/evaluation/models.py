#!/usr/bin/env python3
r"""Loading the user's classifier: any local Hugging Face sequence-classifier
directory (``save_pretrained``), never contacting a hub, with eager attention so
the attention-reading methods work, and a clear error for everything else."""

import json
from pathlib import Path
from typing import Any, Optional, Tuple, Union

import torch
from torch import nn

from captum_ext.adapters import get_adapter, UnsupportedModelError
from captum_ext.default_models import quiet_transformers

__all__ = ["DTYPES", "load_classifier", "resolve_device"]

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

PathLike = Union[str, Path]


def resolve_device(device: Union[str, torch.device, None]) -> torch.device:
    r"""``device`` as a ``torch.device`` that exists on this machine, or a
    ``ValueError`` saying what is available."""
    try:
        chosen = torch.device(device or "cpu")
    except (RuntimeError, TypeError) as error:
        raise ValueError(
            f"unknown device {device!r} ({error}); use cpu, cuda, cuda:N or mps"
        ) from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but CUDA is not available")
    if chosen.type == "cuda" and chosen.index is not None:
        if chosen.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {device!r} asked for, but this machine has "
                f"{torch.cuda.device_count()} CUDA device(s)"
            )
    if chosen.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} asked for, but MPS is not available")
    return chosen


def _config(path: Path) -> dict:
    if not path.is_dir():
        raise ValueError(
            f"model directory {str(path)!r} does not exist (give a local directory "
            "written by save_pretrained; nothing is downloaded)"
        )
    config = path / "config.json"
    if not config.is_file():
        raise ValueError(
            f"{str(path)!r} is not a Hugging Face model directory: it has no "
            "config.json (write one with model.save_pretrained(path))"
        )
    try:
        return json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read {config}: {error}") from None


def _check_architecture(path: Path, config: dict) -> None:
    architectures = config.get("architectures") or []
    if architectures and not any(
        name.endswith("ForSequenceClassification") for name in architectures
    ):
        raise UnsupportedModelError(
            f"{str(path)!r} holds a {', '.join(architectures)}, not a sequence "
            "classifier: its classification head would be randomly initialised. "
            "Fine-tune an AutoModelForSequenceClassification and save that"
        )


def _check_head(path: Path, info: dict) -> None:
    r"""Refuses weights the directory did not provide: a head initialised at
    random would be explained as if it were trained."""
    missing = list(info.get("missing_keys") or [])
    if missing:
        shown = ", ".join(missing[:4]) + (" ..." if len(missing) > 4 else "")
        raise UnsupportedModelError(
            f"{str(path)!r} lacks weights the classifier needs ({shown}); they "
            "would be randomly initialised. Give a fine-tuned sequence-classifier "
            "directory"
        )


def _dtype(dtype: Union[str, torch.dtype]) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def _tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    if not path.is_dir():
        raise ValueError(f"tokenizer directory {str(path)!r} does not exist")
    advice = "save it with tokenizer.save_pretrained(path) or give --tokenizer DIR"
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(
            f"no tokenizer could be loaded from {str(path)!r} ({error}); {advice}"
        ) from None
    # A directory without vocabulary files still gives a tokenizer (built from
    # the config's class alone) that knows only its special tokens, so every
    # word would become the unknown token.
    if not set(tokenizer.get_vocab()) - set(tokenizer.all_special_tokens):
        raise ValueError(
            f"{str(path)!r} holds no tokenizer vocabulary (no tokenizer.json, "
            f"vocab.txt, vocab.json or sentencepiece model); {advice}"
        )
    return tokenizer


def _set_padding(model: nn.Module, tokenizer: Any) -> None:
    r"""Decoder-only classifiers often ship without a pad token; the eos token
    is the usual choice, and the model must know it to find the last token."""
    if tokenizer.pad_token_id is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    config: Any = model.config
    if getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = tokenizer.pad_token_id


def load_classifier(
    path: PathLike,
    *,
    tokenizer: Optional[PathLike] = None,
    device: Union[str, torch.device] = "cpu",
    dtype: Union[str, torch.dtype] = "float32",
    max_length: Optional[int] = None,
) -> Tuple[nn.Module, Any]:
    r"""A local Hugging Face sequence classifier and its tokenizer, ready to
    explain: eval mode, eager attention, on ``device`` in ``dtype``.

    Args:
        path (str or Path): a directory written by ``save_pretrained`` of an
            ``AutoModelForSequenceClassification``.
        tokenizer (str or Path, optional): the tokenizer's directory. Default:
            ``path``.
        device (str or torch.device, optional): Default: ``"cpu"``.
        dtype (str or torch.dtype, optional): ``"float32"``, ``"bfloat16"`` or
            ``"float16"``. Default: ``"float32"``.
        max_length (int, optional): tokens per input the engine should use
            (sets ``tokenizer.model_max_length``). Default: the tokenizer's.

    Returns:
        tuple: ``(model, tokenizer)``.

    Raises:
        ValueError: a missing directory, no tokenizer, an unknown device or
            dtype.
        UnsupportedModelError: not a sequence classifier (a masked-LM or bare
            encoder directory), weights missing from the directory, or an
            architecture captum_ext has no adapter for.
    """
    from transformers import AutoModelForSequenceClassification

    path = Path(path)
    chosen_device = resolve_device(device)
    chosen_dtype = _dtype(dtype)
    if max_length is not None and max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length}")
    _check_architecture(path, _config(path))
    loaded_tokenizer = _tokenizer(Path(tokenizer) if tokenizer else path)
    try:
        with quiet_transformers():  # no weight-loading bar or load report
            model, info = AutoModelForSequenceClassification.from_pretrained(
                path,
                attn_implementation="eager",
                local_files_only=True,
                dtype=chosen_dtype,
                output_loading_info=True,
            )
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(
            f"cannot load a classifier from {str(path)!r}: {error}"
        ) from None
    _check_head(path, info)
    get_adapter(model)  # UnsupportedModelError for a family without an adapter
    _set_padding(model, loaded_tokenizer)
    if max_length is not None:
        loaded_tokenizer.model_max_length = max_length
    return model.to(chosen_device).eval(), loaded_tokenizer
