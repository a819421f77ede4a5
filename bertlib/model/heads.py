"""Fine-tuning heads on `BertModel`, named and shaped as HF `transformers`' so that weights convert both ways:
`BertForSequenceClassification` (one sentence or a pair; the pooled `[CLS]`, or the mean of the tokens),
`BertForTokenClassification` (a label for every token) and `BertForQuestionAnswering` (the start and end of an
answer span). Each keeps its task's label names, and loads the encoder of a pre-trained model with
`load_encoder`, which says which weights are new.

Written by hand; the fine-tuning notebooks present it.
"""

__all__ = [
    "TaskModelOutput",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
    "HEADS",
]

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from ..utils.checks import check_choice
from .bert import IGNORE_INDEX, BertModel, BertModelOutput
from .config import POOLINGS, BertConfig
from .encoder import init_bert_weights


@dataclass
class TaskModelOutput:
    """What a head returns, with HF's names: `logits` [batch, labels] or [batch, seq, labels], or, for question
    answering, `start_logits` and `end_logits` [batch, seq]; `loss` when labels were given."""

    loss: torch.Tensor | None
    logits: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None
    end_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class _TaskModel(nn.Module):
    "A `BertModel` (`self.bert`) under a task head with `label_names`; the head is built by the subclass."

    add_pooling_layer = True

    def __init__(self, config: BertConfig, label_names: Sequence[str]):
        super().__init__()
        if len(label_names) < 1 or len(set(label_names)) != len(label_names):
            raise ValueError(f"label_names={list(label_names)!r} must be distinct names, at least one")
        self.config, self.label_names = config, tuple(label_names)
        self.bert = BertModel(config, add_pooling_layer=self.add_pooling_layer)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def _init_head(self, head: nn.Module) -> None:
        head.apply(partial(init_bert_weights, std=self.config.initializer_range))

    def _encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        output_attentions: bool,
        output_hidden_states: bool,
    ) -> BertModelOutput:
        return self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )

    def load_encoder(self, state_dict: Mapping[str, torch.Tensor]) -> list[str]:
        """Copy the `bert.*` weights of a pre-trained model (a `BertForPreTraining`'s state dict, or any other
        head's) into this model's encoder, and return the names of this model's weights that stay new: the
        head's, and the pooler's when the source had none. Shapes must match (the same `BertConfig`)."""
        ours = self.state_dict()
        found = {k: v for k, v in state_dict.items() if k in ours and k.startswith("bert.")}
        wrong = [k for k, v in found.items() if v.shape != ours[k].shape]
        if wrong:
            raise ValueError(
                f"the pre-trained weights do not fit this model's shape ({wrong[0]}: "
                f"{tuple(found[wrong[0]].shape)} vs {tuple(ours[wrong[0]].shape)}); use its BertConfig"
            )
        missing = [k for k in ours if k.startswith("bert.") and k not in found and not k.startswith("bert.pooler.")]
        if missing:
            raise ValueError(
                f"the pre-trained weights lack {len(missing)} encoder tensors, e.g. {missing[0]}; they "
                f"are not a bertlib BERT's"
            )
        self.load_state_dict(found, strict=False)
        return sorted(k for k in ours if k not in found)


class BertForSequenceClassification(_TaskModel):
    """One label per sequence (a sentence, or a pair through the segment ids), from the pooled `[CLS]` vector
    (`pooling="cls"`, BERT's and HF's way) or from the mean of the final vectors of the real tokens ("mean")."""

    def __init__(self, config: BertConfig, label_names: Sequence[str] = ("0", "1"), pooling: str = "cls"):
        check_choice("pooling", pooling, POOLINGS)
        super().__init__(config, label_names)
        self.pooling = pooling
        self.classifier = nn.Linear(config.hidden_size, len(self.label_names))
        self._init_head(self.classifier)

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> TaskModelOutput:
        "Logits [batch, labels]; with `labels` [batch], the mean cross-entropy."
        out = self._encode(input_ids, attention_mask, token_type_ids, output_attentions, output_hidden_states)
        if self.pooling == "cls":
            pooled = out.pooler_output
        else:
            mask = (torch.ones_like(input_ids) if attention_mask is None else attention_mask).unsqueeze(-1)
            mask = mask.to(out.last_hidden_state.dtype)
            pooled = (out.last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1)
        logits = self.classifier(self.dropout(pooled))
        loss = None if labels is None else F.cross_entropy(logits, labels.view(-1))
        return TaskModelOutput(loss, logits, hidden_states=out.hidden_states, attentions=out.attentions)


class BertForTokenClassification(_TaskModel):
    """One label per token; `labels` hold -100 where there is nothing to predict (padding, special tokens, and
    every piece of a word but its first)."""

    add_pooling_layer = False

    def __init__(self, config: BertConfig, label_names: Sequence[str]):
        super().__init__(config, label_names)
        self.classifier = nn.Linear(config.hidden_size, len(self.label_names))
        self._init_head(self.classifier)

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> TaskModelOutput:
        "Logits [batch, seq, labels]; with `labels` [batch, seq], the mean cross-entropy over the labelled tokens."
        out = self._encode(input_ids, attention_mask, token_type_ids, output_attentions, output_hidden_states)
        logits = self.classifier(self.dropout(out.last_hidden_state))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
        return TaskModelOutput(loss, logits, hidden_states=out.hidden_states, attentions=out.attentions)


class BertForQuestionAnswering(_TaskModel):
    """Extractive question answering: for every token, a score for being the answer's first token and one for
    being its last. `label_names` are fixed to ("start", "end"), HF's two outputs."""

    add_pooling_layer = False

    def __init__(self, config: BertConfig, label_names: Sequence[str] = ("start", "end")):
        super().__init__(config, label_names)
        if self.label_names != ("start", "end"):
            raise ValueError(f"question answering has the outputs ('start', 'end'), not {self.label_names}")
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self._init_head(self.qa_outputs)

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> TaskModelOutput:
        """Start and end logits [batch, seq]. With `start_positions` and `end_positions` [batch], the mean of the
        two cross-entropies; positions outside the sequence are ignored (HF's convention for answers cut off by
        truncation)."""
        out = self._encode(input_ids, attention_mask, token_type_ids, output_attentions, output_hidden_states)
        start_logits, end_logits = self.qa_outputs(out.last_hidden_state).unbind(-1)
        loss = None
        if start_positions is not None and end_positions is not None:
            outside = start_logits.shape[1]
            start = start_positions.view(-1).clamp(0, outside)
            end = end_positions.view(-1).clamp(0, outside)
            loss = (
                F.cross_entropy(start_logits, start, ignore_index=outside)
                + F.cross_entropy(end_logits, end, ignore_index=outside)
            ) / 2
        return TaskModelOutput(
            loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
        )


HEADS = {
    "sequence": BertForSequenceClassification,
    "pair": BertForSequenceClassification,
    "token": BertForTokenClassification,
    "span": BertForQuestionAnswering,
}  # by a task's `kind` (bertlib.tasks.load)
