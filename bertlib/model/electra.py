"""ELECTRA (Clark et al. 2020): a small masked-LM generator fills the masked positions with tokens sampled from
its own predictions, and a discriminator (`BertModel` plus a per-token binary head) learns which tokens were
replaced, so that every token, not only the masked 15-30%, teaches the encoder. The two share their embeddings.

Written by hand; notebook 12 presents it.
"""

__all__ = [
    "SHARED_EMBEDDINGS",
    "generator_config",
    "replace_tokens",
    "RTDHead",
    "ElectraForPreTrainingOutput",
    "ElectraForPreTraining",
]

from dataclasses import dataclass, replace
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .bert import IGNORE_INDEX, BertForPreTraining, BertModel
from .config import BertConfig
from .encoder import ACTIVATION_MODULES, init_bert_weights

# the modules of `BertEmbeddings` that generator and discriminator share; each keeps its own projection
SHARED_EMBEDDINGS = ("word_embeddings", "position_embeddings", "token_type_embeddings", "layer_norm")


def generator_config(config: BertConfig, size: float) -> BertConfig:
    """The generator of a discriminator with `config`: as deep, `size` times as wide (its feed-forward network
    too), with heads of the discriminator's head size (ELECTRA's rule: heads of 64 for BERT's sizes), and
    embeddings at the discriminator's embedding width, which it shares; a projection narrows them to its width."""
    if not 0 < size <= 1:
        raise ValueError(f"generator_size={size} is not valid; it must be in (0, 1] (ELECTRA: 1/4 to 1/3)")
    hidden = max(1, round(config.hidden_size * size))
    heads = max(1, hidden // config.head_size)
    while hidden % heads:
        heads -= 1
    return replace(
        config,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=max(1, round(config.intermediate_size * size)),
        embedding_size=config.embedding_width,
    )


@torch.no_grad()
def replace_tokens(
    input_ids: torch.Tensor, labels: torch.Tensor, sampled: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Put the generator's `sampled` ids [n_selected] at the MLM positions (`labels` != -100, row-major) of
    `input_ids` [batch, seq], and return the new ids and the discriminator's labels: 1 where a token differs
    from the original, 0 where it is the original (also where the sample drew the original token back), -100
    on padding. No gradient flows through it: the generator learns from its MLM loss alone, as in ELECTRA."""
    selected = labels != IGNORE_INDEX
    corrupted = input_ids.clone()
    corrupted[selected] = sampled
    replaced = (corrupted != torch.where(selected, labels, input_ids)).long()
    if attention_mask is not None:
        replaced = replaced.masked_fill(attention_mask == 0, IGNORE_INDEX)
    return corrupted, replaced


class RTDHead(nn.Module):
    "Replaced-token detection: dense and activation, then one score per token (> 0: replaced), as HF ELECTRA's."

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = ACTIVATION_MODULES[config.hidden_act]()
        self.prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        "[batch, seq, hidden] -> [batch, seq]"
        return self.prediction(self.activation(self.dense(hidden_states))).squeeze(-1)


@dataclass
class ElectraForPreTrainingOutput:
    """What `ElectraForPreTraining` returns: the discriminator's `logits` [batch, seq] (> 0: replaced), HF's name.

    With `labels`, also the generator's `mlm_loss` and `prediction_logits` [n_selected, vocab] (as
    `BertForPreTraining` gives them), the discriminator's labels `replaced` [batch, seq] (1 replaced, 0 original,
    -100 padding) for the sampled input it read, and its `rtd_loss`: the mean binary cross-entropy over the
    real tokens. The training loss is `mlm_loss + rtd_weight * rtd_loss` (`bertlib.recipes.objectives`)."""

    logits: torch.Tensor
    mlm_loss: torch.Tensor | None = None
    rtd_loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    replaced: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class ElectraForPreTraining(nn.Module):
    """ELECTRA's discriminator (`self.bert`, so fine-tuning loads it like any encoder, under `RTDHead`) and its
    generator (`self.generator`, a `BertForPreTraining` of `generator_config`, whose NSP head and pooler are frozen:
    no loss uses them).

    The generator's word, position and segment embeddings and their LayerNorm are the discriminator's modules,
    one set of tensors (`SHARED_EMBEDDINGS`). ELECTRA ties them because the discriminator updates only the
    embeddings of the tokens in its input, while the generator's softmax over the vocabulary updates them all."""

    def __init__(self, config: BertConfig, generator_size: float = 0.25):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.rtd_head = RTDHead(config)
        self.rtd_head.apply(partial(init_bert_weights, std=config.initializer_range))
        self.generator = BertForPreTraining(generator_config(config, generator_size))
        for name in SHARED_EMBEDDINGS:
            setattr(self.generator.bert.embeddings, name, getattr(self.bert.embeddings, name))
        for unused in (self.generator.nsp_head, self.generator.bert.pooler):
            unused.requires_grad_(False)  # in no loss: DistributedDataParallel would wait for their gradients

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> ElectraForPreTrainingOutput:
        """Without `labels`, the discriminator scores `input_ids` as they are. With MLM `labels` (the original ids
        at the masked positions of `input_ids`, -100 elsewhere), the generator predicts the masked positions,
        tokens sampled from its predictions replace them, and the discriminator scores the result."""
        mlm_loss = rtd_loss = prediction_logits = replaced = None
        if labels is not None:
            generated = self.generator(
                input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=labels
            )
            mlm_loss, prediction_logits = generated.mlm_loss, generated.prediction_logits
            sampled = torch.multinomial(prediction_logits.detach().float().softmax(-1), 1).squeeze(-1)
            input_ids, replaced = replace_tokens(input_ids, labels, sampled, attention_mask)
        out = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        logits = self.rtd_head(out.last_hidden_state)
        if replaced is not None:
            real = replaced != IGNORE_INDEX
            rtd_loss = F.binary_cross_entropy_with_logits(logits[real].float(), replaced[real].float())
        return ElectraForPreTrainingOutput(
            logits=logits,
            mlm_loss=mlm_loss,
            rtd_loss=rtd_loss,
            prediction_logits=prediction_logits,
            replaced=replaced,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
        )
