"""NumPy float32 emulations of course-style local attentions (gpt2-m3's req_5), for setting and checking its tolerance.

Each takes one (b, h) head's q, k, v (T, HS) float32 rows and returns its (T, HS) output, computed in the order
and precision a family of student kernels computes it:
- `serial`: the course's local_attention_forward_cpu moved to one GPU thread per row: float32 dot products summed
  key by key in order, the max, expf(scale * (w - max)), a float32 sum, then p * v summed key by key;
- `online`: one key at a time with a running max, sum and output (flash-style online softmax), float32;
- `tf32`: `serial` with tensor-core (TF32) operands: q, k, p and v rounded to 10 mantissa bits, float32 sums.
`truth` is the float64 answer for any window (`lo`, `hi`: keys t - lo ... t + hi), for the mutants' distances.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

WINDOW = 128
F32 = np.float32


def tf32(x: np.ndarray) -> np.ndarray:
    """x rounded to TF32 (10 explicit mantissa bits, round to nearest even), kept in float32."""
    bits = np.ascontiguousarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0xFFF + ((bits >> 13) & 1)) & ~np.uint64(0x1FFF)
    return rounded.astype(np.uint32).view(F32)


def _window(T: int, lo: int = WINDOW, hi: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Each query row's key indices t - lo ... t + hi (clipped to 0) and which of them are real keys."""
    keys = np.arange(T)[:, None] + np.arange(-lo, hi + 1)[None, :]
    valid = (keys >= 0) & (keys < T)
    return np.clip(keys, 0, T - 1), valid


def serial(q: np.ndarray, k: np.ndarray, v: np.ndarray, operands: Callable[[np.ndarray], np.ndarray] = lambda x: x,
           lo: int = WINDOW, hi: int = 0) -> np.ndarray:
    T, HS = q.shape
    keys, valid = _window(T, lo, hi)
    q, K, V = operands(q), operands(k)[keys], operands(v)[keys]  # K, V: (T, slots, HS)
    w = np.zeros(keys.shape, F32)
    for i in range(HS):  # summed in the loop's order, rounded at every step as a float32 loop is
        w = w + q[:, None, i] * K[:, :, i]
    w = np.where(valid, w, F32(-np.inf))
    scale = F32(1.0) / np.sqrt(F32(HS))
    e = np.where(valid, np.exp(scale * (w - w.max(axis=1, keepdims=True))), F32(0))
    total = np.zeros(T, F32)
    for s in range(keys.shape[1]):
        total = total + e[:, s]
    p = operands(e * (F32(1.0) / total)[:, None])
    out = np.zeros((T, HS), F32)
    for s in range(keys.shape[1]):
        out = out + p[:, s, None] * V[:, s]
    return out


def tf32_serial(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return serial(q, k, v, operands=tf32)


def online(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    T, HS = q.shape
    keys, valid = _window(T)
    K, V = k[keys], v[keys]
    scale = F32(1.0) / np.sqrt(F32(HS))
    m, l, acc = np.full(T, -np.inf, F32), np.zeros(T, F32), np.zeros((T, HS), F32)
    for s in range(keys.shape[1]):
        score = np.zeros(T, F32)
        for i in range(HS):
            score = score + q[:, i] * K[:, s, i]
        score = np.where(valid[:, s], score * scale, F32(-np.inf))
        m_new = np.maximum(m, score)
        with np.errstate(invalid="ignore"):  # -inf - -inf before a row's first key: that row's terms are dropped
            correction = np.where(np.isfinite(m), np.exp(m - m_new), F32(0))
            p = np.where(valid[:, s], np.exp(score - m_new), F32(0))
        l = l * correction + p
        acc = acc * correction[:, None] + p[:, None] * V[:, s]
        m = m_new
    return acc / l[:, None]


def truth(q: np.ndarray, k: np.ndarray, v: np.ndarray, lo: int = WINDOW, hi: int = 0) -> np.ndarray:
    """float64 softmax(q.k / sqrt(HS)) v over keys t - lo ... t + hi."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    T, HS = q.shape
    offset = np.arange(T)[:, None] - np.arange(T)[None, :]  # query t minus key j
    scores = np.where((offset <= lo) & (offset >= -hi), q @ k.T / np.sqrt(HS), -np.inf)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (weights / weights.sum(axis=1, keepdims=True)) @ v


FAMILIES: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    "serial": serial, "online": online, "tf32": tf32_serial,
}


def heads(inp: np.ndarray, B: int, T: int, NH: int, HS: int):
    """(b, h, q, k, v) for every head of a packed (B, T, 3, NH, HS) input."""
    qkv = inp.reshape(-1)[: B * T * 3 * NH * HS].reshape(B, T, 3, NH, HS)
    for b in range(B):
        for h in range(NH):
            yield b, h, qkv[b, :, 0, h], qkv[b, :, 1, h], qkv[b, :, 2, h]
