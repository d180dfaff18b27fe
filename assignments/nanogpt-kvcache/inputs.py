"""Inputs of nanogpt-kvcache: the prompt, token ids drawn uniformly from the case's vocabulary."""

import numpy as np


def make_inputs(kernel: str, case: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    if kernel not in ("cached_generation", "uncached_generation", "cache_evidence"):
        raise KeyError(f"nanogpt-kvcache has no kernel {kernel!r}")
    count = int(case["batch"]) * int(case["prompt_len"])
    return {"prompt": rng.integers(0, int(case["vocab_size"]), count).astype(np.int32)}
