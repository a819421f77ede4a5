import pytest
import torch
import transformers
from bert_testing import small_config
from transformers.models.bert import modeling_bert

from bertlib.model.attention import MultiHeadSelfAttention, attention_bias, explicit_attention


def layer_and_inputs(heads: int, hidden: int, batch: int, seq: int, seed: int = 0):
    torch.manual_seed(seed)
    config = small_config(hidden_size=hidden, num_attention_heads=heads, max_position_embeddings=512)
    layer = MultiHeadSelfAttention(config).eval()
    for p in layer.parameters():  # unit-scale queries and keys: attention far from uniform, outputs of size ~1
        torch.nn.init.normal_(p, std=hidden**-0.5)
    x = torch.randn(batch, seq, hidden)
    mask = torch.ones(batch, seq, dtype=torch.long)
    for row in range(1, batch):
        mask[row, torch.randint(1, seq + 1, ()).item() :] = 0
    return layer, x, mask


CASES = [(4, 48, 3, 13), (1, 48, 2, 7), (3, 48, 2, 1), (2, 32, 2, 512), (12, 768, 2, 64)]


@pytest.mark.parametrize("heads, hidden, batch, seq", CASES)
@pytest.mark.parametrize("padded", [False, True])
def test_sdpa_equals_explicit(heads, hidden, batch, seq, padded):
    layer, x, mask = layer_and_inputs(heads, hidden, batch, seq)
    m = mask if padded else None
    fast, no_probs = layer(x, m)
    slow, probs = layer(x, m, output_attentions=True)
    assert no_probs is None and probs.shape == (batch, heads, seq, seq)
    assert (fast - slow).abs().max() < 1e-6


@pytest.mark.parametrize("heads, hidden, batch, seq", CASES[:4])
def test_equals_transformers_self_attention(heads, hidden, batch, seq):
    layer, x, mask = layer_and_inputs(heads, hidden, batch, seq)
    hf = modeling_bert.BertSelfAttention(
        transformers.BertConfig(hidden_size=hidden, num_attention_heads=heads, attn_implementation="eager")
    ).eval()
    hf.load_state_dict({k: v for k, v in layer.state_dict().items() if not k.startswith("output.")})
    out, probs = layer(x, mask, output_attentions=True)
    hf_context, hf_probs = hf(x, attention_bias(mask, x.dtype))
    assert (layer.output(hf_context) - out).abs().max() < 1e-5
    assert (hf_probs - probs).abs().max() < 1e-6


def test_padding_gets_zero_probability_and_changes_nothing():
    layer, x, _ = layer_and_inputs(4, 48, 1, 6)
    padded = torch.cat([x, torch.randn(1, 3, 48)], dim=1)
    mask = torch.tensor([[1] * 6 + [0] * 3])
    out, probs = layer(padded, mask, output_attentions=True)
    assert torch.all(probs[..., 6:] == 0)
    alone, _ = layer(x)
    assert (out[:, :6] - alone).abs().max() < 1e-6  # real tokens do not see the padding


def test_fully_masked_row_stays_finite():
    layer, x, _ = layer_and_inputs(2, 48, 1, 4)
    mask = torch.zeros(1, 4, dtype=torch.long)
    for flag in (False, True):
        out, _ = layer(x, mask, output_attentions=flag)
        assert torch.isfinite(out).all()


def test_attention_bias():
    assert attention_bias(None, torch.float32) is None
    bias = attention_bias(torch.tensor([[1, 1, 0]]), torch.float16)
    assert bias.shape == (1, 1, 1, 3) and bias.dtype == torch.float16
    assert bias.flatten().tolist() == [0.0, 0.0, torch.finfo(torch.float16).min]


def test_explicit_attention_matches_the_formula():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 3, 4, dtype=torch.float64) for _ in range(3))
    out, probs = explicit_attention(q, k, v)
    expected = torch.softmax(q[0, 0] @ k[0, 0].T / 2.0, dim=-1)
    assert torch.allclose(probs[0, 0], expected) and torch.allclose(out[0, 0], expected @ v[0, 0])


def test_attention_dropout_only_in_training():
    layer, x, _ = layer_and_inputs(4, 48, 2, 9)
    layer.dropout_p = 0.5
    for flag in (False, True):
        assert not torch.equal(layer.train()(x, output_attentions=flag)[0], layer.eval()(x, output_attentions=flag)[0])
