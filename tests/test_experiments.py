"""The studies in experiments/: each script runs end to end in its smallest mode (`--smoke`) into a temporary folder and
writes its results and report there, never its page's block (a trial's results are not published); the recipe study's
probes are the library's attention analyses (`bertlib.viz.attention`), equal to the definitions they replaced; the
GPU plan's packing and notebook runner work (the plan itself: tests/test_gpu_plan.py).

The studies are scripts, run here as they are run by hand (`python experiments/NAME.py`); the one unit test imports
`recipe_study` the way the scripts import each other, with experiments/ on the path."""

import importlib
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from safetensors.torch import load_file

from bertlib.data.tokenizer import CLS_ID, SEP_ID
from bertlib.evaluation.scores import evaluation_loader
from bertlib.model.bert import BertForPreTraining
from bertlib.model.config import BertConfig

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"

pytestmark = pytest.mark.slow


def study(script: str, *args: str | Path) -> str:
    "Run `experiments/<script>` with `args` as a user would, fail with its output if it fails, return its output."
    done = subprocess.run(
        [sys.executable, str(EXPERIMENTS / script), *map(str, args)], cwd=ROOT, text=True, capture_output=True
    )
    assert done.returncode == 0, f"{script} {args} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture
def pages(tmp_path) -> Path:
    "A copy of the site's pages, for the studies to rewrite their blocks in."
    copy = tmp_path / "docs"
    copy.mkdir()
    for page in (ROOT / "docs").glob("*.md"):  # the pages only: a study's folder under it is not one
        (copy / page.name).write_text(page.read_text())
    return copy


def block(page: Path, name: str) -> str:
    "The generated block `name` of `page`."
    return page.read_text().split(f"<!-- {name}:start -->")[1].split(f"<!-- {name}:end -->")[0]


def unchanged(pages: Path) -> bool:
    "Whether every copied page still reads as the site's own: a trial's results never reach a page."
    return all(page.read_text() == (ROOT / "docs" / page.name).read_text() for page in pages.glob("*.md"))


def test_recipe_study_runs_checks_times_and_reports(tmp_path, pages):
    out = tmp_path / "recipe"
    study("recipe_study.py", "run", "default", "combo-b8", "--smoke", "--out", out)
    result = json.loads((out / "results" / "default@third.json").read_text())
    assert result["steps"] == 4 and result["log"][-1]["step"] == 4
    assert result["provenance"]["mode"] == "trial"
    assert [e["step"] for e in result["evaluations"]] == [0, 1, 2, 3, 4, 4]  # the subset at every step, then all
    assert 0 < result["evaluations"][1]["attention_entropy_bits_per_layer"][0] < math.log2(128)
    assert "repeats all 2 results" in study("recipe_study.py", "check", "--out", out)
    study("recipe_study.py", "speed", "default", "--smoke", "--out", out)
    study("recipe_report.py", "--out", out, "--page", pages / "cpu-recipes.md")
    for name in ("README.md", "curves.png", "plateau.png", "speed.json"):
        assert (out / name).stat().st_size > 0
    assert (
        "| `combo-b8` |" in (out / "README.md").read_text() and "**Not published**" in (out / "README.md").read_text()
    )
    assert unchanged(pages)


def test_recipe_study_refuses_a_smoke_run_into_its_own_folder():
    done = subprocess.run(
        [sys.executable, str(EXPERIMENTS / "recipe_study.py"), "run", "default", "--smoke"],
        cwd=ROOT,
        text=True,
        capture_output=True,
    )
    assert done.returncode == 2 and "--smoke writes a trial result" in done.stderr


def test_finetune_study(tmp_path, pages, task_data):
    "An earlier slice and a full-data plan at their smallest; the report says which plans it still lacks."
    out = tmp_path / "finetune"
    study(
        "finetune_study.py",
        "run",
        "sst2-lr3e-5",
        "rte-full",
        "--smoke",
        "--out",
        out,
        "--page",
        pages / "finetuning.md",
    )
    names = {p.name for p in (out / "results").iterdir()}
    # each start's seed 0 at both learning rates, then the other pre-trained seeds at the rate chosen
    assert {f"rte-full-lr{lr:g}-{init}-s0.json" for lr in (1e-4, 3e-4) for init in ("pretrained", "random")} <= names
    assert len([n for n in names if re.fullmatch(r"rte-full-lr0\.000[13]-pretrained-s[12]\.json", n)]) == 2
    assert {"sst2-lr3e-5-pretrained-s0.json", "sst2-lr3e-5-random-s0.json"} <= names and len(names) == 8
    study_readme = (out / "README.md").read_text()
    finetune = study_readme.split("## Learning rates tried")[0]
    assert "| RTE accuracy (`rte-full`) |" in finetune and "(`sst2-lr3e-5`)" not in finetune
    assert "`sst2-full`: no results yet" in finetune and "`squad-full`: no results yet" in finetune
    assert "**Not published**" in finetune and unchanged(pages)
    assert "## Learning rates tried" in study_readme and "| SST-2 accuracy (`sst2-lr3e-5`) |" in study_readme
    assert (out / "curves.png").stat().st_size > 0


def test_distil_study(tmp_path, pages, task_data):
    out = tmp_path / "distil"
    study("distil_study.py", "run", "--report", "--smoke", "--out", out, "--page", pages / "distillation.md")
    assert (out / "results" / "student.json").exists()
    assert "| student | 2 |" in (out / "README.md").read_text() and unchanged(pages)


def test_variants_study(tmp_path, pages, task_data):
    out = tmp_path / "variants"
    page = pages / "variants.md"
    study("variants_study.py", "run", "bert", "--smoke", "--out", out, "--page", page)
    study("variants_study.py", "rte", "bert", "--report", "--smoke", "--out", out, "--page", page)
    result = json.loads((out / "results" / "bert.json").read_text())
    assert set(result["scores"]) == {"64", "128"} and "rte" in result
    report = (out / "README.md").read_text()
    assert (out / "curves.png").exists() and "| `bert` |" in report
    assert "Not run yet, so not in the table: `rope`, `pre-ln`," in report and unchanged(pages)


def test_course_model_card(tmp_path, pages):
    out = tmp_path / "card"
    study("course_model.py", "--smoke", "--out", out, "--page", pages / "course-model.md")
    study("course_model.py", "--card", "--out", out, "--page", pages / "course-model.md")
    (kept,) = (ROOT / "models" / "course-mini" / "checkpoints").iterdir()
    assert (out / "evaluation.json").exists() and f"`{kept.name}`" in (out / "README.md").read_text()
    assert "| validation |" in (out / "README.md").read_text() and unchanged(pages)


def test_gpu_report(tmp_path, pages):
    out = pages / "results" / "gpu"  # where the page finds the report, as in docs/
    study("gpu_report.py", "--out", out, "--page", pages / "gpu-runs.md")
    assert block(pages / "gpu-runs.md", "gpu-pretraining") == block(ROOT / "docs" / "gpu-runs.md", "gpu-pretraining")
    assert (out / "README.md").read_text() == (ROOT / "docs" / "results" / "gpu" / "README.md").read_text()


def test_pack_run_keeps_the_best_checkpoint_in_float16(tmp_path):
    source = ROOT / "models" / "course-mini"
    study("gpu/pack_run.py", source, tmp_path / "packed")
    (checkpoint,) = (source / "checkpoints").iterdir()
    packed = load_file(tmp_path / "packed" / "checkpoints" / checkpoint.name / "model.safetensors")
    original = load_file(checkpoint / "model.safetensors")
    assert packed.keys() == original.keys()
    for name, tensor in packed.items():
        expected = original[name].half() if original[name].is_floating_point() else original[name]
        assert tensor.dtype == expected.dtype and torch.equal(tensor, expected), name


def test_pack_run_keeps_the_newest_checkpoint_when_told(tmp_path):
    "A run whose best validation came before its last checkpoint: the best by default, the newest with --newest."
    run = tmp_path / "run"
    source = ROOT / "models" / "course-mini"
    (checkpoint,) = (source / "checkpoints").iterdir()
    run.mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy2(source / name, run / name)
    for step in (1, 2):
        shutil.copytree(checkpoint, run / "checkpoints" / f"step-{step:07d}")
    validations = [{"step": step, "split": "validation", "mlm_loss": loss} for step, loss in ((1, 3.0), (2, 3.5))]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in validations))
    expected = [((), "step-0000001", "lowest validation MLM loss"), (("--newest",), "step-0000002", "newest")]
    for flags, kept, rule in expected:
        out = tmp_path / f"packed{len(flags)}"
        study("gpu/pack_run.py", run, out, *flags)
        assert [c.name for c in (out / "checkpoints").iterdir()] == [kept]
        assert json.loads((out / "best.json").read_text())["rule"] == rule


def test_run_notebook_executes_in_place(tmp_path):
    path = tmp_path / "two.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")]), path)
    study("gpu/run_notebook.py", path, "--timeout", "60")
    assert nbformat.read(path, as_version=4).cells[0].outputs[0]["text"] == "42\n"


@pytest.fixture
def recipe_study(monkeypatch):
    "The recipe study's module, imported as the studies import each other: from experiments/ on the path."
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    return importlib.import_module("recipe_study")


def test_probes_are_the_definitions_they_replaced_in_bits(recipe_study, fast_tokenizer):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=fast_tokenizer.get_vocab_size())).eval()
    pairs = evaluation_loader("validation", fast_tokenizer, max_seq_len=64)
    by_length = sorted(range(len(pairs.dataset)), key=pairs.dataset.lengths().__getitem__)
    batch = pairs.collate_fn([pairs.dataset[i] for i in by_length[:3] + by_length[-3:]])
    assert not batch["attention_mask"].all()  # padding, which the maps must leave out
    unigram = torch.randn(fast_tokenizer.get_vocab_size()).log_softmax(-1)
    probes = recipe_study.plateau_probes(model, [batch], fast_tokenizer, unigram)
    # the study's former probes, on the padded batch at once: [layers, batch, heads, seq, seq]
    with torch.no_grad():
        att = torch.stack(
            model.bert(
                batch["input_ids"],
                token_type_ids=batch["token_type_ids"],
                attention_mask=batch["attention_mask"],
                output_attentions=True,
            ).attentions
        )
    q = batch["attention_mask"].float()
    pair = q[:, 1:] * q[:, :-1]
    special = (batch["input_ids"] == CLS_ID) | (batch["input_ids"] == SEP_ID)
    nats = (-(att * att.clamp(min=1e-12).log()).sum(-1) * q[:, None]).sum((1, 3)) / q.sum()
    prev = (att.diagonal(offset=-1, dim1=-2, dim2=-1) * pair[:, None]).sum((1, 3)) / pair.sum()
    to_special = ((att * special[:, None, None, :]).sum(-1) * q[:, None]).sum((1, 3)) / q.sum()
    torch.testing.assert_close(torch.tensor(probes["attention_entropy_bits_per_layer"]), nats.mean(-1) / math.log(2))
    assert probes["max_head_prev_token_attention"] == pytest.approx(float(prev.max()), rel=1e-5)
    torch.testing.assert_close(torch.tensor(probes["mean_attention_to_cls_sep_per_layer"]), to_special.mean(-1))
    assert recipe_study.word_ids(["[CLS]", "the", "play", "##ing", "[MASK]", "[SEP]"]) == [None, 0, 1, 1, None, None]


def test_the_overnight_reader_joins_probes_to_a_run_and_publishes_only_a_finished_full_run(tmp_path):
    """experiments/cpu_overnight.py on a run trained here: each validation gets notebook 07's probes from the
    checkpoint of its step; a run shorter than the overnight budget is a trial, refused where published results live."""
    run = tmp_path / "run"
    subprocess.run(
        [sys.executable, "-m", "bertlib", "pretrain", "--preset", "tiny", "--max-steps", "4", "--batch-size", "4",
         "--eval-every", "2", "--save-every", "2", "--eval-batches", "1", "--keep-checkpoints", "10",
         "--output-dir", str(run)],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    out = tmp_path / "results" / "cpu-overnight"
    study("cpu_overnight.py", "read", run, "--out", out)
    valid = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"split"' in line]
    assert [r["step"] for r in valid] == [2, 4] and all(len(r["attention_entropy"]) == 2 for r in valid)
    made = json.loads((out / "run.json").read_text())
    assert made["provenance"]["mode"] == "trial" and made["finished"] and made["command"].startswith("python -m")
    refused = subprocess.run(
        [sys.executable, str(EXPERIMENTS / "cpu_overnight.py"), "read", str(run), "--out",
         str(ROOT / "docs" / "results" / "cpu-overnight-trial")],
        cwd=ROOT, text=True, capture_output=True,
    )  # fmt: skip
    assert refused.returncode == 2 and "less than 8 hours" in refused.stderr
    assert not (ROOT / "docs" / "results" / "cpu-overnight-trial").exists()


def test_the_overnight_projection_reads_a_power_law_back_and_refuses_a_curve_that_does_not_fall(monkeypatch):
    """cpu_overnight.projection: on validations whose perplexity falls as a power of the tokens it finds the exponent
    and the hours to 100 worked by hand; a flat curve, or too few validations in the later half, project nothing."""
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    overnight = importlib.import_module("cpu_overnight")
    speed = 2_000.0  # tokens per training second
    tokens = [t * 1e6 for t in range(10, 91, 10)]  # perplexity 316 down to 105
    valid = [
        {"step": round(t / 1e4), "tokens": t, "train_seconds": t / speed, "mlm_perplexity": 1_000 * (t / 1e6) ** -0.5}
        | {"nsp_accuracy": 0.8}
        for t in tokens
    ]
    ahead = overnight.projection(valid)
    assert ahead["validations"] == 5  # 50M to 90M tokens: from half the training hours on
    assert math.isclose(ahead["exponent"], 0.5) and math.isclose(ahead["tokens"], 100e6)  # 1000 * 100**-0.5 = 100
    assert math.isclose(ahead["hours"], 100e6 / speed / 3600)
    assert "about 14 hours of training" in overnight.verdict(valid)
    flat = [{**r, "mlm_perplexity": 400.0} for r in valid]
    assert overnight.projection(flat) is None and "did not fall" in overnight.verdict(flat)
    assert overnight.projection(valid[-2:]) is None
    assert overnight.verdict([{**valid[-1], "mlm_perplexity": 90.0}]).startswith("met at")


def test_a_resumed_fine_tuning_run_counts_the_training_time_before_its_stop(tmp_path, monkeypatch):
    """finetune_study.trained_seconds: the training time a stopped run recorded up to its newest complete checkpoint
    (where its resumption continues), not past it, and not from records without a time (events); a resumed run's
    minutes add it, where they once held the last process's wall time alone."""
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    study_module = importlib.import_module("finetune_study")
    run = tmp_path / "run"
    for step, complete in ((4, True), (6, False)):  # step 6's checkpoint was cut off by the stop
        folder = run / "checkpoints" / f"step-{step:07d}"
        folder.mkdir(parents=True)
        for name in ("model.safetensors", "checksums.json") if complete else ("model.safetensors",):
            (folder / name).write_bytes(b"")
    records = [{"step": s, "loss": 1.0, "train_seconds": 10.0 * s} for s in (2, 4, 6)]
    records.insert(1, {"step": 3, "event": "a line without a time"})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert study_module.trained_seconds(run) == 40.0
