#!/usr/bin/env python3
r"""Telling a local path from a Hugging Face Hub id, for models and data alike:
a name that exists on disk, looks like a path (``./x``, ``~/x``, ``/x``) or names
a data file (``x.csv``) is local; any other valid repository id (``org/name``,
``imdb``) is looked up on the Hub, through its cache."""

from pathlib import Path

__all__ = ["is_hub_id"]

# Suffixes of the local data files load_data reads: "my_data.csv" that does not
# exist is a missing file, not a Hub id.
DATA_SUFFIXES = (".csv", ".tsv", ".json", ".jsonl", ".parquet")


def is_hub_id(name: str) -> bool:
    r"""``True`` when ``name`` should be looked up on the Hub rather than on
    disk (see the module docstring)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    path = Path(name)
    if path.exists() or path.is_absolute() or name.startswith((".", "~")):
        return False
    if path.suffix.lower() in DATA_SUFFIXES:
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True
