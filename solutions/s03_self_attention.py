"""Worked solutions of notebook 03's exercises (self-attention): a hand-made previous-token head, the entropy of
attention without the 1/sqrt(d) scaling, and why masking the padded keys is enough.

`python solutions/s03_self_attention.py` runs them all in seconds; nothing is trained.
"""

import math

import torch
import torch.nn.functional as F
from common import header, run_all

from bertlib import BertConfig, BertForPreTraining
from bertlib.model.attention import MultiHeadSelfAttention, attention_bias, explicit_attention


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
    print("argmax of every row is the position before:", bool((probs[1:].argmax(-1) == torch.arange(n - 1)).all()))
    token_only = (tokens @ tokens.T).softmax(-1)  # queries and keys from the words alone
    print(
        f"from the words alone, 'the' at position 4 gives its three copies "
        f"{token_only[4, [0, 4, 7]].sum():.3f} and the word before it {token_only[4, 3]:.3f}: without positions "
        f"no head can tell the copies of a word apart, so the inputs must carry where each token is"
    )


def _entropy_bits(probs: torch.Tensor) -> float:
    return -(probs * torch.log2(probs.clamp_min(1e-12))).sum(-1).mean().item()


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
    print(f"head size {config.head_size}, {seq} keys: uniform attention has {math.log2(seq):.2f} bits")
    for name, (query, key) in (("BERT's initialisation (std 0.02)", (q, k)), ("queries and keys of variance 1", unit)):
        scaled = explicit_attention(query, key, key)[1]
        unscaled = explicit_attention(query * math.sqrt(config.head_size), key, key)[1]  # undoes the 1/sqrt(d)
        print(
            f"{name:<33}: entropy {_entropy_bits(scaled):.2f} bits scaled, {_entropy_bits(unscaled):.2f} bits "
            f"without scaling; score std {(query @ key.transpose(-2, -1)).std():.2f} unscaled"
        )
    print(
        "without the scaling the scores spread sqrt(d) = 8 times wider: attention is much sharper than uniform "
        "already at BERT's initialisation, and with unit-size queries and keys the rows are almost one-hot, where "
        "the softmax's gradients vanish"
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
    print(
        f"real tokens, alone against padded to {padded.shape[1]}: largest difference "
        f"{(alone - with_padding[:, : ids.shape[1]]).abs().max():.1e}"
    )
    bias = attention_bias(mask, torch.float32)[0, 0, 0, -1].item()
    print(
        f"every real query's scores on the padded keys get the bias {bias:.3e}, so they weigh 0; what a padded "
        f"query computes lands only at padded positions, which nothing reads"
    )
    labels = padded.clone().masked_fill(mask == 0, -100)
    labels[0, [0, 5]] = -100  # [CLS] and [SEP] are never predicted
    with_pad_labels = padded.clone()  # the mistake: padding left with a label (the [PAD] id)
    with_pad_labels[0, [0, 5]] = -100
    with torch.no_grad():
        right = model(padded, attention_mask=mask, labels=labels).mlm_loss
        wrong = model(padded, attention_mask=mask, labels=with_pad_labels).mlm_loss
    print(f"MLM loss over the 4 real tokens: {right:.3f}; with the 4 padded positions labelled [PAD] too: {wrong:.3f}")
    print(
        "a label at padding puts positions that hold no word into the mean: the model is then also taught to "
        "predict [PAD] after padding, an easy task whose weight in the loss depends on how much padding a batch "
        "happens to have, and the real tokens' share of the gradient shrinks"
    )


def main() -> None:
    "Run every exercise of this notebook, in order."
    run_all(__name__)


if __name__ == "__main__":
    main()
