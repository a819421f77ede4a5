"""The fine-tuning heads (bertlib.model.heads) against HF transformers' heads with the same weights, their conversion
both ways, the pipelines of an exported model, and loading an HF checkpoint's encoder."""

import pytest
import torch
import transformers
from bert_testing import make_batch, small_config, wordpiece_tokenizer

from bertlib.data.tokenizer import add_bert_post_processor
from bertlib.hf import folders as hf_folders
from bertlib.hf import interop
from bertlib.model.bert import IGNORE_INDEX, BertForPreTraining
from bertlib.model.heads import BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification

LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


def heads(config) -> list[torch.nn.Module]:
    torch.manual_seed(0)
    return [
        BertForSequenceClassification(config, ("negative", "positive")),
        BertForTokenClassification(config, LABELS),
        BertForQuestionAnswering(config),
    ]


def task_labels(model, batch) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    n, seq = batch["input_ids"].shape
    if isinstance(model, BertForSequenceClassification):
        return {"labels": torch.randint(0, 2, (n,), generator=g)}
    if isinstance(model, BertForTokenClassification):
        labels = torch.randint(0, len(LABELS), (n, seq), generator=g)
        return {"labels": labels.masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)}
    start = torch.randint(0, seq, (n,), generator=g)
    return {"start_positions": start, "end_positions": (start + 2).clamp(max=seq + 5)}  # some beyond the end


@pytest.mark.parametrize("index", [0, 1, 2], ids=["sequence", "token", "span"])
def test_logits_loss_and_gradients_equal_transformers(index):
    config = small_config()
    ours = heads(config)[index].eval()
    theirs = interop.to_transformers(ours).eval()
    batch = make_batch(config, 4, 20)
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    labels = task_labels(ours, batch)
    mine, hf = (
        ours(inputs["input_ids"], **{k: v for k, v in inputs.items() if k != "input_ids"}, **labels),
        theirs(**inputs, **labels),
    )
    for name in ("logits", "start_logits", "end_logits"):
        if getattr(mine, name) is not None:
            assert (getattr(mine, name) - getattr(hf, name)).abs().max() < 1e-5, name
    assert abs(mine.loss.item() - hf.loss.item()) < 1e-5
    mine.loss.backward()
    hf.loss.backward()
    hf_params = dict(theirs.named_parameters())
    for key, param in ours.named_parameters():
        assert (param.grad - hf_params[interop.hf_name(key)].grad).abs().max() < 1e-5, key


def test_round_trips_keep_weights_and_label_names():
    for ours in heads(small_config()):
        hf = interop.to_transformers(ours)
        if not isinstance(ours, BertForQuestionAnswering):
            assert [hf.config.id2label[i] for i in range(hf.config.num_labels)] == list(ours.label_names)
        back = interop.from_transformers(hf)
        assert type(back) is type(ours) and back.label_names == ours.label_names
        assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items())
    token, span = heads(small_config())[1:]
    assert token.bert.pooler is None and span.bert.pooler is None  # as HF: these heads read every token


def test_mean_pooling_averages_the_real_tokens_and_is_not_exported():
    config = small_config(hidden_dropout_prob=0.0)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config, ("a", "b", "c"), pooling="mean").eval()
    batch = make_batch(config, 3, 16)
    logits = model(
        batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"]
    ).logits
    hidden = model.bert(
        batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"]
    ).last_hidden_state
    for row in range(3):
        real = hidden[row, batch["attention_mask"][row] == 1].mean(0)
        assert (model.classifier(real) - logits[row]).abs().max() < 1e-5
    with pytest.raises(ValueError, match="pooling='mean' cannot be exported"):
        interop.to_transformers(model)
    with pytest.raises(ValueError, match="pooling='max' is not valid"):
        BertForSequenceClassification(config, pooling="max")


def test_load_encoder_reports_the_new_weights():
    config = small_config()
    torch.manual_seed(3)
    pretrained = BertForPreTraining(config)
    for model in heads(config):
        new = model.load_encoder(pretrained.state_dict())
        assert all(not k.startswith("bert.") or k.startswith("bert.pooler.") for k in new)
        assert any(k.startswith(("classifier.", "qa_outputs.")) for k in new)
        assert torch.equal(
            model.bert.embeddings.word_embeddings.weight, pretrained.bert.embeddings.word_embeddings.weight
        )
    with pytest.raises(ValueError, match="do not fit"):
        heads(small_config(hidden_size=32))[0].load_encoder(pretrained.state_dict())


def test_exported_classifiers_predict_the_same_through_transformers_pipelines(tmp_path):
    tokenizer = add_bert_post_processor(wordpiece_tokenizer())
    config = small_config(vocab_size=tokenizer.get_vocab_size())
    texts = ["the cat sat on the mat", "a big red dog ran quickly over the log"]
    sequence, token, _ = heads(config)
    for model, task in ((sequence, "text-classification"), (token, "token-classification")):
        model.eval()
        folder = hf_folders.save_pretrained_hf(model, tokenizer, tmp_path / task)
        pipe = transformers.pipeline(task, model=str(folder), tokenizer=str(folder))
        for text in texts:
            encoding = tokenizer.encode(text)
            with torch.no_grad():
                logits = model(torch.tensor([encoding.ids]), token_type_ids=torch.tensor([encoding.type_ids])).logits
            if task == "text-classification":
                assert pipe(text)[0]["label"] == model.label_names[int(logits.argmax())]
            else:  # every token (no aggregation) but [CLS] and [SEP], which the pipeline leaves out
                theirs = [r["entity"] for r in pipe(text, ignore_labels=[])]
                assert theirs == [model.label_names[i] for i in logits[0, 1:-1].argmax(-1).tolist()]


def test_an_hf_checkpoint_folder_loads_as_an_encoder(tmp_path):
    tokenizer = add_bert_post_processor(wordpiece_tokenizer())
    config = small_config(vocab_size=tokenizer.get_vocab_size())
    torch.manual_seed(5)
    hf = transformers.BertModel(interop.to_hf_config(config))
    hf.save_pretrained(tmp_path)
    hf_folders.to_hf_tokenizer(tokenizer, 64).save_pretrained(tmp_path)
    loaded_config, state, loaded_tokenizer = hf_folders.load_hf_encoder(tmp_path)
    assert loaded_config == config and loaded_tokenizer.get_vocab() == tokenizer.get_vocab()
    model = BertForSequenceClassification(loaded_config)
    assert model.load_encoder(state) == ["classifier.bias", "classifier.weight"]
    ids = torch.tensor([tokenizer.encode("the cat sat").ids])
    with torch.no_grad():
        assert (model.eval().bert(ids).last_hidden_state - hf.eval()(ids).last_hidden_state).abs().max() < 1e-5
