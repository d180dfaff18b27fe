"""A float64 NumPy GPT-2 (nanoGPT's architecture) that generates greedily without a cache, from the weights the
adapter sets: the check of the reference's gold (tests/test_nanogpt_kvcache_pack.py). Gold itself is the reference's
(`gold = "reference"`), and the generation kernels judge a submission against its own model's uncached generation,
not against gold (`judged_against`): this module says only that the reference and the adapter are nanoGPT's.

The weights are drawn as kvcache_grading.py draws them (torch's generator, seeded per parameter name), so this
module needs torch; it is the grader's code, run in the grader's process, never in a student's harness.
"""

import zlib

import numpy as np

SEED = 1234  # kvcache_grading.SEED


def weights(n_layer: int, n_embd: int, block_size: int, vocab_size: int) -> dict[str, np.ndarray]:
    """Every parameter of nanoGPT's GPT by name (wte tied to lm_head), drawn as the adapter draws them."""
    import torch

    shapes = {"transformer.wte.weight": (vocab_size, n_embd), "transformer.wpe.weight": (block_size, n_embd),
              "transformer.ln_f.weight": (n_embd,), "transformer.ln_f.bias": (n_embd,)}
    for i in range(n_layer):
        h = f"transformer.h.{i}."
        shapes.update({h + "ln_1.weight": (n_embd,), h + "ln_1.bias": (n_embd,), h + "ln_2.weight": (n_embd,),
                       h + "ln_2.bias": (n_embd,), h + "attn.c_attn.weight": (3 * n_embd, n_embd),
                       h + "attn.c_attn.bias": (3 * n_embd,), h + "attn.c_proj.weight": (n_embd, n_embd),
                       h + "attn.c_proj.bias": (n_embd,), h + "mlp.c_fc.weight": (4 * n_embd, n_embd),
                       h + "mlp.c_fc.bias": (4 * n_embd,), h + "mlp.c_proj.weight": (n_embd, 4 * n_embd),
                       h + "mlp.c_proj.bias": (n_embd,)})
    drawn = {}
    for name, shape in shapes.items():
        generator = torch.Generator().manual_seed(SEED + zlib.crc32(name.encode()))
        if len(shape) == 1:
            values = (1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn(shape, generator=generator)
        else:
            values = torch.randn(shape, generator=generator) / shape[-1] ** 0.5
        drawn[name] = values.numpy().astype(np.float64)  # float32 values, computed with in float64
    return drawn


def _layer_norm(x, w, b):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b


def _erf(x):
    """erf to 1.5e-7 (Abramowitz and Stegun 7.1.26): far inside the pack's tolerance, and vectorised."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))  # torch's nn.GELU(), the exact (erf) form


def last_logits(w, tokens: np.ndarray, n_layer: int, n_head: int) -> np.ndarray:
    """The logits at the last position of each row of tokens (B, T), positions numbered from 0."""
    B, T = tokens.shape
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:T]
    C = x.shape[-1]
    hs = C // n_head
    causal = np.tril(np.ones((T, T), dtype=bool))
    for i in range(n_layer):
        p = lambda name: w[f"transformer.h.{i}.{name}"]
        qkv = _layer_norm(x, p("ln_1.weight"), p("ln_1.bias")) @ p("attn.c_attn.weight").T + p("attn.c_attn.bias")
        q, k, v = (a.reshape(B, T, n_head, hs).transpose(0, 2, 1, 3) for a in np.split(qkv, 3, axis=-1))
        att = np.where(causal, q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs), -np.inf)
        att = np.exp(att - att.max(-1, keepdims=True))
        y = (att / att.sum(-1, keepdims=True) @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ p("attn.c_proj.weight").T + p("attn.c_proj.bias")
        hidden = _gelu(_layer_norm(x, p("ln_2.weight"), p("ln_2.bias")) @ p("mlp.c_fc.weight").T + p("mlp.c_fc.bias"))
        x = x + hidden @ p("mlp.c_proj.weight").T + p("mlp.c_proj.bias")
    x = _layer_norm(x[:, -1], w["transformer.ln_f.weight"], w["transformer.ln_f.bias"])
    return x @ w["transformer.wte.weight"].T


def _generation(prompt, batch, prompt_len, new_tokens, n_layer, n_head, n_embd, block_size, vocab_size, **_):
    w = weights(n_layer, n_embd, block_size, vocab_size)
    idx = prompt.reshape(batch, prompt_len).astype(np.int64)
    steps = []
    for _ in range(new_tokens):
        logits = last_logits(w, idx[:, -block_size:], n_layer, n_head)
        steps.append(logits)
        idx = np.concatenate([idx, logits.argmax(-1)[:, None]], axis=1)
    tokens, logits = idx[:, prompt_len:].astype(np.int32), np.stack(steps, axis=1)
    # The truth the adapter writes beside the generation is the same greedy loop, so the same numbers.
    return {"generated": tokens, "logits": logits, "original_tokens": tokens, "original_logits": logits}


def cached_generation(prompt: np.ndarray, **case) -> dict[str, np.ndarray]:
    return _generation(prompt, **case)


def uncached_generation(prompt: np.ndarray, **case) -> dict[str, np.ndarray]:
    return _generation(prompt, **case)


def cache_evidence(prompt: np.ndarray, **case) -> dict[str, np.ndarray]:
    return {"positions": np.ones(1)}  # one position per step after the prefill
