"""Input generators for gpt2-m1: make_inputs(kernel, case, rng) -> the kernel's "input" buffers.

Values are unit-scale (uniform in [-1, 1]) unless a kernel needs otherwise; every draw comes from
`rng`, so a seed fixes the inputs.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

# A lone output this far from zero can't be matched by an unwritten (zeroed) buffer within any
# of the assignment's tolerances.
SINGLE_VALUE_MIN = 0.1


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], bound: float = 1.0) -> np.ndarray:
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def encoder(case: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    B, T, C, V, maxT = case["B"], case["T"], case["C"], case["V"], case["maxT"]
    return {
        "inp": rng.integers(0, V, size=(B, T), dtype=np.int32),
        "wte": _uniform(rng, (V, C)),
        "wpe": _uniform(rng, (maxT, C)),
    }


def layernorm(case: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    B, T, C = case["B"], case["T"], case["C"]
    # A mean offset per row plus a spread of `scale`: small scales make eps and cancellation matter.
    offsets = rng.uniform(-1.0, 1.0, size=(B, T, 1))
    spread = case.get("scale", 1.0) * rng.standard_normal((B, T, C))
    return {
        "inp": (offsets + spread).astype(np.float32),
        "weight": (1.0 + 0.1 * rng.standard_normal(C)).astype(np.float32),
        "bias": (0.1 * rng.standard_normal(C)).astype(np.float32),
    }


def matmul(case: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    B, T, C, OC = case["B"], case["T"], case["C"], case["OC"]
    # bias is always drawn; a case listing it under `null` has the grader pass NULL instead.
    return {
        "inp": _uniform(rng, (B, T, C)),
        "weight": _uniform(rng, (OC, C)),
        "bias": _uniform(rng, (OC,)),
    }


def attention(case: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    B, T, C = case["B"], case["T"], case["C"]
    # Only the packed Q, K, V; the grader copies it into the front of inp's larger allocation.
    # `scale` widens the range where out would otherwise be too small for the tolerance to catch zeros.
    return {"inp": _uniform(rng, (B, T, 3 * C), bound=case.get("scale", 1.0))}


def local_attention(case: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    # gpt2-m3's req_5 (inherited from this file): the packed Q, K, V as (B, T, 3, NH, HS), uniform like attention's.
    B, T, NH, HS = case["B"], case["T"], case["NH"], case["HS"]
    return {"inp": _uniform(rng, (B, T, 3, NH, HS), bound=case.get("scale", 1.0))}


def residual(case: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    N = case["N"]
    inp1, inp2 = _uniform(rng, (N,)), _uniform(rng, (N,))
    while N == 1 and abs(float(inp1[0]) + float(inp2[0])) < SINGLE_VALUE_MIN:
        inp1, inp2 = _uniform(rng, (N,)), _uniform(rng, (N,))
    return {"inp1": inp1, "inp2": inp2}


def gelu(case: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    N = case["N"]
    # [-4, 4] covers GELU's curved region and both of its nearly linear tails.
    inp = _uniform(rng, (N,), bound=4.0)
    while N == 1 and abs(_gelu(float(inp[0]))) < SINGLE_VALUE_MIN:
        inp = _uniform(rng, (N,), bound=4.0)
    return {"inp": inp}


GENERATORS: dict[str, Callable[[dict, np.random.Generator], dict[str, np.ndarray]]] = {
    "encoder": encoder,
    "layernorm": layernorm,
    "matmul": matmul,
    "attention": attention,
    "local_attention": local_attention,
    "residual": residual,
    "gelu": gelu,
}


def make_inputs(kernel: str, case: dict[str, int | float | list], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Arrays for every "input" buffer of `kernel`, shaped as assignment.toml says for `case`."""
    if kernel not in GENERATORS:
        raise KeyError(f"inputs.py: no input generator for kernel {kernel!r} (have {', '.join(GENERATORS)})")
    return GENERATORS[kernel](case, rng)
