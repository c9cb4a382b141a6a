#!/usr/bin/env python3
r"""Hub ids for models and data, without a network: a Hub cache is built in a
temporary ``HF_HOME`` in the caches' own layouts, and the loaders and the
command line run in a subprocess with ``HF_HUB_OFFLINE=1`` (huggingface_hub and
datasets read these variables when first imported)."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pandas as pd
import pytest
import transformers
from captum_ext.evaluation.hub import DATA_SUFFIXES, hub_reachable, is_hub_id
from captum_ext.evaluation.user_data import DataError, load_data
from captum_ext.evaluation.user_models import (
    load_classifier,
    ModelSource,
    resolve_model_source,
)

from tests.helpers import (
    hub_dataset_cache,
    hub_model_cache,
    save_tiny_model,
    tiny_tokenizer,
)

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "0123456789abcdef0123456789abcdef01234567"  # a snapshot's commit hash
TEXTS = ["the movie was great fun !", "a boring plot and bad acting ."]
UNREACHABLE = "http://127.0.0.1:9"  # the discard port: connection refused


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("hf_home")
    hub_model_cache(home, "org/tiny", COMMIT)
    splits = {
        "train": pd.DataFrame({"text": TEXTS, "label": [1, 0]}),
        "test": pd.DataFrame({"text": TEXTS[:1], "label": [1]}),
    }
    hub_dataset_cache(home, "org/reviews", splits, tmp_path_factory.mktemp("scratch"))
    return home


def _run(
    home: Path, argv: List[str], cwd: Path, offline: bool = True
) -> subprocess.CompletedProcess:
    r"""``argv`` in a subprocess on the cache ``home``: in offline mode, or
    (``offline=False``) with no offline variable and a Hub endpoint that
    refuses connections, as on a machine without a network."""
    env: Dict[str, str] = dict(os.environ, HF_HOME=str(home))
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.pop(variable, None)
    if offline:
        env["HF_HUB_OFFLINE"] = env["HF_DATASETS_OFFLINE"] = "1"
    else:
        env["HF_ENDPOINT"] = UNREACHABLE
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("HF_TOKEN", None)
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_a_cached_hub_id_loads_offline_pinned_to_its_commit(hf_home, tmp_path):
    script = (
        "import json\n"
        "from captum_ext.evaluation.user_models import load_classifier, ModelSource\n"
        "model, tokenizer = load_classifier('org/tiny')\n"
        "pinned, _ = load_classifier('org/tiny', revision=%r)\n"
        "print(json.dumps({'record': ModelSource.of(model).record(),\n"
        "  'pinned': ModelSource.of(pinned).record(),\n"
        "  'weights': float(model.classifier.weight.sum()),\n"
        "  'ids': tokenizer('great fun')['input_ids']}))\n" % COMMIT
    )
    done = _run(hf_home, ["-c", script], tmp_path)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["record"] == {"id": "org/tiny", "revision": COMMIT}
    assert loaded["pinned"] == loaded["record"]
    saved = transformers.AutoModelForSequenceClassification.from_pretrained(
        hf_home / "hub" / "models--org--tiny" / "snapshots" / COMMIT
    )
    assert loaded["weights"] == float(saved.classifier.weight.detach().sum())
    assert loaded["ids"] == tiny_tokenizer()("great fun")["input_ids"]


def test_benchmark_by_hub_ids_records_the_model_and_its_commit(hf_home, tmp_path):
    argv = ["-m", "captum_ext.cli", "benchmark", "--model", "org/tiny"]
    argv += ["--data", "org/reviews", "--split", "train", "--label-column", "label"]
    argv += ["--methods", "Random", "NormXLogit", "--metrics", "aopc"]
    argv += ["--out", "out", "--no-progress"]
    done = _run(hf_home, argv, tmp_path)
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "out" / "results.json").read_text())["config"]
    assert config["model"] == {"tiny": {"id": "org/tiny", "revision": COMMIT}}
    assert config["tasks"] == {"tiny": len(TEXTS)}
    assert config["data"] == {"tiny": "org/reviews"}
    assert COMMIT in (tmp_path / "out" / "report.html").read_text()


@pytest.mark.parametrize(
    "argv, named, variable",
    [
        (["--model", "org/absent", "--data", "org/reviews"], "'org/absent'", "HF_HUB"),
        (["--model", "org/tiny", "--data", "org/absent"], "'org/absent'", "HF_DATA"),
        (["--model", "org/tiny", "--data", "org/reviews"], "--split", "test, train"),
    ],
    ids=["model", "data", "split"],
)
def test_offline_without_a_cache_entry_is_one_clear_line(
    hf_home, tmp_path, argv, named, variable
):
    done = _run(hf_home, ["-m", "captum_ext.cli", "benchmark", *argv], tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and variable in lines[0], lines


def test_an_unreachable_hub_reads_the_cache_at_once_and_a_miss_is_one_line(
    hf_home, tmp_path
):
    argv = ["-m", "captum_ext.cli", "benchmark", "--model", "org/tiny"]
    argv += ["--data", "org/reviews", "--split", "train", "--label-column", "label"]
    argv += ["--methods", "Random", "--metrics", "aopc", "--out", "out"]
    done = _run(hf_home, argv + ["--no-progress"], tmp_path, offline=False)
    assert done.returncode == 0, done.stderr
    assert "Retrying" not in done.stderr and "Retry" not in done.stdout
    for absent in (["--model", "org/absent"], ["--data", "org/absent"]):
        missing = list(argv)
        missing[missing.index(absent[0]) + 1] = absent[1]
        done = _run(hf_home, missing, tmp_path, offline=False)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "'org/absent'" in lines[0], lines
        assert "unreachable" in lines[0], lines


def test_hub_reachable_is_false_offline_or_when_refused(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", UNREACHABLE)
    assert not hub_reachable()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert not hub_reachable()


@pytest.mark.parametrize(
    "name, hub",
    [
        ("org/name", True),
        ("imdb", True),
        ("./my_model", False),
        ("~/my_model", False),
        ("/abs/model", False),
        ("my_data.csv", False),  # a missing data file, not an id
        ("a/b/c", False),
    ],
)
def test_what_counts_as_a_hub_id(name, hub):
    assert is_hub_id(name) is hub


def test_an_existing_directory_is_local_even_when_it_looks_like_an_id(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    save_tiny_model(tmp_path / "org" / "tiny")
    source = resolve_model_source("org/tiny")
    assert source.record() == {"path": "org/tiny", "revision": None}
    model, _ = load_classifier("org/tiny")
    assert ModelSource.of(model).record() == {"path": "org/tiny", "revision": None}
    with pytest.raises(ValueError, match="--revision applies to Hub ids"):
        resolve_model_source("org/tiny", revision="main")


def test_remote_code_runs_only_when_asked(tmp_path, monkeypatch):
    save_tiny_model(tmp_path)
    seen = []
    original = transformers.AutoModelForSequenceClassification.from_pretrained

    def spy(*args, **kwargs):
        seen.append(kwargs["trust_remote_code"])
        return original(*args, **kwargs)

    monkeypatch.setattr(
        transformers.AutoModelForSequenceClassification, "from_pretrained", spy
    )
    load_classifier(tmp_path)
    load_classifier(tmp_path, trust_remote_code=True)
    assert seen == [False, True]


def test_config_name_is_for_hub_datasets(tmp_path):
    path = tmp_path / "data.csv"
    pd.DataFrame({"text": TEXTS}).to_csv(path, index=False)
    with pytest.raises(DataError, match="--config-name applies to Hub datasets"):
        load_data(path, config_name="sst2")


def test_data_suffixes_are_the_formats_load_data_reads(tmp_path):
    for suffix in DATA_SUFFIXES:
        with pytest.raises(DataError, match="no such file or directory"):
            load_data(tmp_path / f"missing{suffix}")
