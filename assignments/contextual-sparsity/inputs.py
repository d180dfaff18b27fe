"""Input generators for contextual-sparsity: the pack's classifier, its data set, and the tiny GPT-2 MLP block.

The classifier is the course's "simple multi-class classification task" made deterministic and offline: CLASSES
classes in D_IN dimensions, each class a mixture of CLUSTERS Gaussian clusters (fixed centres drawn from
TASK_SEED), so that a straight line does not separate them and the hidden layers earn their width. The MLP
(D_IN -> WIDTH -> WIDTH -> CLASSES, ReLU after each hidden layer) is trained here, once, in NumPy (float64,
full-batch Adam, a few seconds on a CPU, no PyTorch in the grader's process), and its weights are cached by content
(this file's bytes and the training settings) under the grader's cache (`models/contextual-sparsity/<key>`): every
case's weights are the same trained classifier; each case draws its own inputs from the task with the case's seed
(a secret seed gives fresh held-out samples, never a different classifier).

Top-k must change something: after ReLU a layer with k or fewer positive neurons is left as it is by a top-k
(the zeros it drops were zeros), so on such inputs the top-k pass and the dense pass agree, and a submission that
computes top-k but never applies it passes. The trained classifier's first layer has ~31 of 64 positive neurons
(at most ~43), its second at most ~31: at k = 32 a sample drawn at random is often not cut at all. A case with
`cut = 1` is made of inputs with more than k positive first-layer neurons, so that every input's top-k logits
differ from its dense ones; tests/test_contextual_sparsity_pack.py checks that every case with k < width does.

Ties: after ReLU many hidden values are exactly 0. A tie at 0 across the k-th place is harmless (keeping a 0 or
zeroing it gives the same next layer), so any correct top-k passes there; the `relu-zero-ties` case (`ties = 1`) is
made of inputs whose first layer is cut and whose second layer then has fewer than k positive neurons, on purpose.
Ties among positive values have probability 0 for these continuous inputs; tests/test_contextual_sparsity_pack.py
measures the smallest gap between the k-th and (k+1)-th values over every case (it must be far above float64
rounding).

The GPT-2 MLP block (c_fc: C -> 4C, GELU tanh, c_proj: 4C -> C, GPT-2's initialisation: normal, std 0.02) has
random weights from the case's seed: it checks the mechanism, not an accuracy. So does the causal self-attention
(c_attn: C -> 3C, 4 heads, c_proj: C -> C), whose unit of sparsity is a head.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

D_IN, WIDTH, CLASSES, CLUSTERS = 16, 64, 8, 3
TASK_SEED, TRAINING_SEED = 2023, 7
TRAIN_SAMPLES, STEPS, LEARNING_RATE = 2048, 250, 0.02
CENTRE_SCALE, NOISE = 1.6, 1.3  # clusters overlap a little: dense accuracy is high, not perfect
GPT2_C = 48  # the GPT-2 block's channels (4C = 192 hidden neurons)
WEIGHT_NAMES = ("w1", "b1", "w2", "b2", "w3", "b3")


def task_centres() -> np.ndarray:
    """The clusters' centres, CLASSES x CLUSTERS x D_IN: the task itself, fixed for the pack."""
    return np.random.default_rng(TASK_SEED).normal(0.0, CENTRE_SCALE, (CLASSES, CLUSTERS, D_IN))


def draw_samples(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n labelled samples of the task: a class and one of its clusters uniformly, Gaussian noise around its centre."""
    labels = rng.integers(0, CLASSES, n)
    clusters = rng.integers(0, CLUSTERS, n)
    x = task_centres()[labels, clusters] + rng.normal(0.0, NOISE, (n, D_IN))
    return x, labels.astype(np.int32)


def dense_logits(weights: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    h = np.maximum(x @ weights["w1"].T + weights["b1"], 0.0)
    h = np.maximum(h @ weights["w2"].T + weights["b2"], 0.0)
    return h @ weights["w3"].T + weights["b3"]


def train_classifier() -> dict[str, np.ndarray]:
    """The classifier, trained from scratch: He initialisation, full-batch Adam on cross-entropy, float64."""
    rng = np.random.default_rng(TRAINING_SEED)
    x, labels = draw_samples(rng, TRAIN_SAMPLES)
    shapes = {"w1": (WIDTH, D_IN), "b1": (WIDTH,), "w2": (WIDTH, WIDTH), "b2": (WIDTH,), "w3": (CLASSES, WIDTH),
              "b3": (CLASSES,)}
    weights = {name: (rng.normal(0.0, np.sqrt(2.0 / shape[1]), shape) if len(shape) == 2 else np.zeros(shape))
               for name, shape in shapes.items()}
    moments = {name: (np.zeros(shape), np.zeros(shape)) for name, shape in shapes.items()}
    onehot = np.eye(CLASSES)[labels]
    for step in range(1, STEPS + 1):
        z1 = x @ weights["w1"].T + weights["b1"]
        h1 = np.maximum(z1, 0.0)
        z2 = h1 @ weights["w2"].T + weights["b2"]
        h2 = np.maximum(z2, 0.0)
        logits = h2 @ weights["w3"].T + weights["b3"]
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        d3 = (p - onehot) / len(x)
        d2 = (d3 @ weights["w3"]) * (z2 > 0)
        d1 = (d2 @ weights["w2"]) * (z1 > 0)
        grads = {"w3": d3.T @ h2, "b3": d3.sum(0), "w2": d2.T @ h1, "b2": d2.sum(0), "w1": d1.T @ x, "b1": d1.sum(0)}
        for name, grad in grads.items():
            m, v = moments[name]
            m[:] = 0.9 * m + 0.1 * grad
            v[:] = 0.999 * v + 0.001 * grad * grad
            weights[name] -= LEARNING_RATE * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
    return weights


def model_key() -> str:
    """The trained classifier's content key: this file (the task and the training) and its settings."""
    from grader.cache import content_key

    settings = [D_IN, WIDTH, CLASSES, CLUSTERS, TASK_SEED, TRAINING_SEED, TRAIN_SAMPLES, STEPS, LEARNING_RATE]
    return content_key(Path(__file__).read_bytes(), json.dumps(settings))


def model_folder(cache_dir: Path | None = None) -> Path:
    from grader.options import default_cache_dir

    return (cache_dir or default_cache_dir()) / "models" / "contextual-sparsity" / model_key()


def classifier_weights(cache_dir: Path | None = None) -> dict[str, np.ndarray]:
    """The trained classifier's weights: from the cache, else trained now and published there (atomically)."""
    from grader.cache import is_complete, new_entry, publish_folder

    folder = model_folder(cache_dir)
    if not is_complete(folder):
        staging = new_entry(folder)
        for name, array in train_classifier().items():
            np.save(staging / f"{name}.npy", array)
        publish_folder(staging, folder)
    return {name: np.load(folder / f"{name}.npy") for name in WEIGHT_NAMES}


def cut_inputs(rng: np.random.Generator, weights: dict[str, np.ndarray], n: int, k: int,
               ties: bool = False) -> np.ndarray:
    """n samples of the task with more than k positive neurons in the first hidden layer (its top-k drops positive
    outputs: the top-k pass differs from the dense one); with `ties`, also fewer than k positive neurons in the second
    layer after that cut, so that its 0s tie across the k-th place."""
    found: list[np.ndarray] = []
    while len(found) < n:
        x, _ = draw_samples(rng, 256)
        h1 = np.maximum(x @ weights["w1"].T + weights["b1"], 0.0)
        kth = -np.sort(-h1, axis=1)[:, k - 1:k]  # no positive ties: the k largest are those >= the k-th
        h2 = np.maximum(np.where(h1 >= kth, h1, 0.0) @ weights["w2"].T + weights["b2"], 0.0)
        keep = ((h1 > 0).sum(axis=1) > k) & (((h2 > 0).sum(axis=1) < k) if ties else True)
        found.extend(x[keep])
    return np.array(found[:n])


def make_inputs(kernel: str, params: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    if kernel in ("classifier_logits", "classifier_accuracy"):
        weights = classifier_weights()
        arrays = {name: array.reshape(-1) for name, array in weights.items()}
        if kernel == "classifier_accuracy":
            x, labels = draw_samples(rng, params["n"])
            ks = np.array([WIDTH // 16, WIDTH // 8, WIDTH // 4, WIDTH // 2, WIDTH], dtype=np.int32)
            return {"x": x.reshape(-1), "labels": labels, "ks": ks, **arrays}
        if params.get("cut"):
            x = cut_inputs(rng, weights, params["batch"], params["k"], ties=bool(params.get("ties")))
        else:
            x, _ = draw_samples(rng, params["batch"])
        return {"x": x.reshape(-1), **arrays}
    if kernel == "gpt2_mlp_topk":
        c, tokens = GPT2_C, params["batch"] * params["T"]
        return {"x": rng.normal(0.0, 1.0, tokens * c),
                "w_fc": rng.normal(0.0, 0.02, 4 * c * c), "b_fc": rng.normal(0.0, 0.02, 4 * c),
                "w_proj": rng.normal(0.0, 0.02, c * 4 * c), "b_proj": rng.normal(0.0, 0.02, c)}
    if kernel == "gpt2_attention_topk_heads":
        c, tokens = GPT2_C, params["batch"] * params["T"]
        # Weights of std 0.2 (not GPT-2's 0.02): attention scores of order 1, so that softmax is not near-uniform
        # and the heads' output norms differ clearly.
        return {"x": rng.normal(0.0, 1.0, tokens * c),
                "w_attn": rng.normal(0.0, 0.2, 3 * c * c), "b_attn": rng.normal(0.0, 0.02, 3 * c),
                "w_proj": rng.normal(0.0, 0.02, c * c), "b_proj": rng.normal(0.0, 0.02, c)}
    raise ValueError(f"no inputs for kernel {kernel!r}")
