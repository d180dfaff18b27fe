"""matvec: y = A x for a row-major M x N matrix."""

import numpy as np


def matvec(A: np.ndarray, x: np.ndarray, y: np.ndarray, M: int, N: int) -> None:
    """Write A @ x into y (float64), in place."""
    np.matmul(A, x, out=y)
