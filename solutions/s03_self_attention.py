"""Worked solutions of notebook 03's exercises (self-attention): a hand-made previous-token head, the entropy of
attention without the 1/sqrt(d) scaling, and why masking the padded keys is enough.

`python solutions/s03_self_attention.py` runs them all in seconds; nothing is trained.
"""

import math

import torch
import torch.nn.functional as F
from common import MultiHeadSelfAttention, attention_bias, cli, explicit_attention, header
from verdict import against

from bertlib import BertConfig, BertForPreTraining


def exercise_1() -> None:
    "A head whose queries ask for the position before: the inputs must carry positions."
    header("exercise 1: a hand-made head that attends to the token before")
    sentence = "the cat sat on the mat and the dog sat too".split()
    words = sorted(set(sentence))
    n, v = len(sentence), len(words)
    tokens = torch.eye(v)[[words.index(w) for w in sentence]]
    positions = torch.eye(n)
    x = torch.cat([tokens, positions], dim=1)  # each input: its word, one-hot, and its position, one-hot
    d, strength = v + n, 8.0
    W_Q, W_K = torch.zeros(d, d), torch.zeros(d, d)
    W_Q[v:, v:] = strength * torch.eye(n).roll(-1, dims=1)  # the query of position i is "position i - 1"
    W_K[v:, v:] = strength * torch.eye(n)  # the key of position j is "position j"
    probs = ((x @ W_Q) @ (x @ W_K).T / math.sqrt(d)).softmax(-1)
    on_previous = probs[torch.arange(1, n), torch.arange(0, n - 1)]
    print(
        f"attention on the token before, positions 1..{n - 1}: mean {on_previous.mean():.3f}, least "
        f"{on_previous.min():.3f}; the first token, which has none, spreads it: largest {probs[0].max():.3f}"
    )
    previous = bool((probs[1:].argmax(-1) == torch.arange(n - 1)).all())
    print(f"argmax of every row is the position before: {previous}")
    token_only = (tokens @ tokens.T).softmax(-1)  # queries and keys from the words alone
    copies = token_only[4, [0, 4, 7]]
    print(
        f"from the words alone, 'the' at position 4 gives its three copies "
        f"{', '.join(f'{c:.3f}' for c in copies.tolist())} and the word before it {token_only[4, 3]:.3f}"
    )
    print(
        ("with positions in the inputs the head finds the token before; " if previous else "the head missed; ")
        + (
            "from the words alone the copies of a word get the same weight, so no head can tell them apart: the "
            "inputs must carry where each token is"
            if torch.allclose(copies, copies[0].expand(3))
            else "from the words alone the copies got different weights"
        )
    )


def _entropy_bits(probs: torch.Tensor) -> torch.Tensor:
    "The entropy in bits of every row of attention."
    return -(probs * torch.log2(probs.clamp_min(1e-12))).sum(-1).flatten()


def exercise_2() -> None:
    "Entropy of attention rows with and without 1/sqrt(d), at BERT's initialisation and for unit-variance vectors."
    header("exercise 2: attention without the 1/sqrt(d) scaling, at initialisation")
    torch.manual_seed(0)
    config = BertConfig.from_preset("base")
    layer = MultiHeadSelfAttention(config)
    torch.nn.init.normal_(layer.query.weight, std=config.initializer_range)  # BERT's initialisation
    torch.nn.init.normal_(layer.key.weight, std=config.initializer_range)
    seq = 128
    x = F.layer_norm(torch.randn(4, seq, config.hidden_size), (config.hidden_size,))
    with torch.no_grad():
        q, k = (
            m(x).view(4, seq, config.num_attention_heads, config.head_size).transpose(1, 2)
            for m in (layer.query, layer.key)
        )
    unit = [torch.randn(4, config.num_attention_heads, seq, config.head_size) for _ in range(2)]
    uniform = math.log2(seq)
    print(f"head size {config.head_size}, {seq} keys: uniform attention has {uniform:.2f} bits")
    entropy = {}
    for name, (query, key) in (("BERT's initialisation (std 0.02)", (q, k)), ("queries and keys of variance 1", unit)):
        scaled = explicit_attention(query, key, key)[1]
        unscaled = explicit_attention(query * math.sqrt(config.head_size), key, key)[1]  # undoes the 1/sqrt(d)
        entropy[name] = _entropy_bits(scaled), _entropy_bits(unscaled)
        print(
            f"{name:<33}: entropy {entropy[name][0].mean():.2f} bits scaled, {entropy[name][1].mean():.2f} bits "
            f"without scaling; score std {(query @ key.transpose(-2, -1)).std():.2f} unscaled"
        )
    (init_scaled, init_unscaled), (unit_scaled, unit_unscaled) = entropy.values()
    # against fixed marks, over the rows of attention: half a bit below uniform, and one bit (two keys' worth)
    near_uniform = against(init_unscaled, uniform - 0.5, unit="rows", fmt=".2f")
    one_hot = against(unit_unscaled, 1.0, unit="rows", fmt=".2f")
    print(
        f"without the scaling the scores spread sqrt(d) = {math.sqrt(config.head_size):.0f} times wider. At BERT's "
        f"initialisation the rows lose {init_scaled.mean() - init_unscaled.mean():.2f} bits "
        f"({init_unscaled.mean():.2f} of {uniform:.2f}; against half a bit below uniform: "
        + near_uniform.says(lower="far from uniform", higher="still close to uniform")
        + f"); with queries and keys of variance 1 they fall from {unit_scaled.mean():.2f} to "
        f"{unit_unscaled.mean():.2f} bits, {2 ** unit_unscaled.mean():.1f} keys' worth of attention; against one bit: "
        + one_hot.says(lower="almost one-hot, where the softmax's gradients vanish", higher="more than two keys' worth")
    )


def exercise_3() -> None:
    "Outputs at real tokens do not depend on padding; labels at padded positions would change the loss."
    header("exercise 3: why hiding padded keys is enough, and why the loss must ignore padded positions")
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=100)).eval()
    ids = torch.tensor([[2, 10, 11, 12, 13, 3]])
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = (padded != 0).long()
    with torch.no_grad():
        alone = model.bert(ids).last_hidden_state
        with_padding = model.bert(padded, attention_mask=mask).last_hidden_state
    change = (alone - with_padding[:, : ids.shape[1]]).abs().max().item()
    print(f"real tokens, alone against padded to {padded.shape[1]}: largest difference {change:.1e}")
    bias = attention_bias(mask, torch.float32)[0, 0, 0, -1].item()
    print(
        f"every real query's scores on the padded keys get the bias {bias:.3e}, so they weigh 0; what a padded "
        f"query computes lands only at padded positions, which nothing reads"
        if change < 1e-4  # exact: one computation two ways, equal up to float rounding
        else "padding changed the outputs at real tokens: the mask does not hide the padded keys"
    )
    labels = padded.clone().masked_fill(mask == 0, -100)
    labels[0, [0, 5]] = -100  # [CLS] and [SEP] are never predicted
    with_pad_labels = padded.clone()  # the mistake: padding left with a label (the [PAD] id)
    with_pad_labels[0, [0, 5]] = -100
    pad_only = torch.full_like(padded, -100).masked_fill(mask == 0, 0)
    with torch.no_grad():
        right, wrong, pad = (
            model(padded, attention_mask=mask, labels=targets).mlm_loss
            for targets in (labels, with_pad_labels, pad_only)
        )
    real, padding = int((labels != -100).sum()), int((pad_only != -100).sum())
    print(
        f"MLM loss over the {real} real tokens: {right:.3f}; with the {padding} padded positions labelled [PAD] too: "
        f"{wrong:.3f} (the padded positions alone: {pad:.3f})"
    )
    print(
        f"a label at padding puts positions that hold no word into the mean and moves the loss by "
        f"{wrong - right:+.3f}; "
        "in training the model is also taught to predict [PAD] after padding, a task whose weight in the loss "
        "depends on how much padding a batch happens to have, and the real tokens' share of the gradient shrinks "
        f"(here to {real / (real + padding):.0%})"
    )


if __name__ == "__main__":
    cli(__name__)
