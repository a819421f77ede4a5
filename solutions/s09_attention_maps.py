"""Worked solutions of notebook 09's exercises (attention maps): the heads of a short run of one's own against the
course model's, a "same token string" pattern, and attention weighted by the size of what it moves (Kobayashi et
al. 2020).

`python solutions/s09_attention_maps.py` runs them all; `BERTLIB_QUICK=1` trains the short run for a few dozen
steps and reads fewer sentences.
"""

import torch
from common import (
    PATTERNS,
    QUICK,
    AttentionMaps,
    attention_maps,
    cli,
    compared,
    course_model,
    documents,
    head_entropy,
    head_scores,
    header,
    pair_batches,
    split_documents,
    train,
)

from bertlib import BertForPreTraining, load_wikitext2


def sentences() -> list[str]:
    "Validation sentences of 8 to 60 words, as notebook 09 reads them."
    found = [s for doc in split_documents(load_wikitext2("validation")) for s in doc if 8 <= len(s.split()) <= 60]
    return found[:20] if QUICK else found[:400]


def _strongest(scores: torch.Tensor) -> str:
    layer, head = divmod(int(scores.nan_to_num(-1).argmax()), scores.shape[1])
    return f"{scores[layer, head]:.3f} (head {layer}.{head})"


def exercise_1() -> None:
    "Entropy and pattern scores of a short run of the course model's shape, an untrained twin and the course model."
    header("exercise 1: the heads of a run of one's own, beside the course model's")
    course, tokenizer = course_model()
    torch.manual_seed(0)
    untrained = BertForPreTraining(course.config).eval()
    torch.manual_seed(0)
    short = BertForPreTraining(course.config)
    steps, batch, length = (20, 8, 64) if QUICK else (1500, 16, 128)
    train(short, pair_batches(documents("train", 60), batch, length), steps, lr=1e-3)
    texts = sentences()
    print(f"{len(texts)} validation sentences; strongest head per pattern, and the mean entropy per layer (bits)")
    strongest, entropy = {}, {}
    for name, model in (("untrained", untrained), ("short run", short), ("course model", course)):
        maps = [attention_maps(model, tokenizer, t) for t in texts]
        scores, per_head = head_scores(maps), head_entropy(maps)
        strongest[name] = {p: scores[p].nan_to_num(-1).max().item() for p in ("previous token", "next token", "[SEP]")}
        entropy[name] = per_head.mean().item()
        label = f"short run, {steps} steps" if name == "short run" else name
        print(
            f"{label:<22} previous {_strongest(scores['previous token'])}, next {_strongest(scores['next token'])}, "
            f"[SEP] {_strongest(scores['[SEP]'])}; entropy " + ", ".join(f"{e:.2f}" for e in per_head.mean(1))
        )
    positional = {name: max(s["previous token"], s["next token"]) for name, s in strongest.items()}
    way = (positional["short run"] - positional["untrained"]) / (positional["course model"] - positional["untrained"])
    print(
        f"the strongest positional head (previous or next token): untrained {positional['untrained']:.3f}, short run "
        f"{positional['short run']:.3f}, course model {positional['course model']:.3f}: the short run has gone "
        f"{way:.0%} of the way from the untrained model to the course model"
        + (", so it is still on the plateau, with heads close to the untrained baseline" if way < 0.25 else "")
    )
    sep = strongest["course model"]["[SEP]"]
    sharper = entropy["course model"] < entropy["untrained"]
    print(
        f"the course model's attention is {'sharper' if sharper else 'not sharper'} than the untrained model's "
        f"({entropy['course model']:.2f} bits against {entropy['untrained']:.2f}), and "
        + (
            f"a head parks on [SEP] ({sep:.3f} of its attention)"
            if sep > 0.5
            else f"no head parks on [SEP] (at most {sep:.3f} of a head's attention)"
        )
    )


def same_string_score(maps: list[AttentionMaps]) -> tuple[torch.Tensor, float]:
    """[layers, heads]: the attention a head gives to *other* tokens with the same text as the query, averaged
    over the queries that have one (notebook 09's pattern scores, with one more pattern); and what uniform attention
    would give them."""
    total, uniform, count = torch.zeros(maps[0].attentions.shape[:2]), 0.0, 0
    for m in maps:
        tokens = m.tokens
        same = torch.tensor([[a == b and i != j for j, b in enumerate(tokens)] for i, a in enumerate(tokens)])
        rows = same.any(1)
        if rows.any():
            total += (m.attentions * same).sum(-1)[..., rows].sum(-1)
            uniform += (same[rows].sum(1) / len(tokens)).sum().item()
            count += int(rows.sum())
    return total / max(count, 1), uniform / max(count, 1)


def exercise_2() -> None:
    "The new pattern in the course model and in an untrained twin."
    header("exercise 2: a 'same token string' pattern")
    course, tokenizer = course_model()
    torch.manual_seed(0)
    untrained = BertForPreTraining(course.config).eval()
    texts = sentences()
    best = {}
    for name, model in (("untrained", untrained), ("course model", course)):
        scores, uniform = same_string_score([attention_maps(model, tokenizer, t) for t in texts])
        flat = scores.flatten().topk(3)
        best[name] = flat.values[0].item()
        heads = ", ".join(
            f"{i // scores.shape[1]}.{i % scores.shape[1]}: {v:.3f}"
            for v, i in zip(flat.values.tolist(), flat.indices.tolist(), strict=True)
        )
        print(
            f"{name:<13} strongest heads (layer.head: share of attention on other copies of the query's token) {heads}"
        )
    print(
        f"uniform attention would give the other copies {uniform:.3f}; the course model's strongest head gives them "
        f"{best['course model']:.3f}, {best['course model'] / uniform:.1f}x that, the untrained model's "
        f"{best['untrained']:.3f}"
        + (
            ": that head links repeated words (a name, 'the' to 'the')"
            if best["course model"] > 2 * max(uniform, best["untrained"])
            else ": no head of the course model has a marked habit of it"
        )
    )


def value_weighted(model: BertForPreTraining, tokenizer, text: str) -> tuple[AttentionMaps, AttentionMaps]:
    """The attention maps of `text`, and the same maps with each weight multiplied by the norm of what the key
    sends through that head, ||W_O,h v_j,h|| (Kobayashi et al. 2020), rows renormalised to sum to 1."""
    maps = attention_maps(model, tokenizer, text)
    values = []
    hooks = [
        layer.attention.value.register_forward_hook(lambda _, __, out: values.append(out))
        for layer in model.bert.encoder.layers
    ]
    try:
        with torch.no_grad():
            model(torch.tensor([tokenizer.encode(text).ids]), output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()
    heads, size = model.config.num_attention_heads, model.config.head_size
    norms = []
    for layer, v in zip(model.bert.encoder.layers, values, strict=True):
        v = v[0].view(-1, heads, size)  # [seq, heads, head_size]
        w = layer.attention.output.weight.view(-1, heads, size)  # [hidden, heads, head_size]
        norms.append(torch.einsum("shd,ohd->hso", v, w).norm(dim=-1))  # [heads, seq]
    weighted = maps.attentions * torch.stack(norms)[:, :, None, :]
    weighted = weighted / weighted.sum(-1, keepdim=True)
    return maps, AttentionMaps(weighted, maps.tokens, maps.type_ids, maps.word_ids)


def exercise_3() -> None:
    "Pattern scores of the course model with plain and with value-weighted attention."
    header("exercise 3: attention weighted by the norm of the value it moves")
    course, tokenizer = course_model()
    pairs = [value_weighted(course, tokenizer, t) for t in sentences()]
    plain, weighted = head_scores([p for p, _ in pairs]), head_scores([w for _, w in pairs])
    moves = {"lower": [], "higher": [], "about the same": []}
    for pattern in PATTERNS:
        before, after = plain[pattern].nanmean().item(), weighted[pattern].nanmean().item()
        moves[compared(after, before, 0.002)].append(pattern)
        print(
            f"{pattern:>15}: mean over heads {before:.3f} -> {after:.3f}, "
            f"strongest head {plain[pattern].nan_to_num(0).max():.3f} -> {weighted[pattern].nan_to_num(0).max():.3f}"
        )
    change = sum((p.attentions - w.attentions).abs().sum(-1).mean() for p, w in pairs) / len(pairs) / 2
    print(f"on average {change:.1%} of a row's attention moves to other keys when weighted")
    said = {
        "lower": "falls: the heads look there, at keys whose value vectors are small, but move little",
        "higher": "rises: those keys send more than their weight suggests",
        "about the same": "stays within 0.002",
    }
    print(
        "weighted, the share of "
        + "; of ".join(f"{', '.join(moves[k])} {said[k]}" for k in said if moves[k])
        + ". The weighted maps are closer to what each key contributes to a head's output"
    )


if __name__ == "__main__":
    cli(__name__)
