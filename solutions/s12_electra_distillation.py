"""Worked solutions of notebook 12's exercises (ELECTRA and distillation): ELECTRA at 15% and 30% masking, what
labelling every masked position as replaced gets wrong, the distillation temperature, and where the student's
layers come from.

`python solutions/s12_electra_distillation.py` runs them all. Without `BERTLIB_QUICK`, each of its fourteen training
runs (exercise 3 distils at three temperatures from three seeds) takes 600 steps of 16 sequences of 64 tokens: a
distillation step computes the teacher's and the student's predictions over the whole vocabulary at every position,
so longer runs take hours on a CPU (the saved output in `solutions/outputs/` says how long these took).
`BERTLIB_QUICK=1` trains for ten steps, which shows what each change touches but not the size of its effect.
"""

import math
import statistics

import torch
from common import (
    EVAL_SEED,
    QUICK,
    cli,
    course_model,
    distillation_losses,
    documents,
    header,
    masked_token_losses,
    mean_mlm_loss,
    packed_batches,
    rtd_metrics,
    static_packed,
    student_from_teacher,
    train,
)
from verdict import compare, rank

from bertlib import BertConfig, BertForPreTraining, ElectraForPreTraining

STEPS, BATCH = (10, 4) if QUICK else (600, 16)
LENGTH = 64  # tokens a sequence, for every run


def electra_loss(model: ElectraForPreTraining, batch: dict) -> torch.Tensor:
    "ELECTRA's loss: the generator's MLM loss plus 50 times the discriminator's (notebook 12, section 1)."
    out = model(batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    return out.mlm_loss + 50 * out.rtd_loss


@torch.no_grad()
def rtd_hits(model: ElectraForPreTraining, batches: list[dict]) -> tuple[list[float], list[float]]:
    """Per real token of `batches`, with the generator's samples drawn as `rtd_metrics` draws them: 1 where the
    discriminator is right, else 0; and the same for answering 'original' everywhere."""
    model.eval()
    found, baseline = [], []
    with torch.random.fork_rng():
        torch.manual_seed(EVAL_SEED)
        for batch in batches:
            out = model(batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
            real = batch["attention_mask"] == 1
            replaced = out.replaced[real].bool()
            found += ((out.logits[real] > 0) == replaced).float().tolist()
            baseline += (~replaced).float().tolist()
    return found, baseline


def exercise_1() -> None:
    "ELECTRA trained alike at 15% and at 30% masking, its discriminator against always answering 'original'."
    header("exercise 1: ELECTRA at 15% masking instead of 30%")
    docs, valid = documents("train", 60), documents("validation", 20)
    found = {}
    for rate in (0.15, 0.30):
        torch.manual_seed(0)
        model = ElectraForPreTraining(BertConfig.from_preset("tiny" if QUICK else "mini", vocab_size=8192))
        train(model, packed_batches(docs, BATCH, LENGTH, mlm_probability=rate), STEPS, lr=1e-3, loss=electra_loss)
        batches = static_packed(valid, 32, LENGTH, 4, mlm_probability=rate)
        scores = rtd_metrics(model, batches)
        # one run each: the spread is over the validation tokens, the discriminator and the baseline on the same
        found[rate] = scores["replaced_share"], compare(*rtd_hits(model, batches), paired=True, unit="tokens")
        print(
            f"masking {rate:.0%}: {scores['replaced_share']:.1%} of the tokens replaced, so 'always original' "
            f"scores {1 - scores['replaced_share']:.1%}; the discriminator scores {scores['rtd_accuracy']:.1%} "
            f"(generator perplexity {scores['mlm_perplexity']:.0f})"
        )
    for rate, (replaced, verdict) in found.items():
        print(
            f"at {rate:.0%} the share replaced is {replaced / rate:.2f} x the masking rate (the chance that a sample "
            f"differs from the original); the discriminator's accuracy against 'always original': "
            + verdict.says(
                lower="below it",
                higher="above it: it has learned more than the baseline",
                unclear="so it has not shown that it learned more than the baseline",
            )
        )
    print(
        f"halving the masking rate takes the share of replaced tokens from {found[0.30][0]:.1%} to "
        f"{found[0.15][0]:.1%}: fewer 'replaced' examples to learn from, and a higher bar "
        f"({1 - found[0.15][0]:.1%}) that the discriminator must beat"
    )


def exercise_2() -> None:
    "How often the course model, used as a generator, samples the original token back."
    header("exercise 2: what 'every masked position is replaced' gets wrong")
    model, _ = course_model()
    torch.manual_seed(0)
    drawn_back = expected = masked = 0.0
    with torch.no_grad():
        for batch in static_packed(documents("validation", 20), 32, 128, 4 if QUICK else 40):
            logits = model(
                batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
            ).prediction_logits
            target = batch["labels"][batch["labels"] != -100]
            probs = logits.softmax(-1)
            sampled = torch.multinomial(probs, 1).squeeze(-1)
            drawn_back += float((sampled == target).sum())
            expected += float(probs[torch.arange(len(target)), target].sum())
            masked += len(target)
    print(
        f"{int(masked):,} masked tokens: the sample is the original for {drawn_back / masked:.1%} of them "
        f"(the model's mean probability of the original: {expected / masked:.1%})"
    )
    print(
        f"labelled 'replaced' anyway, {drawn_back / masked:.1%} of the discriminator's 'replaced' labels would be "
        "wrong, and the better the generator, the larger that share: the discriminator would learn to flag correct "
        "tokens"
    )


def distil(student: BertForPreTraining, teacher: BertForPreTraining, temperature: float, seed: int = 0) -> list[float]:
    """A short distillation with DistilBERT's weights, 5 x soft targets + 2 x MLM + 1 x cosine, on the text in the
    order that `seed` draws, with its dropout."""

    def loss(model: BertForPreTraining, batch: dict) -> torch.Tensor:
        soft, mlm, cos = distillation_losses(model, teacher, batch, temperature)
        return 5 * soft + 2 * mlm + cos

    torch.manual_seed(seed)
    batches = packed_batches(documents("train", 60), BATCH, LENGTH, seed=seed, mlm_probability=0.15)
    return train(student, batches, STEPS, lr=5e-4, loss=loss)


def exercise_3() -> None:
    "The teacher's distributions at three temperatures, then the student distilled at each from the same seeds."
    header("exercise 3: distil at temperature 1, 2 and 4")
    teacher, _ = course_model()
    valid = static_packed(documents("validation", 20), 16, LENGTH, 2 if QUICK else 8, mlm_probability=0.15)
    seeds = (0, 1) if QUICK else (0, 1, 2)  # the temperatures' perplexities lie within 1.4 of one another
    temperatures = (1.0, 2.0, 4.0)
    batch = valid[0]
    with torch.no_grad():
        logits = teacher(
            batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        ).prediction_logits
    print(
        f"teacher, {len(logits)} masked tokens; student before training: perplexity "
        f"{math.exp(mean_mlm_loss(student_from_teacher(teacher), valid)):.1f}"
    )
    entropies = []
    for temperature in temperatures:
        probs = (logits / temperature).softmax(-1)
        entropies.append((-(probs * probs.clamp_min(1e-12).log2()).sum(-1).mean()).item())
        with torch.no_grad():
            soft = distillation_losses(student_from_teacher(teacher).eval(), teacher, batch, temperature)[0]
        print(
            f"T = {temperature:g}: teacher's entropy {entropies[-1]:.2f} bits, top probability "
            f"{probs.max(-1).values.mean():.3f}; fresh student's soft loss {soft:.4f}"
        )
    perplexity = {f"T = {t:g}": [] for t in temperatures}
    for seed in seeds:  # a seed draws the text order and the dropout, the same for every temperature
        for temperature, found in zip(temperatures, perplexity.values(), strict=True):
            student = student_from_teacher(teacher)
            distil(student, teacher, temperature, seed)
            found.append(math.exp(mean_mlm_loss(student, valid)))
        print(
            f"seed {seed}: the student's perplexity after {STEPS} steps: "
            + ", ".join(f"{name} {found[-1]:.1f}" for name, found in perplexity.items())
        )
    ranking = rank(perplexity, paired=True, fmt=".1f")
    best = ranking.lowest
    print(
        (
            "a higher temperature flattens the teacher's distribution (its entropy rises with T), so its second and "
            "third guesses carry weight"
            if entropies == sorted(entropies)  # exact: the same logits at every T, and entropy rises with T
            else "the teacher's entropy does not rise with T here"
        )
        + f"; the student's perplexity after {STEPS} steps, lowest first: {ranking}: "
        + (
            f"the student is best at {best[0]}"
            if len(best) == 1
            else f"this run cannot tell {', '.join(best[:-1])} and {best[-1]} apart at the top"
        )
        + ". The T^2 factor keeps the soft loss's gradients comparable across temperatures"
    )


def exercise_4() -> None:
    "Students started from the teacher's layers [0, 3], from [0, 1], and at random, distilled alike."
    header("exercise 4: where the student's layers come from")
    teacher, _ = course_model()
    valid = static_packed(documents("validation", 20), 16, LENGTH, 2 if QUICK else 8, mlm_probability=0.15)
    spread = student_from_teacher(teacher)
    first_two = student_from_teacher(teacher)
    first_two.bert.encoder.layers[1].load_state_dict(teacher.bert.encoder.layers[1].state_dict())
    torch.manual_seed(0)
    random = BertForPreTraining(spread.config)
    losses = {}
    for name, student in (("layers [0, 3]", spread), ("layers [0, 1]", first_two), ("random", random)):
        before = math.exp(mean_mlm_loss(student, valid))
        distil(student, teacher, 2.0)
        losses[name] = masked_token_losses(student, valid)
        print(
            f"{name:<14}: perplexity {before:9.1f} before, {math.exp(statistics.mean(losses[name])):9.1f} after "
            f"{STEPS} steps of distillation (teacher: {math.exp(mean_mlm_loss(teacher, valid)):.1f})"
        )
    # one distillation each: the spread is over the validation's masked tokens, the same for the three students
    ranking = rank(losses, paired=True, unit="masked tokens")
    order = ranking.order
    print(f"measured order by the masked tokens' mean loss, best first: {ranking}")
    copies = [name for name in order if name != "random"]
    print(
        (
            "both copies end ahead of the random student, which has everything to learn"
            if order[-1] == "random" and ranking.steps[-1].decided
            else f"this run does not put the random student decidedly last after {STEPS} steps"
        )
        + (
            f". Between the two copies the {copies[0]} start wins"
            if ranking.lowest == [copies[0]]
            else f". This run cannot tell the two copies apart after {STEPS} steps"
        )
        + ": the spread layers end with the teacher's last layer, whose output the heads were trained to read, but "
        "jump from its first layer's output to an input its last layer never saw; the first two layers run in the "
        "teacher's own order and leave its last steps undone. Which costs less is an empirical question, and the "
        "answer can change as training goes on. One distillation each: another seed may order the copies otherwise"
    )


if __name__ == "__main__":
    cli(__name__)
