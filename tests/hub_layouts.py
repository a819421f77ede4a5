"""HF BERT checkpoints laid out as users bring them, for tests that must not rely on bertlib's own exports.

- `google_layout`: as Google's small BERTs on the hub (`google/bert_uncased_L-4_H-256_A-4` and its siblings): the
  original eleven-key `config.json` (no `model_type`, no `layer_norm_eps`, no `pad_token_id`), a `vocab.txt`
  with Google's special-token ids (`[PAD]` 0, `[unused*]`, `[UNK]` 100, `[CLS]` 101, `[SEP]` 102, `[MASK]` 103)
  and no tokenizer files, and a `pytorch_model.bin` of the pre-training model saved by transformers 3/4 (its
  `position_ids` buffer included).
- `bert_base_layout`: as `bert-base-uncased`: the `config.json` transformers 4.6 wrote (`BertForMaskedLM`,
  `gradient_checkpointing`, `position_embedding_type`), `tokenizer_config.json` and `vocab.txt` without
  `tokenizer.json`, and weights converted from TensorFlow, whose LayerNorms are named `gamma` and `beta`, the
  tied decoder stored once.
- `transformers_layout`: what `save_pretrained` of the installed transformers writes itself.

Each is a tiny model with random weights; the transformers model it was made from is returned with the folder.
"""

import json
from pathlib import Path

import safetensors.torch
import torch
import transformers
from bert_testing import wordpiece_tokenizer

GOOGLE_SPECIALS = ["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SIZES = dict(
    hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, max_position_embeddings=128
)


def google_vocab() -> list[str]:
    "Google's special tokens at their ids, then the pieces of the tests' small WordPiece tokenizer."
    pieces = sorted(wordpiece_tokenizer().get_vocab().items(), key=lambda item: item[1])
    return GOOGLE_SPECIALS + [piece for piece, _ in pieces if piece not in GOOGLE_SPECIALS]


def _pretraining_model(seed: int, **config) -> transformers.BertForPreTraining:
    torch.manual_seed(seed)
    return transformers.BertForPreTraining(transformers.BertConfig(**config)).eval()


def _write_vocab(path: Path, vocab: list[str]) -> None:
    (path / "vocab.txt").write_text("".join(f"{piece}\n" for piece in vocab), encoding="utf-8")


def google_layout(path: Path, seed: int = 0) -> tuple[Path, transformers.BertForPreTraining]:
    "A folder as Google's small BERTs are on the hub (see the module's docstring)."
    vocab = google_vocab()
    config = {
        "hidden_size": SIZES["hidden_size"],
        "hidden_act": "gelu",
        "initializer_range": 0.02,
        "vocab_size": len(vocab),
        "hidden_dropout_prob": 0.1,
        "num_attention_heads": SIZES["num_attention_heads"],
        "type_vocab_size": 2,
        "max_position_embeddings": SIZES["max_position_embeddings"],
        "num_hidden_layers": SIZES["num_hidden_layers"],
        "intermediate_size": SIZES["intermediate_size"],
        "attention_probs_dropout_prob": 0.1,
    }
    model = _pretraining_model(seed, **config)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    _write_vocab(path, vocab)
    state = dict(model.state_dict())
    state["bert.embeddings.position_ids"] = torch.arange(config["max_position_embeddings"])[None]
    torch.save(state, path / "pytorch_model.bin")
    return path, model


def bert_base_layout(path: Path, seed: int = 1) -> tuple[Path, transformers.BertForPreTraining]:
    "A folder as `bert-base-uncased` is on the hub (see the module's docstring)."
    vocab = google_vocab()
    config = {
        "architectures": ["BertForMaskedLM"],
        "attention_probs_dropout_prob": 0.1,
        "gradient_checkpointing": False,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": SIZES["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": SIZES["intermediate_size"],
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": SIZES["max_position_embeddings"],
        "model_type": "bert",
        "num_attention_heads": SIZES["num_attention_heads"],
        "num_hidden_layers": SIZES["num_hidden_layers"],
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "transformers_version": "4.6.0.dev0",
        "type_vocab_size": 2,
        "use_cache": True,
        "vocab_size": len(vocab),
    }
    model = _pretraining_model(
        seed,
        **{
            k: v
            for k, v in config.items()
            if k
            not in (
                "architectures",
                "gradient_checkpointing",
                "model_type",
                "position_embedding_type",
                "transformers_version",
            )
        },
    )
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (path / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": True, "model_max_length": 512}), encoding="utf-8"
    )
    _write_vocab(path, vocab)
    tensorflow_names = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v.clone()
        for k, v in model.state_dict().items()
        if not k.startswith("cls.predictions.decoder.")
    }  # tied to the embeddings: stored once
    safetensors.torch.save_file(tensorflow_names, path / "model.safetensors", metadata={"format": "pt"})
    return path, model


def transformers_layout(path: Path, seed: int = 2) -> tuple[Path, transformers.BertForPreTraining]:
    "A folder that the installed transformers wrote with `save_pretrained` (model and `BertTokenizer`)."
    model = _pretraining_model(seed, vocab_size=len(google_vocab()), **SIZES)
    model.save_pretrained(path)
    _write_vocab(path, google_vocab())
    transformers.BertTokenizer.from_pretrained(path).save_pretrained(path)
    return path, model


LAYOUTS = {"google": google_layout, "bert-base": bert_base_layout, "transformers": transformers_layout}
