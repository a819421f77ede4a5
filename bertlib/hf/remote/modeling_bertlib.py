"""A bertlib BERT for HF `transformers` (`trust_remote_code=True`): the same arithmetic as bertlib's model, in one
file that needs only `torch` and `transformers`. Parameter names are bertlib's own, so an export's weights are
bertlib's state dict as it is. Shipped by bertlib's `export-hf` beside `configuration_bertlib.py`.

Every option of bertlib's config: Post-LN or Pre-LN (LayerNorm before each sub-layer, and a final one), a learned
position table or rotary position embeddings, ALBERT's narrow embeddings and shared layers. Heads: the masked LM
(decoder tied to the word embeddings), sequence classification (pooled `[CLS]`), token classification and
extractive question answering, with HF's output classes and losses.
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from .configuration_bertlib import BertlibConfig


def rotate(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding: turn each pair (x[2i], x[2i+1]) of the head vectors x [batch, heads, seq, head_size]
    by the angle position * theta^(-2i / head_size)."""
    half = x.shape[-1] // 2
    inv_freq = theta ** (-torch.arange(half, device=x.device, dtype=torch.float64) / half)
    angles = torch.arange(x.shape[-2], device=x.device, dtype=torch.float64)[:, None] * inv_freq  # exact angles
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


class Embeddings(nn.Module):
    "Token + segment (+ learned position) embeddings, summed, then LayerNorm and dropout (and ALBERT's projection)."

    def __init__(self, config: BertlibConfig):
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        self.position_embeddings = (
            nn.Embedding(config.max_position_embeddings, width)
            if config.position_embedding_type == "absolute"
            else None
        )
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width)
        self.layer_norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.projection = nn.Linear(width, config.hidden_size) if width != config.hidden_size else None

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings(torch.arange(input_ids.shape[1], device=input_ids.device))
        x = self.dropout(self.layer_norm(x))
        return x if self.projection is None else self.projection(x)


class SelfAttention(nn.Module):
    "Bidirectional multi-head self-attention; with rotary embeddings, queries and keys are turned by position."

    def __init__(self, config: BertlibConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.dropout_p = config.attention_probs_dropout_prob
        self.rope_theta = config.rope_theta if config.position_embedding_type == "rope" else None
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.output = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        batch, seq, hidden = x.shape
        query, key, value = (
            proj(x).view(batch, seq, self.num_heads, -1).transpose(1, 2) for proj in (self.query, self.key, self.value)
        )
        if self.rope_theta is not None:
            query, key = rotate(query, self.rope_theta), rotate(key, self.rope_theta)
        context = F.scaled_dot_product_attention(
            query, key, value, attn_mask=bias, dropout_p=self.dropout_p if self.training else 0.0
        )
        return self.output(context.transpose(1, 2).reshape(batch, seq, hidden))


class FeedForward(nn.Module):
    "Linear up to the intermediate width, activation, linear back."

    def __init__(self, config: BertlibConfig):
        super().__init__()
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.activation = ACT2FN[config.hidden_act]
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.activation(self.intermediate(x)))


class Layer(nn.Module):
    "One encoder layer: self-attention and feed-forward, each with a residual connection, dropout and a LayerNorm."

    def __init__(self, config: BertlibConfig):
        super().__init__()
        self.pre_norm = config.norm_style == "pre"
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.feed_forward = FeedForward(config)
        self.feed_forward_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.pre_norm:  # normalise what enters each sub-layer; the residual stream itself is never normalised
            x = x + self.dropout(self.attention(self.attention_norm(x), bias))
            return x + self.dropout(self.feed_forward(self.feed_forward_norm(x)))
        x = self.attention_norm(x + self.dropout(self.attention(x, bias)))
        return self.feed_forward_norm(x + self.dropout(self.feed_forward(x)))


class Encoder(nn.Module):
    "The stack of layers (one layer at every depth with `share_layers`), and with Pre-LN a final LayerNorm."

    def __init__(self, config: BertlibConfig):
        super().__init__()
        self.depth = config.num_hidden_layers
        self.layers = nn.ModuleList(Layer(config) for _ in range(1 if config.share_layers else self.depth))
        self.final_norm = (
            nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.norm_style == "pre" else None
        )

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        for i in range(self.depth):
            x = self.layers[i % len(self.layers)](x, bias)
        return x if self.final_norm is None else self.final_norm(x)


class Pooler(nn.Module):
    "Dense + tanh on the final `[CLS]` vector."

    def __init__(self, config: BertlibConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x[:, 0]))


class MaskedLMHead(nn.Module):
    "Dense, activation, LayerNorm, then the word-embedding matrix (passed in: the decoder is tied) and a bias."

    def __init__(self, config: BertlibConfig):
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.dense = nn.Linear(config.hidden_size, width)
        self.activation = ACT2FN[config.hidden_act]
        self.layer_norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(self.layer_norm(self.activation(self.dense(x))), word_embeddings, self.bias)


class BertlibPreTrainedModel(PreTrainedModel):
    "BERT's initialisation: normal(0, initializer_range) matrices, zero biases, LayerNorms at 1 and 0."

    config_class = BertlibConfig
    base_model_prefix = "bert"

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)  # transformers' default is BERT's, but for the MLM head's own bias
        if isinstance(module, MaskedLMHead):
            nn.init.zeros_(module.bias)


class BertlibModel(BertlibPreTrainedModel):
    "The body: embeddings, encoder and (unless `add_pooling_layer=False`) the pooler."

    def __init__(self, config: BertlibConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)
        self.pooler = Pooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> BaseModelOutputWithPooling:
        """Encode `input_ids` [batch, seq]; `attention_mask` marks tokens (1) and padding (0), `token_type_ids` the
        segments (default: all 0)."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)
        bias = None  # added to the attention scores: the most negative number at the padding keys
        if attention_mask is not None:
            padding = (attention_mask == 0)[:, None, None, :]
            bias = torch.zeros(padding.shape, dtype=x.dtype, device=x.device).masked_fill(
                padding, torch.finfo(x.dtype).min
            )
        x = self.encoder(x, bias)
        return BaseModelOutputWithPooling(
            last_hidden_state=x, pooler_output=None if self.pooler is None else self.pooler(x)
        )


class BertlibForMaskedLM(BertlibPreTrainedModel):
    "The masked-LM model: vocabulary scores at every position; `labels` -100 where there is nothing to predict."

    def __init__(self, config: BertlibConfig):
        super().__init__(config)
        self.bert = BertlibModel(config, add_pooling_layer=False)
        self.mlm_head = MaskedLMHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> MaskedLMOutput:
        hidden = self.bert(input_ids, attention_mask, token_type_ids).last_hidden_state
        logits = self.mlm_head(hidden, self.bert.embeddings.word_embeddings.weight)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return MaskedLMOutput(loss=loss, logits=logits)


class BertlibForSequenceClassification(BertlibPreTrainedModel):
    "One label per sequence (or sentence pair), from the pooled `[CLS]` vector."

    def __init__(self, config: BertlibConfig):
        super().__init__(config)
        self.bert = BertlibModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> SequenceClassifierOutput:
        pooled = self.bert(input_ids, attention_mask, token_type_ids).pooler_output
        logits = self.classifier(self.dropout(pooled))
        loss = None if labels is None else F.cross_entropy(logits, labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits)


class BertlibForTokenClassification(BertlibPreTrainedModel):
    "One label per token; `labels` -100 where there is nothing to predict."

    def __init__(self, config: BertlibConfig):
        super().__init__(config)
        self.bert = BertlibModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> TokenClassifierOutput:
        logits = self.classifier(self.dropout(self.bert(input_ids, attention_mask, token_type_ids).last_hidden_state))
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return TokenClassifierOutput(loss=loss, logits=logits)


class BertlibForQuestionAnswering(BertlibPreTrainedModel):
    "Extractive question answering: a score for every token being the answer's first, and one for being its last."

    def __init__(self, config: BertlibConfig):
        super().__init__(config)
        self.bert = BertlibModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
    ) -> QuestionAnsweringModelOutput:
        hidden = self.bert(input_ids, attention_mask, token_type_ids).last_hidden_state
        start_logits, end_logits = self.qa_outputs(hidden).unbind(-1)
        loss = None
        if start_positions is not None and end_positions is not None:
            outside = start_logits.shape[1]  # answers cut off by truncation point past the end: ignored
            loss = (
                F.cross_entropy(start_logits, start_positions.view(-1).clamp(0, outside), ignore_index=outside)
                + F.cross_entropy(end_logits, end_positions.view(-1).clamp(0, outside), ignore_index=outside)
            ) / 2
        return QuestionAnsweringModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits)
