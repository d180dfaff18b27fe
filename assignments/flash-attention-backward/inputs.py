"""Input generators for flash-attention-backward: the forward's Q, K, V and O, the upstream gradient dO, and
(for Algorithm 1) the forward's row statistics m and l."""

import numpy as np

_KERNELS = ("standard_attention_backward", "flash_attention_backward")

# The large-score case's shift is carried by K's first _SHIFT_COLUMNS columns, each _KEY_COLUMN (a power of two,
# so that Q[i, c] * K[j, c] is exact in float32). Spread over several columns, no entry is large: an error in a
# score (ulp(190) ~ 1.5e-5 is float32's own) reaches dK[:, c] multiplied by |Q[i, c]| and dQ[:, c] by
# |K[j, c]|, here ~5 and 4, where one column would have carried 20 and 8.
_KEY_COLUMN = 4.0
_SHIFT_COLUMNS = 8


def make_inputs(kernel: str, case: dict[str, int | float | list], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Q, K, V and dO uniform in [-1, 1] (drawn from rng in that order), O, m and l from the float64 forward.

    O, m and l are what a correct forward pass returns, rounded once to float32: O = softmax(Q K^T) V, and per
    row m = max of S = Q K^T and l = sum of exp(S - m) (the forward's final running statistics).

    score_offset = R: every score of row i is shifted by c_i = +-(0.75..1.25) R (sign random per row), through
    the first columns of Q and K (up to 8 of them), set after the draws above. A shift of a whole row changes
    neither its softmax nor dS, but takes exp() of raw scores far out of float32's range.
    """
    if kernel not in _KERNELS:
        raise KeyError(
            f"flash-attention-backward has no kernel {kernel!r}; expected one of {', '.join(_KERNELS)}"
        )
    N, d = int(case["N"]), int(case["d"])
    arrays = {
        name: rng.uniform(-1.0, 1.0, size=(N, d)).astype(np.float32)
        for name in ("Q", "K", "V", "dO")
    }
    if "score_offset" in case:
        shift = rng.choice([-1.0, 1.0], size=N) * rng.uniform(0.75, 1.25, size=N) * float(case["score_offset"])
        columns = min(_SHIFT_COLUMNS, d)
        arrays["K"][:, :columns] = _KEY_COLUMN
        arrays["Q"][:, :columns] = (shift / (columns * _KEY_COLUMN))[:, None]

    scores = arrays["Q"].astype(np.float64) @ arrays["K"].astype(np.float64).T
    m = scores.max(axis=1)
    weights = np.exp(scores - m[:, None])
    l = weights.sum(axis=1)
    arrays["O"] = ((weights / l[:, None]) @ arrays["V"].astype(np.float64)).astype(np.float32)
    if kernel == "flash_attention_backward":
        arrays["m"] = m.astype(np.float32)
        arrays["l"] = l.astype(np.float32)
    return arrays
