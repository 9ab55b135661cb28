#!/usr/bin/env python3
"""Generate training-step HLO text for four model families (stitchd fleet replay).

Each module is one whole training step of a randomly initialised model, written
here with flax.linen: forward pass, loss, backward pass (jax.grad) and an optax
optimizer update.  The HLO is JAX's *pre-optimization* module (what
`jax.jit(step).lower(...)` hands to XLA), with two rewrites so that stitchd's
extractor sees one flat entry computation (`stitch.jax.inline_calls`, in python/stitch):

  * every nested `jit` (jnp helpers such as `_where`, `clip`, `_reduce_max`,
    flax/optax internals) is inlined instead of becoming an HLO `call`;
  * the Threefry-2x32 PRNG behind dropout is expanded inline, unrolled (the
    form JAX uses on GPU without the Threefry kernel), instead of a `call` to
    a rolled `while` loop (the form JAX uses on CPU).

Models (all float32, default JAX config: 32-bit ints, partitionable Threefry):

  bert_base_mlm   BERT-base encoder, 12 x (768, 12 heads, FFN 3072), seq 128,
                  masked-LM loss on 20 gathered positions, dropout 0.1,
                  AdamW + global-norm clipping.
  resnet50        ResNet-50 v1.5, 224x224x3 NHWC, batch norm in training mode
                  (batch statistics, running averages updated and returned),
                  SGD with momentum 0.9 and weight decay 1e-4.
  gpt2_small      decoder-only Transformer, GPT-2 small shapes: 12 x (768,
                  12 heads, FFN 3072), pre-LayerNorm, causal attention, seq 256,
                  tied output embedding, next-token loss, dropout 0.1,
                  AdamW + global-norm clipping.
  dlrm_criteo     DLRM-style CTR model: 13 dense + 26 sparse features, 26
                  embedding tables (dim 16, Criteo-Kaggle-sized), bottom MLP
                  512-256-64-16, pairwise dot interaction, top MLP 512-256-1,
                  logistic loss, Adam.

Parameters are never materialised: `model.init` (random normal / uniform /
zeros initialisers) is only traced through `jax.eval_shape`, and the step is
lowered against `jax.ShapeDtypeStruct` arguments, so the script needs little
memory.  `--smoke` additionally initialises one model for real and runs one
step on the CPU (slow for the big ones).

Setup (once, from the repository root; Python 3.11):

    python3 -m venv .venv-models
    .venv-models/bin/pip install -r tools/requirements-models.txt

(scripts/setup does this; the pins, jax[cpu] 0.10.2, flax 0.12.8 and optax 0.2.8, are kept in
tools/requirements-models.txt alone.)

Generate all four modules, the cost figures and the subgraph counts:

    .venv-models/bin/python tools/make_model_hlo.py --out testdata/models \\
        --stitchctl build/client/stitchctl --compile-sample 6 --compile-timeout 60

Dropout (BERT, GPT): `--dropout mask` (default) passes one bool keep-mask per
dropout site in as a step argument, so the step has no RNG ops; `--dropout rng`
draws the masks inside the step with inline Threefry (the BERT module then has
a 20,810-node subgraph, over stitchctl extract's 20,000-node limit);
`--dropout off` removes dropout.

Options: `--models bert_base_mlm,resnet50` (a subset; models.json entries of
the others are kept), `--no-cost` (skip the XLA CPU compile that
cost_analysis needs), `--compile-sample N` (also run `stitchctl compile
--no-cubin` on N evenly spaced extracted subgraphs per model).

This script installs nothing and does not need a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from typing import Any, Callable, Sequence

import numpy as np

import jax
import jax.numpy as jnp
import flax
import flax.linen as nn
import optax

# The flattening of nested jits lives in the stitch package (stitch.jax uses it for every job's
# signatures); this script imports it from the source tree.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from stitch.jax import inline_calls  # noqa: E402

F32 = jnp.float32
I32 = jnp.int32


# --------------------------------------------------------------------------
# Shared Transformer pieces
# --------------------------------------------------------------------------

def _normal(std=0.02):
    return nn.initializers.normal(stddev=std)


class Dropout(nn.Module):
    """Inverted dropout whose keep-mask comes from one of three places.

    mode "mask": the mask is an input of the step (collection "dropout_masks",
                 one bool array per dropout site), so the step has no RNG ops;
    mode "rng":  the mask is drawn inside the step (Threefry, from the
                 "dropout" rng stream), as flax's nn.Dropout does;
    mode "off":  identity (deterministic model).
    """

    rate: float
    mode: str

    @nn.compact
    def __call__(self, x):
        if self.mode == "off" or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        if self.mode == "rng":
            mask = jax.random.bernoulli(self.make_rng("dropout"), keep, x.shape)
        elif self.mode == "mask":
            mask = self.variable("dropout_masks", "keep", jnp.ones, x.shape, jnp.bool_).value
        else:
            raise ValueError(f"dropout mode {self.mode!r}")
        return jnp.where(mask, x / keep, jnp.zeros_like(x))


class MultiHeadAttention(nn.Module):
    """Self-attention with an additive score bias (padding or causal mask)."""

    width: int
    heads: int
    attn_dropout: float
    dropout_mode: str

    @nn.compact
    def __call__(self, x, score_bias):
        b, s, _ = x.shape
        d = self.width // self.heads
        proj = partial(nn.Dense, self.width, kernel_init=_normal())
        split = lambda t: t.reshape(b, s, self.heads, d)
        q = split(proj(name="q")(x))
        k = split(proj(name="k")(x))
        v = split(proj(name="v")(x))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / math.sqrt(d))
        probs = jax.nn.softmax(scores + score_bias, axis=-1)
        probs = Dropout(self.attn_dropout, self.dropout_mode, name="probs_dropout")(probs)
        ctx = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, self.width)
        return proj(name="o")(ctx)


class FeedForward(nn.Module):
    width: int
    inner: int
    exact_gelu: bool

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(self.inner, kernel_init=_normal(), name="up")(x)
        h = jax.nn.gelu(h, approximate=not self.exact_gelu)
        return nn.Dense(self.width, kernel_init=_normal(), name="down")(h)


# --------------------------------------------------------------------------
# 1. BERT-base, masked-LM pretraining step
# --------------------------------------------------------------------------

class BertLayer(nn.Module):
    width: int
    heads: int
    inner: int
    dropout: float
    dropout_mode: str

    @nn.compact
    def __call__(self, x, score_bias):
        a = MultiHeadAttention(self.width, self.heads, self.dropout, self.dropout_mode,
                               name="attention")(x, score_bias)
        a = Dropout(self.dropout, self.dropout_mode, name="attention_dropout")(a)
        x = nn.LayerNorm(epsilon=1e-12, name="attention_norm")(x + a)
        f = FeedForward(self.width, self.inner, exact_gelu=True, name="ffn")(x)
        f = Dropout(self.dropout, self.dropout_mode, name="ffn_dropout")(f)
        return nn.LayerNorm(epsilon=1e-12, name="ffn_norm")(x + f)


class BertMLM(nn.Module):
    vocab: int = 30522
    max_positions: int = 512
    type_vocab: int = 2
    width: int = 768
    layers: int = 12
    heads: int = 12
    inner: int = 3072
    dropout: float = 0.1
    dropout_mode: str = "mask"

    @nn.compact
    def __call__(self, token_ids, type_ids, pad_mask, mlm_positions):
        b, s = token_ids.shape
        words = nn.Embed(self.vocab, self.width, embedding_init=_normal(), name="word_embed")
        positions = self.param("position_embed", _normal(), (self.max_positions, self.width))
        types = nn.Embed(self.type_vocab, self.width, embedding_init=_normal(), name="type_embed")
        x = words(token_ids) + positions[None, :s, :] + types(type_ids)
        x = nn.LayerNorm(epsilon=1e-12, name="embed_norm")(x)
        x = Dropout(self.dropout, self.dropout_mode, name="embed_dropout")(x)
        # [b, 1, 1, s]: 0 for real tokens, -10000 for padding.
        score_bias = ((1.0 - pad_mask.astype(F32)) * -10000.0)[:, None, None, :]
        for i in range(self.layers):
            x = BertLayer(self.width, self.heads, self.inner, self.dropout,
                          self.dropout_mode, name=f"layer_{i}")(x, score_bias)
        # MLM head only on the masked positions (as BERT pretraining does).
        picked = jnp.take_along_axis(x, mlm_positions[:, :, None], axis=1)
        h = nn.Dense(self.width, kernel_init=_normal(), name="mlm_transform")(picked)
        h = nn.LayerNorm(epsilon=1e-12, name="mlm_norm")(jax.nn.gelu(h, approximate=False))
        logits = words.attend(h) + self.param("mlm_bias", nn.initializers.zeros, (self.vocab,))
        return logits


# --------------------------------------------------------------------------
# 2. ResNet-50 v1.5
# --------------------------------------------------------------------------

class Bottleneck(nn.Module):
    width: int
    stride: int
    train: bool

    @nn.compact
    def __call__(self, x):
        bn = partial(nn.BatchNorm, use_running_average=not self.train, momentum=0.9,
                     epsilon=1e-5)
        conv = partial(nn.Conv, use_bias=False, kernel_init=nn.initializers.he_normal())
        out_width = 4 * self.width
        y = nn.relu(bn(name="bn1")(conv(self.width, (1, 1), name="conv1")(x)))
        y = conv(self.width, (3, 3), strides=(self.stride, self.stride),
                 padding=((1, 1), (1, 1)), name="conv2")(y)
        y = nn.relu(bn(name="bn2")(y))
        y = conv(out_width, (1, 1), name="conv3")(y)
        y = bn(scale_init=nn.initializers.zeros, name="bn3")(y)
        if x.shape[-1] != out_width or self.stride != 1:
            x = conv(out_width, (1, 1), strides=(self.stride, self.stride), name="proj")(x)
            x = bn(name="proj_bn")(x)
        return nn.relu(x + y)


class ResNet50(nn.Module):
    classes: int = 1000
    stages: Sequence[int] = (3, 4, 6, 3)
    train: bool = True

    @nn.compact
    def __call__(self, images):
        x = nn.Conv(64, (7, 7), strides=(2, 2), padding=((3, 3), (3, 3)), use_bias=False,
                    kernel_init=nn.initializers.he_normal(), name="stem_conv")(images)
        x = nn.BatchNorm(use_running_average=not self.train, momentum=0.9, epsilon=1e-5,
                         name="stem_bn")(x)
        x = nn.max_pool(nn.relu(x), (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for stage, blocks in enumerate(self.stages):
            width = 64 * 2 ** stage
            for block in range(blocks):
                stride = 2 if (block == 0 and stage > 0) else 1
                x = Bottleneck(width, stride, self.train, name=f"stage{stage}_block{block}")(x)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(self.classes, kernel_init=_normal(0.01), name="fc")(x)


# --------------------------------------------------------------------------
# 3. GPT-2-small-shaped decoder
# --------------------------------------------------------------------------

class DecoderBlock(nn.Module):
    width: int
    heads: int
    inner: int
    dropout: float
    dropout_mode: str

    @nn.compact
    def __call__(self, x, score_bias):
        a = MultiHeadAttention(self.width, self.heads, self.dropout, self.dropout_mode,
                               name="attention")(nn.LayerNorm(epsilon=1e-5, name="ln_attn")(x),
                                                 score_bias)
        x = x + Dropout(self.dropout, self.dropout_mode, name="attention_dropout")(a)
        f = FeedForward(self.width, self.inner, exact_gelu=False,
                        name="mlp")(nn.LayerNorm(epsilon=1e-5, name="ln_mlp")(x))
        return x + Dropout(self.dropout, self.dropout_mode, name="mlp_dropout")(f)


class GPTDecoder(nn.Module):
    vocab: int = 50257
    context: int = 1024
    width: int = 768
    layers: int = 12
    heads: int = 12
    inner: int = 3072
    dropout: float = 0.1
    dropout_mode: str = "mask"

    @nn.compact
    def __call__(self, token_ids):
        b, s = token_ids.shape
        tokens = nn.Embed(self.vocab, self.width, embedding_init=_normal(), name="token_embed")
        positions = self.param("position_embed", _normal(0.01), (self.context, self.width))
        x = tokens(token_ids) + positions[None, :s, :]
        x = Dropout(self.dropout, self.dropout_mode, name="embed_dropout")(x)
        row = jax.lax.broadcasted_iota(I32, (s, s), 0)
        col = jax.lax.broadcasted_iota(I32, (s, s), 1)
        causal_bias = jnp.where(col <= row, 0.0, -1e9).astype(F32)[None, None, :, :]
        for i in range(self.layers):
            x = DecoderBlock(self.width, self.heads, self.inner, self.dropout,
                             self.dropout_mode, name=f"block_{i}")(x, causal_bias)
        x = nn.LayerNorm(epsilon=1e-5, name="ln_final")(x)
        return tokens.attend(x)


# --------------------------------------------------------------------------
# 4. DLRM-style CTR model
# --------------------------------------------------------------------------

# Per-feature cardinalities of the 26 categorical columns of the Criteo Kaggle
# display-advertising data as DLRM's Kaggle setup indexes them (~33.8M rows).
CRITEO_KAGGLE_ROWS = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)


def _uniform_fan(rows):
    bound = 1.0 / math.sqrt(rows)
    return lambda key, shape, dtype=F32: jax.random.uniform(key, shape, dtype, -bound, bound)


class DLRM(nn.Module):
    table_rows: Sequence[int] = CRITEO_KAGGLE_ROWS
    dim: int = 16
    bottom: Sequence[int] = (512, 256, 64)
    top: Sequence[int] = (512, 256)

    @nn.compact
    def __call__(self, dense, sparse):
        x = dense
        for i, w in enumerate(list(self.bottom) + [self.dim]):
            x = nn.relu(nn.Dense(w, name=f"bottom_{i}")(x))
        vectors = [x]
        for t, rows in enumerate(self.table_rows):
            table = nn.Embed(rows, self.dim, embedding_init=_uniform_fan(rows), name=f"table_{t}")
            vectors.append(table(sparse[:, t]))
        stacked = jnp.stack(vectors, axis=1)                      # [b, 27, dim]
        gram = jnp.einsum("bid,bjd->bij", stacked, stacked)       # [b, 27, 27]
        li, lj = np.tril_indices(len(vectors), k=-1)               # 351 distinct pairs
        pairs = gram[:, li, lj]
        z = jnp.concatenate([x, pairs], axis=1)                    # [b, 16 + 351]
        for i, w in enumerate(self.top):
            z = nn.relu(nn.Dense(w, name=f"top_{i}")(z))
        return nn.Dense(1, name="top_out")(z)[:, 0]


# --------------------------------------------------------------------------
# Training steps
# --------------------------------------------------------------------------

def _no_decay_mask(params):
    """AdamW decays kernels and embeddings, not biases or LayerNorm parameters."""
    flat = flax.traverse_util.flatten_dict(params)
    return flax.traverse_util.unflatten_dict(
        {k: (k[-1] not in ("bias", "scale")) for k in flat})


@dataclasses.dataclass
class Built:
    step: Callable          # step(*args) -> new state..., loss
    args: tuple             # pytree of jax.ShapeDtypeStruct
    donate: tuple           # argnums donated (params / optimizer / model state)
    params: int             # trainable parameter count
    init_real: Callable     # () -> concrete args, for --smoke


def _abstract(tree):
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)


def _count(tree):
    return int(sum(np.prod(a.shape) for a in jax.tree_util.tree_leaves(tree)))


def _key_struct():
    return jax.ShapeDtypeStruct((2,), jnp.uint32)


def _dropout_io(mode: str, variables_shape, rate: float = 0.1):
    """The step's dropout argument for `mode`: (abstract arg, apply-kwargs fn, real maker)."""
    if mode == "mask":
        masks = variables_shape.get("dropout_masks", {})

        def kwargs(drop):
            return {"extra_vars": {"dropout_masks": drop}}

        def real(key):
            leaves, tdef = jax.tree_util.tree_flatten(masks)
            keys = jax.random.split(key, max(len(leaves), 1))
            return jax.tree_util.tree_unflatten(
                tdef, [jax.random.bernoulli(k, 1.0 - rate, l.shape) for k, l in zip(keys, leaves)])

        return _abstract(masks), kwargs, real
    if mode == "rng":
        return _key_struct(), (lambda drop: {"rngs": {"dropout": drop}}), (lambda key: key)
    return None, (lambda drop: {}), (lambda key: None)


def _apply(model, params, drop_kwargs, *inputs):
    extra = drop_kwargs.pop("extra_vars", {})
    return model.apply({"params": params, **extra}, *inputs, **drop_kwargs)


def build_bert(batch: int, seq: int, dropout_mode: str = "mask") -> Built:
    model = BertMLM(dropout_mode=dropout_mode)
    predictions = 20  # BERT's max_predictions_per_seq for seq 128
    inputs = (jnp.zeros((batch, seq), I32), jnp.zeros((batch, seq), I32),
              jnp.ones((batch, seq), I32), jnp.zeros((batch, predictions), I32))
    init = lambda key: model.init({"params": key, "dropout": key}, *inputs)
    opt = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(1e-4, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01, mask=_no_decay_mask))
    v_shape = jax.eval_shape(init, jax.random.PRNGKey(0))
    p_shape = v_shape["params"]
    o_shape = jax.eval_shape(opt.init, p_shape)
    drop_arg, drop_kwargs, drop_real = _dropout_io(dropout_mode, v_shape)

    def step(params, opt_state, token_ids, type_ids, pad_mask, mlm_positions, mlm_labels,
             mlm_weights, dropout):
        def loss_fn(p):
            logits = _apply(model, p, drop_kwargs(dropout), token_ids, type_ids, pad_mask,
                            mlm_positions)
            nll = optax.softmax_cross_entropy_with_integer_labels(logits, mlm_labels)
            return jnp.sum(nll * mlm_weights) / (jnp.sum(mlm_weights) + 1e-5)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    data = (jax.ShapeDtypeStruct((batch, seq), I32), jax.ShapeDtypeStruct((batch, seq), I32),
            jax.ShapeDtypeStruct((batch, seq), I32), jax.ShapeDtypeStruct((batch, predictions), I32),
            jax.ShapeDtypeStruct((batch, predictions), I32),
            jax.ShapeDtypeStruct((batch, predictions), F32), drop_arg)

    def init_real():
        key = jax.random.PRNGKey(0)
        p = init(key)["params"]
        ks = jax.random.split(key, 4)
        return (p, opt.init(p),
                jax.random.randint(ks[0], (batch, seq), 0, model.vocab, I32),
                jnp.zeros((batch, seq), I32).at[:, seq // 2:].set(1),
                jnp.ones((batch, seq), I32),
                jax.random.randint(ks[1], (batch, predictions), 0, seq, I32),
                jax.random.randint(ks[2], (batch, predictions), 0, model.vocab, I32),
                jnp.ones((batch, predictions), F32), drop_real(ks[3]))

    return Built(step, (_abstract(p_shape), _abstract(o_shape)) + data, (0, 1),
                 _count(p_shape), init_real)


def build_resnet(batch: int, image: int, dropout_mode: str = "mask") -> Built:
    del dropout_mode  # no dropout in ResNet-50
    model = ResNet50()
    sample = jnp.zeros((batch, image, image, 3), F32)
    init = lambda key: model.init(key, sample)
    opt = optax.chain(optax.add_decayed_weights(1e-4), optax.sgd(0.1, momentum=0.9))

    def step(params, batch_stats, opt_state, images, labels):
        def loss_fn(p):
            logits, new_state = model.apply({"params": p, "batch_stats": batch_stats}, images,
                                            mutable=["batch_stats"])
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return loss, new_state["batch_stats"]

        (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_stats, opt_state, loss

    v_shape = jax.eval_shape(init, jax.random.PRNGKey(0))
    p_shape, s_shape = v_shape["params"], v_shape["batch_stats"]
    o_shape = jax.eval_shape(opt.init, p_shape)
    data = (jax.ShapeDtypeStruct((batch, image, image, 3), F32),
            jax.ShapeDtypeStruct((batch,), I32))

    def init_real():
        key = jax.random.PRNGKey(0)
        v = init(key)
        ks = jax.random.split(key, 2)
        return (v["params"], v["batch_stats"], opt.init(v["params"]),
                jax.random.normal(ks[0], (batch, image, image, 3), F32),
                jax.random.randint(ks[1], (batch,), 0, 1000, I32))

    return Built(step, (_abstract(p_shape), _abstract(s_shape), _abstract(o_shape)) + data,
                 (0, 1, 2), _count(p_shape), init_real)


def build_gpt(batch: int, seq: int, dropout_mode: str = "mask") -> Built:
    model = GPTDecoder(dropout_mode=dropout_mode)
    init = lambda key: model.init({"params": key, "dropout": key}, jnp.zeros((batch, seq), I32))
    opt = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(6e-4, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1, mask=_no_decay_mask))
    v_shape = jax.eval_shape(init, jax.random.PRNGKey(0))
    p_shape = v_shape["params"]
    o_shape = jax.eval_shape(opt.init, p_shape)
    drop_arg, drop_kwargs, drop_real = _dropout_io(dropout_mode, v_shape)

    def step(params, opt_state, token_ids, targets, dropout):
        def loss_fn(p):
            logits = _apply(model, p, drop_kwargs(dropout), token_ids)
            return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    data = (jax.ShapeDtypeStruct((batch, seq), I32), jax.ShapeDtypeStruct((batch, seq), I32),
            drop_arg)

    def init_real():
        key = jax.random.PRNGKey(0)
        p = init(key)["params"]
        ks = jax.random.split(key, 3)
        toks = jax.random.randint(ks[0], (batch, seq + 1), 0, model.vocab, I32)
        return p, opt.init(p), toks[:, :-1], toks[:, 1:], drop_real(ks[2])

    return Built(step, (_abstract(p_shape), _abstract(o_shape)) + data, (0, 1),
                 _count(p_shape), init_real)


def build_dlrm(batch: int, _unused: int, dropout_mode: str = "mask") -> Built:
    del dropout_mode  # no dropout in this DLRM configuration
    model = DLRM()
    n_dense, n_sparse = 13, len(model.table_rows)
    init = lambda key: model.init(key, jnp.zeros((batch, n_dense), F32),
                                  jnp.zeros((batch, n_sparse), I32))["params"]
    opt = optax.adam(1e-3)

    def step(params, opt_state, dense, sparse, clicks):
        def loss_fn(p):
            logits = model.apply({"params": p}, dense, sparse)
            return optax.sigmoid_binary_cross_entropy(logits, clicks).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    p_shape = jax.eval_shape(init, jax.random.PRNGKey(0))
    o_shape = jax.eval_shape(opt.init, p_shape)
    data = (jax.ShapeDtypeStruct((batch, n_dense), F32),
            jax.ShapeDtypeStruct((batch, n_sparse), I32),
            jax.ShapeDtypeStruct((batch,), F32))

    def init_real():
        key = jax.random.PRNGKey(0)
        p = init(key)
        ks = jax.random.split(key, 3)
        rows = jnp.asarray(model.table_rows, I32)
        sparse = (jax.random.randint(ks[1], (batch, n_sparse), 0, 2 ** 30, I32) % rows)
        return (p, opt.init(p), jnp.log1p(jax.random.exponential(ks[0], (batch, n_dense), F32)),
                sparse, jax.random.bernoulli(ks[2], 0.25, (batch,)).astype(F32))

    return Built(step, (_abstract(p_shape), _abstract(o_shape)) + data, (0, 1),
                 _count(p_shape), init_real)


@dataclasses.dataclass
class Spec:
    name: str
    family: str
    batch: int
    seq_or_image: int
    build: Callable[[int, int, str], Built]
    shape_note: str


SPECS = [
    Spec("bert_base_mlm", "nlp-encoder", 32, 128, build_bert, "seq 128"),
    Spec("resnet50", "cv-cnn", 32, 224, build_resnet, "224x224x3"),
    Spec("gpt2_small", "nlp-decoder", 8, 256, build_gpt, "seq 256"),
    Spec("dlrm_criteo", "ctr", 2048, 26, build_dlrm, "13 dense + 26 sparse features"),
]


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------

def _cost(lowered) -> tuple[float | None, float | None, float]:
    t0 = time.time()
    compiled = lowered.compile()
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost = cost or {}
    return cost.get("flops"), cost.get("bytes accessed"), time.time() - t0


def _extract(stitchctl: str, hlo_path: str, compile_sample: int, compile_timeout: float) -> dict:
    out: dict[str, Any] = {}
    tmp = tempfile.mkdtemp(prefix="stitch_extract_")
    try:
        r = subprocess.run([stitchctl, "extract", hlo_path, "--out", tmp],
                           capture_output=True, text=True)
        if r.returncode != 0:
            out["extract_error"] = (r.stderr or r.stdout).strip()[-2000:]
            return out
        files = sorted(f for f in os.listdir(tmp) if f.endswith(".json"))
        out["subgraphs"] = len(files)
        nodes = {os.path.basename(m.group(1)): int(m.group(2))
                 for m in re.finditer(r"^(\S+\.json)\s+(\d+) nodes", r.stdout, re.M)}
        out["nodes"] = nodes
        if compile_sample > 0 and files:
            n = min(compile_sample, len(files))
            picks = sorted({int(i * (len(files) - 1) / max(n - 1, 1)) for i in range(n)})
            ok, failures = 0, []
            for i in picks:
                label = f"{files[i]} ({nodes.get(files[i], '?')} nodes)"
                t0 = time.time()
                try:
                    r = subprocess.run(
                        [stitchctl, "compile", "--no-cubin", os.path.join(tmp, files[i])],
                        capture_output=True, text=True, timeout=compile_timeout)
                except subprocess.TimeoutExpired:
                    failures.append(f"{label}: no result within {compile_timeout:.0f}s (killed)")
                    continue
                if r.returncode == 0:
                    ok += 1
                    print(f"      compiled {label} in {time.time() - t0:.1f}s", flush=True)
                else:
                    failures.append(f"{label}: {(r.stderr or r.stdout).strip()[-500:]}")
            out["compile_sample"] = {"tried": len(picks), "ok": ok, "failures": failures}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _smoke(built: Built) -> None:
    args = built.init_real()
    t0 = time.time()
    outs = jax.jit(built.step)(*args)
    loss = float(jax.block_until_ready(outs[-1]))
    print(f"    smoke: one step ran, loss {loss:.4f} ({time.time() - t0:.1f}s)", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="testdata/models")
    ap.add_argument("--models", default=",".join(s.name for s in SPECS))
    ap.add_argument("--stitchctl", default=None, help="stitchctl binary; counts extracted subgraphs")
    ap.add_argument("--compile-sample", type=int, default=0)
    ap.add_argument("--compile-timeout", type=float, default=120.0,
                    help="seconds allowed for each sampled stitchctl compile")
    ap.add_argument("--no-cost", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--dropout", choices=("mask", "rng", "off"), default="mask",
                    help="BERT/GPT dropout: masks as step inputs (default), Threefry "
                         "inside the step, or none")
    a = ap.parse_args(argv)

    wanted = [n for n in a.models.split(",") if n]
    unknown = set(wanted) - {s.name for s in SPECS}
    if unknown:
        ap.error(f"unknown model(s): {sorted(unknown)}")
    os.makedirs(a.out, exist_ok=True)
    index_path = os.path.join(a.out, "models.json")
    index = []
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
    by_name = {e["name"]: e for e in index}

    status = 0
    for spec in SPECS:
        if spec.name not in wanted:
            continue
        print(f"== {spec.name} (batch {spec.batch}, {spec.shape_note})", flush=True)
        t0 = time.time()
        built = spec.build(spec.batch, spec.seq_or_image, a.dropout)
        lowered = jax.jit(inline_calls(built.step, f"{spec.name}_train_step"), donate_argnums=built.donate).lower(*built.args)
        text = lowered.as_text(dialect="hlo")
        calls = len(re.findall(r"\bcall\(", text))
        if calls:
            print(f"    warning: {calls} call instruction(s) remain", flush=True)
            status = 1
        fname = f"{spec.name}_train_bs{spec.batch}.hlo"
        path = os.path.join(a.out, fname)
        with open(path, "w") as f:
            f.write(text)
        print(f"    params {built.params:,}; wrote {path} ({len(text):,} bytes, "
              f"{text.count(chr(10)):,} lines) in {time.time() - t0:.1f}s", flush=True)

        entry = dict(by_name.get(spec.name, {}))
        entry.update({
            "name": spec.name, "file": fname, "family": spec.family, "batch": spec.batch,
            "seq_or_image": spec.seq_or_image, "input": spec.shape_note,
            "params": built.params, "bytes": len(text),
            "dropout": a.dropout if spec.name in ("bert_base_mlm", "gpt2_small") else "none",
            "jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__,
        })
        if not a.no_cost:
            flops, nbytes, secs = _cost(lowered)
            entry["flops_per_step"] = flops
            entry["bytes_accessed_per_step"] = nbytes
            print(f"    XLA:CPU cost_analysis: flops {flops:.4g}, bytes accessed {nbytes:.4g} "
                  f"(compile {secs:.1f}s)", flush=True)
        if a.stitchctl:
            ex = _extract(a.stitchctl, path, a.compile_sample, a.compile_timeout)
            if "extract_error" in ex:
                print(f"    stitchctl extract FAILED: {ex['extract_error']}", flush=True)
                entry["subgraphs"] = None
                status = 1
            else:
                entry["subgraphs"] = ex["subgraphs"]
                sizes = sorted(ex["nodes"].values(), reverse=True)
                entry["subgraph_nodes_largest"] = sizes[:5]
                entry["subgraph_nodes_total"] = sum(sizes)
                msg = f"    stitchctl extract: {ex['subgraphs']} subgraphs"
                if "compile_sample" in ex:
                    cs = ex["compile_sample"]
                    msg += f"; compile --no-cubin {cs['ok']}/{cs['tried']} ok"
                    for fail in cs["failures"]:
                        print(f"      {fail}", flush=True)
                print(msg, flush=True)
        if a.smoke:
            _smoke(built)
        by_name[spec.name] = entry

    order = [s.name for s in SPECS]
    index = sorted(by_name.values(), key=lambda e: order.index(e["name"]) if e["name"] in order else 99)
    with open(index_path, "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
