"""Tests of the training loop (bertlib.train.loop), the pre-training recipe (bertlib.recipes.objectives,
bertlib.recipes.pretrain) and run folders (bertlib.train.runs, bertlib.train.checkpoints): learning, schedules,
resuming, atomic checkpoints and DDP equality."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup

import bertlib.train.checkpoints as checkpoints_module
from bertlib.data.batching import make_loader
from bertlib.data.corpus import encode_corpus
from bertlib.data.pretraining import PretrainingDataset, pretraining_dataloader
from bertlib.data.tokenizer import train_tokenizer
from bertlib.data.wikitext import load_wikitext2, split_documents
from bertlib.evaluation.scores import validation_metrics
from bertlib.model.bert import BertForPreTraining
from bertlib.model.config import BertConfig
from bertlib.recipes.objectives import MaskedLMAndNSP, train
from bertlib.train.checkpoints import checkpoints, load_checkpoint, save_checkpoint
from bertlib.train.loop import fit
from bertlib.train.runs import RunError, read_metrics
from bertlib.train.settings import TrainConfig
from bertlib.train.step import configure_optimizer, lr_factor, lr_schedule, step_loss, training_step

SEQ = 64


@pytest.fixture(scope="module")
def small():
    "A tokenizer of 600 pieces and a corpus of 12 validation articles (about 800 pairs of 64 tokens)."
    documents = split_documents(load_wikitext2("validation"))[:12]
    tokenizer = train_tokenizer([s for d in documents for s in d], vocab_size=600)
    return tokenizer, encode_corpus(documents, tokenizer, use_cache=False)


def tiny_model(tokenizer, dropout: float = 0.1, seed: int = 0) -> BertForPreTraining:
    torch.manual_seed(seed)
    return BertForPreTraining(
        BertConfig.from_preset(
            "tiny",
            vocab_size=tokenizer.get_vocab_size(),
            max_position_embeddings=SEQ,
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout,
        )
    )


@pytest.mark.slow
def test_tiny_model_overfits_a_tiny_corpus(small):
    "MLM loss below 1.0 and NSP accuracy above 0.9 on 48 fixed pairs within 250 steps."
    tokenizer, corpus = small
    documents = [[s[:12] for s in doc[:6]] for doc in corpus.documents()[:8]]
    dataset = PretrainingDataset(documents, tokenizer, 32, seed=0, static=True)
    dataset.examples = dataset.examples[:48]
    model = tiny_model(tokenizer, dropout=0.0)
    cfg = TrainConfig(max_steps=250, batch_size=48, lr=3e-3, warmup_ratio=0.05, log_every=5, device="cpu")
    records = train(model, dataset, cfg, show_progress=False)
    scores = validation_metrics(model, pretraining_dataloader(dataset, 48, shuffle=False))
    assert records[0]["mlm_loss"] > 5.0  # ln(600) = 6.4 at the start
    assert scores["mlm_loss"] < 1.0 and scores["mlm_accuracy"] > 0.8, scores
    assert scores["nsp_accuracy"] > 0.9, scores


def test_the_notebooks_training_step_and_the_librarys_loop_give_the_same_weights(small):
    "Notebook 07's `training_step`, run by hand over fit's batches, ends on fit's weights, bit for bit."
    tokenizer, corpus = small
    dataset = PretrainingDataset(corpus, tokenizer, SEQ, seed=0)
    objective = MaskedLMAndNSP()
    cfg = TrainConfig(max_steps=5, batch_size=16, lr=2e-3, warmup_ratio=0.2, device="cpu", seed=4)
    by_fit, by_hand = tiny_model(tokenizer, dropout=0.0), tiny_model(tokenizer, dropout=0.0)
    fit(by_fit, dataset, objective, cfg, show_progress=False)
    optimizer = configure_optimizer(by_hand, cfg.lr, cfg.weight_decay)
    scheduler = lr_schedule(optimizer, round(cfg.warmup_ratio * cfg.max_steps), cfg.max_steps)
    batches = iter(make_loader(dataset, 16, objective.collate, dataset.lengths, seed=cfg.seed))
    flush = torch.set_flush_denormal(True)  # as fit does on a CPU
    try:
        for _ in range(cfg.max_steps):
            training_step(by_hand, next(batches), optimizer, scheduler)
    finally:
        torch.set_flush_denormal(not flush)
    hand, fitted = by_hand.state_dict(), by_fit.state_dict()
    assert not all(torch.equal(fitted[k], tiny_model(tokenizer).state_dict()[k]) for k in fitted)  # it trained
    assert all(torch.equal(fitted[k], hand[k]) for k in fitted)


def test_step_loss_makes_accumulation_give_the_big_batchs_gradient(small):
    """Notebook 07's `step_loss`: two micro-batches of 8 weighted by their share of the step's masked tokens and
    sequences give the gradient of the batch of 16 they came from (and the mean of their means does not)."""
    tokenizer, corpus = small
    dataset = PretrainingDataset(corpus, tokenizer, SEQ, seed=0)
    model = tiny_model(tokenizer, dropout=0.0)
    big = next(iter(pretraining_dataloader(dataset, 16, seed=1)))
    halves = [{k: v[i : i + 8] for k, v in big.items()} for i in (0, 8)]

    def counts(batch):
        return int((batch["labels"] != -100).sum()), len(batch["input_ids"])

    def gradients(batches, weighted):
        model.zero_grad()
        totals = [sum(part) for part in zip(*map(counts, batches), strict=True)]
        for b in batches:
            losses = MaskedLMAndNSP().losses(model, b)
            (step_loss(losses, counts(b), totals) if weighted else sum(losses) / len(batches)).backward()
        return [p.grad.clone() for p in model.parameters()]

    whole = gradients([big], True)
    assert counts(halves[0])[0] != counts(halves[1])[0]  # the halves hold different numbers of masked tokens
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(whole, gradients(halves, True), strict=True))
    assert not all(torch.allclose(a, b, atol=1e-6) for a, b in zip(whole, gradients(halves, False), strict=True))


def test_lr_factor_equals_transformers_schedules():
    for name, make in (("linear", get_linear_schedule_with_warmup), ("cosine", get_cosine_schedule_with_warmup)):
        for warmup, total in ((0, 20), (5, 20), (19, 20)):
            opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
            schedule = make(opt, warmup, total)
            for step in range(total):
                assert opt.param_groups[0]["lr"] == pytest.approx(lr_factor(step, warmup, total, name), abs=1e-12)
                opt.step()
                schedule.step()


def test_weight_decay_skips_vectors():
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=100))
    decayed, plain = configure_optimizer(model, 1e-3, 0.01).param_groups
    assert decayed["weight_decay"] == 0.01 and plain["weight_decay"] == 0.0
    assert all(p.ndim == 2 for p in decayed["params"]) and all(p.ndim == 1 for p in plain["params"])
    assert len(decayed["params"]) + len(plain["params"]) == len(list(model.parameters()))


@pytest.mark.parametrize(
    "bad",
    [
        dict(max_steps=0),
        dict(max_steps=None),
        dict(max_steps=5, epochs=1.0),
        dict(max_steps=5, batch_size=6, grad_accum=4),
        dict(max_steps=5, lr=-1.0),
        dict(max_steps=5, schedule="step"),
        dict(max_steps=5, warmup_ratio=1.0),
    ],
)
def test_train_config_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="TrainConfig"):
        TrainConfig(**bad)


class Crash(Exception):
    pass


def crash_at(step: int):
    def callback(entry: dict) -> None:
        if entry["step"] == step and "loss" in entry:
            raise Crash

    return callback


def test_resume_retraces_an_uninterrupted_run(small, tmp_path):
    tokenizer, corpus = small
    cfg = TrainConfig(max_steps=16, batch_size=16, max_seq_len=SEQ, lr=2e-3, log_every=1, save_every=5, device="cpu")

    def run(folder, **kwargs):
        model = tiny_model(tokenizer)
        train(
            model,
            PretrainingDataset(corpus, tokenizer, SEQ, seed=3),
            cfg,
            run_dir=folder,
            show_progress=False,
            **kwargs,
        )
        return model

    straight = run(tmp_path / "straight")
    with pytest.raises(Crash):
        run(tmp_path / "crashed", on_log=crash_at(12))
    assert [c.name for c in checkpoints(tmp_path / "crashed")] == ["step-0000005", "step-0000010"]
    resumed = run(tmp_path / "crashed", resume=True)
    losses = [[r["loss"] for r in read_metrics(tmp_path / name / "metrics.jsonl")] for name in ("straight", "crashed")]
    assert len(losses[0]) == 16 and losses[0] == losses[1]
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)


def test_resume_without_a_checkpoint_starts_from_step_0(small, tmp_path):
    "A run stopped before its first checkpoint resumes from the start: the same losses as a fresh run."
    tokenizer, corpus = small
    cfg = TrainConfig(max_steps=3, batch_size=8, max_seq_len=SEQ, log_every=1, device="cpu")
    fresh = train(tiny_model(tokenizer), PretrainingDataset(corpus, tokenizer, SEQ), cfg, show_progress=False)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 99.0}\n')  # written before the stop
    resumed = train(
        tiny_model(tokenizer),
        PretrainingDataset(corpus, tokenizer, SEQ),
        cfg,
        run_dir=tmp_path,
        resume=True,
        show_progress=False,
    )
    assert [r["loss"] for r in resumed] == [r["loss"] for r in fresh]
    assert [r["loss"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [r["loss"] for r in fresh]


def test_a_crash_while_writing_a_checkpoint_keeps_the_last_good_one(small, tmp_path, monkeypatch):
    tokenizer, _ = small
    model = tiny_model(tokenizer)
    save_checkpoint(tmp_path, model, {"step": 1}, 1)
    good = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    real_save = torch.save

    def dying_save(obj, path):  # writes half a file, then the process "dies"
        real_save(obj, path)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoints_module.torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, model, {"step": 2}, 2)
    monkeypatch.undo()
    assert [c.name for c in checkpoints(tmp_path)] == ["step-0000001"]
    restored = tiny_model(tokenizer, seed=1)
    assert load_checkpoint(checkpoints(tmp_path)[-1], restored) == {"step": 1}
    assert all(torch.equal(restored.state_dict()[k], v) for k, v in good.items())
    save_checkpoint(tmp_path, model, {"step": 2}, 2)  # the next save clears what the crash left
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-0000001", "step-0000002"]


def test_a_corrupt_checkpoint_is_a_clear_error(small, tmp_path):
    tokenizer, _ = small
    folder = save_checkpoint(tmp_path, tiny_model(tokenizer), {"step": 1}, 1)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(RunError, match="restore it from a backup, or move it out of"):
        load_checkpoint(folder, tiny_model(tokenizer))


def test_checkpoints_keep_only_the_newest(small, tmp_path):
    tokenizer, _ = small
    model = tiny_model(tokenizer)
    for step in range(1, 5):
        save_checkpoint(tmp_path, model, {"step": step}, step, keep=2)
    assert [c.name for c in checkpoints(tmp_path)] == ["step-0000003", "step-0000004"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STEPS_CFG = dict(max_steps=3, batch_size=8, max_seq_len=SEQ, lr=1e-3, warmup_ratio=0.0, device="cpu")


def _ddp_worker(rank: int, world: int, port: int, tokenizer_json: str, documents, out: str) -> None:
    from tokenizers import Tokenizer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        tokenizer = Tokenizer.from_str(tokenizer_json)
        model = tiny_model(tokenizer, dropout=0.0)
        train(
            model, PretrainingDataset(documents, tokenizer, SEQ, seed=1), TrainConfig(**STEPS_CFG), show_progress=False
        )
        if rank == 0:
            torch.save(model.state_dict(), out)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("mode", [pytest.param("ddp", marks=pytest.mark.slow), "accumulation"])
def test_two_processes_or_accumulation_equal_one_big_batch(small, tmp_path, mode):
    tokenizer, corpus = small
    documents = corpus.documents()
    reference = tiny_model(tokenizer, dropout=0.0)
    train(
        reference, PretrainingDataset(documents, tokenizer, SEQ, seed=1), TrainConfig(**STEPS_CFG), show_progress=False
    )
    if mode == "ddp":
        out = tmp_path / "rank0.pt"
        mp.spawn(_ddp_worker, args=(2, _free_port(), tokenizer.to_str(), documents, str(out)), nprocs=2)
        state = torch.load(out)
    else:
        model = tiny_model(tokenizer, dropout=0.0)
        train(
            model,
            PretrainingDataset(documents, tokenizer, SEQ, seed=1),
            TrainConfig(**STEPS_CFG, grad_accum=2),
            show_progress=False,
        )
        state = model.state_dict()
    initial = tiny_model(tokenizer, dropout=0.0).state_dict()
    moved = max((reference.state_dict()[k] - initial[k]).abs().max().item() for k in initial)
    worst = max((reference.state_dict()[k] - v).abs().max().item() for k, v in state.items())
    assert moved > 1e-3  # the parameters did change
    assert worst < 1e-5, worst


def test_a_step_without_masked_tokens_trains_on_nsp_alone(small):
    "The short last batch of an epoch can hold no masked token: its step must not divide by zero."
    tokenizer, corpus = small
    dataset = PretrainingDataset(corpus.documents()[:4], tokenizer, SEQ, seed=0, mlm_probability=1e-9)
    cfg = TrainConfig(max_steps=3, batch_size=8, log_every=1, device="cpu")
    records = train(tiny_model(tokenizer), dataset, cfg, show_progress=False)
    assert [r["mlm_loss"] for r in records] == [0.0, 0.0, 0.0]
    assert all(r["nsp_loss"] > 0 for r in records)
