r"""Every measured table of the README and the docs is the rendering of its
committed results file (``python -m benchmarks.render_tables``), and each
results file says which command, commit, date and machine produced it."""

import json
import sys
from pathlib import Path

import pytest
from benchmarks import render_tables

CSV = (
    "task,method,family,n,AOPC,Kendall-tau,class_agnostic,time_ratio,timing_suspect\n"
    "sentiment,AttCAT,captum_ext,32,0.61234,0.25,False,3.46,False\n"
    "sentiment,LogAt,captum_ext,32,0.5,1.0,True,0.04,True\n"
    "recall,AttCAT,captum_ext,32,0.9,nan,False,3.5,False\n"
)
RUN = {
    "command": "captum-ext benchmark",
    "commit": "0" * 40,
    "date": "2026-01-01T00:00:00+00:00",
    "machine": {"cpu": "a CPU", "cores": 2},
    "higher_is_better": {"AOPC": True, "Kendall-tau": False, "time_ratio": False},
}
MARKDOWN = (
    "Intro.\n\n<!-- results: demo task=sentiment columns=AOPC,Kendall-tau,"
    "time_ratio -->\nstale\n<!-- end results -->\n\nAfter.\n"
)


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    run = tmp_path / "results" / "demo"
    run.mkdir(parents=True)
    (run / "results.csv").write_text(CSV)
    (run / "run.json").write_text(json.dumps(RUN))
    monkeypatch.setattr(render_tables, "RESULTS", tmp_path / "results")
    return run


def test_the_committed_tables_equal_their_results_files() -> None:
    stale = [
        str(path)
        for path in render_tables.documents()
        if render_tables.rendered(path) != path.read_text(encoding="utf-8")
    ]
    assert stale == [], "run python -m benchmarks.render_tables"
    readme = (render_tables.ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count("<!-- results: ") >= 2  # a classifier and a generation task


def test_every_results_directory_names_its_command_commit_date_and_machine():
    runs = sorted(p for p in render_tables.RESULTS.iterdir() if p.is_dir())
    assert runs
    for run in runs:
        record = json.loads((run / "run.json").read_text())
        assert record["command"].strip() and len(record["commit"]) == 40
        assert record["date"][:2] == "20" and record["machine"]["cores"] >= 1
        assert (run / "results.csv").stat().st_size > 0


def test_a_markdown_table_is_rendered_from_its_rows(
    results: Path, tmp_path: Path
) -> None:
    page = tmp_path / "page.md"
    page.write_text(MARKDOWN)
    assert render_tables.rendered(page).split("\n")[4:10] == [
        "| method | AOPC ↑ | Kendall-tau ↓ | time (× forward) ↓ |",
        "|---|---:|---:|---:|",
        "| AttCAT | 0.612 | 0.250 | 3.5 |",
        # Kendall-τ of a class-agnostic method is not a measurement.
        "| LogAt | 0.500 | n/a | ⚠ 0.0 |",  # a timing the benchmark flagged
        "",
        "`captum-ext benchmark`, 32 examples (docs/results/demo: its commit, "
        "date and machine in run.json)",
    ]


def test_methods_keep_those_rows_in_the_files_order(
    results: Path, tmp_path: Path
) -> None:
    page = tmp_path / "page.md"
    marker = "columns=AOPC,Kendall-tau,time_ratio"
    page.write_text(MARKDOWN.replace(marker, marker + " methods=LogAt"))
    lines = render_tables.rendered(page).split("\n")
    assert [line for line in lines if line.startswith("| ")][1:] == [
        "| LogAt | 0.500 | n/a | ⚠ 0.0 |"
    ]
    page.write_text(MARKDOWN.replace(marker, marker + " methods=LogAt,Grad CAM"))
    with pytest.raises(ValueError, match=r"has no rows \['Grad CAM'\]"):
        render_tables.rendered(page)


def test_a_changed_results_file_makes_the_check_fail(
    results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "page.rst"
    page.write_text(
        "Text.\n\n.. results: demo task=recall columns=AOPC\n\n.. end results\n"
    )
    page.write_text(render_tables.rendered(page))
    assert "     - 0.900" in page.read_text()
    monkeypatch.setattr(render_tables, "documents", lambda: [page])
    assert render_tables.main(["--check"]) == 0
    (results / "results.csv").write_text(CSV.replace("0.9,", "0.8,"))
    assert render_tables.main(["--check"]) == 1
    assert "     - 0.900" in page.read_text()  # --check rewrites nothing
    assert render_tables.main([]) == 0
    assert "     - 0.800" in page.read_text()
    assert render_tables.main(["--check"]) == 0


def test_a_missing_end_marker_or_task_is_an_error(
    results: Path, tmp_path: Path
) -> None:
    page = tmp_path / "page.md"
    page.write_text(MARKDOWN.replace("<!-- end results -->", ""))
    with pytest.raises(ValueError, match="without its end marker"):
        render_tables.rendered(page)
    page.write_text(MARKDOWN.replace("task=sentiment", "task=flags"))
    with pytest.raises(ValueError, match="no task 'flags'"):
        render_tables.rendered(page)


def test_record_run_keeps_the_results_and_what_the_command_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from benchmarks import record_run

    out = tmp_path / "out"
    script = (
        "import json, pathlib, sys; out = pathlib.Path(sys.argv[1]); out.mkdir();"
        f"(out / 'results.csv').write_text({CSV!r});"
        "(out / 'results.json').write_text(json.dumps({'metrics': "
        "{'AOPC': {'higher_is_better': True}}}));"
        "print('pip: a warning', file=sys.stderr); print('estimate: about 2 s');"
        "print('total 1 s'); print('a last line')"
    )
    monkeypatch.setattr(record_run, "RESULTS", tmp_path / "results")
    argv = ["demo", "--out", str(out), "--", sys.executable, "-c", script, str(out)]
    assert record_run.main(argv) == 0
    assert "estimate: about 2 s" in capsys.readouterr().out  # echoed
    run = tmp_path / "results" / "demo"
    assert (run / "results.csv").read_text() == CSV
    record = json.loads((run / "run.json").read_text())
    assert record["command"].startswith(sys.executable) and len(record["commit"]) == 40
    assert (record["estimate"], record["total"]) == ("estimate: about 2 s", "total 1 s")
    assert record["higher_is_better"] == {"AOPC": True, "time_ratio": False}
    assert record["peak_rss_bytes"] > 2**20 and record["wall_seconds"] > 0
    assert record["cpu_seconds"] >= 0
    assert record["machine"]["cores"] >= 1
    (out / "results.json").unlink()  # a benchmark that writes only results.csv
    assert record_run.main(argv[:3] + ["--", sys.executable, "-c", "1"]) == 0
    record = json.loads((run / "run.json").read_text())
    assert record["higher_is_better"] == {"time_ratio": False}
    failing = ["demo", "--out", str(out), "--", sys.executable, "-c", "exit(3)"]
    with pytest.raises(SystemExit, match="exited with 3"):
        record_run.main(failing)


def test_record_run_adds_up_processes_that_run_side_by_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r"""A command holding 300 MiB while its child holds another 300 MiB peaks
    at 600 MiB or more, where the largest single process holds 300."""
    from benchmarks import record_run

    hold = "import time; block = b'x' * (300 * 2**20); time.sleep(3)"
    script = (
        "import subprocess, sys, time;"
        f"child = subprocess.Popen([sys.executable, '-c', {hold!r}]);"
        f"{hold}; child.wait()"
    )
    monkeypatch.setattr(record_run, "RESULTS", tmp_path / "results")
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text(CSV)
    argv = ["demo", "--out", str(out), "--", sys.executable, "-c", script]
    assert record_run.main(argv) == 0
    record = json.loads((tmp_path / "results" / "demo" / "run.json").read_text())
    assert record["peak_rss_bytes"] >= 600 * 2**20
