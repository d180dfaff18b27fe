"""Input generators for flash-attention-cpu: Q, K, V for one attention head."""

import numpy as np

# Both kernels compute the same O from the same three matrices.
_KERNELS = ("standard_attention", "flash_attention")


def make_inputs(kernel: str, case: dict[str, int | float | list], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Return Q, K and V as float32 (N, d) arrays, uniform in [-1, 1], drawn from rng in that order.

    Entries in [-1, 1] keep scores (sums of d products) in a range where float32 exp() is exact
    enough for the tolerance, yet spread enough that softmax rows are far from uniform.
    """
    if kernel not in _KERNELS:
        raise KeyError(
            f"flash-attention-cpu has no kernel {kernel!r}; expected one of {', '.join(_KERNELS)}"
        )
    shape = (int(case["N"]), int(case["d"]))
    return {
        name: rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        for name in ("Q", "K", "V")
    }
