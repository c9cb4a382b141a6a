#!/usr/bin/env python3
r"""Runs a benchmark command and keeps its results for the docs: copies the
``results.csv`` it wrote into ``docs/results/NAME/`` beside ``run.json``, which
holds the command, the commit, the date, the machine (CPU, cores, load average
before and after, torch's version), the wall and CPU time, the peak resident memory
of the command's processes together, and the estimate and the total
``captum-ext benchmark`` prints first and last. :mod:`benchmarks.render_tables`
renders the docs' tables from these files.

Usage: ``python -m benchmarks.record_run NAME --out DIR -- COMMAND ...``
(``DIR``: where the command writes its results, e.g. its ``--out``).
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import psutil
from benchmarks.render_tables import RESULTS, ROOT


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _cpu() -> str:
    r"""The CPU's model name (Linux), else the platform's processor."""
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def machine() -> Dict[str, Any]:
    import torch

    return {
        "cpu": _cpu(),
        "cores": os.cpu_count(),
        "system": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


class _TreePeak(threading.Thread):
    r"""The largest resident memory of a process and its descendants together,
    sampled every ``interval`` seconds: processes that run side by side (the
    first run trains the generators beside the rest) count together, where
    ``ru_maxrss`` gives the largest single one."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = psutil.Process(pid), interval
        self.peak, self.done = 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.interval):
            try:
                processes = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            self.peak = max(self.peak, sum(map(_rss, processes)))


def _rss(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.NoSuchProcess:  # ended since it was listed
        return 0


def run(command: List[str]) -> Dict[str, Any]:
    r"""Runs ``command``, echoing what it prints; what it took, its estimate
    (the first line starting ``estimate:``) and its total (the last line
    starting ``total``)."""
    load = os.getloadavg()
    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    sampler = _TreePeak(process.pid)
    sampler.start()
    printed = []
    for line in process.stdout:
        sys.stdout.write(line)
        printed.append(line.rstrip("\n"))
    code = process.wait()
    wall = time.perf_counter() - start
    sampler.done.set()
    sampler.join()
    if code != 0:
        raise SystemExit(f"the command exited with {code}")
    # ru_maxrss: KiB on Linux, the largest of the waited-for processes (a
    # peak shorter than the sampling interval shows only here).
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = max(sampler.peak, usage.ru_maxrss * 1024)
    return {
        "wall_seconds": round(wall, 3),  # a short command takes under 50 ms
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_bytes": peak,
        "load_average_before": [round(x, 2) for x in load],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "estimate": next((x for x in printed if x.startswith("estimate:")), ""),
        "total": next((x for x in reversed(printed) if x.startswith("total")), ""),
    }


def _directions(out: Path) -> Dict[str, bool]:
    r"""Each metric's direction from the main job's ``results.json``; none for a
    benchmark that writes only ``results.csv``."""
    path = out / "results.json"
    if not path.exists():
        return {}
    written = json.loads(path.read_text(encoding="utf-8"))
    return {name: m["higher_is_better"] for name, m in written["metrics"].items()}


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the run's directory in docs/results/")
    parser.add_argument("--out", type=Path, required=True, help="its results dir")
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        parser.error("give the command after --")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    record = {
        "command": shlex.join(command),
        "commit": _git("rev-parse", "HEAD"),
        "uncommitted_changes": bool(_git("status", "--porcelain", "--", "captum_ext")),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        ),
        "machine": machine(),
        **run(command),
    }
    record["higher_is_better"] = {**_directions(args.out), "time_ratio": False}
    target = RESULTS / args.name
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(args.out / "results.csv", target / "results.csv")
    (target / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
