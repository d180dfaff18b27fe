"""Float64 truth for array-kernels-python."""

import numpy as np


def axpy(x: np.ndarray, y: np.ndarray, a: float, **_) -> dict[str, np.ndarray]:
    """out = a x + y."""
    return {"out": a * x.astype(np.float64) + y.astype(np.float64)}


def matvec(A: np.ndarray, x: np.ndarray, **_) -> dict[str, np.ndarray]:
    """y = A x."""
    return {"y": A.astype(np.float64) @ x.astype(np.float64)}
