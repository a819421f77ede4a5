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
    course_model,
    documents,
    head_entropy,
    head_scores,
    header,
    pair_batches,
    split_documents,
    train,
)
from verdict import bootstrap

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
    maps = {}
    for name, model in (("untrained", untrained), ("short run", short), ("course model", course)):
        maps[name] = [attention_maps(model, tokenizer, t) for t in texts]
        scores, per_head = head_scores(maps[name]), head_entropy(maps[name])
        label = f"short run, {steps} steps" if name == "short run" else name
        print(
            f"{label:<22} previous {_strongest(scores['previous token'])}, next {_strongest(scores['next token'])}, "
            f"[SEP] {_strongest(scores['[SEP]'])}; entropy " + ", ".join(f"{e:.2f}" for e in per_head.mean(1))
        )

    def measured(rows: torch.Tensor) -> dict[str, dict[str, float]]:
        "Over the sentences at `rows`, for each model: its strongest positional and [SEP] heads, its mean entropy."
        found = {}
        for name, listed in maps.items():
            chosen = [listed[i] for i in rows.tolist()]
            scores = head_scores(chosen)
            found[name] = {
                "positional": max(scores[p].nan_to_num(-1).max().item() for p in ("previous token", "next token")),
                "[SEP]": scores["[SEP]"].nan_to_num(-1).max().item(),
                "entropy": head_entropy(chosen).mean().item(),
            }
        return found

    def measure(rows: torch.Tensor) -> dict[str, float]:
        "How far the short run has gone (against a quarter of the way), how much sharper, how much on [SEP]."
        found = measured(rows)
        untrained, short_run, trained = (found[name]["positional"] for name in maps)
        return {
            "way": (short_run - untrained) / (trained - untrained) - 0.25,
            "sharper": found["course model"]["entropy"] - found["untrained"]["entropy"],
            "sep": found["course model"]["[SEP]"] - 0.5,  # against half of a head's attention
        }

    verdicts = bootstrap(measure, len(texts), unit="sentences", resamples=300, fmt={"way": ".1%", "sharper": ".2f"})
    found = measured(torch.arange(len(texts)))
    positional = {name: found[name]["positional"] for name in maps}
    print(
        f"the strongest positional head (previous or next token): untrained {positional['untrained']:.3f}, short run "
        f"{positional['short run']:.3f}, course model {positional['course model']:.3f}: the short run has gone "
        f"{verdicts['way'].difference + 0.25:.0%} of the way from the untrained model to the course model; against "
        "a quarter of the way: "
        + verdicts["way"].says(
            lower="it is still on the plateau, with heads close to the untrained baseline",
            higher="its heads have left the untrained baseline",
        )
    )
    print(
        f"the course model's mean entropy against the untrained model's ({found['course model']['entropy']:.2f} bits "
        f"against {found['untrained']['entropy']:.2f}): "
        + verdicts["sharper"].says(lower="sharper", higher="flatter")
        + f"; the course model's strongest [SEP] head ({found['course model']['[SEP]']:.3f} of its attention) "
        "against half of a head's: "
        + verdicts["sep"].says(lower="no head parks on [SEP]", higher="a head parks on [SEP]")
    )


def same_string_parts(maps: list[AttentionMaps]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per sentence: [sentences, layers, heads] the attention that each head gives to *other* tokens with the same
    text as the query, summed over the queries that have one; what uniform attention would give them; and how many
    such queries there are (notebook 09's pattern scores, with one more pattern)."""
    totals, uniform, counts = [], [], []
    for m in maps:
        tokens = m.tokens
        same = torch.tensor([[a == b and i != j for j, b in enumerate(tokens)] for i, a in enumerate(tokens)])
        rows = same.any(1)
        totals.append((m.attentions * same).sum(-1)[..., rows].sum(-1))
        uniform.append((same[rows].sum(1) / len(tokens)).sum().item())
        counts.append(int(rows.sum()))
    return torch.stack(totals), torch.tensor(uniform), torch.tensor(counts)


def exercise_2() -> None:
    "The new pattern in the course model and in an untrained twin."
    header("exercise 2: a 'same token string' pattern")
    course, tokenizer = course_model()
    torch.manual_seed(0)
    untrained = BertForPreTraining(course.config).eval()
    texts = sentences()
    parts = {
        name: same_string_parts([attention_maps(model, tokenizer, t) for t in texts])
        for name, model in (("untrained", untrained), ("course model", course))
    }

    def pooled(name: str, rows: torch.Tensor) -> tuple[torch.Tensor, float]:
        "[layers, heads] the pattern's score over the sentences at `rows`, and uniform attention's."
        totals, uniform, counts = parts[name]
        count = max(int(counts[rows].sum()), 1)
        return totals[rows].sum(0) / count, uniform[rows].sum().item() / count

    for name in parts:
        scores, uniform = pooled(name, torch.arange(len(texts)))
        flat = scores.flatten().topk(3)
        heads = ", ".join(
            f"{i // scores.shape[1]}.{i % scores.shape[1]}: {v:.3f}"
            for v, i in zip(flat.values.tolist(), flat.indices.tolist(), strict=True)
        )
        print(
            f"{name:<13} strongest heads (layer.head: share of attention on other copies of the query's token) {heads}"
        )

    def measure(rows: torch.Tensor) -> dict[str, float]:
        "The course model's strongest head against twice the larger of uniform and the untrained model's strongest."
        (course_scores, uniform), (untrained_scores, _) = pooled("course model", rows), pooled("untrained", rows)
        return {"margin": course_scores.max().item() - 2 * max(uniform, untrained_scores.max().item())}

    found = bootstrap(measure, len(texts), unit="sentences")
    everything = torch.arange(len(texts))
    (course_scores, uniform), (untrained_scores, _) = (
        pooled("course model", everything),
        pooled("untrained", everything),
    )
    best, untrained_best = course_scores.max().item(), untrained_scores.max().item()
    print(
        f"uniform attention would give the other copies {uniform:.3f}; the course model's strongest head gives them "
        f"{best:.3f}, {best / uniform:.1f}x that, the untrained model's {untrained_best:.3f}; the course model's "
        "strongest head against twice the larger of the two: "
        + found["margin"].says(
            lower="no head of the course model has a marked habit of it",
            higher="that head links repeated words (a name, 'the' to 'the')",
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

    def measure(rows: torch.Tensor) -> dict[str, float]:
        "For each pattern, the mean over heads of its weighted score minus its plain one, over the sentences at `rows`."
        chosen = [pairs[i] for i in rows.tolist()]
        before, after = head_scores([p for p, _ in chosen]), head_scores([w for _, w in chosen])
        return {pattern: (after[pattern].nanmean() - before[pattern].nanmean()).item() for pattern in PATTERNS}

    found = bootstrap(measure, len(pairs), unit="sentences", resamples=300, fmt=".4f")
    for pattern in PATTERNS:
        print(
            f"{pattern:>15}: mean over heads {plain[pattern].nanmean():.3f} -> {weighted[pattern].nanmean():.3f} "
            f"({found[pattern]}), strongest head {plain[pattern].nan_to_num(0).max():.3f} -> "
            f"{weighted[pattern].nan_to_num(0).max():.3f}"
        )
    change = sum((p.attentions - w.attentions).abs().sum(-1).mean() for p, w in pairs) / len(pairs) / 2
    print(f"on average {change:.1%} of a row's attention moves to other keys when weighted")
    said = {
        "lower": "falls: the heads look there, at keys whose value vectors are small, but move little",
        "higher": "rises: those keys send more than their weight suggests",
        "unclear": f"changes by less than these {len(pairs)} sentences can tell from their noise",
    }
    moves = {outcome: [p for p in PATTERNS if found[p].outcome == outcome] for outcome in said}
    print(
        "weighted, the share of "
        + "; of ".join(f"{', '.join(moves[k])} {said[k]}" for k in said if moves[k])
        + ". The weighted maps are closer to what each key contributes to a head's output"
    )


if __name__ == "__main__":
    cli(__name__)
