#!/usr/bin/env python3
r"""Renders every measured table of ``README.md`` and ``docs/`` from the results
files committed in ``docs/results/`` (each run's ``results.csv``, written by the
benchmark, and ``run.json``: its command, commit, date, machine, wall time and
peak memory, written by :mod:`benchmarks.record_run`).

A table is the text between a marker naming its source and an end marker, in
Markdown ``<!-- results: RUN task=TASK columns=A,B,... -->`` ...
``<!-- end results -->`` and in reStructuredText ``.. results: RUN task=TASK
columns=A,B,...`` ... ``.. end results``; ``RUN`` is a directory of
``docs/results/``. The script rewrites that text; with ``--check`` it rewrites
nothing and exits 1 when a table differs from its results file.

Usage: ``python -m benchmarks.render_tables [--check]``
"""

import argparse
import csv
import json
import math
import re
import sys
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
TIME = "time_ratio"
# Column headers a reader knows (the benchmark's own names otherwise).
HEADERS = {
    TIME: "time (× forward)",
    "n": "n",
    "no_signal": "no signal",
    "peak_ratio": "peak (× forward)",
    "time_over_plain_gradients": "time (× plain gradients)",
}
MARKER = re.compile(
    r"^(?:<!-- |\.\. )results: (?P<run>\S+)(?: task=(?P<task>\S+) "
    r"columns=(?P<columns>\S+)(?: methods=(?P<methods>[^,>][^>]*?))?)?"
    r"(?: -->)?$"
)
END = ("<!-- end results -->", ".. end results")


class Table(NamedTuple):
    run: str
    task: Optional[str]  # None: the run itself (run.json), not its rows
    columns: List[str]
    markdown: bool
    methods: Optional[List[str]] = None  # None: every row


def documents() -> List[Path]:
    r"""The README and every page of the docs."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.rst"))]


def read_run(run: str) -> Dict[str, object]:
    r"""``docs/results/RUN/run.json``."""
    return json.loads((RESULTS / run / "run.json").read_text(encoding="utf-8"))


def read_rows(
    run: str, task: str, methods: Optional[List[str]] = None
) -> List[Dict[str, str]]:
    r"""The rows of ``task`` in ``docs/results/RUN/results.csv``, in its order
    (only those of ``methods`` where given)."""
    with open(RESULTS / run / "results.csv", newline="", encoding="utf-8") as f:
        rows = [row for row in csv.DictReader(f) if row["task"] == task]
    if not rows:
        raise ValueError(f"docs/results/{run}/results.csv has no task {task!r}")
    if methods is None:
        return rows
    missing = sorted(set(methods) - {row["method"] for row in rows})
    if missing:
        raise ValueError(f"docs/results/{run}: task {task!r} has no rows {missing}")
    return [row for row in rows if row["method"] in methods]


def cell(row: Dict[str, str], column: str) -> str:
    r"""A metric mean to 3 decimals, the time ratio to 1 (⚠ where the
    benchmark flagged its timing); ``n/a`` where the
    benchmark wrote NaN or the metric does not apply (Kendall-τ of a
    class-agnostic method)."""
    if column not in row:
        raise ValueError(f"results.csv has no column {column!r}")
    text = row[column]
    if text in ("", "nan") or math.isnan(float(text)):
        return "n/a"
    if column.startswith("Kendall") and row.get("class_agnostic") == "True":
        return "n/a"
    if column != TIME:
        return f"{float(text):.3f}"
    # The benchmark flags a ratio below 0.9 or repetitions far apart.
    return ("⚠ " if row.get("timing_suspect") == "True" else "") + f"{float(text):.1f}"


def header(column: str, directions: Dict[str, bool]) -> str:
    arrow = {True: " ↑", False: " ↓"}.get(directions.get(column), "")  # type: ignore
    return HEADERS.get(column, column) + arrow


def _lines(titles: List[str], body: List[List[str]], markdown: bool) -> List[str]:
    r"""A Markdown table, or a reStructuredText list-table."""
    if markdown:
        lines = ["| " + " | ".join(titles) + " |"]
        lines.append("|---|" + "---:|" * (len(titles) - 1))
        return lines + ["| " + " | ".join(cells) + " |" for cells in body]
    lines = [".. list-table::", "   :header-rows: 1", ""]
    for cells in [titles] + body:
        lines.append(f"   * - {cells[0]}")
        lines += [f"     - {text}" for text in cells[1:]]
    return lines


def run_lines(name: str, markdown: bool) -> List[str]:
    r"""What ``run.json`` records: the command, its wall time, the estimate
    and the total it printed, its peak memory, the load
    average around it and where and when it ran."""
    run = read_run(name)
    machine: Dict[str, object] = run["machine"]  # type: ignore
    minutes, seconds = divmod(round(float(run["wall_seconds"])), 60)  # type: ignore
    load = run["load_average_before"], run["load_average_after"]
    peak = int(run["peak_rss_bytes"])  # type: ignore
    cpu = run.get("cpu_seconds")
    body = [
        ["command", str(run["command"])],
        ["wall time", f"{minutes} min {seconds:02d} s"],
        # CPU seconds of every process (older runs did not record them).
        ["CPU time", f"{cpu} s" if cpu is not None else "not recorded"],
        ["its estimate (printed first)", str(run["estimate"])],
        ["its total (printed last)", str(run["total"])],
        ["peak resident memory", f"{peak / 2**30:.2f} GiB"],
        ["load average (1, 5, 15 min) before, after", f"{load[0]}, {load[1]}"],
        [
            "machine",
            f"{machine['cpu']}, {machine['cores']} cores, torch {machine.get('torch')}",
        ],
        ["commit, date", f"{run['commit']}, {run['date']}"],
    ]
    return _lines(["run", name], body, markdown)


def render(table: Table) -> List[str]:
    r"""The table's lines (Markdown, or a reStructuredText list-table indented
    as a directive) with a line naming its source."""
    if table.task is None:
        return run_lines(table.run, table.markdown)
    run = read_run(table.run)
    directions: Dict[str, bool] = run.get("higher_is_better", {})  # type: ignore
    rows = read_rows(table.run, table.task, table.methods)
    titles = ["method"] + [header(c, directions) for c in table.columns]
    body = [[row["method"]] + [cell(row, c) for c in table.columns] for row in rows]
    quote = "`" if table.markdown else "``"
    source = (
        f"{quote}{run['command']}{quote}, {rows[0]['n']} examples "
        f"(docs/results/{table.run}: its commit, date and machine in run.json)"
    )
    return _lines(titles, body, table.markdown) + ["", source]


def _table(line: str, markdown: bool) -> Optional[Table]:
    match = MARKER.match(line.strip())
    if not match:
        return None
    columns = (match.group("columns") or "").split(",")
    methods = match.group("methods")
    chosen = methods.split(",") if methods else None
    return Table(match.group("run"), match.group("task"), columns, markdown, chosen)


def rendered(path: Path) -> str:
    r"""``path``'s text with every marked table rendered from its results."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out: List[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        table = _table(lines[i], path.suffix == ".md")
        i += 1
        if table is None:
            continue
        end = next((j for j in range(i, len(lines)) if lines[j] in END), None)
        if end is None:
            raise ValueError(f"{path.name}: a results table without its end marker")
        out += [""] + render(table) + [""]
        i = end
    return "\n".join(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 where a table differs"
    )
    args = parser.parse_args(argv)
    stale = []
    for path in documents():
        text = rendered(path)
        if text != path.read_text(encoding="utf-8"):
            stale.append(path.name)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    verb = "differ from their results files" if args.check else "rendered"
    for name in stale:
        print(f"{name}: tables {verb}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
