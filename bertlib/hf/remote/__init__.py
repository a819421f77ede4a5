"""bertlib's own classes for HF `transformers`, for the models that no class of `transformers` holds (Pre-LN; rotary
positions at another base than RoFormer's, with ALBERT's savings, or under a sequence classifier).

`bertlib.hf.interop` exports such a model with these two files copied beside its weights, and `transformers` loads the
folder with `trust_remote_code=True`. So the files import only `torch` and `transformers`, never `bertlib`: the
people who load an export need not have bertlib installed. Written by hand.
"""
