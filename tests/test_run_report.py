"""The end of `python -m bertlib pretrain` tells a learner where the run stands (issue 27, item 3): its validation
beside the unigram baseline, fill-mask on two fixed sentences, and, on the plateau, the two ways out."""

import json
from pathlib import Path

import pytest

from bertlib.cli.main import main
from bertlib.evaluation.report import PROBES, baseline_scores, on_plateau, run_report
from bertlib.evaluation.scores import evaluate_run
from bertlib.train.runs import read_metrics

ROOT = Path(__file__).resolve().parents[1]
UNIGRAM = 802.5  # the unigram baseline's validation perplexity with the 8,192-piece tokenizer (README)


@pytest.mark.parametrize(
    ("perplexity", "plateau", "run"),
    [
        (499.6, True, "the CPU recipe study's `default`, full budget"),
        (457.7, True, "`b8-lr1e-3-m30`, the main command's settings"),
        (406.1, True, "`combo-b8`, the study's best without rotary positions"),
        (332.0, True, "GPU `mini-e100` at step 1,656, its last validation before the drop"),
        (249.0, False, "GPU `mini-e100` at step 1,840, the first after it"),
        (74.6, False, "`b8-lr1e-3-m30-rope`: rotary positions, the main command's budget"),
        (22.05, False, "the course model, models/course-mini"),
    ],
)
def test_the_plateau_line_separates_the_measured_runs(perplexity, plateau, run):
    assert on_plateau(perplexity, UNIGRAM) == plateau, run


def test_the_gpu_runs_fall_off_the_plateau_once_and_stay_off():
    "The line sits where the measured curves drop: every GPU run crosses it once, and none comes back above it."
    for metrics in (ROOT / "docs" / "results" / "gpu" / "runs").glob("*/metrics.jsonl"):
        validations = [r for r in read_metrics(metrics) if r.get("split") == "validation"]
        curve = [on_plateau(r["mlm_perplexity"], UNIGRAM) for r in validations]
        assert curve[0] and not curve[-1], metrics
        assert curve == sorted(curve, reverse=True), metrics  # True ... True, False ... False


def test_the_main_command_ends_with_the_baseline_fill_mask_and_the_way_out(tokenizer_file, tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main(
            [
                "pretrain",
                "--preset",
                "tiny",
                "--batch-size",
                "8",
                "--max-seq-len",
                "64",
                "--eval-batches",
                "2",
                "--num-workers",
                "0",
                "--tokenizer",
                str(tokenizer_file),
                "--max-steps",
                "2",
                "--output-dir",
                str(run),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    validation = [r for r in read_metrics(run / "metrics.jsonl") if r.get("split") == "validation"][-1]
    baseline = evaluate_run(run, max_batches=2, baseline=True)  # the same batches, scored by `evaluate --baseline`
    assert (
        f"MLM perplexity {validation['mlm_perplexity']:.1f} ({baseline['unigram_mlm_perplexity']:.1f}), "
        f"top-1 {validation['mlm_accuracy']:.1%} ({baseline['unigram_mlm_accuracy']:.1%})"
    ) in out
    for text in PROBES:
        assert f"fill-mask: {text}  ->  " in out
    assert "still on the plateau" in out
    assert "--position-embedding-type rope" in out and "models/course-mini" in out


def test_the_course_model_is_off_the_plateau_and_fills_both_sentences():
    "The baseline is the one `evaluate --baseline` recorded for the course model; its guesses are the right words."
    course = ROOT / "models" / "course-mini"
    validation = {"step": 8556, **json.loads((course / "evaluation.json").read_text())["scores"]["validation"]}
    unigram = baseline_scores(course)
    assert unigram["mlm_perplexity"] == pytest.approx(validation["unigram_mlm_perplexity"], rel=1e-9)
    lines = run_report(course, validation)
    assert not any("plateau" in line for line in lines)
    assert [line.split("->  ")[1].split()[0] for line in lines[1:3]] == ["states", "war"]
