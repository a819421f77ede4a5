"""Where a pre-training run stands, in a few lines for the end of `python -m bertlib pretrain`: its last validation
beside the unigram baseline on the same batches, its guesses for two fixed sentences, and whether it is still on the
plateau, where a small BERT fills most masks with frequent tokens, and how to leave it.

Written by hand; the `pretrain` and `distil` commands print it. Notebook 07 explains the plateau, notebook 08 the
baseline.
"""

__all__ = ["PLATEAU_RATIO", "PROBES", "on_plateau", "baseline_scores", "run_report"]

import os
from itertools import islice

from ..data.corpus import wikitext_corpus
from ..train.factory import load_model
from ..train.runs import load_run
from .scores import fill_mask, run_evaluation_loader, unigram_baseline

# The recipe study (experiments/recipe_study/README.md) calls a run out of the plateau at its first validation below
# perplexity 300, against the unigram baseline's 802.5 on the same validation split: the GPU runs crept down to 307-344
# on it, then fell below 100 within a few hundred steps. As a share of the baseline, the line holds for any tokenizer.
PLATEAU_RATIO = 300 / 802.5
PROBES = ("the united [MASK] of america .", "the battle took place during the second world [MASK] .")
WAYS_OUT = (
    "python -m bertlib pretrain --position-embedding-type rope (rotary positions leave it within a CPU "
    "budget, notebook 11), or the course model, trained on a GPU: models/course-mini"
)


def on_plateau(perplexity: float, unigram_perplexity: float) -> bool:
    "Whether a masked-LM perplexity is still on the plateau: above `PLATEAU_RATIO` x the unigram baseline's."
    return perplexity > PLATEAU_RATIO * unigram_perplexity


def baseline_scores(run_dir: str | os.PathLike, data_dir: str | None = None) -> dict[str, float]:
    """The unigram baseline (`bertlib.evaluation.scores.unigram_baseline`: train-split counts) on the validation
    batches the run validates on (the first `eval_batches` of the statically masked split)."""
    _, cfg, tokenizer = load_run(run_dir)
    loader = run_evaluation_loader("validation", tokenizer, cfg, data_dir=data_dir)
    train_ids = wikitext_corpus("train", tokenizer, config=cfg.data_config, data_dir=data_dir).ids
    return unigram_baseline(train_ids, islice(loader, cfg.eval_batches), tokenizer.get_vocab_size())


def run_report(run_dir: str | os.PathLike, validation: dict[str, float], data_dir: str | None = None) -> list[str]:
    """Lines on a BERT pre-training run whose last validation is `validation`: its scores beside the unigram
    baseline's, its top guesses for `PROBES`, and, while `on_plateau`, that it is there and the two ways out."""
    unigram = baseline_scores(run_dir, data_dir)
    shown = (
        ("MLM perplexity", "mlm_perplexity", "{:.1f}"),
        ("top-1", "mlm_accuracy", "{:.1%}"),
        ("top-5", "mlm_top5_accuracy", "{:.1%}"),
        ("NSP", "nsp_accuracy", "{:.1%}"),
    )
    lines = [
        f"validation at step {validation['step']} (unigram baseline in brackets): "
        + ", ".join(
            f"{name} {form.format(validation[key])} ({form.format(unigram[key])})"
            for name, key, form in shown
            if key in validation
        )
    ]
    model, tokenizer = load_model(run_dir)
    for text in PROBES:
        guesses = fill_mask(model, tokenizer, text, top_k=3)[0]
        lines.append(f"fill-mask: {text}  ->  " + ", ".join(f"{token} ({p:.2f})" for token, p in guesses))
    if on_plateau(validation["mlm_perplexity"], unigram["mlm_perplexity"]):
        lines.append(
            f"still on the plateau: perplexity {validation['mlm_perplexity']:.1f} is above "
            f"{PLATEAU_RATIO:.2f} x the unigram baseline's {unigram['mlm_perplexity']:.1f} (the line the GPU "
            f"runs crossed when they left it), so the model guesses little better than word frequencies; the "
            f"ways out: {WAYS_OUT}"
        )
    return lines
