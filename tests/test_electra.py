"""ELECTRA (issue 17): the replaced-token labels (a sample equal to the original counts as original, padding is
left out), no gradient through the sampling, one embedding tensor for generator and discriminator (kept through a
checkpoint), the export equal to HF `ElectraForPreTraining`, and a whole run from the command line."""

import json

import pytest
import torch
import transformers
from bert_testing import make_batch, small_config, spawn_group
from safetensors import safe_open
from tokenizers import Tokenizer

from bertlib.cli.main import main
from bertlib.data.packed import PackedDataset
from bertlib.evaluation.electra import rtd_metrics
from bertlib.hf import interop
from bertlib.model.bert import IGNORE_INDEX
from bertlib.model.electra import ElectraForPreTraining, generator_config, replace_tokens
from bertlib.model.heads import BertForSequenceClassification
from bertlib.recipes.objectives import train
from bertlib.train.checkpoints import load_weights, save_checkpoint
from bertlib.train.settings import PretrainConfig


def test_replaced_labels_count_a_sample_equal_to_the_original_as_original():
    ids = torch.tensor([[2, 4, 11, 12, 13, 3], [2, 4, 21, 3, 0, 0]])  # 4 = [MASK]; row 2 has two pads
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 1], labels[0, 3], labels[1, 1] = 10, 12, 20  # position (0, 3) was kept as itself by the masking
    mask = (ids != 0).long()
    sampled = torch.tensor([10, 99, 55])  # row-major: (0, 1) draws the original back, (0, 3) and (1, 1) do not
    corrupted, replaced = replace_tokens(ids, labels, sampled, mask)
    assert corrupted.tolist() == [[2, 10, 11, 99, 13, 3], [2, 55, 21, 3, 0, 0]]
    assert replaced.tolist() == [[0, 0, 0, 1, 0, 0], [0, 1, 0, 0, IGNORE_INDEX, IGNORE_INDEX]]


def test_the_generator_is_smaller_and_shares_one_embedding_tensor():
    config = small_config()
    gen = generator_config(config, 0.25)
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size) == (12, 1, 24)
    assert gen.num_hidden_layers == config.num_hidden_layers and gen.embedding_width == config.hidden_size
    with pytest.raises(ValueError, match="generator_size"):
        generator_config(config, 0.0)
    model = ElectraForPreTraining(config)
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings", "layer_norm"):
        ours, theirs = getattr(model.bert.embeddings, name), getattr(model.generator.bert.embeddings, name)
        assert ours.weight is theirs.weight
    assert model.generator.bert.embeddings.projection.weight.shape == (12, 48)  # the generator's own narrowing
    unique = {p.data_ptr() for p in model.parameters()}
    assert len(unique) == len(list(model.parameters()))  # parameters() lists a shared tensor once


def test_no_gradient_reaches_the_generator_through_sampling():
    torch.manual_seed(0)
    model = ElectraForPreTraining(small_config())
    batch = make_batch(model.config, 3, 12)
    out = model(batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    out.rtd_loss.backward()
    shared = {id(p) for p in model.bert.embeddings.parameters()}
    generator_own = [n for n, p in model.generator.named_parameters() if id(p) not in shared]
    assert generator_own and all(model.generator.get_parameter(n).grad is None for n in generator_own)
    assert model.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0  # the discriminator trains them
    model.zero_grad()
    out = model(batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    out.mlm_loss.backward()
    assert model.generator.mlm_head.dense.weight.grad.abs().sum() > 0
    assert model.rtd_head.dense.weight.grad is None


def test_the_discriminator_loss_leaves_out_padding():
    torch.manual_seed(1)
    model = ElectraForPreTraining(small_config()).eval()
    batch = make_batch(model.config, 3, 12)
    torch.manual_seed(2)
    out = model(batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    real = batch["attention_mask"] == 1
    assert (out.replaced[~real] == IGNORE_INDEX).all() and (out.replaced[real] >= 0).all()
    expected = torch.nn.functional.binary_cross_entropy_with_logits(out.logits[real], out.replaced[real].float())
    assert torch.allclose(out.rtd_loss, expected)


def test_a_checkpoint_keeps_the_sharing(tmp_path):
    torch.manual_seed(0)
    model = ElectraForPreTraining(small_config(embedding_size=16))
    folder = save_checkpoint(tmp_path, model, {"step": 1}, 1)
    with safe_open(folder / "model.safetensors", "pt") as f:
        assert "bert.embeddings.word_embeddings.weight" in f.keys()
        assert not any(k.startswith("generator.bert.embeddings.word") for k in f.keys())  # stored once
    torch.manual_seed(1)
    loaded = ElectraForPreTraining(small_config(embedding_size=16))
    load_weights(folder, loaded)
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())
    assert loaded.generator.bert.embeddings.word_embeddings.weight is loaded.bert.embeddings.word_embeddings.weight


@pytest.mark.parametrize("embedding_size", [None, 16], ids=["plain", "factorised"])
def test_the_export_equals_hf_electra_for_pretraining(embedding_size):
    torch.manual_seed(3)
    model = ElectraForPreTraining(small_config(embedding_size=embedding_size)).eval()
    batch = make_batch(model.config, 3, 12)
    hf_model = interop.to_transformers(model)
    assert type(hf_model) is transformers.ElectraForPreTraining
    discriminator = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("generator."))
    assert sum(p.numel() for p in hf_model.parameters()) == discriminator
    inputs = {k: batch[k] for k in ("token_type_ids", "attention_mask")}
    with torch.no_grad():
        ours, theirs = model(batch["input_ids"], **inputs).logits, hf_model(batch["input_ids"], **inputs).logits
    real = batch["attention_mask"].bool()
    assert torch.allclose(ours[real], theirs[real], atol=1e-5)
    for bad in (dict(position_embedding_type="rope"), dict(share_layers=True)):
        with pytest.raises(ValueError, match="ELECTRA"):
            interop.to_transformers(ElectraForPreTraining(small_config(**bad)))
    with pytest.raises(ValueError, match="norm_style"):
        interop.to_transformers(ElectraForPreTraining(small_config(norm_style="pre")))


def test_a_fine_tuning_head_loads_the_discriminator():
    model = ElectraForPreTraining(small_config())
    head = BertForSequenceClassification(small_config())
    new = head.load_encoder(model.state_dict())
    assert all(k.startswith(("classifier.", "bert.pooler.")) for k in new)
    key = "bert.encoder.layers.1.attention.query.weight"
    assert torch.equal(head.state_dict()[key], model.state_dict()[key])


def test_training_adds_the_weighted_detection_loss(fast_tokenizer):
    sentence = fast_tokenizer.encode(
        "the city was founded in the year of the great flood .", add_special_tokens=False
    ).ids
    data = PackedDataset([[sentence[d:], sentence] for d in range(8)], fast_tokenizer, max_seq_len=16)
    torch.manual_seed(0)
    model = ElectraForPreTraining(small_config(vocab_size=fast_tokenizer.get_vocab_size()))
    records = train(
        model,
        data,
        PretrainConfig(max_steps=2, batch_size=4, log_every=1, device="cpu", rtd_weight=10.0),
        show_progress=False,
    )
    assert all(r["loss"] == pytest.approx(r["mlm_loss"] + r["weighted_rtd_loss"]) for r in records)
    assert all(r["weighted_rtd_loss"] > 10 * 0.2 for r in records)  # 10 x a binary cross-entropy near log 2


def _train_electra(rank: int, tokenizer_json: str) -> None:
    tokenizer = Tokenizer.from_str(tokenizer_json)
    sentence = tokenizer.encode("the city was founded in the year of the great flood .", add_special_tokens=False).ids
    data = PackedDataset([[sentence[d:], sentence] for d in range(16)], tokenizer, max_seq_len=16)
    torch.manual_seed(0)
    model = ElectraForPreTraining(small_config(vocab_size=tokenizer.get_vocab_size()))
    train(model, data, PretrainConfig(max_steps=2, batch_size=8, device="cpu"), show_progress=False)


@pytest.mark.slow
def test_two_processes_train_it(fast_tokenizer):
    "DistributedDataParallel needs a gradient for every trainable parameter: the generator's NSP head is frozen."
    spawn_group(_train_electra, fast_tokenizer.to_str())


def test_scores_are_reproducible(fast_tokenizer):
    from bertlib.evaluation.scores import evaluation_loader

    loader = evaluation_loader("validation", fast_tokenizer, batch_size=4, max_seq_len=32)
    torch.manual_seed(0)
    model = ElectraForPreTraining(small_config(vocab_size=fast_tokenizer.get_vocab_size()))
    first, second = rtd_metrics(model, loader, max_batches=2), rtd_metrics(model, loader, max_batches=2)
    assert first == second and 0 < first["replaced_share"] < 1 and 0 <= first["rtd_accuracy"] <= 1


@pytest.mark.slow
def test_an_electra_run_through_the_command_line(tmp_path, tokenizer_file, task_data, capsys, monkeypatch):
    monkeypatch.setenv("BERTLIB_DATA_DIR", str(task_data))
    run = tmp_path / "electra"
    options = [
        "--preset",
        "tiny",
        "--objective",
        "electra",
        "--generator-size",
        "0.5",
        "--rtd-weight",
        "20",
        "--batch-size",
        "8",
        "--max-seq-len",
        "64",
        "--eval-batches",
        "2",
        "--eval-every",
        "2",
        "--save-every",
        "2",
        "--tokenizer",
        str(tokenizer_file),
        "--output-dir",
        str(run),
    ]
    assert main(["pretrain", *options, "--max-steps", "2"]) == 0
    assert "rtd_accuracy" in capsys.readouterr().out
    assert main(["pretrain", "--output-dir", str(run), "--resume", "--max-steps", "4"]) == 0
    saved = json.loads((run / "config.json").read_text())["training"]
    assert (saved["objective"], saved["generator_size"], saved["rtd_weight"]) == ("electra", 0.5, 20.0)
    capsys.readouterr()
    assert main(["evaluate", str(run), "--json"]) == 0
    scores = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert {"rtd_accuracy", "replaced_share", "mlm_perplexity"} <= set(scores)
    assert main(["evaluate", str(run), "--baseline"]) == 2
    assert main(["fill-mask", str(run), "the [MASK] of the city", "--json"]) == 0
    assert (
        main(
            [
                "finetune",
                "rte",
                "--from",
                str(run),
                "--output-dir",
                str(tmp_path / "rte"),
                "--max-steps",
                "1",
                "--train-examples",
                "8",
                "--eval-examples",
                "8",
                "--batch-size",
                "8",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert main(["export-hf", str(run), str(tmp_path / "hf")]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["ElectraForPreTraining"]
    assert (
        type(transformers.AutoModelForPreTraining.from_pretrained(tmp_path / "hf"))
        is transformers.ElectraForPreTraining
    )
