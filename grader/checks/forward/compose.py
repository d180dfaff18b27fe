"""One step of the forward pass in the assignment's float64 NumPy truth: the very function the harness uses
to compute each step's swap-in gold, and the grader to compute the gold it compares with.

NumPy and `grader.boundary.protocol` only: the harness imports it.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from grader.boundary.protocol import ScalarArgument, SliceArgument, StepArgument


def view(arrays: dict[str, np.ndarray], argument: SliceArgument) -> np.ndarray:
    """The step's argument as its gold function sees it: the slice's first elements, in the spec's shape."""
    size = int(np.prod(argument.shape))
    return arrays[argument.space][argument.offset: argument.offset + size].reshape(argument.shape)


def gold_of_step(truth: ModuleType, kernel: str, arguments: tuple[StepArgument, ...],
                 arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The step's outputs (float64, by parameter name) from its inputs in `arrays` (allocation -> flat array)."""
    inputs = {a.name: None if a.null else view(arrays, a) for a in arguments
              if isinstance(a, SliceArgument) and a.role == "input"}
    scalars = {a.name: a.value for a in arguments if isinstance(a, ScalarArgument)}
    outputs = getattr(truth, kernel)(**inputs, **scalars)
    return {a.name: np.asarray(outputs[a.name], dtype=np.float64).reshape(a.shape) for a in arguments
            if isinstance(a, SliceArgument) and a.role == "output"}


def put(arrays: dict[str, np.ndarray], argument: SliceArgument, values: np.ndarray) -> None:
    """Write a step's output into its slice (rounded to the allocation's dtype, as the kernels' float32 is)."""
    target = arrays[argument.space]
    target[argument.offset: argument.offset + values.size] = values.reshape(-1)


def next_tokens(logits_rows: np.ndarray, V: int) -> np.ndarray:
    """Greedy decoding: the most likely real token of each row (the padded vocabulary is never a token)."""
    return np.argmax(logits_rows[..., :V], axis=-1).astype(np.int32)
