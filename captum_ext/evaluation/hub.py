#!/usr/bin/env python3
r"""Telling a local path from a Hugging Face Hub id, for models and data alike:
a name that exists on disk, looks like a path (``./x``, ``~/x``, ``/x``) or names
a data file (``x.csv``) is local; any other valid repository id (``org/name``,
``imdb``) is looked up on the Hub, through its cache.

Whether the Hub can be reached at all is asked once, up front
(:func:`hub_reachable`): without it, the libraries retry every request for
half a minute, logging each retry, before the cache is consulted; with it, an
unreachable Hub means the cache alone is read, and a miss is one line at once.
"""

import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse

__all__ = ["cache_only_unless_reachable", "hub_reachable", "is_hub_id"]

# Suffixes of the local data files load_data reads: "my_data.csv" that does not
# exist is a missing file, not a Hub id.
DATA_SUFFIXES = (".csv", ".tsv", ".json", ".jsonl", ".parquet")
# Seconds to wait for the Hub's endpoint to accept a connection.
PROBE_SECONDS = 3.0


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


def hub_reachable() -> bool:
    r"""``False`` in offline mode (``HF_HUB_OFFLINE``) or when the Hub's
    endpoint (``HF_ENDPOINT``) does not accept a TCP connection within
    :data:`PROBE_SECONDS`; then only the local cache is read."""
    from huggingface_hub import constants

    if constants.is_offline_mode():
        return False
    endpoint = urlparse(constants.ENDPOINT)
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname, port), PROBE_SECONDS).close()
    except (OSError, ValueError):  # no route, no DNS, refused, timed out
        return False
    return True


@contextmanager
def cache_only_unless_reachable() -> Iterator[bool]:
    r"""Inside the block, huggingface_hub's offline mode (which transformers
    follows too) when the Hub cannot be reached (:func:`hub_reachable`), so
    every lookup reads the cache at once; restored after. Yields whether the
    block runs offline."""
    from huggingface_hub import constants

    if hub_reachable():
        yield False
        return
    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield True
    finally:
        constants.HF_HUB_OFFLINE = before
