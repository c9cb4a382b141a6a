#!/usr/bin/env python3
r"""attribute_dataset on a tiny random BERT: each output row equals the method run
on that example alone, shards resume after an interruption, a different run
refuses to write into the same directory, and the output reads back in one
call."""

import json
import os
import pickle
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple

import datasets
import pandas as pd
import pyarrow as pa
import pytest
import torch
from captum_ext._utils.model_forward import classifier_forward
from captum_ext.evaluation.attribute import (
    attribute_dataset,
    ManifestMismatchError,
    runner,
)
from captum_ext.evaluation.attribute.lock import LOCK
from captum_ext.evaluation.attribute.manifest import MANIFEST
from captum_ext.evaluation.distributed import DistributedContext
from captum_ext.evaluation.engine import benchmark
from captum_ext.evaluation.registry import METHODS, MethodSpec, MetricContext, METRICS
from captum_ext.evaluation.registry.call_convention import MethodFn
from captum_ext.evaluation.user_data import LoadedExamples
from torch import nn, Tensor
from transformers import PreTrainedTokenizerBase

from tests.helpers import (
    assert_same_state,
    model_state,
    tiny_labelled_bert,
    TINY_TEXTS,
    tiny_tokenizer,
)

MORE = ["bad bad bad", "the film", "it was not fun and not good and very boring"]
LABELS = [i % 3 for i in range(9)]
DATA = LoadedExamples("tiny.csv", TINY_TEXTS + MORE, labels=LABELS)
METHOD_NAMES = ["NormXLogit", "AttCAT", "Saliency"]


def tokenizer() -> PreTrainedTokenizerBase:
    tokenizer = tiny_tokenizer()
    tokenizer.model_max_length = 10  # the two longest texts are cut
    return tokenizer


def run(
    out: Path,
    model: Optional[nn.Module] = None,
    data: LoadedExamples = DATA,
    methods: Sequence[str] = METHOD_NAMES,
    **options: Any,
) -> Path:
    options = {"batch_size": 3, "shard_size": 4, "progress": False, **options}
    model = tiny_labelled_bert() if model is None else model
    return attribute_dataset(model, tokenizer(), data, methods, out, **options)


def single(text: str) -> Tuple[Tensor, Tensor]:
    encoded = tokenizer()(text, truncation=True, max_length=10, return_tensors="pt")
    return encoded["input_ids"], encoded["attention_mask"]


def test_rows_equal_each_example_explained_alone(tmp_path: Path) -> None:
    model = tiny_labelled_bert()
    table = pd.read_parquet(run(tmp_path / "out", model))
    assert table["id"].tolist() == list(range(9))
    assert (
        table["text"].tolist() == DATA.texts and table["label"].tolist() == DATA.labels
    )
    assert table["truncated"].tolist() == [i in (5, 8) for i in range(9)]
    explainers = {
        name: METHODS[name].factory(model, tokenizer()) for name in METHOD_NAMES
    }
    for row, text in zip(table.itertuples(index=False), DATA.texts):
        ids, mask = single(text)
        with torch.no_grad():
            probabilities = model(input_ids=ids, attention_mask=mask).logits.softmax(-1)
        predicted = int(probabilities.argmax())
        assert row.predicted == predicted == row.target
        assert torch.allclose(
            torch.tensor(row.probabilities), probabilities[0], atol=1e-6
        )
        assert list(row.input_ids) == ids[0].tolist()
        assert list(row.tokens) == tokenizer().convert_ids_to_tokens(ids[0].tolist())
        for name, explain in explainers.items():
            expected = explain(ids, mask, torch.tensor([predicted]))[0]
            got = torch.tensor(table[name][row.id])
            assert got.dtype == torch.float32 and got.shape == expected.shape
            assert torch.allclose(got, expected.float(), atol=1e-6, rtol=1e-4), name


def test_method_order_does_not_change_results(tmp_path: Path) -> None:
    # The first method shares its forward pass for the prediction when it can
    # (captum_ext methods); a Captum method first takes the plain route.
    shared = pd.read_parquet(run(tmp_path / "a"))
    plain = pd.read_parquet(run(tmp_path / "b", methods=METHOD_NAMES[::-1]))
    pd.testing.assert_frame_equal(shared, plain[shared.columns], atol=1e-6)


def test_gold_label_targets(tmp_path: Path) -> None:
    model = tiny_labelled_bert()
    table = pd.read_parquet(run(tmp_path / "out", model, target="label"))
    assert table["target"].tolist() == DATA.labels
    explain = METHODS["Saliency"].factory(model, tokenizer())
    for index in (0, 5):
        ids, mask = single(DATA.texts[index])
        expected = explain(ids, mask, torch.tensor([LABELS[index]]))[0]
        assert torch.allclose(
            torch.tensor(table["Saliency"][index]), expected, atol=1e-6
        )
    unlabelled = LoadedExamples("tiny.csv", DATA.texts)
    with pytest.raises(ValueError, match="loaded without a label column"):
        run(tmp_path / "x", data=unlabelled, target="label")


def test_metric_values_equal_each_example_alone(tmp_path: Path) -> None:
    model = tiny_labelled_bert()
    table = pd.read_parquet(run(tmp_path / "out", model, metrics=["aopc"]))
    explain = METHODS["NormXLogit"].factory(model, tokenizer())
    forward = classifier_forward(model)
    for index in (1, 6):
        ids, mask = single(DATA.texts[index])
        target = torch.tensor([int(table["predicted"][index])])
        scores = explain(ids, mask, target)
        context = MetricContext(
            forward, ids, mask, target, tokenizer(), lambda t: explain(ids, mask, t)
        )
        value = METRICS["aopc"].compute(context, scores)["AOPC"].per_example
        assert table["NormXLogit/AOPC"][index] == pytest.approx(float(value), abs=1e-6)
    assert {"AttCAT/AOPC", "Saliency/AOPC"} <= set(table.columns)


def test_metric_values_of_text_pairs_equal_the_benchmarks(tmp_path: Path) -> None:
    data = LoadedExamples("pairs.csv", DATA.texts, text_pairs=DATA.texts[::-1])
    methods, metrics = ["NormXLogit", "Saliency"], ["aopc", "kendall_tau"]
    model = tiny_labelled_bert()
    table = pd.read_parquet(
        run(tmp_path / "out", model, data, methods, metrics=metrics)
    )
    result = benchmark(
        model, tokenizer(), data, methods, metrics, max_length=10, progress=False
    )
    for row in result.per_example():
        for column in ("AOPC", "Kendall-tau"):
            written = table[f"{row['method']}/{column}"][row["row"]]
            assert written == pytest.approx(row[column], abs=1e-6), (row, column)


def test_reads_back_with_datasets_in_data_order(tmp_path: Path) -> None:
    data = DATA.select([8, 2, 5, 0, 7])  # as after a seeded shuffle
    out = run(tmp_path / "out", data=data, shard_size=2)
    assert sorted(os.listdir(out)) == [LOCK, MANIFEST] + [
        f"part-0000{k}.parquet" for k in range(3)
    ]
    loaded = datasets.load_dataset(
        "parquet",
        data_files=f"{out}/*.parquet",
        split="train",
        cache_dir=str(tmp_path / "cache"),
    )
    assert loaded["id"] == [8, 2, 5, 0, 7]
    assert loaded["NormXLogit"] == pd.read_parquet(out)["NormXLogit"].map(list).tolist()


def test_resume_after_interruption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    complete = pd.read_parquet(run(tmp_path / "reference"))
    write = runner.write_shard
    calls: List[Path] = []

    def write_then_die(table: pa.Table, path: Path, rank: int) -> None:
        if calls:
            raise KeyboardInterrupt  # killed while working on the second shard
        calls.append(path)
        write(table, path, rank)

    monkeypatch.setattr(runner, "write_shard", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        run(out)
    assert sorted(os.listdir(out)) == [LOCK, MANIFEST, "part-00000.parquet"]
    first_shard = out / "part-00000.parquet"
    written_at = first_shard.stat().st_mtime_ns
    (out / ".part-00001.parquet.tmp-0-123").write_bytes(b"half a shard")

    monkeypatch.setattr(runner, "write_shard", write)
    run(out, batch_size=2)  # batch size and device may change between runs
    assert first_shard.stat().st_mtime_ns == written_at
    assert sorted(os.listdir(out)) == [LOCK, MANIFEST] + [
        f"part-0000{k}.parquet" for k in range(3)
    ]
    pd.testing.assert_frame_equal(pd.read_parquet(out), complete, atol=1e-6)


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(methods=["LogAt"]), "arguments.methods"),
        (dict(metrics=["aopc"]), "arguments.metrics"),
        (dict(shard_size=5), "arguments.shard_size"),
        (dict(max_length=8), "arguments.max_length"),
        (dict(data=DATA.head(8)), "data.examples"),
        (dict(data=LoadedExamples("tiny.csv", DATA.texts)), "data.fingerprint"),
        (dict(model=tiny_labelled_bert()), None),
    ],
)
def test_refuses_to_mix_runs(
    tmp_path: Path, change: Dict[str, Any], named: Optional[str]
) -> None:
    out = run(tmp_path / "out", data=DATA.head(4), methods=["NormXLogit"])
    if "model" in change:  # same architecture, other weights
        with torch.no_grad():
            list(change["model"].parameters())[-1].add_(1.0)
        named = "model.fingerprint"
    change = {"data": DATA.head(4), "methods": ["NormXLogit"], **change}
    with pytest.raises(ManifestMismatchError, match=named) as error:
        run(out, **change)
    assert str(out) in str(error.value) and "another --out directory" in str(
        error.value
    )


def test_refuses_shards_without_manifest(tmp_path: Path) -> None:
    out = run(tmp_path / "out", data=DATA.head(2), methods=["NormXLogit"])
    (out / MANIFEST).unlink()
    with pytest.raises(ManifestMismatchError, match="holds shards but no"):
        run(out, data=DATA.head(2), methods=["NormXLogit"])


def test_unreadable_manifest_and_other_versions(tmp_path: Path) -> None:
    out = run(tmp_path / "out", data=DATA.head(2), methods=["NormXLogit"])
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["versions"]["torch"] = "0.1"
    (out / MANIFEST).write_text(json.dumps(manifest))
    (out / "part-00000.parquet").unlink()
    with pytest.warns(UserWarning, match=r"other package versions \(torch 0.1 ->"):
        run(out, data=DATA.head(2), methods=["NormXLogit"])
    assert (out / "part-00000.parquet").exists()
    (out / MANIFEST).write_text("{half a manifest")
    with pytest.raises(ManifestMismatchError, match="not a readable manifest"):
        run(out, data=DATA.head(2), methods=["NormXLogit"])


def test_model_state_is_left_alone_also_on_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_labelled_bert()
    before = model_state(model)
    run(tmp_path / "ok", model, data=DATA.head(4))
    assert_same_state(before, model_state(model))

    def failing(model: nn.Module, tokenizer: Any) -> MethodFn:
        explain = METHODS["NormXLogit"].factory(model, tokenizer)

        def explain_or_fail(
            input_ids: Tensor,
            attention_mask: Tensor,
            target: Tensor,
            token_type_ids: Optional[Tensor] = None,
        ) -> NoReturn:
            explain(input_ids, attention_mask, target)  # runs the forward pass
            raise RuntimeError("method failed midway")

        return explain_or_fail

    monkeypatch.setitem(
        METHODS, "Failing", MethodSpec("Failing", failing, "captum_ext")
    )
    with pytest.raises(RuntimeError, match="midway"):
        run(tmp_path / "fail", model, methods=["Failing"])
    assert_same_state(before, model_state(model))


def test_text_pairs(tmp_path: Path) -> None:
    model = tiny_labelled_bert()
    pairs = LoadedExamples(
        "pairs.csv", TINY_TEXTS[:4], ["good", "bad", "fun", "the plot"]
    )
    table = pd.read_parquet(run(tmp_path / "out", model, data=pairs))
    assert table["text_pair"].tolist() == pairs.text_pairs
    explain = METHODS["NormXLogit"].factory(model, tokenizer())
    encoded = tokenizer()(TINY_TEXTS[0], "good", return_tensors="pt")
    assert table["token_type_ids"][0].tolist() == encoded["token_type_ids"][0].tolist()
    expected = explain(
        encoded["input_ids"],
        encoded["attention_mask"],
        torch.tensor([int(table["predicted"][0])]),
        token_type_ids=encoded["token_type_ids"],
    )[0]
    assert torch.allclose(torch.tensor(table["NormXLogit"][0]), expected, atol=1e-6)


def test_max_length_defaults_to_what_tokenizer_and_model_allow(tmp_path: Path) -> None:
    unlimited = tiny_tokenizer()  # states no limit (a huge sentinel)
    model = tiny_labelled_bert()  # 64 position embeddings
    out = attribute_dataset(
        model, unlimited, DATA, ["Random"], tmp_path / "out", progress=False
    )
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["arguments"]["max_length"] == 64
    assert pd.read_parquet(out)["truncated"].sum() == 0


@pytest.mark.parametrize(
    "error",
    [ManifestMismatchError("max_length differs: 10 != 12"), PermissionError(13, "no")],
)
def test_other_ranks_raise_the_error_rank_0_found(error: Exception) -> None:
    class OtherRank(DistributedContext):
        def broadcast(self, obj: Any) -> Any:  # what rank 0 sent, through pickle
            return pickle.loads(pickle.dumps((error, [])))

    with pytest.raises(type(error)) as raised:
        # None on purpose: a rank other than 0 reads neither output nor model.
        runner._agreed_missing_shards(
            OtherRank(rank=1, world_size=2),
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            None,
            ExitStack(),
        )
    assert str(raised.value) == str(error)


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match="unknown method\\(s\\) \\['Nope'\\]; available"
    ):
        run(tmp_path / "a", methods=["Nope"])
    with pytest.raises(ValueError, match="unknown metric\\(s\\) \\['auc'\\]"):
        run(tmp_path / "a", metrics=["auc"])
    with pytest.raises(ValueError, match="non-empty list"):
        run(tmp_path / "a", methods="NormXLogit")
    with pytest.raises(ValueError, match="a method is listed twice"):
        run(tmp_path / "a", methods=["NormXLogit", "NormXLogit"])
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        run(tmp_path / "a", batch_size=0)
    with pytest.raises(ValueError, match="target must be one of"):
        run(tmp_path / "a", target="gold")
    with pytest.raises(ValueError, match="training mode"):
        run(tmp_path / "a", model=tiny_labelled_bert().train())
    assert not (tmp_path / "a").exists()


def test_plain_progress_lines_when_not_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(tmp_path / "out", data=DATA.head(5), progress=True)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("attribute: 5/5 examples, ")
    assert "examples/s, ETA 0 s" in lines[-1]


@pytest.mark.parametrize("content", ["[1, 2, 3]", "null", '"text"', "4"])
def test_manifest_that_is_not_an_object(tmp_path: Path, content: str) -> None:
    out = run(tmp_path / "out", data=DATA.head(2), methods=["NormXLogit"])
    (out / MANIFEST).write_text(content)
    with pytest.raises(ManifestMismatchError, match="not an object"):
        run(out, data=DATA.head(2), methods=["NormXLogit"])


def test_manifest_entries_that_are_not_objects_differ(tmp_path: Path) -> None:
    out = run(tmp_path / "out", data=DATA.head(2), methods=["NormXLogit"])
    manifest = json.loads((out / MANIFEST).read_text())
    manifest.update(model=[1], versions="x")
    (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ManifestMismatchError, match="model.fingerprint: None before"):
        run(out, data=DATA.head(2), methods=["NormXLogit"])


def test_the_same_model_under_another_path_resumes(tmp_path: Path) -> None:
    model = tiny_labelled_bert()
    first_home = tmp_path / "models" / "bert"
    first_home.mkdir(parents=True)
    model.config._name_or_path = str(first_home)
    out = run(tmp_path / "out", model, data=DATA.head(8), methods=["NormXLogit"])
    (out / "part-00001.parquet").unlink()
    model.config._name_or_path = "/somewhere/else/models/bert"
    model.config.transformers_version = "0.0.1"  # only warned about, as versions
    run(out, model, data=DATA.head(8), methods=["NormXLogit"])
    assert len(pd.read_parquet(out)) == 8
    manifest = json.loads((out / MANIFEST).read_text())
    # The source is recorded as the first run saw it, and not compared.
    assert manifest["model_source"] == {"path": str(first_home), "revision": None}
    model.config.num_labels_note = "a config entry that is no path"
    with pytest.raises(ManifestMismatchError, match="model.fingerprint"):
        run(out, model, data=DATA.head(8), methods=["NormXLogit"])


def test_max_length_above_the_models_positions_is_refused_before_any_work(
    tmp_path: Path,
) -> None:
    long = LoadedExamples("long.csv", [" ".join(["fun"] * 80)] * 3)  # 64 positions
    with pytest.raises(ValueError, match="max_length=65 is more than the 64 pos"):
        run(tmp_path / "out", data=long, methods=["NormXLogit"], max_length=65)
    assert not (tmp_path / "out").exists()
    run(tmp_path / "out", data=long, methods=["NormXLogit"], max_length=64)
    assert pd.read_parquet(tmp_path / "out")["truncated"].tolist() == [True] * 3


def test_truncation_is_told_by_the_projects_own_notice(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.warns(UserWarning) as notices:
        run(tmp_path / "out", methods=["NormXLogit"])
    assert "Token indices sequence length" not in capfd.readouterr().err
    assert [str(n.message) for n in notices] == [
        "2 of the texts this run attributed were cut to max_length=10 tokens "
        "(column 'truncated'); their attributions cover the kept tokens only"
    ]
