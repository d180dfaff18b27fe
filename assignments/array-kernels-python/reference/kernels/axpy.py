"""axpy: out = a x + y, element by element."""

import numpy as np


def axpy(a: float, x: np.ndarray, y: np.ndarray, out: np.ndarray, n: int) -> None:
    """Write a * x + y into out (float32), in place."""
    out[:] = np.float32(a) * x + y
