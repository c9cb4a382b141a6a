r"""``benchmarks/bench_long_prompts.py`` runs end to end (``--quick`` on a tiny
model, workers in this process) and judges its targets from the numbers."""

import argparse
import csv
import json
from functools import partial
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import torch
from benchmarks import bench_long_prompts as bench
from benchmarks.common import continuation
from captum.attr import InputXGradient
from captum_ext.adapters import get_adapter
from captum_ext.attr import CAT
from torch import nn

TINY = ["--layers", "1", "--hidden", "32", "--vocab", "256"]


def _in_process(
    capsys: pytest.CaptureFixture, module: str, arguments: List[str]
) -> Dict[str, Any]:
    r"""What a worker subprocess returns, run here (import time dominates)."""
    assert module == bench.MODULE
    outside = capsys.readouterr().out  # the parent's table so far
    bench.main(["--worker", *arguments])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    print(outside, end="")
    return result


def test_quick_run_prints_every_method_and_length_and_a_verdict_per_target(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(
        bench,
        "measure_in_subprocess",
        lambda module, arguments: _in_process(capsys, module, arguments),
    )
    bench.main(["--quick", *TINY, "--methods", "CAT", "LastLayerAttention"])
    lines = capsys.readouterr().out.splitlines()
    rows = [
        line.split()
        for line in lines
        if line.split()[:1] in (["CAT"], ["LastLayerAttention"], ["forward"])
    ]
    assert [(row[0], row[1]) for row in rows] == [
        (name, length)
        for name in ("forward", "CAT", "LastLayerAttention")
        for length in ("256", "512")
    ]
    assert all(float(row[2]) >= 0 or "n/a" in row for row in rows)
    verdicts = [line for line in lines if line.startswith("CAT: ")]
    assert len(verdicts) in (1, 3)  # n/a, or the three targets
    assert all(("PASS" in v) != ("not met" in v) or "n/a" in v for v in verdicts)
    assert not any("FAIL" in line for line in lines)


def test_a_method_that_raises_is_reported_not_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(model: Any, chunk: Any) -> Any:
        raise ValueError("needs eager attention")

    monkeypatch.setattr(bench, "builders", lambda: {"CAT": broken})
    options = argparse.Namespace(
        threads=1,
        lengths=[64],
        length=64,
        steps=2,
        layers=1,
        hidden=32,
        vocab=256,
        device="cpu",
        dtype="float32",
        shape="small",
    )
    assert bench.worker("CAT", options) == {
        "error": "ValueError: needs eager attention"
    }


def _float64_model_and_continuation(
    prompt: int, steps: int
) -> Tuple[nn.Module, Dict[str, torch.Tensor]]:
    r"""The script's model (2 layers x 32, vocabulary 256) in float64 and one
    ``prompt``-token prompt with ``steps`` target ids."""
    options = argparse.Namespace(
        lengths=[prompt], steps=steps, device="cpu", dtype="float64", shape="small"
    )
    options.layers, options.hidden, options.vocab = 2, 32, 256
    model = bench._model(options)
    return model, continuation(model, 1, prompt, steps)


def test_cat_rows_of_either_choice_equal_cat() -> None:
    # The rows "CAT, targets batched" and "CAT, 1 target per backward" are CAT's
    # scores with all T steps in one backward pass, or one step per pass.
    model, data = _float64_model_and_continuation(24, 3)
    expected = CAT(model).attribute(
        data["ids"], target=data["target"], additional_forward_args=(data["mask"],)
    )  # [1, T, P]
    for name in bench.CAT_CHOICES:
        scores = bench.builders()[name](model, None)(
            data["ids"], data["mask"], data["target"]
        )
        assert isinstance(scores, torch.Tensor)  # a Run returns object
        torch.testing.assert_close(scores, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("row", bench.WHOLE_GRAPH_ROWS)
def test_whole_graph_rows_equal_the_default(row: str) -> None:
    # The rows "..., whole graph" run the method with recompute=False: the
    # same scores as its default, which recomputes blocks on a CPU.
    model, data = _float64_model_and_continuation(24, 3)
    method = row.split(",")[0]
    run = partial(bench.builders()[method](model, None), data["ids"], data["mask"])
    whole = bench.builders()[row](model, None)(
        data["ids"], data["mask"], data["target"]
    )
    assert isinstance(whole, torch.Tensor)
    assert whole.abs().max() > 1e-5
    torch.testing.assert_close(whole, run(data["target"]), rtol=1e-10, atol=1e-14)


def test_plain_gradients_row_is_captums_input_x_gradient_per_target_step() -> None:
    # The floor row: per target step, gradient x input of that step's
    # log-probability at the input embeddings, as Captum's InputXGradient gives
    # it on a forward function of the embeddings.
    model, data = _float64_model_and_continuation(12, 3)
    ids, target = data["ids"], data["target"]
    joined = torch.cat([ids, target[:, :-1]], 1)  # [1, P + T - 1]
    embeds = get_adapter(model).word_embeddings()(joined).detach().requires_grad_()

    def log_prob(step: int) -> Any:
        position = ids.shape[1] - 1 + step
        return lambda x: model(inputs_embeds=x).logits[:, position].log_softmax(-1)

    expected = torch.stack(
        [
            InputXGradient(log_prob(step))
            .attribute(embeds, target=int(target[0, step]))
            .sum(-1)
            for step in range(3)
        ],
        1,
    )  # [1, T, P + T - 1]
    scores = bench.builders()[bench.PLAIN_GRADIENTS](model, None)(
        ids, data["mask"], target
    )
    assert isinstance(scores, torch.Tensor)
    assert scores[0, 0, ids.shape[1] :].abs().max() == 0  # causal: none later
    torch.testing.assert_close(scores, expected, rtol=1e-10, atol=1e-12)


def _result(peak: float, seconds: float) -> Dict[str, Any]:
    return {"peak_mib": peak, "seconds": seconds, "exact": True}


def test_verdicts_from_the_numbers() -> None:
    lengths = [512, 1024, 2048]
    forward = [_result(10, 1), _result(20, 2), _result(40, 4)]
    results = {
        "forward": forward,
        # 1.2x, linear, time ratio 10 -> 12 (+20 %): every target met
        "CAT": [_result(12, 10), _result(24, 22), _result(48, 48)],
        # 5x at 2,048 tokens, 2.5x per doubling, time ratio 10 -> 13.5 (+35 %)
        "AttCAT": [_result(32, 10), _result(80, 20), _result(200, 54)],
        # 1.6x at 1,024 tokens: over the 1.5x
        "DecodedLayerGradCam": [_result(14, 5), _result(32, 9), _result(56, 20)],
        "GlobEnc": [{"error": "ValueError: needs eager"}] * 3,
    }
    lines = bench.verdicts(results, lengths)
    assert lines == [
        "CAT: peak <= 1.5x forward: worst 1.20: PASS",
        "CAT: peak growth <= 2.3x per doubling: worst 2.00: PASS",
        "CAT: time / forward within +-25% of 512 tokens': worst 0.20: PASS",
        "AttCAT: peak <= 1.5x forward: worst 5.00: not met on this machine",
        "AttCAT: peak growth <= 2.3x per doubling: worst 2.50: not met on this machine",
        "AttCAT: time / forward within +-25% of 512 tokens': worst 0.35: "
        "not met on this machine",
        "DecodedLayerGradCam: peak <= 1.5x forward: worst 1.60: "
        "not met on this machine",
        "GlobEnc: n/a (a run failed)",
    ]


def test_verdicts_over_the_plain_gradients_where_that_row_ran() -> None:
    lengths = [512, 2048]
    results = {
        "forward": [_result(10, 1), _result(40, 4)],
        bench.PLAIN_GRADIENTS: [_result(25, 16), _result(100, 80)],
        # 1.0x and 1.1x the plain gradients' time: within its 1.3x
        "CAT": [_result(30, 16), _result(120, 88)],
        # 1.5x at 2,048 tokens
        "AttCAT": [_result(30, 16), _result(120, 120)],
        # 0.5x: it recomputes only the blocks above its layer
        "DecodedLayerGradCam": [_result(30, 8), _result(120, 40)],
    }
    lines = bench.verdicts(results, lengths)
    floor = "time / T gradients, plain autograd's <= 1.3"
    assert f"CAT: {floor}: worst 1.10: PASS" in lines
    assert f"AttCAT: {floor}: worst 1.50: not met on this machine" in lines
    assert f"DecodedLayerGradCam: {floor}: worst 0.50: PASS" in lines
    results[bench.PLAIN_GRADIENTS][1] = {"error": "worker exited with 9"}
    assert not any(floor in line for line in bench.verdicts(results, lengths))


def test_results_file_has_a_task_per_length_and_ratios_over_the_forward(
    tmp_path: Path,
) -> None:
    results = {
        "forward": [_result(10, 1), _result(40, 4)],
        bench.PLAIN_GRADIENTS: [_result(25, 16), {"error": "worker exited with 9"}],
        "CAT": [_result(7, 20), _result(30, 88)],
    }
    options = argparse.Namespace(lengths=[512, 2048], out=str(tmp_path / "out"))
    bench.write_results(results, options)
    with open(tmp_path / "out" / "results.csv", newline="") as f:
        rows = {(r["task"], r["method"]): r for r in csv.DictReader(f)}
    cat = rows[("512", "CAT")]
    assert float(cat["peak_ratio"]) == 0.7 and float(cat["time_ratio"]) == 20.0
    assert float(cat["time_over_plain_gradients"]) == 20 / 16
    # the plain gradients' row failed at 2,048 tokens: no ratio over it
    assert rows[("2048", "CAT")]["time_over_plain_gradients"] == "nan"
    assert rows[("2048", bench.PLAIN_GRADIENTS)]["peak_ratio"] == "nan"
    assert float(rows[("2048", "CAT")]["time_ratio"]) == 22.0
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["results.csv"]


def test_growth_per_doubling_over_uneven_steps() -> None:
    # 512 -> 2,048 tokens is two doublings: 16x in all is 4x per doubling
    assert bench._growth([1.0, 16.0, None], [512, 2048, 4096]) == ["", "4.00", ""]
