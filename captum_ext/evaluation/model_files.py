#!/usr/bin/env python3
r"""The user's model directory read without torch or transformers, so the
command line refuses a missing or foreign directory in a fraction of a second,
before it imports or loads anything heavy."""

import json
from pathlib import Path
from typing import Any, Dict

__all__ = ["read_model_config"]


def read_model_config(path: Path) -> Dict[str, Any]:
    r"""``config.json`` of the model directory ``path``, or a ``ValueError``
    that says what is missing (the directory or its ``config.json``) or why
    it cannot be read.

    Args:
        path (Path): a directory written by ``save_pretrained``.

    Returns:
        dict: the parsed ``config.json``.
    """
    if not path.is_dir():
        raise ValueError(
            f"model directory {str(path)!r} does not exist (give a directory "
            "written by save_pretrained, or a Hub model id like org/name)"
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
