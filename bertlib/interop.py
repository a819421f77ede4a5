"""Conversion between bertlib's BERT and HF `transformers`' BERT (weights, configs, tokenizer, saved directory).

Written by hand; notebook 05 presents it.
"""

import dataclasses
import os
import tempfile
from pathlib import Path

import tokenizers
import torch
import transformers
from tokenizers import decoders

from .config import BertConfig
from .encoder import HF_LAYER_NAMES
from .model import BertForPreTraining
from .tokenizer import CLS, CONTINUATION, MASK, PAD, SEP, UNK, add_bert_post_processor

__all__ = ["SPECIAL_TOKENS", "hf_name", "hf_names", "to_hf_config", "from_hf_config", "to_transformers",
           "from_transformers", "to_hf_tokenizer", "save_pretrained_hf"]

SPECIAL_TOKENS = {"pad_token": PAD, "unk_token": UNK, "cls_token": CLS, "sep_token": SEP, "mask_token": MASK}
# Our module names outside the encoder layers -> HF's (the parameter's .weight/.bias suffix is kept).
_HF_MODULE_NAMES = {
    "bert.embeddings.layer_norm": "bert.embeddings.LayerNorm",
    "mlm_head.dense": "cls.predictions.transform.dense",
    "mlm_head.layer_norm": "cls.predictions.transform.LayerNorm",
    "mlm_head": "cls.predictions",  # its `bias`
    "nsp_head": "cls.seq_relationship",
}
_LAYER_PREFIX = "bert.encoder.layers."
# HF's decoder is tied to these parameters; its state dict lists it under both names.
_HF_TIED = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
            "cls.predictions.decoder.bias": "mlm_head.bias"}


def hf_name(key: str) -> str:
    "HF `BertForPreTraining`'s name for our parameter `key` (e.g. 'bert.encoder.layers.0.attention.query.weight')."
    module, _, kind = key.rpartition(".")
    if module.startswith(_LAYER_PREFIX):
        index, name = module.removeprefix(_LAYER_PREFIX).split(".", 1)
        return f"bert.encoder.layer.{index}.{HF_LAYER_NAMES[name]}.{kind}"
    return f"{_HF_MODULE_NAMES.get(module, module)}.{kind}"


def hf_names(model: BertForPreTraining) -> dict[str, str]:
    "Our state-dict key -> HF's, for every parameter of `model`."
    return {key: hf_name(key) for key in model.state_dict()}


def to_hf_config(config: BertConfig) -> transformers.BertConfig:
    "The `transformers.BertConfig` of the same model; raises ValueError for options HF BERT lacks."
    if config.norm_style != "post":
        raise ValueError(f"BertConfig.norm_style={config.norm_style!r} cannot be exported: HF transformers' BERT "
                         f"supports only norm_style='post' (LayerNorm after each residual sum)")
    fields = {k: v for k, v in config.to_dict().items() if k != "norm_style"}
    return transformers.BertConfig(**fields, architectures=["BertForPreTraining"])


def from_hf_config(hf_config: transformers.PretrainedConfig) -> BertConfig:
    "Our `BertConfig` for an HF BERT config; raises ValueError for options bertlib does not implement."
    if hf_config.model_type != "bert":
        raise ValueError(f"model_type={hf_config.model_type!r} is not supported; only 'bert' converts")
    unsupported = {"is_decoder": False, "add_cross_attention": False, "tie_word_embeddings": True,
                   "position_embedding_type": "absolute"}
    for name, expected in unsupported.items():
        value = getattr(hf_config, name, expected)
        if value != expected:
            raise ValueError(f"{name}={value!r} is not supported by bertlib; only {name}={expected!r} converts")
    names = [f.name for f in dataclasses.fields(BertConfig) if f.name != "norm_style"]
    return BertConfig(**{name: getattr(hf_config, name) for name in names})


def _match(module: torch.nn.Module, like: torch.nn.Module) -> torch.nn.Module:
    "Move `module` to the device, dtype and train/eval mode of `like` (the model it was converted from)."
    param = next(like.parameters())
    return module.to(device=param.device, dtype=param.dtype).train(like.training)


def to_transformers(model: BertForPreTraining) -> transformers.BertForPreTraining:
    "A `transformers.BertForPreTraining` holding copies of `model`'s weights (same device, dtype and mode)."
    hf_model = transformers.BertForPreTraining(to_hf_config(model.config))
    state = model.state_dict()
    hf_state = {hf_name(key): value for key, value in state.items()}
    hf_state.update({hf_key: state[key] for hf_key, key in _HF_TIED.items()})
    hf_model.load_state_dict(hf_state)
    return _match(hf_model, model)


def from_transformers(hf_model: transformers.BertForPreTraining) -> BertForPreTraining:
    "A bertlib `BertForPreTraining` holding copies of an HF `BertForPreTraining`'s weights."
    if not isinstance(hf_model, transformers.BertForPreTraining):
        raise TypeError(f"expected a transformers.BertForPreTraining, got {type(hf_model).__name__}; load the "
                        f"checkpoint with transformers.BertForPreTraining.from_pretrained")
    hf_state = hf_model.state_dict()
    for hf_key, key in _HF_TIED.items():
        if not torch.equal(hf_state[hf_key], hf_state[hf_name(key)]):
            raise ValueError(f"{hf_key} differs from {hf_name(key)}: bertlib's MLM decoder is always tied to the "
                             f"word embeddings, so an untied model cannot be converted")
    with torch.device("meta"):  # skip the random initialisation that the copies overwrite
        model = BertForPreTraining(from_hf_config(hf_model.config))
    model.load_state_dict({key: hf_state[hf_name(key)].clone() for key in model.state_dict()}, assign=True)
    return _match(model, hf_model)


def to_hf_tokenizer(tokenizer: tokenizers.Tokenizer, model_max_length: int) -> transformers.PreTrainedTokenizerFast:
    """Wrap a `tokenizers.Tokenizer` with BERT's special tokens for `transformers`.

    Works on a copy. A tokenizer without a post-processor gets BERT's `[CLS] A [SEP] B [SEP]` template, and
    one without a decoder gets the WordPiece decoder, so pipelines see the inputs the model was trained on."""
    missing = [token for token in SPECIAL_TOKENS.values() if tokenizer.token_to_id(token) is None]
    if missing:
        raise ValueError(f"the tokenizer lacks the special token(s) {', '.join(missing)}; a BERT tokenizer needs "
                         f"{', '.join(SPECIAL_TOKENS.values())}")
    copy = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    if copy.post_processor is None:
        add_bert_post_processor(copy)
    if copy.decoder is None:
        copy.decoder = decoders.WordPiece(prefix=CONTINUATION)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=copy, model_max_length=model_max_length,
                                                **SPECIAL_TOKENS)


def save_pretrained_hf(model: BertForPreTraining, tokenizer: tokenizers.Tokenizer, path: str | os.PathLike) -> Path:
    """Write `model` and `tokenizer` to the directory `path` in HF `transformers`' format and return it.

    The directory holds the model as a `BertForPreTraining` (safetensors and config.json) and the fast
    tokenizer, so `AutoModelForMaskedLM.from_pretrained(path)` (which drops the NSP head),
    `AutoTokenizer.from_pretrained(path)` and `pipeline("fill-mask", model=path)` work. Files are written to a
    temporary directory first and moved in one by one, so no file is ever left half-written."""
    pad = tokenizer.token_to_id(SPECIAL_TOKENS["pad_token"])
    if pad is not None and pad != model.config.pad_token_id:
        raise ValueError(f"the tokenizer's [PAD] id is {pad} but BertConfig.pad_token_id={model.config.pad_token_id}")
    if tokenizer.get_vocab_size() > model.config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.get_vocab_size()} tokens but the model only "
                         f"BertConfig.vocab_size={model.config.vocab_size}")
    hf_tokenizer = to_hf_tokenizer(tokenizer, model.config.max_position_embeddings)
    hf_model = to_transformers(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as tmp:
        hf_model.save_pretrained(tmp)
        hf_tokenizer.save_pretrained(tmp)
        path.mkdir(exist_ok=True)
        for file in Path(tmp).iterdir():
            os.replace(file, path / file.name)
    return path
