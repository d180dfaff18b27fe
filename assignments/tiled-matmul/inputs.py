"""Input generators for tiled-matmul: make_inputs(kernel, case, rng) -> {"A": (M, K), "B": (K, N)}, float32.

Uniform in [-1, 1] for the three kernels alike (the tiled kernel's `tile` changes how it computes, not what), so a
case's gold is shared by every kernel that has it: C's entries are sums of K products of mean 0, |C| ~ sqrt(K / 9).
"""

from __future__ import annotations

import numpy as np


def _operands(case: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    M, N, K = case["M"], case["N"], case["K"]
    return {"A": rng.uniform(-1.0, 1.0, size=(M, K)).astype(np.float32),
            "B": rng.uniform(-1.0, 1.0, size=(K, N)).astype(np.float32)}


def make_inputs(kernel: str, case: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return _operands(case, rng)
