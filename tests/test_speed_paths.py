"""Every fast path gives the numbers of the plain path: sparse MLM prediction and the pruned last layer against
scoring every position, the head index found on the CPU against the model finding it, SDPA against explicit
attention, torch.compile against eager; and the step with the head index given reads nothing back."""

import pytest
import torch
import torch.nn.functional as F
from bert_testing import make_batch, small_config
from conftest import missing_tool

from bertlib.model.attention import MultiHeadSelfAttention, gather_positions
from bertlib.model.bert import IGNORE_INDEX, BertForPreTraining, _head_positions, head_index
from bertlib.model.config import BertConfig
from bertlib.model.encoder import EncoderLayer
from bertlib.model.inputs import check_index_range


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def loss_and_grads(model: torch.nn.Module, inputs: dict[str, torch.Tensor], **kwargs):
    "The output of one forward pass and the gradients its loss leaves, starting from none."
    model.zero_grad()
    out = model(**inputs, **kwargs)
    out.loss.backward()
    return out, grads(model)


def plain_loss(model: BertForPreTraining, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    "MLM + NSP loss from the dense path: every position scored over the whole vocabulary, every position computed."
    out = model(inputs["input_ids"], token_type_ids=inputs["token_type_ids"], attention_mask=inputs["attention_mask"])
    mlm = F.cross_entropy(out.prediction_logits.flatten(0, 1), inputs["labels"].flatten())
    return mlm + F.cross_entropy(out.seq_relationship_logits, inputs["next_sentence_label"])


@pytest.mark.parametrize("style", ["post", "pre"])
@pytest.mark.parametrize("padded", [False, True])
def test_sparse_prediction_and_pruned_last_layer_equal_the_dense_path(style, padded):
    config = small_config(norm_style=style)
    torch.manual_seed(0)
    model = BertForPreTraining(config).eval()
    inputs = make_batch(config, 4, 23, padded=padded)
    sparse, fast_grads = loss_and_grads(model, inputs)
    model.zero_grad()
    dense = plain_loss(model, inputs)
    dense.backward()
    assert abs(sparse.loss - dense) < 1e-5
    for name, grad in grads(model).items():
        assert (fast_grads[name] - grad).abs().max() < 1e-5, name
    # the full last layer (kept when the caller wants every layer's states) gives the same logits
    full = model(**inputs, output_hidden_states=True)
    assert (full.prediction_logits - sparse.prediction_logits).abs().max() < 1e-5
    assert (full.seq_relationship_logits - sparse.seq_relationship_logits).abs().max() < 1e-5


def test_pruned_path_handles_rows_without_selected_positions_and_a_labelled_cls():
    config = small_config()
    torch.manual_seed(0)
    model = BertForPreTraining(config).eval()
    inputs = make_batch(config, 3, 15)
    inputs["labels"][1] = IGNORE_INDEX  # nothing to predict in row 1
    inputs["labels"][2, 0] = 7  # a label on position 0, which the pruned layer computes anyway
    fast = model(**inputs)
    full = model(**inputs, output_hidden_states=True)
    assert fast.prediction_logits.shape[0] == int((inputs["labels"] != IGNORE_INDEX).sum())
    assert (fast.prediction_logits - full.prediction_logits).abs().max() < 1e-5
    assert abs(fast.loss - full.loss) < 1e-6


def test_head_positions_put_cls_first_then_the_selected_in_order():
    selected = torch.tensor(
        [[False, False, True, False, True], [False, True, False, False, False], [True, False, False, False, False]]
    )
    positions = _head_positions(selected)
    assert positions.shape == (3, 3)
    assert positions[:, 0].tolist() == [0, 0, 0]
    assert positions[0].tolist() == [0, 2, 4] and positions[1, 1] == 1
    kept = selected.gather(1, positions)
    assert kept.sum() == selected.sum()


@pytest.mark.parametrize("style", ["post", "pre"])
@pytest.mark.parametrize("padded", [False, True])
def test_head_index_found_on_the_cpu_gives_what_the_model_finds_itself(style, padded):
    config = small_config(norm_style=style)
    torch.manual_seed(0)
    model = BertForPreTraining(config).eval()
    inputs = make_batch(config, 4, 24, padded=padded)
    inputs["labels"][2] = IGNORE_INDEX  # a row with nothing to predict
    found, found_grads = loss_and_grads(model, inputs)
    given, given_grads = loss_and_grads(model, inputs, head_index=head_index(inputs["labels"]))
    assert torch.equal(given.loss, found.loss)
    assert torch.equal(given.prediction_logits, found.prediction_logits)  # rows in the order of labels != -100
    assert all(torch.equal(found_grads[name], grad) for name, grad in given_grads.items())


def test_a_head_index_of_other_labels_is_refused_in_one_line():
    config = small_config()
    model = BertForPreTraining(config)
    inputs = make_batch(config, 3, 16)
    other = inputs["labels"].clone()
    other[0, 1:] = IGNORE_INDEX
    with pytest.raises(ValueError, match="head_index does not match labels"):
        model(**inputs, head_index=head_index(other))


def test_value_checks_read_tensors_on_the_cpu_only():
    out_of_range = torch.full((2, 3), 999)
    with pytest.raises(ValueError, match="contains 999"):
        check_index_range("input_ids", out_of_range, 10, "BertConfig.vocab_size=10")
    # on another device reading the values would stall every step: nothing is read (a meta tensor has no values)
    check_index_range("input_ids", out_of_range.to("meta"), 10, "BertConfig.vocab_size=10")


@pytest.mark.slow
@pytest.mark.parametrize("style", ["post", "pre"])
def test_the_step_with_a_head_index_is_one_graph_that_reads_nothing_back(style):
    """fullgraph=True makes torch.compile fail on anything that reads a tensor's value into Python (a host sync on
    a GPU) or gives a shape that depends on values: with the head index given, the model has neither, over
    batches of different lengths; without it, finding the index reads the device, and the compile fails."""
    import torch._dynamo

    config = small_config(norm_style=style, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = BertForPreTraining(config).train()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager", dynamic=True)
    for seq in (16, 24):
        inputs = make_batch(config, 4, seq)
        eager = model(**inputs)
        out = compiled(**inputs, head_index=head_index(inputs["labels"]))
        out.loss.backward()
        assert (out.loss - eager.loss).abs() < 1e-5
    with pytest.raises((torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError)):  # a value read, or a shape
        compiled(**make_batch(config, 4, 16))


@pytest.mark.parametrize("style", ["post", "pre"])
def test_layer_at_some_positions_equals_the_full_layer_there(style):
    config = small_config(norm_style=style)
    torch.manual_seed(0)
    layer = EncoderLayer(config).eval()
    x = torch.randn(2, 9, config.hidden_size)
    mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3])
    positions = torch.tensor([[0, 3, 8], [0, 1, 5]])
    full, _ = layer(x, mask)
    part, _ = layer(x, mask, output_positions=positions)
    assert (gather_positions(full, positions) - part).abs().max() < 1e-6


def test_an_all_ones_mask_is_dropped_without_changing_anything():
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=97)).eval()
    ids = torch.randint(5, 97, (3, 12))
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, -100)
    outs = []
    for mask in (torch.ones_like(ids), None):
        model.zero_grad()
        out = model(ids, attention_mask=mask, labels=labels, next_sentence_label=torch.tensor([0, 1, 0]))
        out.loss.backward()
        outs.append((out.loss.detach(), [p.grad.clone() for p in model.parameters()]))
    assert torch.equal(outs[0][0], outs[1][0])
    assert all(torch.equal(a, b) for a, b in zip(outs[0][1], outs[1][1], strict=True))


@pytest.mark.parametrize("padded", [False, True])
def test_sdpa_equals_explicit_attention_with_output_positions(padded):
    config = small_config()
    torch.manual_seed(0)
    attention = MultiHeadSelfAttention(config).eval()
    x = torch.randn(3, 11, config.hidden_size)
    mask = torch.ones(3, 11, dtype=torch.long)
    if padded:
        mask[1, 7:], mask[2, 2:] = 0, 0
    positions = torch.tensor([[0, 5, 10], [0, 2, 6], [0, 1, 1]])
    fast, _ = attention(x, mask, output_positions=positions)
    slow, probs = attention(x, mask, output_attentions=True, output_positions=positions)
    assert probs.shape == (3, config.num_attention_heads, 3, 11)
    assert (fast - slow).abs().max() < 1e-6
    full, _ = attention(x, mask)
    assert (gather_positions(full, positions) - fast).abs().max() < 1e-6


def _compiler_works() -> bool:
    try:
        torch.compile(lambda t: t * 2)(torch.ones(2))
        return True
    except Exception:  # no C++ compiler or an unsupported platform: nothing to compare
        return False


@pytest.mark.slow
def test_compiled_model_equals_eager():
    if not _compiler_works():
        missing_tool("torch.compile does not run here (it needs a C++ compiler)")
    config = small_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = BertForPreTraining(config).train()
    inputs = make_batch(config, 4, 16)
    eager = model(**inputs)
    eager.loss.backward()
    eager_grads = grads(model)
    model.zero_grad()
    compiled = torch.compile(model)(**inputs)
    compiled.loss.backward()
    assert abs(compiled.loss - eager.loss) < 1e-5
    for name, grad in grads(model).items():
        assert (eager_grads[name] - grad).abs().max() < 1e-5, name
