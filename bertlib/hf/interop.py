"""Conversion between bertlib's BERT and HF `transformers`' BERT (parameter names, configs, weights): the
pre-training model and every fine-tuning head, both ways, and ELECTRA's discriminator as HF's. A model that no
`transformers` class holds (Pre-LN, for one) converts to bertlib's own classes (`bertlib.hf.remote`). Folders as
transformers writes and reads them are `bertlib.hf.folders`'.

Written by hand; notebook 05 presents it.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
import transformers

from ..model.bert import BertForPreTraining
from ..model.config import ACTIVATIONS, BertConfig
from ..model.electra import ElectraForPreTraining
from ..model.encoder import HF_LAYER_NAMES
from ..model.heads import BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification
from .remote import configuration_bertlib, modeling_bertlib

__all__ = [
    "HF_CLASSES",
    "ROFORMER_CLASSES",
    "ALBERT_CLASSES",
    "OWN_CLASSES",
    "OWN_AUTO_MAP",
    "hf_name",
    "hf_names",
    "albert_name",
    "electra_name",
    "hf_class",
    "to_hf_config",
    "from_hf_config",
    "to_transformers",
    "from_transformers",
]

BertLibModel = (
    BertForPreTraining
    | BertForSequenceClassification
    | BertForTokenClassification
    | BertForQuestionAnswering
    | ElectraForPreTraining
)
# our model classes -> HF's, which hold the same weights under the names `hf_name` gives
HF_CLASSES = {
    BertForPreTraining: transformers.BertForPreTraining,
    BertForSequenceClassification: transformers.BertForSequenceClassification,
    BertForTokenClassification: transformers.BertForTokenClassification,
    BertForQuestionAnswering: transformers.BertForQuestionAnswering,
}
# ... and with rotary positions: HF RoFormer is BERT with rotary attention and no position table, under
# `roformer.*`. It has no NSP head (a pre-training model exports as a masked LM) and its sequence classifier
# is not BERT's pooler, so a RoPE sequence classifier does not export.
ROFORMER_CLASSES = {
    BertForPreTraining: transformers.RoFormerForMaskedLM,
    BertForTokenClassification: transformers.RoFormerForTokenClassification,
    BertForQuestionAnswering: transformers.RoFormerForQuestionAnswering,
}
_ROFORMER_SINUSOIDS = "roformer.encoder.embed_positions.weight"  # RoFormer's fixed angle table, made at init
# ... and with ALBERT's factorised embeddings or shared layers: HF ALBERT (its SOP head is our NSP head)
ALBERT_CLASSES = {
    BertForPreTraining: transformers.AlbertForPreTraining,
    BertForSequenceClassification: transformers.AlbertForSequenceClassification,
    BertForTokenClassification: transformers.AlbertForTokenClassification,
    BertForQuestionAnswering: transformers.AlbertForQuestionAnswering,
}
_ALBERT_LAYER_NAMES = {
    "attention.query": "attention.query",
    "attention.key": "attention.key",
    "attention.value": "attention.value",
    "attention.output": "attention.dense",
    "attention_norm": "attention.LayerNorm",
    "feed_forward.intermediate": "ffn",
    "feed_forward.output": "ffn_output",
    "feed_forward_norm": "full_layer_layer_norm",
}
_ALBERT_MODULE_NAMES = {
    "bert.embeddings.layer_norm": "albert.embeddings.LayerNorm",
    "bert.embeddings.projection": "albert.encoder.embedding_hidden_mapping_in",
    "bert.pooler.dense": "albert.pooler",
    "mlm_head.dense": "predictions.dense",
    "mlm_head.layer_norm": "predictions.LayerNorm",
    "mlm_head": "predictions",
    "nsp_head": "sop_classifier.classifier",
}
_ALBERT_TIED = {
    "predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
    "predictions.decoder.bias": "mlm_head.bias",
}
# ... and ELECTRA's discriminator: HF ELECTRA's layers are BERT's, under `electra.`; the generator stays behind
_ELECTRA_MODULE_NAMES = {
    "bert.embeddings.layer_norm": "electra.embeddings.LayerNorm",
    "bert.embeddings.projection": "electra.embeddings_project",
    "rtd_head.dense": "discriminator_predictions.dense",
    "rtd_head.prediction": "discriminator_predictions.dense_prediction",
}
# ... and for every model that none of these holds, bertlib's own classes (`bertlib/hf/remote`), under our names. An
# export copies their two files beside the weights, and its config's `auto_map` points `transformers`' Auto classes
# at them, so `AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True)` builds them without bertlib.
OWN_CLASSES = {
    BertForPreTraining: modeling_bertlib.BertlibForMaskedLM,
    BertForSequenceClassification: modeling_bertlib.BertlibForSequenceClassification,
    BertForTokenClassification: modeling_bertlib.BertlibForTokenClassification,
    BertForQuestionAnswering: modeling_bertlib.BertlibForQuestionAnswering,
}
OWN_AUTO_MAP = {
    auto: f"{cls.__module__.rpartition('.')[2]}.{cls.__name__}"
    for auto, cls in (
        ("AutoConfig", configuration_bertlib.BertlibConfig),
        ("AutoModel", modeling_bertlib.BertlibModel),
        ("AutoModelForMaskedLM", modeling_bertlib.BertlibForMaskedLM),
        ("AutoModelForSequenceClassification", modeling_bertlib.BertlibForSequenceClassification),
        ("AutoModelForTokenClassification", modeling_bertlib.BertlibForTokenClassification),
        ("AutoModelForQuestionAnswering", modeling_bertlib.BertlibForQuestionAnswering),
    )
}
_NO_NSP = ("bert.pooler.", "nsp_head.")  # what a masked-LM class leaves out of a pre-training model


def _albert(config: BertConfig) -> bool:
    return config.share_layers or config.embedding_width != config.hidden_size


def albert_name(key: str) -> str:
    "HF ALBERT's name for our parameter `key` (each of our layers is a group of one layer in ALBERT)."
    return _rename(
        key,
        "albert.encoder.albert_layer_groups.{}.albert_layers.0",
        _ALBERT_LAYER_NAMES,
        _ALBERT_MODULE_NAMES,
        "albert.",
    )


def electra_name(key: str) -> str:
    "HF `ElectraForPreTraining`'s name for our discriminator's parameter `key` (`bert.*` or `rtd_head.*`)."
    return _rename(key, "electra.encoder.layer.{}", HF_LAYER_NAMES, _ELECTRA_MODULE_NAMES, "electra.")


_OURS_ONLY = ("norm_style", "rope_theta", "embedding_size", "share_layers")  # fields HF's BertConfig lacks
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
_HF_TIED = {
    "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
    "cls.predictions.decoder.bias": "mlm_head.bias",
}


def _rename(
    key: str, layer: str, layer_names: dict[str, str], module_names: dict[str, str], prefix: str = "bert."
) -> str:
    """Another family's name for our parameter `key`: layer `i`'s parameters under `layer.format(i)` with
    `layer_names`, other modules through `module_names`, the rest with our `bert.` turned into `prefix`."""
    module, _, kind = key.rpartition(".")
    if module.startswith(_LAYER_PREFIX):
        index, name = module.removeprefix(_LAYER_PREFIX).split(".", 1)
        return f"{layer.format(index)}.{layer_names[name]}.{kind}"
    return f"{module_names.get(module, module.replace('bert.', prefix, 1))}.{kind}"


def hf_name(key: str) -> str:
    "HF `BertForPreTraining`'s name for our parameter `key` (e.g. 'bert.encoder.layers.0.attention.query.weight')."
    return _rename(key, "bert.encoder.layer.{}", HF_LAYER_NAMES, _HF_MODULE_NAMES)


def hf_names(model: BertLibModel) -> dict[str, str]:
    "Our state-dict key -> HF's, for every parameter of `model`."
    return {key: hf_name(key) for key in model.state_dict()}


def _labels(label_names: Sequence[str] | None) -> dict[str, dict]:
    if label_names is None:
        return {}
    return {"id2label": dict(enumerate(label_names)), "label2id": {name: i for i, name in enumerate(label_names)}}


def to_hf_config(
    config: BertConfig, architecture: str = "BertForPreTraining", label_names: Sequence[str] | None = None
) -> transformers.PretrainedConfig:
    """The `transformers` config of the same model (for the HF class `architecture`, and a head's label names
    as `id2label`): a `BertConfig`, for rotary positions a `RoFormerConfig`, for ALBERT's factorised
    embeddings or shared layers an `AlbertConfig`, for ELECTRA's discriminator an `ElectraConfig`, and for one of
    bertlib's own classes (`OWN_CLASSES`) a `BertlibConfig` whose `auto_map` points at them; raises ValueError for
    options the HF class lacks."""
    if architecture in {cls.__name__ for cls in OWN_CLASSES.values()}:
        return configuration_bertlib.BertlibConfig(
            **config.to_dict(), **_labels(label_names), architectures=[architecture], auto_map=OWN_AUTO_MAP
        )
    fields = {k: v for k, v in config.to_dict().items() if k not in _OURS_ONLY}
    if architecture == "ElectraForPreTraining":
        if config.norm_style != "post" or config.share_layers or config.position_embedding_type != "absolute":
            raise ValueError(
                f"an ELECTRA model with norm_style={config.norm_style!r}, shared layers or rotary "
                f"positions cannot be exported: HF ELECTRA is Post-LN, with one layer per depth and a "
                f"learned position table, and bertlib's own classes have no ELECTRA head"
            )
        del fields["position_embedding_type"]
        return transformers.ElectraConfig(**fields, embedding_size=config.embedding_width, architectures=[architecture])
    if config.norm_style != "post":
        raise ValueError(
            f"BertConfig.norm_style={config.norm_style!r} cannot be exported as {architecture}: HF "
            f"transformers' BERT family supports only norm_style='post' (LayerNorm after each residual "
            f"sum); to_transformers exports it as bertlib's own class instead"
        )
    if _albert(config):
        if config.position_embedding_type != "absolute":
            raise ValueError(
                "an ALBERT-style model with rotary positions cannot be exported as HF ALBERT, which has a "
                "learned position table; to_transformers exports it as bertlib's own class instead"
            )
        del fields["position_embedding_type"]
        return transformers.AlbertConfig(
            **{**fields, "embedding_size": config.embedding_width},
            num_hidden_groups=1 if config.share_layers else config.num_hidden_layers,
            inner_group_num=1,
            classifier_dropout_prob=config.hidden_dropout_prob,
            **_labels(label_names),
            architectures=[architecture],
        )
    if config.position_embedding_type == "absolute":
        return transformers.BertConfig(**fields, **_labels(label_names), architectures=[architecture])
    if config.rope_theta != 10000.0:
        raise ValueError(
            f"BertConfig.rope_theta={config.rope_theta:g} cannot be exported as HF RoFormer, whose rotary "
            f"angles use the base 10000; to_transformers exports it as bertlib's own class instead"
        )
    del fields["position_embedding_type"]
    return transformers.RoFormerConfig(
        **fields,
        embedding_size=config.hidden_size,
        rotary_value=False,
        **_labels(label_names),
        architectures=[architecture],
    )


# What an HF BERT config means by the fields it leaves out: configs written before a field existed (Google's
# small BERTs have eleven keys) and transformers releases that dropped one (5.0 has no `position_embedding_type`)
# both mean BERT as published.
_BERT_MEANING: dict[str, Any] = {
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "is_decoder": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}
# options of HF's BERT that bertlib's model has no switch for: only BERT's own meaning converts
_FIXED = ("position_embedding_type", "is_decoder", "add_cross_attention", "tie_word_embeddings")


def from_hf_config(hf_config: transformers.PretrainedConfig) -> BertConfig:
    """Our `BertConfig` for an HF BERT config, as `transformers` of any version or an original hub
    `config.json` defines it: a field it lacks takes BERT's meaning, and a value bertlib cannot honour raises
    a one-line ValueError."""
    if hf_config.model_type != "bert":
        raise ValueError(f"model_type={hf_config.model_type!r} is not supported; only 'bert' converts")
    defined = hf_config.to_dict()

    def read(name: str) -> Any:
        value = defined.get(name)
        return _BERT_MEANING[name] if value is None and name in _BERT_MEANING else value

    for name in _FIXED:
        if read(name) != _BERT_MEANING[name]:
            raise ValueError(
                f"{name}={read(name)!r} is not supported by bertlib; only {name}={_BERT_MEANING[name]!r} converts"
            )
    if read("hidden_act") not in ACTIVATIONS:
        raise ValueError(
            f"hidden_act={read('hidden_act')!r} is not supported by bertlib; supported: {', '.join(ACTIVATIONS)}"
        )
    names = [f.name for f in dataclasses.fields(BertConfig) if f.name not in _OURS_ONLY]
    missing = [name for name in names if read(name) is None]
    if missing:
        raise ValueError(f"the HF config defines no {', '.join(missing)}; a BERT config needs every size")
    return BertConfig(**{name: read(name) for name in names})


def _match(module: torch.nn.Module, like: torch.nn.Module) -> torch.nn.Module:
    "Move `module` to the device, dtype and train/eval mode of `like` (the model it was converted from)."
    param = next(like.parameters())
    return module.to(device=param.device, dtype=param.dtype).train(like.training)


def _our_class(model: torch.nn.Module) -> type:
    """The bertlib class `model` is, found by name so that a notebook's own build of the class (the code the
    library mirrors) converts too."""
    by_name = {cls.__name__: cls for cls in (*HF_CLASSES, ElectraForPreTraining)}
    if type(model).__name__ not in by_name:
        raise TypeError(f"{type(model).__name__} has no HF counterpart; convertible: {', '.join(by_name)}")
    return by_name[type(model).__name__]


def hf_class(model: BertLibModel) -> type[transformers.PreTrainedModel]:
    """The `transformers` class that `to_transformers` builds for `model`: HF's own where one holds it (`HF_CLASSES`;
    with rotary positions `ROFORMER_CLASSES`; with ALBERT's savings `ALBERT_CLASSES`; ELECTRA's discriminator), else
    bertlib's own (`OWN_CLASSES`, loaded with `trust_remote_code=True`): for Pre-LN, and for rotary positions at
    another base than 10000, with ALBERT's savings or under a sequence classifier."""
    ours = _our_class(model)
    if ours is ElectraForPreTraining:
        return transformers.ElectraForPreTraining
    config = model.config
    albert, rope = _albert(config), config.position_embedding_type == "rope"
    roformer_holds = not albert and config.rope_theta == 10000.0 and ours in ROFORMER_CLASSES
    if config.norm_style == "pre" or (rope and not roformer_holds):
        return OWN_CLASSES[ours]
    return (ALBERT_CLASSES if albert else ROFORMER_CLASSES if rope else HF_CLASSES)[ours]


def to_transformers(model: BertLibModel) -> transformers.PreTrainedModel:
    """The HF model of class `hf_class(model)` (`transformers.BertForPreTraining`, `...ForSequenceClassification`,
    ..., or bertlib's own) holding copies of `model`'s weights (same device, dtype and mode) and its label names. An
    `ElectraForPreTraining` exports its discriminator as `transformers.ElectraForPreTraining` (HF's discriminator
    class holds no generator); a pre-training model without an HF pre-training class exports as a masked LM."""
    ours, cls = _our_class(model), hf_class(model)
    if ours is ElectraForPreTraining:
        hf_model = cls(to_hf_config(model.config, cls.__name__))
        discriminator = {key: value for key, value in model.state_dict().items() if not key.startswith("generator.")}
        return _match(_load_hf(hf_model, {electra_name(key): value for key, value in discriminator.items()}), model)
    if getattr(model, "pooling", "cls") != "cls":
        raise ValueError(
            f"pooling={model.pooling!r} cannot be exported: HF's BertForSequenceClassification (and "
            f"bertlib's own class) reads the pooled [CLS] vector only (pooling='cls')"
        )
    labels = None if ours in (BertForPreTraining, BertForQuestionAnswering) else model.label_names
    hf_model = cls(to_hf_config(model.config, cls.__name__, labels))
    masked_lm = cls in (transformers.RoFormerForMaskedLM, modeling_bertlib.BertlibForMaskedLM)
    state = {key: value for key, value in model.state_dict().items() if not (masked_lm and key.startswith(_NO_NSP))}
    tied = {}
    if cls in OWN_CLASSES.values():
        hf_state = state  # our names, and the decoder is the embedding matrix itself
    elif _albert(model.config):
        hf_state, tied = {albert_name(key): value for key, value in state.items()}, _ALBERT_TIED
    else:
        prefix = "roformer." if model.config.position_embedding_type == "rope" else "bert."
        hf_state, tied = {hf_name(key).replace("bert.", prefix, 1): value for key, value in state.items()}, _HF_TIED
    if ours is BertForPreTraining:
        hf_state.update({hf_key: state[key] for hf_key, key in tied.items()})
    return _match(_load_hf(hf_model, hf_state), model)


def _load_hf(hf_model: transformers.PreTrainedModel, hf_state: dict[str, torch.Tensor]) -> transformers.PreTrainedModel:
    "`hf_model` with `hf_state` loaded, which must cover its weights exactly (RoFormer's fixed angles aside)."
    missing, unexpected = hf_model.load_state_dict(hf_state, strict=False)
    if unexpected or set(missing) - {_ROFORMER_SINUSOIDS}:
        raise RuntimeError(
            f"the weights do not map onto {type(hf_model).__name__}: missing {missing}, unexpected {unexpected}"
        )
    return hf_model


def from_transformers(hf_model: transformers.PreTrainedModel) -> BertLibModel:
    "The bertlib model of the same class (`HF_CLASSES`) holding copies of an HF BERT model's weights."
    ours = {hf: mine for mine, hf in HF_CLASSES.items()}
    if type(hf_model) not in ours:
        heads = ", ".join(c.__name__ for c in ours if c is not transformers.BertForPreTraining)
        raise TypeError(
            f"expected a transformers.BertForPreTraining, got {type(hf_model).__name__} (or, fine-tuned, "
            f"one of {heads}); load the checkpoint with that class's from_pretrained"
        )
    hf_state = hf_model.state_dict()
    if isinstance(hf_model, transformers.BertForPreTraining):
        for hf_key, key in _HF_TIED.items():
            if not torch.equal(hf_state[hf_key], hf_state[hf_name(key)]):
                raise ValueError(
                    f"{hf_key} differs from {hf_name(key)}: bertlib's MLM decoder is always tied to "
                    f"the word embeddings, so an untied model cannot be converted"
                )
    config = from_hf_config(hf_model.config)
    labels = [hf_model.config.id2label[i] for i in range(hf_model.config.num_labels)]
    if isinstance(hf_model, transformers.BertForQuestionAnswering) and len(labels) != 2:
        raise ValueError(
            f"a BertForQuestionAnswering with num_labels={len(labels)} cannot be converted: a span reader "
            f"scores 2 things per token (start, end)"
        )
    with torch.device("meta"):  # skip the random initialisation that the copies overwrite
        cls = ours[type(hf_model)]
        model = cls(config) if cls in (BertForPreTraining, BertForQuestionAnswering) else cls(config, labels)
    model.load_state_dict({key: hf_state[hf_name(key)].clone() for key in model.state_dict()}, assign=True)
    return _match(model, hf_model)
