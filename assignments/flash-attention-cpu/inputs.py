"""Input generators for flash-attention-cpu: Q, K, V for one attention head."""

import numpy as np

# Both kernels compute the same O from the same three matrices.
_KERNELS = ("standard_attention", "flash_attention")

# K's column 0 in the large-score cases: a power of two, so that Q[i, 0] * K[j, 0] is exact in float32.
_KEY_COLUMN = 8.0


def make_inputs(kernel: str, case: dict[str, int | float | list], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Return Q, K and V as float32 (N, d) arrays, uniform in [-1, 1], drawn from rng in that order.

    Entries in [-1, 1] keep scores (sums of d products) in a range where float32 exp() is exact
    enough for the tolerance, yet spread enough that softmax rows are far from uniform.

    Two knobs make scores far past 88, where float32 exp() overflows (and past -103, where it
    underflows to 0), while the softmax stays well defined; each sets column 0 of Q and K after the
    draws above, so the other columns are the ordinary case's:
      score_offset = R: every score of row i is shifted by c_i = ±(0.75..1.25) R (its sign random per
        row). A shift of a whole row leaves its softmax unchanged, exactly, so O is an ordinary
        attention's; only a kernel that exponentiates scores without subtracting a row max sees it.
      score_spread = R: the scores of row i get ±R t_j, t_j rising from -1 to 1 over the keys, so the
        row's max moves by hundreds from one key block to the next (the running max must follow it)
        while neighbouring keys stay ~2R/N apart (the softmax is not one-hot).
    """
    if kernel not in _KERNELS:
        raise KeyError(
            f"flash-attention-cpu has no kernel {kernel!r}; expected one of {', '.join(_KERNELS)}"
        )
    N, d = int(case["N"]), int(case["d"])
    arrays = {
        name: rng.uniform(-1.0, 1.0, size=(N, d)).astype(np.float32)
        for name in ("Q", "K", "V")
    }
    Q, K = arrays["Q"], arrays["K"]
    sign = rng.choice([-1.0, 1.0], size=N)
    if "score_offset" in case:
        K[:, 0] = _KEY_COLUMN
        Q[:, 0] = sign * rng.uniform(0.75, 1.25, size=N) * float(case["score_offset"]) / _KEY_COLUMN
    elif "score_spread" in case:
        K[:, 0] = _KEY_COLUMN * np.linspace(-1.0, 1.0, N)
        Q[:, 0] = sign * float(case["score_spread"]) / _KEY_COLUMN
    return arrays
