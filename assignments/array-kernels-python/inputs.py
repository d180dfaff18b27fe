"""Input generators for array-kernels-python."""

import numpy as np


def make_inputs(kernel: str, case: dict[str, int | float | list], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """axpy: x and y, float32 of length n; matvec: A (M x N) and x (N), float64; uniform in [-1, 1], drawn in that
    order. Away from zero on average, so that an all-zeros answer is far outside the tolerance."""
    if kernel == "axpy":
        n = int(case["n"])
        return {name: rng.uniform(-1.0, 1.0, n).astype(np.float32) for name in ("x", "y")}
    if kernel == "matvec":
        M, N = int(case["M"]), int(case["N"])
        return {"A": rng.uniform(-1.0, 1.0, (M, N)), "x": rng.uniform(-1.0, 1.0, N)}
    raise KeyError(f"array-kernels-python has no kernel {kernel!r}; expected axpy or matvec")
