#!/usr/bin/env python3
r"""transformers' own progress bars, quiet in a log."""

import sys
from typing import Optional, TextIO

from captum_ext._utils.progress import is_terminal

__all__ = ["quiet_library_bars"]


def quiet_library_bars(stream: Optional[TextIO] = None) -> None:
    r"""Turns off transformers' own progress bars ("Loading weights", "Writing
    model shards") when ``stream`` (default ``sys.stderr``) is not a terminal:
    a tqdm bar writes carriage returns into a log."""
    if is_terminal(sys.stderr if stream is None else stream):
        return
    from transformers.utils import logging

    logging.disable_progress_bar()
