"""The configuration of a bertlib BERT for HF `transformers` (`trust_remote_code=True`): bertlib's `BertConfig`
fields, under the model type "bertlib", for the models that no `transformers` class computes (Pre-LN, rotary
positions at another base, and the like).

Shipped by bertlib's `export-hf` beside `modeling_bertlib.py`; needs only `transformers`."""

from transformers import PretrainedConfig

# bertlib's BertConfig fields and their defaults (the `mini` preset with an 8,192-token vocabulary)
DEFAULTS = dict(
    vocab_size=8192,
    hidden_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=1024,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    max_position_embeddings=512,
    type_vocab_size=2,
    initializer_range=0.02,
    layer_norm_eps=1e-12,
    pad_token_id=0,
    norm_style="post",  # "post": LayerNorm after each residual sum (BERT); "pre": before each sub-layer
    position_embedding_type="absolute",  # "absolute": a learned table; "rope": rotary, in attention
    rope_theta=10000.0,  # base of the rotary angles
    embedding_size=None,  # ALBERT: embeddings this narrow, projected to hidden_size (None: no projection)
    share_layers=False,
)  # ALBERT: one layer's weights at every depth


class BertlibConfig(PretrainedConfig):
    "A bertlib BERT's sizes and options (the fields of `DEFAULTS`), with the usual `transformers` config fields."

    model_type = "bertlib"

    def __init__(self, **kwargs):
        for name, default in DEFAULTS.items():
            setattr(self, name, kwargs.pop(name, default))
        super().__init__(**kwargs)
