"""Rotary position embeddings (`BertConfig.position_embedding_type="rope"`): the rotation's two defining
properties, and whole models equal to HF RoFormer (masked LM, sparse MLM loss, token and span heads) through
the export in `bertlib.hf.interop`."""

import pytest
import torch
import transformers
from bert_testing import small_config, wordpiece_tokenizer

from bertlib.cli.main import build_parser
from bertlib.data.tokenizer import add_bert_post_processor
from bertlib.hf import folders as hf_folders
from bertlib.hf import interop
from bertlib.model.bert import IGNORE_INDEX, BertForPreTraining
from bertlib.model.config import BertConfig
from bertlib.model.heads import BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification
from bertlib.model.variants import rotate


def rope_config(**overrides) -> BertConfig:
    return small_config(position_embedding_type="rope", **overrides)


def test_position_zero_is_the_identity_and_lengths_are_kept():
    x = torch.randn(2, 3, 5, 8)
    assert torch.equal(rotate(x, torch.zeros(5, dtype=torch.long)), x)
    turned = rotate(x, torch.arange(5))
    assert torch.allclose(turned.norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # a rotation changes no length
    assert not torch.allclose(turned[:, :, 1:], x[:, :, 1:])


def test_scores_depend_only_on_the_offset():
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 16)
    positions = torch.tensor([0, 3, 4, 9, 20, 21])
    scores = rotate(q, positions) @ rotate(k, positions).transpose(-1, -2)
    for shift in (1, 17, 300):
        shifted = rotate(q, positions + shift) @ rotate(k, positions + shift).transpose(-1, -2)
        assert torch.allclose(scores, shifted, atol=1e-4)
    # per-sequence positions ([batch, seq]) rotate each sequence by its own positions
    batched = rotate(q.expand(2, -1, -1, -1), torch.stack([positions, positions + 5]))
    assert torch.allclose(batched[1], rotate(q, positions + 5)[0], atol=1e-6)


def test_a_rope_model_has_no_position_table():
    absolute, rope = (BertForPreTraining(small_config(position_embedding_type=kind)) for kind in ("absolute", "rope"))
    assert "bert.embeddings.position_embeddings.weight" not in rope.state_dict()
    n = sum(p.numel() for p in absolute.parameters()) - sum(p.numel() for p in rope.parameters())
    assert n == absolute.config.max_position_embeddings * absolute.config.hidden_size


def test_rope_pretraining_model_equals_hf_roformer():
    torch.manual_seed(0)
    model = BertForPreTraining(rope_config()).eval()
    hf_model = interop.to_transformers(model)
    assert type(hf_model) is transformers.RoFormerForMaskedLM
    ids = torch.randint(5, model.config.vocab_size, (3, 17))
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    segments = (torch.arange(17) > 8).long().expand(3, -1)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 2], labels[1, 5], labels[2, 16] = 7, 9, 11  # sparse MLM: only these positions ask queries
    with torch.no_grad():
        ours = model(ids, attention_mask=mask, token_type_ids=segments)
        theirs = hf_model(ids, attention_mask=mask, token_type_ids=segments)
        real = mask.bool()
        assert torch.allclose(ours.prediction_logits[real], theirs.logits[real], atol=1e-5)
        ours_loss = model(ids, attention_mask=mask, token_type_ids=segments, labels=labels).mlm_loss
        theirs_loss = hf_model(ids, attention_mask=mask, token_type_ids=segments, labels=labels).loss
    assert torch.allclose(ours_loss, theirs_loss, atol=1e-5)


def test_rope_token_and_span_heads_equal_hf_roformer_and_the_rest_get_bertlib_s_own_classes():
    torch.manual_seed(1)
    config = rope_config()
    ids = torch.randint(5, config.vocab_size, (2, 12))
    for model, name in (
        (BertForTokenClassification(config, ("O", "B-X", "I-X")), "logits"),
        (BertForQuestionAnswering(config), "start_logits"),
    ):
        hf_model = interop.to_transformers(model.eval())
        with torch.no_grad():
            assert torch.allclose(getattr(model(ids), name), getattr(hf_model(ids), name), atol=1e-5)
    # RoFormer's sequence classifier is not BERT's pooled [CLS], and its angles use the base 10000: those models
    # export as bertlib's own classes (test_remote_code), and RoFormer's config refuses the other base
    assert interop.hf_class(BertForSequenceClassification(config)) is interop.OWN_CLASSES[BertForSequenceClassification]
    own_mlm = interop.OWN_CLASSES[BertForPreTraining]
    assert interop.hf_class(BertForPreTraining(rope_config(rope_theta=500.0))) is own_mlm
    with pytest.raises(ValueError, match="rope_theta=500 cannot be exported as HF RoFormer"):
        interop.to_hf_config(rope_config(rope_theta=500.0), "RoFormerForMaskedLM")
    with pytest.raises(ValueError, match="must be even"):
        small_config(position_embedding_type="rope", hidden_size=12, num_attention_heads=4)


def test_a_saved_rope_model_loads_as_a_masked_lm(tmp_path):
    tokenizer = add_bert_post_processor(wordpiece_tokenizer())
    torch.manual_seed(2)
    model = BertForPreTraining(rope_config(vocab_size=tokenizer.get_vocab_size())).eval()
    hf_folders.save_pretrained_hf(model, tokenizer, tmp_path)
    hf_model = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(hf_model) is transformers.RoFormerForMaskedLM
    ids = torch.tensor([tokenizer.encode("the cat sat on the mat").ids])
    with torch.no_grad():
        assert torch.allclose(model(ids).prediction_logits, hf_model(ids).logits, atol=1e-5)


def test_the_command_line_offers_the_switch():
    args = build_parser().parse_args(["pretrain", "--position-embedding-type", "rope", "--rope-theta", "500"])
    assert (args.position_embedding_type, args.rope_theta) == ("rope", 500.0)
