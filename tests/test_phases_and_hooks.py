"""The training loop's seams (bertlib.train.loop): data phases (BERT's short-then-long length schedule), hooks that a
study plugs in instead of copying the loop, and the records' tokens and training seconds; and the recipe that
`python -m bertlib pretrain` chooses when told nothing."""

import pytest
import torch

import bertlib.recipes.pretrain
from bertlib.cli.main import main
from bertlib.data.batching import Phase, phase_ends
from bertlib.data.corpus import encode_corpus
from bertlib.data.pretraining import PretrainingDataset
from bertlib.data.tokenizer import train_tokenizer
from bertlib.data.wikitext import load_wikitext2, split_documents
from bertlib.model.bert import BertForPreTraining
from bertlib.model.config import BertConfig
from bertlib.recipes.objectives import train
from bertlib.train.checkpoints import checkpoints
from bertlib.train.runs import read_metrics
from bertlib.train.settings import PretrainConfig, TrainConfig

SHORT, LONG = 32, 64


@pytest.fixture(scope="module")
def small():
    documents = split_documents(load_wikitext2("validation"))[:12]
    tokenizer = train_tokenizer([s for d in documents for s in d], vocab_size=600)
    return tokenizer, encode_corpus(documents, tokenizer, use_cache=False)


def tiny_model(tokenizer) -> BertForPreTraining:
    torch.manual_seed(0)
    return BertForPreTraining(
        BertConfig.from_preset("tiny", vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=LONG)
    )


def phases(small) -> list[Phase]:
    tokenizer, corpus = small
    return [
        Phase(PretrainingDataset(corpus, tokenizer, SHORT, seed=1), 0.75),
        Phase(PretrainingDataset(corpus, tokenizer, LONG, seed=1), 0.25),
    ]


def test_phase_ends_split_the_steps_by_share():
    assert phase_ends([0.9, 0.1], 100) == [90, 100]
    assert phase_ends([1.0], 7) == [7]
    assert phase_ends([1, 1, 1], 10) == [3, 7, 10]


def test_the_last_phase_trains_on_the_long_sequences_and_resumes_across_the_boundary(small, tmp_path):
    tokenizer, _ = small
    cfg = TrainConfig(max_steps=8, batch_size=8, max_seq_len=SHORT, log_every=1, save_every=3, device="cpu")
    widths = []

    def width(loop):  # the hook sees every step's loop; the widest batch of the phase tells its length
        widths.append((loop.step, loop.phase))

    straight = train(
        tiny_model(tokenizer), phases(small), cfg, run_dir=tmp_path / "straight", hooks=[width], show_progress=False
    )
    assert [phase for _, phase in widths] == [0] * 6 + [1] * 2
    assert [c.name for c in checkpoints(tmp_path / "straight")] == ["step-0000006", "step-0000008"]
    # a run stopped at the boundary (its last checkpoint is step 6, the last short step) goes on with long ones
    stop_at_6 = train(
        tiny_model(tokenizer),
        phases(small),
        cfg,
        run_dir=tmp_path / "stopped",
        hooks=[lambda loop: loop.step == 6],
        show_progress=False,
    )
    assert stop_at_6[-1]["step"] == 6 and checkpoints(tmp_path / "stopped")[-1].name == "step-0000006"
    resumed = train(
        tiny_model(tokenizer), phases(small), cfg, run_dir=tmp_path / "stopped", resume=True, show_progress=False
    )
    assert [r["loss"] for r in read_metrics(tmp_path / "stopped" / "metrics.jsonl")] == [r["loss"] for r in straight]
    assert resumed[-1]["tokens"] == straight[-1]["tokens"]


def test_records_count_tokens_and_training_seconds(small):
    tokenizer, corpus = small
    dataset = PretrainingDataset(corpus, tokenizer, SHORT, seed=1)
    cfg = TrainConfig(max_steps=4, batch_size=4, max_seq_len=SHORT, log_every=2, device="cpu")
    records = train(tiny_model(tokenizer), dataset, cfg, show_progress=False)
    tokens = [r["tokens"] for r in records]
    assert 0 < tokens[0] < tokens[1] <= 4 * 4 * SHORT
    assert 0 < records[0]["train_seconds"] < records[1]["train_seconds"]


def test_pretraining_data_makes_the_long_phase_from_the_settings(fast_tokenizer):
    cfg = PretrainConfig(max_steps=10, max_seq_len=SHORT, long_seq_len=LONG, long_share=0.2)
    data, valid = bertlib.recipes.pretrain.pretraining_data(cfg, fast_tokenizer)
    assert [(p.dataset.max_seq_len, p.share) for p in data] == [(SHORT, 0.8), (LONG, 0.2)]
    assert valid.dataset.max_seq_len == SHORT  # validation stays at the training length, comparable across runs
    assert max(data[1].dataset.lengths()) > SHORT >= max(data[0].dataset.lengths())
    with pytest.raises(ValueError, match="long_seq_len=32 is not valid; it must be longer than max_seq_len=32"):
        PretrainConfig(max_seq_len=SHORT, long_seq_len=SHORT)
    with pytest.raises(ValueError, match="long_seq_len cannot go with a time budget"):
        PretrainConfig(time_budget=60, long_seq_len=512)
    with pytest.raises(ValueError, match="long_seq_len=64 is longer than the model's max_position_embeddings=32"):
        bertlib.recipes.pretrain.check_settings(BertConfig(max_position_embeddings=SHORT), cfg)


@pytest.fixture
def recipes_seen(monkeypatch):
    "The (model config, settings) each `pretrain` command hands to the recipe, which does not run."
    seen = []
    monkeypatch.setattr(
        bertlib.recipes.pretrain, "pretrain", lambda out, model_config, cfg, **_: seen.append((model_config, cfg)) or []
    )
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "a test GPU")
    return seen


def test_the_main_command_trains_the_course_recipe_on_a_gpu_and_the_cpu_run_otherwise(
    recipes_seen, monkeypatch, capsys, tmp_path
):
    for gpu in (False, True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda gpu=gpu: gpu)
        assert main(["pretrain", "--output-dir", str(tmp_path / "run")]) == 0
    (cpu_model, cpu), (gpu_model, gpu) = recipes_seen
    assert cpu_model == gpu_model == BertConfig.from_preset("mini")
    assert cpu == PretrainConfig() and cpu.max_steps == 4000
    assert (gpu.epochs, gpu.batch_size, gpu.max_seq_len, gpu.long_seq_len, gpu.mlm_probability) == (
        100,
        256,
        128,
        512,
        0.15,
    )
    out = capsys.readouterr().out
    assert "recipe: no GPU, so the CPU's: mini, 4,000 steps of 8 sequences of 128 tokens" in out
    assert "recipe: the course recipe, since there is a GPU (a test GPU)" in out


def test_any_option_chooses_your_own_recipe(recipes_seen, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert main(["pretrain", "--max-steps", "5", "--output-dir", str(tmp_path / "run")]) == 0
    assert recipes_seen[0][1] == PretrainConfig(max_steps=5) and "recipe:" not in capsys.readouterr().out


def test_a_target_perplexity_ends_the_run_at_the_first_validation_that_reaches_it(fast_tokenizer, tmp_path):
    model = BertConfig.from_preset("tiny", vocab_size=fast_tokenizer.get_vocab_size())
    cfg = PretrainConfig(
        max_steps=20,
        batch_size=4,
        max_seq_len=32,
        eval_every=3,
        eval_batches=1,
        log_every=1,
        device="cpu",
        target_perplexity=1e9,
    )  # any validation reaches it
    records = bertlib.recipes.pretrain.pretrain(
        tmp_path / "run", model, cfg, tokenizer=fast_tokenizer, show_progress=False
    )
    assert records[-1]["step"] == 3 and records[-1]["split"] == "validation"
    assert checkpoints(tmp_path / "run")[-1].name == "step-0000003"
    assert PretrainConfig(target_perplexity=25.0).target_perplexity == 25.0
    with pytest.raises(ValueError, match="target_perplexity=0 is not valid"):
        PretrainConfig(target_perplexity=0)


def test_no_validation_or_checkpoint_period_means_at_the_end_only(small, tmp_path):
    tokenizer, corpus = small
    cfg = TrainConfig(
        max_steps=3, batch_size=4, max_seq_len=SHORT, log_every=1, eval_every=None, save_every=None, device="cpu"
    )
    records = train(
        tiny_model(tokenizer),
        PretrainingDataset(corpus, tokenizer, SHORT, seed=1),
        cfg,
        valid_loader=None,
        run_dir=tmp_path,
        show_progress=False,
    )
    assert [r["step"] for r in records] == [1, 2, 3]
    assert [c.name for c in checkpoints(tmp_path)] == ["step-0000003"]
