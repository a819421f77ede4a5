"""BERT built from scratch in PyTorch, one notebook per component, trained on WikiText-2

Modules:

- `bertlib.cli.commands`: The commands that make a run folder (`bertlib.cli.main` parses the options and maps errors to exit codes): prepare a tokenizer; pre-train, distil or fine-tune a run. A problem the user can fix raises `UsageError`; the commands that read a run are `bertlib.cli.run_commands`'.
- `bertlib.cli.main`: The `bertlib` command line: `python -m bertlib <command> --help` explains each command. This module parses the options (those of training are made from the fields of `bertlib.train.settings`) and turns errors into one line and an exit code; `bertlib.cli.commands` (the commands that make a run) and `bertlib.cli.run_commands` (those that read one) do the work.
- `bertlib.cli.options`: Command-line options made from the settings dataclasses: one option per field (`--max-steps` for `max_steps`), typed, with the help text and choices of the field's metadata, so that a new setting is one edit in `bertlib.train.settings` or `bertlib.model.config`.
- `bertlib.cli.run_commands`: The commands that read a run folder (`bertlib.cli.main` parses the options and maps errors to exit codes): predict, evaluate, fill masks, export or describe a run. A problem the user can fix raises `bertlib.cli.commands.UsageError`.
- `bertlib.data.batching`: Batches for every loop of bertlib: a seeded, length-grouped, shardable sampler that can start an epoch part of the way in, the one `DataLoader` factory, the phases of a run (a dataset for a share of the steps), and how much padding a batching wastes.
- `bertlib.data.corpus`: The pre-tokenised corpus: WikiText-2 (or any documents of sentences) encoded once with the fast tokenizer, kept as three flat arrays and cached on disk under a hash of everything it depends on. WikiText-2 is read checked (`read_wikitext`): a file that is not WikiText-2's, or a split without text, is one line that names the file.
- `bertlib.data.packed`: RoBERTa's pre-training data, built in notebook 11: no sentence pairs and no NSP, just the corpus as one stream of tokens (documents joined by `[SEP]`) cut into full-length sequences, `[CLS] ... [SEP]`, cut at a new offset and masked afresh every epoch (dynamic masking). Every sequence is as long as allowed, so a batch has no padding at all. The masking is notebook 06's (`bertlib.data.pretraining.MaskedItems`).
- `bertlib.data.pairs`: Sentence pairs for next-sentence prediction, as BERT's data generator makes them: segments of consecutive sentences packed up to the sequence length, half of them followed by their true continuation and half by text from another document, or single sentences paired the same way.
- `bertlib.data.pretraining`: bertlib.data.pretraining: BERT's pre-training inputs, built in notebook 06. The layout `[CLS] A [SEP] B [SEP]` with its segment ids, BERT's masking (15% of the ordinary tokens picked; 80% of those become `[MASK]`, 10% a random token, 10% stay; whole words on request), the dataset that draws new pairs and masks every epoch from its seeds, the collator that pads a batch, and the loader. The NSP pairs themselves are `bertlib.data.pairs`.
- `bertlib.data.tokenizer`: BERT's WordPiece tokenizer, written out in Python and assembled from HF `tokenizers`: the basic tokenizer (`normalize`, `pre_tokenize`), greedy longest-match-first splitting (`wordpiece`, `wordpiece_tokenize`, `join_pieces`) and `WordPieceTokenizer`, which encodes and decodes like the reference; a trainer of vocabularies by pair count or likelihood (`word_frequencies`, `train_wordpiece`); the fast tokenizer the library uses (`train_tokenizer`, `train_wikitext_tokenizer`, `tokenizer_from_vocab`), saved as `tokenizer.json` and `vocab.txt` (`save_tokenizer`, `load_tokenizer`). Every vocabulary starts with the special tokens, in `SPECIAL_TOKENS` order.
- `bertlib.data.wikitext`: Loading WikiText-2 and cutting it into what BERT's pre-training reads: `load_wikitext2` returns the rows of a split, from the HuggingFace hub or from local parquet files (`BERTLIB_DATA_DIR`), with errors that say how to work offline; `restore_joiners`, `parse_heading` and `split_sentences` undo WikiText's `@-@` joiners, recognise article titles and cut a paragraph into sentences; `split_documents`, `wikitext_documents` and `wikitext_paragraphs` group the rows into articles of sentences or paragraphs; `corpus_stats` counts them.
- `bertlib.evaluation.electra`: The scores of an ELECTRA model: how well its discriminator tells replaced tokens from original ones (replaced-token detection accuracy, with the share of replaced tokens that a guess of "original" everywhere would score against), and its generator's masked-LM scores, on the statically masked validation or test split.
- `bertlib.evaluation.plateau`: What a pre-training run measures to see the plateau, built in notebook 07: how spread out the model's attention is (the entropy of each layer, against attention spread evenly over the keys) and how much its masked-LM loss rises when the words of each segment are shuffled, which tells whether it reads word order yet. The pre-training recipe (`bertlib.recipes.objectives`) adds both to every validation of a BERT run.
- `bertlib.evaluation.report`: Where a pre-training run stands, in a few lines for the end of `python -m bertlib pretrain`: its last validation beside the unigram baseline on the same batches, its guesses for two fixed sentences, and whether it is still on the plateau, where a small BERT fills most masks with frequent tokens, and how to leave it.
- `bertlib.evaluation.scores`: Scores of a pre-trained BERT on text it never saw: `evaluation_loader` builds a WikiText-2 split with static masks and pairs, the same for every run; `validation_metrics` scores a model on it (MLM loss, perplexity, top-1 and top-5 accuracy of the masked tokens, NSP loss and accuracy), and `evaluate_run` does both for a run folder; `unigram_baseline` scores a guesser that ignores context on the same batches, `token_scores` breaks the scores down by token, and `fill_mask` gives a model's guesses for each `[MASK]` of free text.
- `bertlib.hf.folders`: Folders as HF `transformers` writes and reads them: a bertlib model and tokenizer saved so that `from_pretrained` and the pipelines load them (with bertlib's own modeling file beside the weights when no transformers class holds the model), and the encoder of any HF BERT checkpoint (a hub id, or a folder laid out as on the hub) for fine-tuning.
- `bertlib.hf.interop`: Conversion between bertlib's BERT and HF `transformers`' BERT (parameter names, configs, weights): the pre-training model and every fine-tuning head, both ways, and ELECTRA's discriminator as HF's. A model that no `transformers` class holds (Pre-LN, for one) converts to bertlib's own classes (`bertlib.hf.remote`). Folders as transformers writes and reads them are `bertlib.hf.folders`'.
- `bertlib.hf.remote.configuration_bertlib`: The configuration of a bertlib BERT for HF `transformers` (`trust_remote_code=True`): bertlib's `BertConfig` fields, under the model type "bertlib", for the models that no `transformers` class computes (Pre-LN, rotary positions at another base, and the like).
- `bertlib.hf.remote.modeling_bertlib`: A bertlib BERT for HF `transformers` (`trust_remote_code=True`): the same arithmetic as bertlib's model, in one file that needs only `torch` and `transformers`. Parameter names are bertlib's own, so an export's weights are bertlib's state dict as it is. Shipped by bertlib's `export-hf` beside `configuration_bertlib.py`.
- `bertlib.model.attention`: bertlib.model.attention: bidirectional multi-head self-attention, built in notebook 03. Scores of every query against every key, scaled and softmaxed, with an additive bias that hides padding; the explicit computation when the probabilities are wanted (notebook 09's maps), PyTorch's fused `scaled_dot_product_attention` otherwise. `MultiHeadSelfAttention` keeps HF's parameter names.
- `bertlib.model.bert`: bertlib.model.bert: BERT itself, built in notebook 05. `BertModel` (embeddings, encoder, and the pooler that summarises a sequence in its `[CLS]` vector) and `BertForPreTraining` with BERT's two heads: masked language modelling, whose decoder is the word-embedding matrix, scored only where there is a label, and next-sentence prediction on the pooled `[CLS]`; `head_index`, the positions the heads read.
- `bertlib.model.config`: `BertConfig`: every size and option of a bertlib BERT, with HF's field names, the presets from `tiny` to `large`, validation that names a bad field in one line, and JSON save/load. It also holds the choices that the settings name without loading torch (activations, norm styles, position types, poolings, soft targets).
- `bertlib.model.distillation`: DistilBERT (Sanh et al. 2019), built in notebook 12: a student with fewer layers starts as a copy of a pre-trained teacher's embeddings, heads and evenly spread layers (`teacher_layers`, `student_from_teacher`), and learns to match the teacher's predictions softened by a temperature, and its last hidden states, as well as the masked tokens (`distillation_losses`, unweighted). `bertlib.recipes.distil` weights the three losses and runs a distillation with them.
- `bertlib.model.electra`: ELECTRA (Clark et al. 2020), built in notebook 12: a small masked-LM generator, as deep as the discriminator and a fraction as wide, fills the masked positions with tokens sampled from its predictions; the discriminator (`BertModel` under a head with one score per token) learns which tokens were replaced, so that every token teaches it, not only the masked ones. The two share their embeddings. `ElectraForPreTraining` returns both losses, and `bertlib.recipes.objectives.ReplacedTokenDetection` weights them for the training loop.
- `bertlib.model.embeddings`: bertlib.model.embeddings: BERT's input layer, built in notebook 02. Every token id becomes the sum of three learned vectors (what the token is, where it is, which segment it belongs to), normalised by LayerNorm and thinned by dropout: `BertEmbeddings`, with HF's parameter names. Its inputs are checked by the hand-written `bertlib.model.inputs`, and notebook 11's variants change it through two attributes that are None here.
- `bertlib.model.encoder`: bertlib.model.encoder: the encoder stack, built in notebook 04. The GELU feed-forward network, the encoder layer (self-attention and feed-forward, each with dropout, a residual connection and LayerNorm, after the sum as in BERT or before the sub-layer), `BertEncoder`, which stacks the layers and can return every hidden state and attention map, BERT's weight initialisation, and the table of HF's names for a layer's parameters.
- `bertlib.model.heads`: Fine-tuning heads on `BertModel`, named and shaped as HF `transformers`' so that weights convert both ways: `BertForSequenceClassification` (one sentence or a pair; the pooled `[CLS]`, or the mean of the tokens), `BertForTokenClassification` (a label for every token) and `BertForQuestionAnswering` (the start and end of an answer span). Each keeps its task's label names, and loads the encoder of a pre-trained model with `load_encoder`, which says which weights are new. Built in notebook 10, beside the task features and metrics.
- `bertlib.model.inputs`: What the model checks of its inputs before it computes: token and segment ids inside their tables, shapes that match, labels that a loss can read, each refused with a one-line ValueError that names the input and the limit.
- `bertlib.model.variants`: bertlib.model.variants: the variants of BERT's model, built in notebook 11. Rotary position embeddings in every attention layer (RoFormer), the final LayerNorm of a Pre-LN stack, ALBERT's factorised embeddings and one layer shared across depths, and `apply_variants`, the switch that swaps into a `BertModel` the parts its configuration asks for. The notebook also writes RoBERTa's packed data (`bertlib.data.packed`) and ALBERT's sentence-order pairs.
- `bertlib.recipes.course`: The course recipe's settings (notebook 07): the `tiny` preset for a few hundred steps in quick mode; otherwise `mini`, on a GPU for 100 epochs at 128 tokens and then 512 (the shipped `models/course-mini` ran the 128-token part only), or as the README's main command trains it on a CPU.
- `bertlib.recipes.distil`: The distillation recipe (DistilBERT, Sanh et al. 2019): a student with fewer layers, initialised from a pre-trained teacher's embeddings, heads and evenly spread layers, learns on packed MLM sequences to match the teacher's softened predictions and last hidden states as well as the masked tokens. The student is a plain `BertForPreTraining` in an ordinary run folder, so evaluation, fill-mask, fine-tuning and export work on it.
- `bertlib.recipes.finetune`: The fine-tuning recipe: a task's head on a pre-trained encoder, trained by the same loop as pre-training (`bertlib.train.loop.fit`) with the task's loss, validated each epoch with the task's metric, the best validation kept as a checkpoint of its own. What a fine-tuned run predicts for new text is `bertlib.recipes.predict`.
- `bertlib.recipes.objectives`: The pre-training objectives for the training loop (`bertlib.train.accumulation.Objective`): BERT's MLM + NSP on sentence pairs, RoBERTa's MLM alone on packed sequences and ELECTRA's replaced-token detection; and `train`, which runs the loop on a model with the objective its data calls for, scored on a validation loader (with notebook 07's plateau probes for BERT).
- `bertlib.recipes.predict`: What a fine-tuned run says about new text: `predict` reads one input, or a list of them, as the run was trained to (a classifier the start of its text or pair, a tagger a long text in windows of whole words, a reader a long paragraph in windows with a stride) and answers with the task's labels, entities or answer span. A list is batched by length, so that each batch pads little, and answered in its own order.
- `bertlib.recipes.pretrain`: The pre-training recipe: `pretrain` takes a name to a trained run folder on WikiText-2, with BERT's MLM + NSP on sentence pairs, RoBERTa's MLM alone or ELECTRA's replaced-token detection on packed sequences; its data is `pretraining_data`.
- `bertlib.recipes.time_budget`: A time budget turned into a number of steps: a few steps and one validation are timed on a throwaway copy of the model, and the steps that fit in what is left are fixed before training starts, so the run is reproducible and resumes exactly.
- `bertlib.tasks.examples`: The fine-tuning tasks' vocabulary: which tasks there are (`TASKS`), their examples as plain dataclasses, the one-line `TaskDataError`, and the checks every example passes whatever file or hub dataset it comes from.
- `bertlib.tasks.features`: Fine-tuning features: task examples turned into what a head reads and back. A sentence or a pair becomes `[CLS] a [SEP] b [SEP]` with its class; a tagged sentence gets its word's tag on the first piece of each word and -100 on the others; a SQuAD question and a long paragraph become overlapping windows, each with the answer's first and last token (or `[CLS]` when the window does not hold the whole answer). `best_spans` goes the other way: it searches every window of a question for the best span and maps it back to characters.
- `bertlib.tasks.inputs`: The inputs a user gives `predict` in a file, one example a line: plain text (a sentence, or a text to tag), TSV or CSV with a header that names the task's columns, or JSONL with the task's fields, named as in the hub's datasets: sst2 `sentence`; rte `sentence1` and `sentence2`; conll2003 `tokens` (a list of words, or words between spaces); squad `context` and `question`. A line that also holds the task's label (sst2 and rte `label`, an index or a name; conll2003 `ner_tags`, tag names or ids; squad `answers`, texts of the context) is an example the prediction is scored against. Blank lines are left out; a bad line is a one-line `TaskDataError` that names the file and the line.
- `bertlib.tasks.load`: The fine-tuning tasks as plain Python examples: SST-2 (sentiment), RTE (entailment), CoNLL-2003 (named entities) and SQuAD v1.1 (extractive question answering).
- `bertlib.tasks.metrics`: The scores of the fine-tuning tasks: accuracy (SST-2, RTE), entity-level precision, recall and F1 (CoNLL-2003, with `seqeval`) and SQuAD v1.1's exact match and F1 with the official answer normalisation.
- `bertlib.tasks.sources`: Where the fine-tuning tasks' examples come from: the original files in the local data folder (GLUE TSV, CoNLL columns, the SQuAD JSON, split by article offline) and the HuggingFace hub's datasets, each turned into the examples of `bertlib.tasks.examples` with one-line errors that name the file and row.
- `bertlib.train.accumulation`: A step over several micro-batches and processes: what `bertlib.train.loop` adds around notebook 07's step. An objective names its loss parts and counts each part's items on the CPU; `step_totals` adds the counts over the step's micro-batches and, under `torchrun`, over the processes with one `all_reduce`; `backward` weights each micro-batch's losses by its share of those totals (notebook 07's `step_loss`), so that accumulation and several GPUs give the gradient of one big batch.
- `bertlib.train.checkpoints`: Checkpoints of a run: the weights and the training state of one step, written atomically with a SHA-256 checksum of each file, rotated so that a kill never leaves a listed, broken one, and read back checked.
- `bertlib.train.factory`: The model of a run: which class a run's settings train (BERT's pre-training model, ELECTRA's, a task's head) built fresh, or loaded from a checkpoint with its tokenizer for evaluation, prediction and export.
- `bertlib.train.lifecycle`: The life of a run folder that every recipe (pre-training, distillation, fine-tuning) shares: join the process group `torchrun` describes; refuse a folder inside a run or holding one (runs never nest); take the folder's lock, so that one process at a time writes it; for a new run, check that the folder is free before anything is written, then make it whole at once, with a fingerprint of the data it learns from; for a resumed one, read its settings back (a change is allowed to `RESUMABLE_FIELDS` only, a setting left unset keeps the run's, the length may not end before the newest checkpoint, and the training data must be the data it learned from) and record the new ones; choose the CPU threads; at the end, release the lock and leave the process group.
- `bertlib.train.loop`: The training loop of every recipe: notebook 07's step (`bertlib.train.step`) with the machinery a real run needs around it. `fit` reads as a few named steps: `start` (the model on its device, DDP under `torchrun`, AdamW, one loader per phase, the schedule, and a resumed run's state), `train_step` (one optimiser step, reseeded and resumable), `log_window` (the mean losses, learning rate, gradient norm and tokens/s of the last steps, read back from the device only then), `watch_pace` (on a CPU, say once when the run slowed because other work took its CPUs), `save` (a checksummed, atomic checkpoint and the loss curve), `paused` (validation and saving left out of the training time and of the progress bar's rate), and hooks that may end training at any step. Ctrl-C or SIGTERM writes a checkpoint and stops; a non-finite loss or gradient stops without saving (or is skipped, `on_nan="skip"`); a full disk stops with one line that names it.
- `bertlib.train.pace`: Whether other work has slowed a CPU run: its speed over stretches of training against the speed it started the session at, and the CPUs that other processes kept busy meanwhile. Threads that share their cores with other work wait for each other at every step, so the notice names the command that resumes the run with fewer threads.
- `bertlib.train.runs`: Run folders on disk: the configuration, the tokenizer and `metrics.jsonl` of a training run, written so that a crash never leaves a broken file, and read back with clear errors (`RunError`; `NonFiniteLoss` when a run meets a loss, gradient or weight that is not finite). The checkpoints inside are `bertlib.train.checkpoints`'.
- `bertlib.train.settings`: How to train: `TrainConfig` (the training loop's settings), `PretrainConfig` (plus the pre-training data and objective), `DistilConfig` (the same data, plus the teacher and the distillation loss) and `FinetuneConfig` (plus the task and where the encoder comes from), validated when made and saved in every run's `config.json`. Each field's metadata holds its command-line help, so a new option is one edit here.
- `bertlib.train.step`: bertlib.train.step: one optimiser step of pre-training, built in notebook 07. AdamW with weight decay on the matrices only, warm-up then linear or cosine decay, and `training_step`: the MLM + NSP loss (under autocast), backward, the gradient norm clipped, the optimiser step; `step_loss` weights micro-batches so that gradient accumulation gives the big batch's gradient. `bertlib.train.loop.fit` runs the same arithmetic in a real run.
- `bertlib.utils.checks`: Checks of settings, each raising a one-line ValueError that names the setting, its value and what is allowed.
- `bertlib.utils.devices`: Where tensors live and how they are computed: the device, the CPU threads, mixed precision (and on a CPU the matrix products of `F.linear` through oneDNN), moving batches, eval mode, and whether a tensor's values can be read without stalling a GPU.
- `bertlib.utils.environment`: What the environment asks of bertlib: quick mode, the local data folder, where notebooks put their runs, the machine it runs on and how busy its CPUs are, and the command lines bertlib prints for a shell.
- `bertlib.utils.files`: Files that a crash never leaves half-written: atomic writes (a temporary file beside the target, flushed and renamed over it) and flushed folder entries, so that a rename survives a power cut. Run folders, checkpoints, tokenizers, configurations and results files are all written through it. Files get the permissions the umask gives (`open_up`), also where a writer makes them private. A write that found no room (a full disk, a used-up quota, the process's file-size limit) is told apart from other failures and described in words (`no_room`, `no_room_reason`).
- `bertlib.utils.processes`: The training process and its peers: the process group that `torchrun` describes (this process's rank among how many), Ctrl-C or SIGTERM turned into a request that the training loop honours between steps, and the error it raises once it has (`TrainingInterrupted`).
- `bertlib.viz.attention`: Attention maps of any bertlib BERT, computed and drawn in Python: `attention_maps` runs a model with `output_attentions=True` on a text or a pair and keeps one input's `[layers, heads, seq, seq]` maps with its tokens, segments and words; `plot_attention` (a heatmap), `plot_attention_grid` (the model view) and `head_view_lines` with `plot_head_view` (the head view) draw them; `head_entropy` and `head_scores` measure what each head attends to; `plot_metrics` draws the curves of a training run.
- `bertlib.viz.diagrams`: Concept diagrams of the course, drawn with matplotlib so that they replay offline and under nbval: the input embedding sum (notebook 02), one head's attention with the padding mask (03), the encoder block, Post-LN beside Pre-LN (04), the pre-training model and its two heads (05), the four fine-tuning patterns (10), and ELECTRA's generator and discriminator (12). Each function returns a `Diagram`, which a notebook shows as a PNG image and whose `figure` is the matplotlib `Figure`; nothing here computes a model.
- `bertlib.viz.plots`: The figures of the evaluation and attention notebooks that are drawing and nothing else: a model's scores beside a baseline's (notebook 08), and the entropy and the pattern scores of every attention head (notebook 09). They return `matplotlib.figure.Figure`s, which a notebook shows and a script saves, and never touch pyplot's current figure.
- `bertlib.viz.render`: Attention maps rendered for files and browsers: a figure as PNG bytes (`figure_png`), a map as a small PNG (`thumbnail_png`), the head view as self-contained SVG whose hover is plain CSS (`head_view_svg`), and the attention explorer (`explorer_html`): every layer, head and view of one input drawn beforehand into one HTML fragment, switched by a few lines of plain JavaScript, so that it works in a saved notebook and on the course's website, where no kernel runs and nothing may be fetched.
- `bertlib.viz.tasks`: Pictures of the fine-tuning tasks (notebook 10): a classifier's confusion matrix, bars of scores over seeds beside reference lines (the majority class, a published model), and a tagger's entities and a reader's answer as HTML. The plots return a `Figure`, the views an HTML string; nothing here computes a model or a score.
- `bertlib.viz.widget`: The interactive attention widget of notebook 09: text boxes, a layer slider, a head selector and three views (heatmap, head view, model view), drawn in Python as PNG or inline SVG so that it works offline, with PNG and HTML export, and its explorer (`AttentionWidget.explorer`): every view drawn beforehand, for where no kernel runs."""

import sys

__version__ = "0.2.0"

# The names a user reaches for, imported on first use (PEP 562), so that `import bertlib` stays light and a
# name needs only its own module's dependencies.
_PUBLIC = {
    "BertConfig": "model.config",
    "PRESETS": "model.config",
    "BertModel": "model.bert",
    "BertForPreTraining": "model.bert",
    "ElectraForPreTraining": "model.electra",
    "BertForSequenceClassification": "model.heads",
    "BertForTokenClassification": "model.heads",
    "BertForQuestionAnswering": "model.heads",
    "TrainConfig": "train.settings",
    "PretrainConfig": "train.settings",
    "FinetuneConfig": "train.settings",
    "DistilConfig": "train.settings",
    "load_wikitext2": "data.wikitext",
    "wikitext_documents": "data.wikitext",
    "train_tokenizer": "data.tokenizer",
    "train_wikitext_tokenizer": "data.tokenizer",
    "load_tokenizer": "data.tokenizer",
    "save_tokenizer": "data.tokenizer",
    "PretrainingDataset": "data.pretraining",
    "pretraining_dataloader": "data.pretraining",
    "load_run": "train.runs",
    "load_model": "train.factory",
    "RunError": "train.runs",
    "fit": "train.loop",
    "pretrain": "recipes.pretrain",
    "course_configs": "recipes.course",
    "finetune": "recipes.finetune",
    "predict": "recipes.predict",
    "distil": "recipes.distil",
    "evaluate_run": "evaluation.scores",
    "fill_mask": "evaluation.scores",
    "validation_metrics": "evaluation.scores",
    "evaluate_electra_run": "evaluation.electra",
    "to_transformers": "hf.interop",
    "from_transformers": "hf.interop",
    "save_pretrained_hf": "hf.folders",
    "load_hf_encoder": "hf.folders",
    "load_task": "tasks.load",
    "quick_mode": "utils.environment",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'bertlib' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


# bertlib 0.2 kept its modules in one folder; they moved into one folder per layer. For one release an old path still
# works, with a DeprecationWarning that names the new one: an old module (`bertlib.tokenizer`) is a stand-in, made on
# import, whose names come from the modules listed here, in order; a folder that took an old module's name
# (`bertlib.model`) gives that module's names the same way (its `__init__` asks `_old_names`).
_MOVED = {
    "attention": ("model.attention",),
    "batching": ("data.batching",),
    "checkpoints": ("train.checkpoints",),
    "checks": ("utils.checks",),
    "config": ("model.config",),
    "corpus": ("data.corpus",),
    "course": ("recipes.course",),
    "data": ("data.wikitext",),
    "devices": ("utils.devices",),
    "distillation": ("model.distillation", "recipes.distil"),
    "electra": ("model.electra",),
    "electra_evaluate": ("evaluation.electra",),
    "embeddings": ("model.embeddings", "model.inputs"),
    "encoder": ("model.encoder",),
    "environment": ("utils.environment",),
    "evaluate": ("evaluation.scores",),
    "files": ("utils.files",),
    "finetune_data": ("tasks.features",),
    "finetuning": ("recipes.finetune", "recipes.predict"),
    "heads": ("model.heads",),
    "hf_folders": ("hf.folders",),
    "interop": ("hf.interop",),
    "lifecycle": ("train.lifecycle",),
    "model": ("model.bert",),
    "model_factory": ("train.factory",),
    "objectives": ("recipes.objectives",),
    "packed_data": ("data.packed",),
    "pretraining": ("recipes.pretrain",),
    "pretraining_data": ("data.pretraining", "data.pairs"),
    "processes": ("utils.processes",),
    "run_report": ("evaluation.report",),
    "runs": ("train.runs", "train.lifecycle"),
    "task_examples": ("tasks.examples", "data.wikitext"),
    "task_metrics": ("tasks.metrics",),
    "task_sources": ("tasks.sources",),
    "tasks": ("tasks.examples", "tasks.load", "data.wikitext"),
    "time_budget": ("recipes.time_budget",),
    "tokenizer": ("data.tokenizer",),
    "train_config": ("train.settings", "data.pairs", "model.config"),
    "trainer": ("train.loop", "train.step"),
    "viz": ("viz.attention",),
    "widget": ("viz.widget",),
}


def _moved(old: str, name: str, warn: bool):
    "The object `name` of bertlib 0.2's module `bertlib.<old>`, from the module it moved to (`warn`: say where)."
    from importlib import import_module

    for new in _MOVED[old] if not name.startswith("_") else ():
        module = import_module(f".{new}", __name__)
        if hasattr(module, name):
            if warn:
                import warnings

                warnings.warn(
                    f"bertlib.{old}.{name} is now bertlib.{new}.{name}; import it from there (bertlib 0.2's path "
                    f"goes in the next release)",
                    DeprecationWarning,
                    stacklevel=3,
                )
            return getattr(module, name)
    raise AttributeError(f"module 'bertlib.{old}' has no attribute {name!r}")


def _old_names(package: str):
    """The `__getattr__` of a folder that took the name of a bertlib 0.2 module: that module's names, each with a warning
    on its first use; the folder's own modules are left to the import system."""
    from importlib.machinery import PathFinder

    old = package.removeprefix(f"{__name__}.")

    def old_name(name: str):
        folder = sys.modules[package]
        if PathFinder.find_spec(f"{package}.{name}", folder.__path__) is not None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")  # a module of its own, not imported
        value = _moved(old, name, warn=True)
        setattr(folder, name, value)  # found from now on without a warning
        return value

    return old_name


class _OldModules:
    "Finds bertlib 0.2's modules that no folder took the name of: each is a stand-in whose names come from `_MOVED`."

    @staticmethod
    def find_spec(fullname, path, target=None):
        from importlib.util import spec_from_loader

        old = fullname.removeprefix(f"{__name__}.")
        return spec_from_loader(fullname, _OldModules) if fullname != old and old in _MOVED else None

    @staticmethod
    def create_module(spec):
        return None

    @staticmethod
    def exec_module(module):
        import warnings

        old = module.__name__.removeprefix(f"{__name__}.")
        module.__getattr__ = lambda name: _moved(old, name, warn=False)  # the import said where they went
        new = " or ".join(f"bertlib.{new}" for new in _MOVED[old])
        warnings.warn(
            f"bertlib.{old} is now {new}; import from there (bertlib 0.2's path goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )


sys.meta_path.append(_OldModules)  # last: the package's own modules and folders are found first
