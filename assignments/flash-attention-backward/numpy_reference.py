"""Float64 truth for flash-attention-backward: the gradients of O = softmax(Q K^T) V, no scaling, no mask."""

import numpy as np


def forward(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """O = softmax(Q K^T) V in float64 (what the finite-difference check differentiates)."""
    return _probabilities(Q, K) @ V.astype(np.float64)


def _probabilities(Q: np.ndarray, K: np.ndarray) -> np.ndarray:
    scores = Q.astype(np.float64) @ K.astype(np.float64).T
    # Shift by the row max so exp() cannot overflow; softmax is unchanged by it.
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True)


def _gradients(Q: np.ndarray, K: np.ndarray, V: np.ndarray, dO: np.ndarray) -> dict[str, np.ndarray]:
    Q, K, V, dO = (x.astype(np.float64) for x in (Q, K, V, dO))
    P = _probabilities(Q, K)
    dP = dO @ V.T
    # D_i = sum_j P_ij dP_ij = rowsum(dO * O): the softmax Jacobian's rank-one part. Taken from P here, not
    # from the float32 O the kernels get, so that the truth is the float64 inputs' exact gradient.
    D = (P * dP).sum(axis=1, keepdims=True)
    dS = P * (dP - D)
    return {"dQ": dS @ K, "dK": dS.T @ Q, "dV": P.T @ dO}


def standard_attention_backward(Q: np.ndarray, K: np.ndarray, V: np.ndarray, dO: np.ndarray,
                                **_) -> dict[str, np.ndarray]:
    """The backward pass of Algorithm 0, in float64 (O is the forward's; the truth recomputes it)."""
    return _gradients(Q, K, V, dO)


def flash_attention_backward(Q: np.ndarray, K: np.ndarray, V: np.ndarray, dO: np.ndarray,
                             **_) -> dict[str, np.ndarray]:
    """The backward pass of Algorithm 1: exact gradients, so its truth ignores m, l, Br and Bc."""
    return _gradients(Q, K, V, dO)
