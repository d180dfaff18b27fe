"""Float64 truth for contextual-sparsity: the top-k forward pass, one small function per kernel.

The quantity kept, the course's words ("the second [forward pass] using only the top-k weights with the largest
outputs", after Liu et al. 2023, Deja Vu): per input row, in each hidden layer, the k neurons whose *output* (the
value after the activation: ReLU for the classifier, GELU for the GPT-2 MLP) is largest *by value* (not by absolute
value), all others set to 0 before the next layer. Logits (the last layer) are never masked. k = width is the dense
forward pass. For attention the unit is a head, and a head's output at a token is a vector: the k heads kept per
token are those whose output has the largest L2 norm (Deja Vu's attention sparsity keeps whole heads). Ties at the
k-th place are only ReLU's 0s (inputs.py says why these are harmless): np.argpartition
picks any of them.
"""

from __future__ import annotations

import math

import numpy as np

D_IN, WIDTH, CLASSES, GPT2_C, GPT2_HEADS = 16, 64, 8, 48, 4


def keep_topk(h: np.ndarray, k: int) -> np.ndarray:
    """h with all but each row's k largest values set to 0."""
    if k >= h.shape[-1]:
        return h
    drop = np.argpartition(h, h.shape[-1] - k, axis=-1)[..., : h.shape[-1] - k]
    out = h.copy()
    np.put_along_axis(out, drop, 0.0, axis=-1)
    return out


def topk_logits(w1, b1, w2, b2, w3, b3, x: np.ndarray, k: int) -> np.ndarray:
    """The classifier's logits with each hidden layer cut to its k largest outputs, per row of x (batch x D_IN)."""
    h = keep_topk(np.maximum(x @ w1.reshape(WIDTH, D_IN).T + b1, 0.0), k)
    h = keep_topk(np.maximum(h @ w2.reshape(WIDTH, WIDTH).T + b2, 0.0), k)
    return h @ w3.reshape(CLASSES, WIDTH).T + b3


def classifier_logits(x, w1, b1, w2, b2, w3, b3, batch: int, k: int, **_) -> dict[str, np.ndarray]:
    return {"logits": topk_logits(w1, b1, w2, b2, w3, b3, x.reshape(batch, D_IN), k).reshape(-1)}


def classifier_accuracy(x, labels, ks, w1, b1, w2, b2, w3, b3, n: int, **_) -> dict[str, np.ndarray]:
    """The fraction of the n held-out samples classified right, for each k of ks."""
    rows = x.reshape(n, D_IN)
    return {"k_over_width": ks / WIDTH, "accuracy": np.array([float(np.mean(topk_logits(w1, b1, w2, b2, w3, b3, rows, int(k)).argmax(axis=1)
                                                 == labels)) for k in ks])}


def gelu(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU (the tanh approximation)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_mlp_topk(x, w_fc, b_fc, w_proj, b_proj, batch: int, T: int, k: int, **_) -> dict[str, np.ndarray]:
    """GPT-2's MLP (c_fc, GELU, c_proj) on each token, its 4C hidden outputs cut to the k largest per token."""
    c = GPT2_C
    h = keep_topk(gelu(x.reshape(batch * T, c) @ w_fc.reshape(4 * c, c).T + b_fc), k)
    return {"out": (h @ w_proj.reshape(c, 4 * c).T + b_proj).reshape(-1)}


def attention_heads(x: np.ndarray, w_attn: np.ndarray, b_attn: np.ndarray) -> np.ndarray:
    """GPT-2's causal self-attention's per-head outputs for x (batch, T, C): (batch, n_head, T, head size)."""
    batch, T, c = x.shape
    size = c // GPT2_HEADS
    qkv = x @ w_attn.reshape(3 * c, c).T + b_attn
    q, k, v = (qkv[..., i * c:(i + 1) * c].reshape(batch, T, GPT2_HEADS, size).transpose(0, 2, 1, 3)
               for i in range(3))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size)
    scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v


def gpt2_attention_topk_heads(x, w_attn, b_attn, w_proj, b_proj, batch: int, T: int, k: int,
                              **_) -> dict[str, np.ndarray]:
    """GPT-2's attention, each token keeping its k heads with the largest output norm, the rest zeroed before
    c_proj."""
    c = GPT2_C
    heads = attention_heads(x.reshape(batch, T, c), w_attn, b_attn)
    norms = np.linalg.norm(heads, axis=-1)  # (batch, n_head, T)
    kept = keep_topk(norms.transpose(0, 2, 1) + 1.0, k) > 0  # +1: a kept head is > 0 even where its norm is 0
    heads = heads * kept.transpose(0, 2, 1)[..., None]
    joined = heads.transpose(0, 2, 1, 3).reshape(batch * T, c)
    return {"out": (joined @ w_proj.reshape(c, c).T + b_proj).reshape(-1)}
