"""BERT built from scratch in PyTorch, one notebook per component, trained on WikiText-2

Modules:

- `bertlib.batching`: Batches for every loop of bertlib: a seeded, length-grouped, shardable sampler that can start an epoch part of the way in, the one `DataLoader` factory, and how much padding a batching wastes.
- `bertlib.corpus`: The pre-tokenised corpus: WikiText-2 (or any documents of sentences) encoded once with the fast tokenizer, kept as three flat arrays and cached on disk under a hash of everything it depends on.
- `bertlib.heads`: Fine-tuning heads on `BertModel`, named and shaped as HF `transformers`' so that weights convert both ways: `BertForSequenceClassification` (one sentence or a pair; the pooled `[CLS]`, or the mean of the tokens), `BertForTokenClassification` (a label for every token) and `BertForQuestionAnswering` (the start and end of an answer span). Each keeps its task's label names, and loads the encoder of a pre-trained model with `load_encoder`, which says which weights are new.
- `bertlib.helpers`: Generic helpers that every layer of bertlib may use: quick mode, the local data folder, files written atomically, argument checks, the label that losses ignore, devices and mixed precision, and eval mode.
- `bertlib.interop`: Conversion between bertlib's BERT and HF `transformers`' BERT (weights, configs, tokenizer, saved directory): the pre-training model and every fine-tuning head, both ways, and the encoder of any HF BERT checkpoint (a hub id or a folder) for fine-tuning with bertlib.
- `bertlib.pretrain`: The pre-training recipe: BERT's MLM + NSP objective for the training loop of `bertlib.trainer`, `train` on a ready dataset, `pretrain` from a name to a trained run folder on WikiText-2, and the course model's settings.
- `bertlib.runs`: Run folders on disk: the configuration, the tokenizer, `metrics.jsonl`, the loss curve and the checkpoints of a training run, written so that a crash never leaves a broken file, and read back with clear errors.
- `bertlib.task_examples`: The fine-tuning tasks' vocabulary: which tasks there are (`TASKS`), their examples as plain dataclasses, the one-line `TaskDataError`, and the checks every example passes whatever file or hub dataset it comes from.
- `bertlib.task_metrics`: The scores of the fine-tuning tasks: accuracy (SST-2, RTE), entity-level precision, recall and F1 (CoNLL-2003, with `seqeval`) and SQuAD v1.1's exact match and F1 with the official answer normalisation.
- `bertlib.task_sources`: Where the fine-tuning tasks' examples come from: the original files in the local data folder (GLUE TSV, CoNLL columns, the SQuAD JSON, split by article offline) and the HuggingFace hub's datasets, each turned into the examples of `bertlib.task_examples` with one-line errors that name the file and row.
- `bertlib.tasks`: The fine-tuning tasks as plain Python examples: SST-2 (sentiment), RTE (entailment), CoNLL-2003 (named entities) and SQuAD v1.1 (extractive question answering).
- `bertlib.train_config`: How to train: `TrainConfig` (the training loop's settings) and `PretrainConfig` (plus the pre-training data), validated when made and saved in every run's `config.json`. Each field's metadata holds its command-line help, so a new option is one edit here.
- `bertlib.widget`: The interactive attention widget of notebook 09: text boxes, a layer slider, a head selector and three views (heatmap, head view, model view), drawn in Python as PNG or inline SVG so that it works offline, with PNG and HTML export."""

__version__ = "0.2.0"

# The names a user reaches for, imported on first use (PEP 562), so that `import bertlib` stays light and a
# name needs only its own module's dependencies.
_PUBLIC = {
    "BertConfig": "config", "PRESETS": "config",
    "BertModel": "model", "BertForPreTraining": "model",
    "BertForSequenceClassification": "heads", "BertForTokenClassification": "heads",
    "BertForQuestionAnswering": "heads",
    "TrainConfig": "train_config", "PretrainConfig": "train_config",
    "load_wikitext2": "data", "wikitext_documents": "data",
    "train_tokenizer": "tokenizer", "train_wikitext_tokenizer": "tokenizer", "load_tokenizer": "tokenizer",
    "save_tokenizer": "tokenizer",
    "PretrainingDataset": "pretraining_data", "pretraining_dataloader": "pretraining_data",
    "load_run": "runs", "load_model": "runs", "RunError": "runs",
    "fit": "trainer",
    "pretrain": "pretrain", "course_configs": "pretrain",
    "evaluate_run": "evaluate", "fill_mask": "evaluate", "validation_metrics": "evaluate",
    "to_transformers": "interop", "from_transformers": "interop", "save_pretrained_hf": "interop",
    "load_hf_encoder": "interop", "load_task": "tasks",
    "quick_mode": "helpers",
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
