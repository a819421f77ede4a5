"""ALBERT's parameter savings (issue 16): factorised embeddings (`embedding_size` < `hidden_size`) and cross-layer
sharing (`share_layers`): the parameter counts they promise, one tensor really shared, and the export equal to HF
ALBERT (a whole run from the command line is in tests/test_variants.py)."""

import pytest
import torch
import transformers
from bert_testing import small_config

from bertlib.hf import interop
from bertlib.model.bert import BertForPreTraining
from bertlib.model.heads import BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_factorised_embeddings_and_shared_layers_save_what_they_promise():
    base = small_config()
    v, h, e, p, t = base.vocab_size, base.hidden_size, 16, base.max_position_embeddings, base.type_vocab_size
    plain = count(BertForPreTraining(base))
    factorised = count(BertForPreTraining(small_config(embedding_size=e)))
    # the three tables shrink from width h to e; a projection e -> h joins them to the encoder; the MLM head's
    # dense layer and LayerNorm shrink to width e
    tables = (v + p + t) * (h - e)
    head = h * (h - e) + (h - e) + 2 * (h - e)
    assert plain - factorised == tables + 2 * (h - e) - (e * h + h) + head
    shared = BertForPreTraining(small_config(share_layers=True))
    layer = count(shared.bert.encoder.layers[0])
    assert plain - count(shared) == (base.num_hidden_layers - 1) * layer


def test_sharing_uses_one_tensor_at_every_depth():
    torch.manual_seed(0)
    model = BertForPreTraining(small_config(share_layers=True, num_hidden_layers=3))
    layers = model.bert.encoder.layers
    assert len(layers) == 3 and len({id(layer) for layer in layers}) == 1  # one layer, run at every depth
    assert not any(".layers.1." in key for key in model.state_dict())
    ids = torch.randint(5, 97, (2, 9))
    out = model(ids, output_hidden_states=True, output_attentions=True)
    assert len(out.hidden_states) == 4 and len(out.attentions) == 3  # three applications of the one layer
    out.prediction_logits.sum().backward()
    weight = model.bert.encoder.layers[0].attention.query.weight
    assert weight.grad is not None and weight.grad.abs().sum() > 0


@pytest.mark.parametrize("share", [True, False], ids=["shared", "unshared"])
def test_albert_style_models_equal_hf_albert(share):
    torch.manual_seed(1)
    config = small_config(embedding_size=16, share_layers=share, num_hidden_layers=3)
    ids = torch.randint(5, config.vocab_size, (2, 11))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    model = BertForPreTraining(config).eval()
    hf_model = interop.to_transformers(model)
    assert type(hf_model) is transformers.AlbertForPreTraining and count(hf_model) == count(model)
    with torch.no_grad():
        ours, theirs = model(ids, attention_mask=mask), hf_model(ids, attention_mask=mask)
    real = mask.bool()
    assert torch.allclose(ours.prediction_logits[real], theirs.prediction_logits[real], atol=1e-5)
    assert torch.allclose(ours.seq_relationship_logits, theirs.sop_logits, atol=1e-5)
    for head, name in (
        (BertForSequenceClassification(config, ("a", "b")), "logits"),
        (BertForTokenClassification(config, ("O", "B-X")), "logits"),
        (BertForQuestionAnswering(config), "end_logits"),
    ):
        hf_head = interop.to_transformers(head.eval())
        assert type(hf_head).__name__.startswith("Albert")
        with torch.no_grad():
            assert torch.allclose(getattr(head(ids), name), getattr(hf_head(ids), name), atol=1e-5)
    # HF ALBERT has a position table: with rotary positions, bertlib's own class (test_remote_code)
    rope = small_config(share_layers=True, position_embedding_type="rope")
    assert interop.hf_class(BertForPreTraining(rope)) is interop.OWN_CLASSES[BertForPreTraining]
    with pytest.raises(ValueError, match="rotary positions cannot be exported as HF ALBERT"):
        interop.to_hf_config(rope, "AlbertForPreTraining")
