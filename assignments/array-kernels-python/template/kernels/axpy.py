"""axpy: out = a x + y, element by element."""

import numpy as np


def axpy(a: float, x: np.ndarray, y: np.ndarray, out: np.ndarray, n: int) -> None:
    """Write a * x + y into out, in place (out[i] = ...): out arrives filled with NaN, and a new array bound to
    the name `out` is never seen by the grader."""
    # TODO: your code here.
    pass
