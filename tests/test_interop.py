import json

import pytest
import torch
import transformers
from bert_testing import make_batch, model_pair, small_config, wordpiece_tokenizer
from tokenizers import Tokenizer, models

from bertlib.hf import folders as hf_folders
from bertlib.hf import interop
from bertlib.model.bert import BertForPreTraining
from bertlib.model.config import BertConfig


def test_round_trips_are_exact():
    ours, _ = model_pair(small_config())
    back = interop.from_transformers(interop.to_transformers(ours))
    assert back.config == ours.config
    assert ours.state_dict().keys() == back.state_dict().keys()
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items())
    assert all(p.requires_grad for p in back.parameters())  # trainable after the conversion

    torch.manual_seed(1)
    hf = transformers.BertForPreTraining(interop.to_hf_config(small_config()))
    hf_back = interop.to_transformers(interop.from_transformers(hf))
    assert all(torch.equal(v, hf_back.state_dict()[k]) for k, v in hf.state_dict().items())
    assert hf_back.cls.predictions.decoder.weight is hf_back.bert.embeddings.word_embeddings.weight  # still tied


def test_name_mapping_covers_every_parameter_once():
    model = BertForPreTraining(small_config(num_hidden_layers=3))
    names = interop.hf_names(model)
    hf_keys = set(transformers.BertForPreTraining(interop.to_hf_config(model.config)).state_dict())
    assert len(set(names.values())) == len(names)  # one to one
    assert hf_keys - set(names.values()) == {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    assert set(names.values()) <= hf_keys


def test_conversion_keeps_mode_dtype_and_config():
    ours, _ = model_pair(small_config(hidden_act="relu", layer_norm_eps=1e-5))
    hf = interop.to_transformers(ours.train().to(torch.bfloat16))
    assert hf.training and next(hf.parameters()).dtype == torch.bfloat16
    assert hf.config.hidden_act == "relu" and hf.config.layer_norm_eps == 1e-5
    back = interop.from_transformers(hf.eval())
    assert not back.training and next(back.parameters()).dtype == torch.bfloat16
    assert interop.from_hf_config(interop.to_hf_config(ours.config)) == ours.config


def test_unsupported_options_raise_clear_errors():
    # HF's BERT classes hold no Pre-LN model (to_transformers picks bertlib's own class instead: test_remote_code)
    with pytest.raises(
        ValueError,
        match="norm_style='pre' cannot be exported as BertForPreTraining: HF transformers' "
        "BERT family supports only norm_style='post'",
    ):
        interop.to_hf_config(small_config(norm_style="pre"))
    hf_config = interop.to_hf_config(small_config())
    hf_config.is_decoder = True
    with pytest.raises(ValueError, match="is_decoder=True is not supported by bertlib"):
        interop.from_hf_config(hf_config)
    with pytest.raises(TypeError, match="expected a transformers.BertForPreTraining, got BertForMaskedLM"):
        interop.from_transformers(transformers.BertForMaskedLM(interop.to_hf_config(small_config())))
    untied = transformers.BertForPreTraining(interop.to_hf_config(small_config()))
    untied.cls.predictions.decoder.weight = torch.nn.Parameter(torch.randn(97, 48))
    with pytest.raises(ValueError, match="untied model cannot be converted"):
        interop.from_transformers(untied)


def test_hf_tokenizer_wrapper_adds_bert_template_and_leaves_the_original_alone():
    tokenizer = wordpiece_tokenizer()
    hf_tokenizer = hf_folders.to_hf_tokenizer(tokenizer, 64)
    ids = hf_tokenizer("the cat sat", "on the mat")["input_ids"]
    assert ids[0] == 2 and ids.count(3) == 2 and ids[-1] == 3
    assert (hf_tokenizer.mask_token_id, hf_tokenizer.pad_token_id, hf_tokenizer.model_max_length) == (4, 0, 64)
    assert tokenizer.post_processor is None
    no_mask = Tokenizer(models.WordPiece({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "cat": 4}, unk_token="[UNK]"))
    with pytest.raises(ValueError, match=r"lacks the special token\(s\) \[MASK\]; a BERT tokenizer needs"):
        hf_folders.to_hf_tokenizer(no_mask, 64)


@pytest.mark.slow
def test_saved_directory_loads_in_transformers_and_fill_mask_agrees(tmp_path):
    tokenizer = wordpiece_tokenizer()
    config = BertConfig.from_preset(
        "tiny", vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=64, initializer_range=0.5
    )  # large weights: well separated top-5
    torch.manual_seed(0)
    model = BertForPreTraining(config).eval()
    path = hf_folders.save_pretrained_hf(model, tokenizer, tmp_path / "export")
    assert json.loads((path / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    assert not list(tmp_path.glob(".export.*"))  # the temporary directory is gone

    transformers.logging.set_verbosity_error()
    mlm = transformers.AutoModelForMaskedLM.from_pretrained(path).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    fill_mask = transformers.pipeline("fill-mask", model=str(path))
    for text in ["the cat sat on the [MASK]", "a [MASK] dog ran quickly under the blue tree", "[MASK]"]:
        encoded = hf_tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            ours = model(encoded["input_ids"]).prediction_logits[0]
            theirs = mlm(**encoded).logits[0]
        assert (ours - theirs).abs().max() < 1e-4
        position = encoded["input_ids"][0].tolist().index(hf_tokenizer.mask_token_id)
        expected = ours[position].topk(5).indices.tolist()
        assert [p["token"] for p in fill_mask(text, top_k=5)] == expected


def test_save_rejects_a_tokenizer_that_does_not_fit(tmp_path):
    tokenizer = wordpiece_tokenizer()
    model = BertForPreTraining(small_config(vocab_size=tokenizer.get_vocab_size() - 1))
    with pytest.raises(ValueError, match="the tokenizer has .* tokens but the model only BertConfig.vocab_size"):
        hf_folders.save_pretrained_hf(model, tokenizer, tmp_path / "x")
    model = BertForPreTraining(small_config(vocab_size=tokenizer.get_vocab_size(), pad_token_id=1))
    with pytest.raises(ValueError, match=r"\[PAD\] id is 0 but BertConfig.pad_token_id=1"):
        hf_folders.save_pretrained_hf(model, tokenizer, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_save_overwrites_an_existing_export(tmp_path):
    tokenizer = wordpiece_tokenizer()
    config = small_config(vocab_size=tokenizer.get_vocab_size())
    first, _ = model_pair(config, seed=1)
    second, _ = model_pair(config, seed=2)
    hf_folders.save_pretrained_hf(first, tokenizer, tmp_path)
    hf_folders.save_pretrained_hf(second, tokenizer, tmp_path)
    transformers.logging.set_verbosity_error()
    loaded = interop.from_transformers(transformers.BertForPreTraining.from_pretrained(tmp_path))
    inputs = make_batch(config, 2, 8)
    assert torch.equal(loaded.eval()(**inputs).loss, second(**inputs).loss)
