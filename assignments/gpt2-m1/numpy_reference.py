"""Float64 NumPy truth for gpt2-m1: one function per kernel, called as fn(**inputs, **case_params).

Each returns {output buffer name: float64 array shaped as assignment.toml says}.
"""

from __future__ import annotations

import numpy as np


def encoder(inp: np.ndarray, wte: np.ndarray, wpe: np.ndarray, T: int, **_) -> dict[str, np.ndarray]:
    # Gathered, then widened: the same values, without widening all 50,304 rows (the forward check's harness
    # computes this one too).
    return {"out": wte[inp].astype(np.float64) + wpe[:T].astype(np.float64)}


def layernorm(inp: np.ndarray, weight: np.ndarray, bias: np.ndarray, **_) -> dict[str, np.ndarray]:
    x = inp.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # biased, as in PyTorch
    normalised = (x - mean) / np.sqrt(variance + 1e-5)
    return {"out": normalised * weight.astype(np.float64) + bias.astype(np.float64)}


def matmul(inp: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, **_) -> dict[str, np.ndarray]:
    out = inp.astype(np.float64) @ weight.astype(np.float64).T
    if bias is not None:
        out += bias.astype(np.float64)
    return {"out": out}


def attention(inp: np.ndarray, B: int, T: int, C: int, NH: int, **_) -> dict[str, np.ndarray]:
    HS = C // NH
    # inp may be the grader's larger allocation; the packed Q, K, V are its first B*T*3C floats.
    qkv = inp.reshape(-1)[: B * T * 3 * C].astype(np.float64).reshape(B, T, 3, NH, HS)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # each (B, NH, T, HS)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)  # key j > query t
    out = np.empty((B, NH, T, HS))
    for b in range(B):  # per batch keeps the (NH, T, T) scores at ~100 MB for T = 1024
        scores = q[b] @ k[b].transpose(0, 2, 1) / np.sqrt(HS)
        scores[:, future] = -np.inf
        scores -= scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        out[b] = weights @ v[b]
    return {"out": out.transpose(0, 2, 1, 3).reshape(B, T, C)}


# gpt2-m3's req_5 (local attention, a kernel milestone 1 does not grade): here so that gpt2-m3, which inherits this
# file, keeps one reference file whole (the forward check's sandbox sees a copy of this file alone).
LOCAL_WINDOW = 128  # the course's WINDOW_SIZE: query t sees keys max(0, t - 128) ... t, inclusive (129 keys)


def local_attention(inp: np.ndarray, B: int, T: int, NH: int, HS: int, **_) -> dict[str, np.ndarray]:
    """The course's local_attention_forward_cpu in float64: softmax(q.k / sqrt(HS)) over the window, times v."""
    # inp may be the grader's larger allocation; the packed Q, K, V are its first B*T*3*NH*HS floats.
    qkv = inp.reshape(-1)[: B * T * 3 * NH * HS].astype(np.float64).reshape(B, T, 3, NH, HS)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # each (B, NH, T, HS)
    offset = np.arange(T)[:, None] - np.arange(T)[None, :]  # query t minus key j
    outside = (offset < 0) | (offset > LOCAL_WINDOW)
    out = np.empty((B, NH, T, HS))
    for b in range(B):  # per batch keeps the (NH, T, T) scores at ~100 MB for T = 1024
        scores = q[b] @ k[b].transpose(0, 2, 1) / np.sqrt(HS)
        scores[:, outside] = -np.inf
        scores -= scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        out[b] = weights @ v[b]
    return {"out": out.transpose(0, 2, 1, 3).reshape(B, T, NH * HS)}


def residual(inp1: np.ndarray, inp2: np.ndarray, **_) -> dict[str, np.ndarray]:
    return {"out": inp1.astype(np.float64) + inp2.astype(np.float64)}


def gelu(inp: np.ndarray, **_) -> dict[str, np.ndarray]:
    x = inp.astype(np.float64)
    return {"out": 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))}
