"""Float64 truth for autodiff-reverse: our own reverse mode over the graph's arrays (inputs.py's encoding).

The arrays list every node after its parents, so reverse mode is one loop from the last node down: each node
passes d output / d node times its local derivatives on to its parents, summed where a node is used more than once.
Iterative, so a graph 10,000 nodes deep costs nothing special. `node_values` and `output_value` are what the tests'
finite differences evaluate.
"""

from __future__ import annotations

import math

import numpy as np

INPUT, ADD, SUB, MUL, LOG, SIN = range(6)
BINARY = (ADD, SUB, MUL)
# d node / d parent for each operator, at the parents' values (a, b): the course's grad_wrt_parents.
LOCAL_DERIVATIVES = {
    ADD: lambda a, b: (1.0, 1.0),
    SUB: lambda a, b: (1.0, -1.0),
    MUL: lambda a, b: (b, a),
    LOG: lambda a, b: (1.0 / a,),
    SIN: lambda a, b: (math.cos(a),),
}


def node_values(ops: np.ndarray, left: np.ndarray, right: np.ndarray, values: np.ndarray) -> list[float]:
    """Every node's value: the inputs', then each operator's on its parents' (Python floats, as the package)."""
    found = [float(v) for v in values]
    for op, a, b in zip(ops[len(found):].tolist(), left[len(found):].tolist(), right[len(found):].tolist()):
        x, y = found[a], found[b] if b >= 0 else 0.0
        found.append(x + y if op == ADD else x - y if op == SUB else x * y if op == MUL
                     else math.log(x) if op == LOG else math.sin(x))
    return found


def output_value(ops: np.ndarray, left: np.ndarray, right: np.ndarray, values: np.ndarray,
                 output: int | None = None) -> float:
    """The value of node `output` (the last node: the graph's output)."""
    found = node_values(ops, left, right, values)
    return found[-1 if output is None else output]


def adjoints(ops: np.ndarray, left: np.ndarray, right: np.ndarray, values: np.ndarray,
             output: int | None = None) -> np.ndarray:
    """d output / d node for every node up to `output` (default: the last), by reverse mode."""
    found = node_values(ops, left, right, values)
    output = len(found) - 1 if output is None else output
    adjoint = [0.0] * (output + 1)
    adjoint[output] = 1.0
    for node in range(output, len(values) - 1, -1):
        if adjoint[node] == 0.0 or ops[node] == INPUT:
            continue
        a, b = int(left[node]), int(right[node])
        parents = (a, b) if ops[node] in BINARY else (a,)
        locals_ = LOCAL_DERIVATIVES[int(ops[node])](found[a], found[b] if b >= 0 else 0.0)
        for parent, local in zip(parents, locals_):
            adjoint[parent] += adjoint[node] * local
    return np.array(adjoint)


def gradients(ops: np.ndarray, left: np.ndarray, right: np.ndarray, values: np.ndarray, n_inputs: int,
              **_) -> dict[str, np.ndarray]:
    """d output / d input for every input (0 for an input the output does not depend on)."""
    return {"grads": adjoints(ops, left, right, values)[:n_inputs]}


def node_derivatives(ops: np.ndarray, left: np.ndarray, right: np.ndarray, values: np.ndarray,
                     **_) -> dict[str, np.ndarray]:
    """d output / d node for every node: the inputs', the intermediate nodes', output's own (1); 0 for a node the
    output does not depend on (a dead branch keeps the 0 it starts with on a fresh graph)."""
    return {"derivatives": adjoints(ops, left, right, values)}


def backward_again(ops: np.ndarray, left: np.ndarray, right: np.ndarray, values: np.ndarray, n_inputs: int,
                   **_) -> dict[str, np.ndarray]:
    """Whatever came before (forward calls, a first backward, nodes added since), the last backward's answer:
    d last node / d input, as on a fresh graph."""
    return gradients(ops, left, right, values, n_inputs)


def reverse_mode_evidence(ops: np.ndarray, left: np.ndarray, right: np.ndarray, values: np.ndarray, n_inputs: int,
                          **_) -> dict[str, np.ndarray]:
    """The gradients, and one sweep over the graph (autodiff_grading.py counts what backward's call did)."""
    return {**gradients(ops, left, right, values, n_inputs), "sweeps": np.ones(1)}
