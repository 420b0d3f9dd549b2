"""BERT encoders in the layout Hugging Face's ``BertModel`` exports to ONNX.

MiniLM-L6-H384 (sentence-transformers/all-MiniLM-L6-v2's backbone) is a BERT with 6 layers,
hidden size 384, 12 heads and an intermediate size of 1536. The graph is what torch.onnx emits
for it: Gather embeddings, LayerNormalization (or its decomposed form), attention as
MatMul/Transpose/Div by sqrt(d)/Add mask/Softmax, GELU through Erf, and the pooler (Gemm + Tanh
on the first token).
"""

from __future__ import annotations

import math

import numpy as np

from halbench.bench.zoo.graph import GraphBuilder
from halbench.bench.zoo.spec import InputSpec
from halbench.errors import UserError

__all__ = ["bert_inputs", "build_bert"]

#: BERT's LayerNorm epsilon.
LN_EPS = 1e-12
#: The additive mask value of Hugging Face's BERT exports: large enough to zero a softmax
#: term, small enough for f16.
MASK_VALUE = -10000.0


def bert_inputs(batch: int, seq: int, *, vocab_size: int = 30522, type_vocab_size: int = 2,
                max_position: int = 512, **_) -> list[InputSpec]:
    if seq > max_position:
        raise UserError(f"sequence length {seq} exceeds the model's {max_position} positions")
    return [
        InputSpec("input_ids", (batch, seq), "int64", "int", 0, vocab_size),
        InputSpec("attention_mask", (batch, seq), "int64", "mask"),
        InputSpec("token_type_ids", (batch, seq), "int64", "int", 0, type_vocab_size),
    ]


def build_bert(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
               vocab_size: int = 30522, hidden: int = 384, layers: int = 6, heads: int = 12,
               intermediate: int = 1536, max_position: int = 512, type_vocab_size: int = 2,
               layer_norm: str = "fused", pooler: bool = True) -> None:
    if layer_norm not in ("fused", "decomposed"):
        raise UserError(f"layer_norm must be 'fused' or 'decomposed', not {layer_norm!r}")
    if layer_norm == "fused" and g.opset < 17:
        raise UserError(f"LayerNormalization needs opset 17 or later (asked for {g.opset}); "
                        "use layer_norm='decomposed'")
    if hidden % heads:
        raise UserError(f"hidden size {hidden} is not a multiple of {heads} heads")
    decomposed = layer_norm == "decomposed"
    head_dim = hidden // heads
    ids, mask, types = (g.input(s.name, s.shape, s.dtype) for s in inputs)

    # Embeddings: BERT initialises them N(0, 0.02); the LayerNorm after the sum rescales.
    words = g.weight("embeddings.word_embeddings.weight", g.small((vocab_size, hidden)))
    positions = g.weight("embeddings.position_embeddings.weight", g.small((max_position, hidden)))
    token_types = g.weight("embeddings.token_type_embeddings.weight", g.small((type_vocab_size, hidden)))
    position_ids = g.const("position_ids", np.arange(seq)[None, :], np.int64)
    x = g.node("Add", [g.node("Gather", [words, ids]), g.node("Gather", [token_types, types])])
    x = g.node("Add", [x, g.node("Gather", [positions, position_ids])])
    x = g.layer_norm(x, hidden, LN_EPS, decomposed, "embeddings.LayerNorm")

    # The extended attention mask, [B, 1, 1, S]: 0 where attended, MASK_VALUE where padded.
    m = g.node("Cast", [g.unsqueeze(mask, [1, 2])], to=1)  # to FLOAT
    m = g.node("Mul", [g.node("Sub", [g.const("one", 1.0), m]), g.const("mask_value", MASK_VALUE)])

    split_shape = g.const("split_heads", [batch, seq, heads, head_dim], np.int64)
    merge_shape = g.const("merge_heads", [batch, seq, hidden], np.int64)
    scale = g.const("sqrt_head_dim", math.sqrt(head_dim))
    for layer in range(layers):
        p = f"encoder.layer.{layer}"
        q = _heads(g, x, hidden, split_shape, f"{p}.attention.self.query", [0, 2, 1, 3])  # [B,H,S,D]
        k = _heads(g, x, hidden, split_shape, f"{p}.attention.self.key", [0, 2, 3, 1])  # [B,H,D,S]
        v = _heads(g, x, hidden, split_shape, f"{p}.attention.self.value", [0, 2, 1, 3])  # [B,H,S,D]
        scores = g.node("Div", [g.node("MatMul", [q, k]), scale])
        probs = g.node("Softmax", [g.node("Add", [scores, m])], axis=-1)
        ctx = g.node("Transpose", [g.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = g.node("Reshape", [ctx, merge_shape])
        attn = g.linear(ctx, hidden, hidden, f"{p}.attention.output.dense")
        x = g.layer_norm(g.node("Add", [attn, x]), hidden, LN_EPS, decomposed,
                         f"{p}.attention.output.LayerNorm")
        h = g.gelu(g.linear(x, hidden, intermediate, f"{p}.intermediate.dense"))
        h = g.linear(h, intermediate, hidden, f"{p}.output.dense")
        x = g.layer_norm(g.node("Add", [h, x]), hidden, LN_EPS, decomposed, f"{p}.output.LayerNorm")

    g.output(x, "last_hidden_state", (batch, seq, hidden))
    if pooler:
        first = g.node("Gather", [x, g.const("first_token", 0, np.int64)], axis=1)  # [B, hidden]
        g.output(g.node("Tanh", [g.gemm(first, hidden, hidden, "pooler.dense")]), "pooler_output",
                 (batch, hidden))


def _heads(g: GraphBuilder, x: str, hidden: int, split_shape: str, prefix: str, perm: list[int]) -> str:
    """A projection split into heads: Linear, Reshape to [B, S, H, D], Transpose by ``perm``."""
    y = g.linear(x, hidden, hidden, prefix)
    return g.node("Transpose", [g.node("Reshape", [y, split_shape])], perm=perm)
