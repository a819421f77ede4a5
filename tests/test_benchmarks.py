"""The benchmark scripts' pieces that can be checked without timing anything: the speed page's report, the batch
both sides train on, and the FLOP count behind MFU. (Speed targets live in the benchmarks, never in tests.)"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertlib.model.bert import IGNORE_INDEX
from bertlib.model.config import BertConfig

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def side(tokens_per_second: float, memory_mib: float, mfu: float | None = None) -> dict:
    row = {
        "tokens_per_second": tokens_per_second,
        "step_seconds": 4096 / tokens_per_second,
        "peak_memory_bytes": int(memory_mib * 2**20),
    }
    return row if mfu is None else {**row, "mfu": mfu}


def sample(device: str) -> dict:
    machine = {
        "date": "2026-01-02",
        "cpu": "Test CPU",
        "cpu_cores": 2,
        "torch": "2.13.0",
        "transformers": "5.0",
        "device": device,
        **({"gpu": "NVIDIA H100 80GB HBM3"} if device == "cuda" else {}),
    }
    mfu = device == "cuda"
    row = {
        "preset": "mini",
        "vocab_size": 30522,
        "parameters": 12_345_678,
        "batch_size": 32,
        "seq_len": 128,
        "dtype": "bf16" if mfu else "fp32",
        "compile": mfu,
        "speedup": 3.25,
        "bertlib": side(13000, 700.4, 0.41 if mfu else None),
        "transformers": side(4000, 1200.6, 0.126 if mfu else None),
    }
    if mfu:
        row["peak_flops_source"] = "data sheet of H100: 989 TFLOP/s bf16 dense"
    return {
        "benchmark": "train_step",
        "machine": machine,
        "settings": {"threads": 2, "flush_denormal": True},
        "results": [row],
    }


def test_report_renders_the_cpu_table_and_says_no_gpu_was_measured(tmp_path):
    report = load_script("report")
    (tmp_path / "train_step-cpu.json").write_text(json.dumps(sample("cpu")))
    text = report.render(tmp_path, published=False)
    assert "| mini, vocab 30,522 | 12.3M | 32 x 128 | fp32 | 13,000 | 4,000 | **3.25x** | 700 | 1,201 |" in text
    assert "Test CPU, 2 cores; 2 threads, denormals flushed; torch 2.13.0" in text
    assert "No GPU numbers have been measured yet" in text


def test_report_renders_mfu_on_gpu(tmp_path):
    report = load_script("report")
    (tmp_path / "train_step-cuda.json").write_text(json.dumps(sample("cuda")))
    text = report.render(tmp_path, published=False)
    assert "| bf16 (compiled) | 13,000 | 4,000 | **3.25x** | 700 | 1,201 | 41.0% | 12.6% |" in text
    assert "989 TFLOP/s" in text and "No CPU training-step numbers" in text


def test_report_renders_inference_latency_and_throughput(tmp_path):
    report = load_script("report")
    data = {
        "benchmark": "inference",
        "machine": sample("cpu")["machine"],
        "settings": {"threads": 2},
        "model": "random mini",
        "parameters": 5_500_000,
        "fill_mask_ms": {"bertlib": 4.0, "transformers": 10.0},
        "evaluation": {
            "tokens_per_second": {"bertlib": 30_000, "transformers": 15_000},
            "largest_score_difference": 2e-7,
        },
    }
    (tmp_path / "inference-cpu.json").write_text(json.dumps(data))
    text = report.render(tmp_path, published=False)
    assert "4.0 ms with `bertlib.evaluation.scores.fill_mask` and 10.0 ms" in text and "(2.50x)" in text
    assert "30,000 tokens/s against 15,000" in text and "(2.00x;" in text


def test_report_rewrites_only_between_the_markers(tmp_path):
    publish = load_script("report").publish
    page = tmp_path / "speed.md"
    start, end = "<!-- benchmarks:start -->", "<!-- benchmarks:end -->"
    page.write_text(f"# title\n{start}\nold\n{end}\ntail\n")
    publish.write_block("benchmarks", "new table", page)
    assert page.read_text() == f"# title\n{start}\nnew table\n{end}\ntail\n"
    page.write_text("no markers")
    with pytest.raises(ValueError, match="exactly once"):
        publish.write_block("benchmarks", "x", page)


def test_the_speed_page_s_block_is_what_the_report_renders():
    report = load_script("report")
    page = (ROOT / "docs" / "speed.md").read_text()
    section = page.split("<!-- benchmarks:start -->")[1].split("<!-- benchmarks:end -->")[0]
    assert section.strip() == report.render().strip()


def test_benchmark_batch_masks_fifteen_percent_and_both_sides_share_the_weights():
    bench = load_script("train_step")
    config = BertConfig.from_preset("tiny", vocab_size=500)
    batch = bench.make_batch(config, 16, 64, torch.device("cpu"))
    selected = batch["labels"] != IGNORE_INDEX
    assert 0.10 < selected.float().mean() < 0.20
    assert not selected[:, [0, 32, 63]].any()  # never [CLS] or [SEP]
    ours = bench.build("bertlib", config, torch.device("cpu")).eval()
    from bertlib.hf import interop

    theirs = interop.to_transformers(ours).eval()
    theirs.set_attn_implementation("sdpa")
    assert abs(ours(**batch).loss - theirs(**batch).loss) < 1e-5


def test_each_side_gets_the_batch_its_training_loop_gives_it():
    bench = load_script("train_step")
    config = BertConfig.from_preset("tiny", vocab_size=500)
    batch = bench.make_batch(config, 4, 32)
    ours, theirs = (bench.side_inputs(side, batch, torch.device("cpu")) for side in bench.SIDES)
    from bertlib.model.bert import head_index

    assert all(torch.equal(a, b) for a, b in zip(ours.pop("head_index"), head_index(batch["labels"]), strict=True))
    assert ours.keys() == theirs.keys() == batch.keys()


def test_real_batches_need_the_tokenizers_vocabulary():
    bench = load_script("train_step")
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(["--data", "wikitext", "--vocab-size", "1000"])
    assert exit_info.value.code == 2


def test_report_names_real_batches_and_their_padding(tmp_path):
    report = load_script("report")
    data = sample("cpu")
    data["results"][0].update(data="wikitext", padding_share=0.123)
    (tmp_path / "train_step-cpu.json").write_text(json.dumps(data))
    assert "| mini, vocab 30,522, WikiText-2 pairs (12% padding) | 12.3M |" in report.render(tmp_path, published=False)


def test_model_flops_per_token():
    bench = load_script("train_step")
    config = BertConfig.from_preset("base", vocab_size=30522)
    assert bench.model_flops_per_token(config, 128, 110_000_000) == 6 * 110_000_000 + 12 * 12 * 128 * 768


def test_shared_cpu_ratios_and_their_report(tmp_path):
    "The shared-CPU benchmark's ratios (the targets are stated in them) and the table made of them."
    bench, report = load_script("shared_cpu"), load_script("report")
    speeds = {"quiet": (2000, 3000, 2500, 2900), "beside a busy process": (2000, 800, 1900, 1900)}
    timings = {
        condition: {
            setting: [
                {
                    "tokens_per_second": speed,
                    "threads": 1 if setting == "one thread" else 2,
                    "load_average": 0.4 + 0.1 * i,
                    "idle_cpus": None,
                }
            ]
            for i, (setting, speed) in enumerate(zip(bench.SETTINGS, values, strict=True))
        }
        for condition, values in speeds.items()
    }
    for condition, speed in (("quiet", 3100), ("beside a busy process", 180)):  # a run that a busy process joined
        timings[condition][bench.PARTWAY] = [{"tokens_per_second": speed, "threads": 2, "load_average": 1.0}]
    data = {"machine": sample("cpu")["machine"], "steps": 20, "rounds": 1, "timings": timings, **bench.summary(timings)}
    assert data["choice_vs_best_quiet"] == pytest.approx(2900 / 3000)
    assert data["choice_vs_one_thread_busy"] == pytest.approx(1900 / 2000)
    (tmp_path / "shared_cpu.json").write_text(json.dumps(data))
    text = report.render(tmp_path, published=False)
    assert "| one thread | 2,000 | 2,000 |" in text and "| all cores | 3,000 | 800 |" in text
    assert "| bertlib's choice | 2,900 (2 threads) | 1,900 (2 threads) |" in text
    assert f"| {bench.PARTWAY} | 3,100 | 180 |" in text
    assert "**0.97** of the best setting's speed when the machine is quiet" in text and "**0.95** of one" in text


def test_report_names_every_benchmark_it_lacks(tmp_path):
    "A folder with part of the results: each missing one is a line with the command that makes it."
    report = load_script("report")
    (tmp_path / "train_step-cpu.json").write_text(json.dumps(sample("cpu")))
    text = report.render(tmp_path, published=False)
    for name, (what, command, _) in report.PARTS.items():
        if name != "train_step-cpu.json":
            assert f"No {what} have been measured yet: run {command}, then this script." in text
    assert "No data-pipeline numbers have been measured yet: run `python benchmarks/data_pipeline.py`" in text


def test_report_refuses_a_folder_without_results(tmp_path):
    report = load_script("report")
    with pytest.raises(report.publish.MissingResults, match="does not exist"):
        report.render(tmp_path / "missing")
    with pytest.raises(report.publish.MissingResults, match="holds no result files"):
        report.render(tmp_path, published=False)
    (tmp_path / "notes.json").write_text("{}")
    with pytest.raises(report.publish.MissingResults, match="holds none of the benchmarks' result files"):
        report.render(tmp_path, published=False)
    (tmp_path / "shared_cpu.json").write_text("")  # a benchmark stopped while writing
    with pytest.raises(report.publish.MissingResults, match="shared_cpu.json is not a readable result file"):
        report.render(tmp_path, published=False)


@pytest.fixture(scope="module")
def course_tokenizer():
    import bertlib

    return bertlib.load_model(ROOT / "models" / "course-mini")[1]


def test_finetune_batches_are_padded_as_the_fine_tuning_loop_pads_them(course_tokenizer, task_data, monkeypatch):
    "Length-grouped SST-2 batches, each padded to its longest sentence rounded up to 8, not to the window."
    monkeypatch.setenv("BERTLIB_DATA_DIR", str(task_data))
    bench = load_script("finetune_step")
    batches = bench.training_batches(course_tokenizer, 128, 32, 3, sentences=500)
    pad = course_tokenizer.token_to_id("[PAD]")
    for batch in batches:
        lengths = batch["attention_mask"].sum(1)
        assert batch["input_ids"].shape == (32, -(-int(lengths.max()) // 8) * 8) and batch["labels"].shape == (32,)
        assert (batch["input_ids"][batch["attention_mask"] == 0] == pad).all()
        assert int(lengths.max()) - int(lengths.min()) < 16  # grouped by length: far narrower than the window
    assert len({b["input_ids"].shape[1] for b in batches}) > 1  # each batch padded to its own width


def test_finetune_step_benchmark_writes_its_results_and_the_report_their_rows(tmp_path, task_data):
    "The benchmark at its smallest (two batches, one repeat), in a process of its own: speeds, roofline, provenance."
    output = tmp_path / "finetune_step-cpu.json"
    env = {**os.environ, "BERTLIB_DATA_DIR": str(task_data), "PYTHONPATH": str(ROOT)}
    small = ["--batches", "2", "--train-sentences", "300", "--repeats", "1", "--warmup", "0", "--device", "cpu"]
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "finetune_step.py"),
            *small,
            "--threads",
            "1",
            "--output",
            str(output),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(output.read_text())
    step = data["step"]
    assert step["batches"] == 2 and step["batch_size"] == 32 and data["parameters"] > 5e6
    assert 0 < step["padding_share"] < 1 and step["tokens"] == round(step["mean_length"] * 64)
    for side in ("bertlib", "transformers"):
        assert step[side]["tokens_per_second"] == pytest.approx(
            step["tokens"] / step[side]["seconds_per_repeat"][0],
            rel=1e-3,  # the seconds are kept to 5 decimals
        )
        assert step["roofline"]["fraction_of_peak"][side] == pytest.approx(
            step["roofline"]["flops"] / step["roofline"]["cpu_seconds"][side] / step["roofline"]["peak_flops"]
        )
    assert step["speedup"] == pytest.approx(
        step["bertlib"]["tokens_per_second"] / step["transformers"]["tokens_per_second"]
    )
    made = data["provenance"]  # it says how it was made
    assert made["mode"] == "trial" and made["repeats"] == 1 and made["warmup"] == 0 and made["threads"] == 1
    assert made["commit"] and len(made["load_average"]["before"]) == len(made["load_average"]["after"]) == 3
    text = load_script("report").render(tmp_path, published=False)
    fractions = " | ".join(f"{step['roofline']['fraction_of_peak'][side]:.0%}" for side in ("bertlib", "transformers"))
    row = (
        f"| 32 x {step['mean_length']:.1f} | 128 | {step['padding_share']:.0%} | fp32 | "
        f"{step['bertlib']['tokens_per_second']:,.0f} | {step['transformers']['tokens_per_second']:,.0f} | "
        f"**{step['speedup']:.2f}x** | 1.5x: "
    )
    assert (
        row in text
        and f"| {fractions} |" in text
        and "Made in trial mode (batches 2, warmup 0, repeats 1), 1 thread" in text
    )
    # the oneDNN lever's before (torch's own products) was timed in the same run, and the report sets it beside after
    before = step["bertlib_without_onednn"]
    assert step["onednn_speedup"] == pytest.approx(step["bertlib"]["tokens_per_second"] / before["tokens_per_second"])
    assert len(before["seconds_per_repeat"]) == 1 and "bertlib_without_onednn" in step["roofline"]["cpu_seconds"]
    lever = (
        f"| SST-2, 32 x {step['mean_length']:.1f} | {before['tokens_per_second']:,.0f} | "
        f"{step['bertlib']['tokens_per_second']:,.0f} | **{step['onednn_speedup']:.2f}x** | "
        f"{step['roofline']['fraction_of_peak']['bertlib_without_onednn']:.0%} | "
    )
    assert lever in text


# ---------------------------------------------------------------------------------------------------- roofline
@pytest.mark.parametrize("head", ["pretraining", "sequence", "token", "span"])
def test_a_steps_flops_are_what_torchs_flop_counter_counts(head):
    """The roofline's count of a training step (forward and backward) equals torch's own count of the matrix products
    and attention that bertlib's model runs, for every head (on sequences without padding, which torch would count)."""
    from torch.utils.flop_counter import FlopCounterMode

    import bertlib

    roofline = load_script("roofline")
    config = BertConfig.from_preset("tiny", vocab_size=500)
    torch.manual_seed(0)
    ids = torch.randint(5, 500, (3, 20))
    inputs = {}
    if head == "pretraining":
        model = bertlib.BertForPreTraining(config)
        labels = torch.full_like(ids, IGNORE_INDEX)
        labels[:, [3, 7, 9]] = ids[:, [3, 7, 9]]
        inputs = {"labels": labels, "next_sentence_label": torch.zeros(3, dtype=torch.long)}
    elif head == "span":
        model = bertlib.BertForQuestionAnswering(config)
    else:
        kind = bertlib.BertForSequenceClassification if head == "sequence" else bertlib.BertForTokenClassification
        model = kind(config, ("a", "b", "c"))
    with FlopCounterMode(display=False) as counted:
        out = model.train()(ids, **inputs)
        (out.loss if head == "pretraining" else out.logits if head != "span" else out.start_logits).sum().backward()
    classes = {"pretraining": 2, "span": 2}.get(head, 3)
    expected = roofline.step_flops(config, [20] * 3, head, training=True, masked=[3] * 3, labels=classes)
    assert counted.get_total_flops() == expected


def test_the_peak_is_the_best_shape_and_each_fraction_its_share():
    roofline = load_script("roofline")
    config = BertConfig.from_preset("tiny", vocab_size=500)
    shapes = roofline.layer_shapes(config, 64, backward=True)
    assert (64, 128, 512) in shapes and (512, 64, 128) in shapes and len(shapes) == len(set(shapes))
    peak = roofline.measure_peak(shapes[:2], repeats=1, seconds=0.001)
    assert peak["flops"] == max(f for kernels in peak["per_shape"].values() for f in kernels.values())
    assert peak["per_shape"][peak["shape"]][peak["kernel"]] == peak["flops"]
    row = roofline.roofline(
        8e9, {"bertlib": 1.0, "transformers": 2.0}, [{"flops": 10e9, "shape": "a"}, {"flops": 16e9, "shape": "b"}]
    )
    assert row["peak_flops"] == 16e9 and row["peak_shape"] == "b" and row["peak_flops_measured"] == [10e9, 16e9]
    assert row["fraction_of_peak"] == {"bertlib": 0.5, "transformers": 0.25}


def test_report_shows_each_cpu_rows_fraction_of_the_peak(tmp_path):
    report = load_script("report")
    data = sample("cpu")
    data["results"][0]["roofline"] = {
        "fraction_of_peak": {"bertlib": 0.612, "transformers": 0.188},
        "peak_flops": 95e9,
        "peak_shape": "4096 x 256 x 1024",
    }
    (tmp_path / "train_step-cpu.json").write_text(json.dumps(data))
    text = report.render(tmp_path, published=False)
    assert "| **3.25x** | 700 | 1,201 | 61% | 19% |" in text and "95 GFLOP/s (torch.mm, 4096 x 256 x 1024)" in text
    assert "How it was made (mode, commit, load) was not recorded." in text  # a result from before provenance
    assert "The oneDNN lever" not in text  # a result made before the lever was timed has no before-and-after table


def test_report_sets_the_onednn_levers_before_beside_its_after(tmp_path):
    report = load_script("report")
    data = sample("cpu")
    row = data["results"][0]
    row["bertlib_without_onednn"] = {"tokens_per_second": 1500.0}
    row["onednn_speedup"] = row["bertlib"]["tokens_per_second"] / 1500.0
    fractions = {"bertlib": 0.61, "transformers": 0.19, "bertlib_without_onednn": 0.33}
    row["roofline"] = {"fraction_of_peak": fractions, "peak_flops": 95e9, "peak_shape": "4096 x 256 x 1024"}
    (tmp_path / "train_step-cpu.json").write_text(json.dumps(data))
    text = report.render(tmp_path, published=False)
    speed = f"{row['bertlib']['tokens_per_second']:,.0f} | **{row['onednn_speedup']:.2f}x** | 33% | 61% |"
    assert f"| mini, vocab 30,522 | 1,500 | {speed}" in text


def test_the_levers_before_is_timed_only_where_bertlib_uses_onednn(monkeypatch):
    bench_utils = load_script("bench_utils")
    model, cpu = torch.nn.Linear(2, 2), torch.device("cpu")
    assert list(bench_utils.without_onednn(model, [], cpu, bf16=False)) == [bench_utils.WITHOUT_ONEDNN]
    assert bench_utils.without_onednn(model, [], cpu, bf16=True) == {}
    monkeypatch.setenv("BERTLIB_ONEDNN", "0")
    assert bench_utils.without_onednn(model, [], cpu, bf16=False) == {}


# -------------------------------------------------------------------------------------------------- prediction
def test_prediction_benchmark_writes_its_results_and_the_report_its_table(tmp_path, task_data):
    """`bertlib.predict` against the pipelines at the smallest size, in a process of its own: every prediction the
    same as the pipeline's, and the table with the speed-up, the agreement and each side's fraction of the peak."""
    output = tmp_path / "prediction-cpu.json"
    env = {**os.environ, "BERTLIB_DATA_DIR": str(task_data), "PYTHONPATH": str(ROOT)}
    small = ["--sentences", "40", "--repeats", "1", "--warmup", "0", "--one-sentences", "2", "--threads", "1"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "prediction.py"), *small, "--output", str(output)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(output.read_text())
    assert [row["task"] for row in data["datasets"]] == ["sst2", "conll2003"] and data["provenance"]["mode"] == "trial"
    for row in data["datasets"]:
        agree = row["agreement"]
        assert row["examples"] == 40 and agree["identical"] == agree["fitting"] == 40 - agree["longer"]
        assert row["speedup"] == pytest.approx(row["seconds"]["transformers"] / row["seconds"]["bertlib"])
    assert data["datasets"][0]["agreement"]["largest_difference"] < 1e-5
    text = load_script("report").render(tmp_path, published=False)
    sst2 = data["datasets"][0]
    assert f"| SST-2 validation | text-classification | 40 | {sst2['examples_per_second']['bertlib']:,.0f} |" in text
    assert f"**{sst2['speedup']:.2f}x** | 2x: " in text and "| 40 of 40 (probabilities within" in text


def test_trial_prediction_settings_never_replace_the_published_results():
    "Part of a data set, fewer repeats or no warm-up is a trial, which `write_results` keeps out of results/."
    bench = load_script("prediction")
    for trial in (["--sentences", "10"], ["--repeats", "2"], ["--warmup", "0"], ["--one-sentences", "8"]):
        assert bench.parse_args(trial).provenance["mode"] == "trial", trial
    assert bench.parse_args([]).provenance["mode"] == "full"
