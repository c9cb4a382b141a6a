#!/usr/bin/env python3
r"""The one progress reporter of every long loop (the benchmark engine, dataset
attribution, the metrics' batches, decoder fitting, fine-tuning).

On a terminal it draws a tqdm bar. Anywhere else (a log file, CI, ``torchrun``)
it prints plain lines, never a carriage return or a cursor move: one when the
loop starts, one after the first step, then one every :data:`EVERY_SECONDS` or
every :data:`EVERY_FRACTION` of the total, whichever comes first, and one at
the last step; each line has the elapsed time and an ETA extrapolated from the
steps measured so far.
"""

import math
import sys
import time
from typing import Any, Callable, Optional, TextIO

__all__ = ["EVERY_FRACTION", "EVERY_SECONDS", "Progress", "is_terminal"]

EVERY_SECONDS = 30.0
EVERY_FRACTION = 0.05


def duration(seconds: float) -> str:
    r"""``"42 s"``, ``"3 min 05 s"``, ``"1 h 02 min"``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def is_terminal(stream: TextIO) -> bool:
    r"""Whether ``stream`` is a terminal (a bar may redraw its line there)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    r"""Counts the steps of a loop; a context manager.

    Args:
        total (int): steps in the loop.
        desc (str): what the loop does, the start of every line.
        unit (str, optional): the steps' plural noun. Default: ``"steps"``.
        enabled (bool, optional): False prints nothing. Default: True.
        summary (bool, optional): on closing, a line ``"<desc>: <n> <unit> in
            <s> s"`` (also on a terminal). Default: True.
        stream (TextIO, optional): where it writes. Default: ``sys.stderr``
            at construction.
        clock (Callable, optional): seconds, monotonic (a seam for tests).
    """

    def __init__(
        self,
        total: int,
        desc: str,
        unit: str = "steps",
        *,
        enabled: bool = True,
        summary: bool = True,
        stream: Optional[TextIO] = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.enabled, self.summary = enabled, summary
        self.stream = sys.stderr if stream is None else stream
        self.clock = clock
        self.start = self.last_line = clock()
        self.done = self.status_lines = 0
        self.bucket = 0  # EVERY_FRACTION steps of the total already reported
        self.bar: Any = None
        if not enabled:
            return
        if is_terminal(self.stream):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit, file=self.stream)
        else:
            self._line(f"{desc}: {total} {unit}")

    @property
    def elapsed(self) -> float:
        return self.clock() - self.start

    def eta(self) -> float:
        r"""Seconds left at the mean pace of the steps done (inf before any)."""
        if self.done == 0:
            return math.inf
        return self.elapsed / self.done * max(0, self.total - self.done)

    def update(self, n: int = 1, postfix: str = "") -> None:
        r"""``n`` more steps done; ``postfix`` (e.g. a loss) ends the line."""
        if not self.enabled:
            return
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix_str(postfix)
            return
        if self._due():
            self.last_line = self.clock()
            self.status_lines += 1
            self._line(self._status(postfix))

    def note(self, message: str) -> None:
        r"""A line of its own, under the bar on a terminal."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(message, file=self.stream)
        else:
            self._line(message)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.enabled and self.summary:
            self._line(f"{self.desc}: {self.done} {self.unit} in {self.elapsed:.1f} s")
        self.enabled = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _due(self) -> bool:
        r"""The first step, the last, a new ``EVERY_FRACTION`` of the total or
        ``EVERY_SECONDS`` since the last line."""
        # integer arithmetic: 30/200 is a whole 3 twentieths, not 2.999...
        bucket = self.done * round(1 / EVERY_FRACTION) // max(self.total, 1)
        due = (
            self.status_lines == 0
            or self.done >= self.total
            or bucket > self.bucket
            or self.clock() - self.last_line >= EVERY_SECONDS
        )
        self.bucket = max(self.bucket, bucket)
        return due

    def _status(self, postfix: str) -> str:
        elapsed = self.elapsed
        rate = self.done / max(elapsed, 1e-9)
        line = (
            f"{self.desc}: {self.done}/{self.total} {self.unit}, "
            f"{rate:.1f} {self.unit}/s, ETA {duration(self.eta())}, "
            f"{duration(elapsed)} elapsed"
        )
        return f"{line}, {postfix}" if postfix else line

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)
