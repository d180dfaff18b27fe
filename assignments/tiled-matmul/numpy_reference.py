"""Float64 NumPy truth for tiled-matmul: one function per kernel, named as the kernel, called as
fn(**inputs, **case_params).

The three kernels compute the same product (naive, tiled and cuBLAS are three ways to it): C = A @ B in float64.
"""

from __future__ import annotations

import numpy as np


def _product(A: np.ndarray, B: np.ndarray) -> dict[str, np.ndarray]:
    return {"C": A.astype(np.float64) @ B.astype(np.float64)}


def naive(A: np.ndarray, B: np.ndarray, **_) -> dict[str, np.ndarray]:
    return _product(A, B)


def tiled(A: np.ndarray, B: np.ndarray, **_) -> dict[str, np.ndarray]:
    return _product(A, B)


def cublas(A: np.ndarray, B: np.ndarray, **_) -> dict[str, np.ndarray]:
    return _product(A, B)
