"""Input generators for autodiff-reverse: computational graphs as arrays, deterministic from the case's seed.

A graph is four arrays (the encoding autodiff_grading.py decodes with the student's package):
  ops     int32, one opcode per node: 0 input, 1 add, 2 sub, 3 mul, 4 log, 5 sin;
  left    int32, the first parent's index (-1 for an input);
  right   int32, the second parent's index (-1 for an input or a unary operator);
  values  float64, the inputs' values.
Inputs are nodes 0 .. n_inputs-1; every other node comes after its parents; the output is the last node.

The case's `graph` names the shape: hand-picked ones (the course's example), random DAGs with shared
subexpressions, chains 10,000 nodes deep, graphs with unused inputs, and the 1,000-input graph of the evidence
kernel. Values are chosen so that every log's argument is >= 0.1 and no value grows past a few thousand: the
gradients stay well scaled for float64 and for finite differences.
"""

from __future__ import annotations

import math
import numpy as np

INPUT, ADD, SUB, MUL, LOG, SIN = range(6)
BINARY = (ADD, SUB, MUL)
LOG_FLOOR = 0.1  # log only of values above it: 1/x stays below 10
MUL_CEILING = 50.0  # mul only where |product| stays below it: values stay moderate


def value_of(op: int, a: float, b: float) -> float:
    """The operator's value, computed as the package computes it (Python floats, the math module)."""
    if op == ADD:
        return a + b
    if op == SUB:
        return a - b
    if op == MUL:
        return a * b
    if op == LOG:
        return math.log(a)
    if op == SIN:
        return math.sin(a)
    raise ValueError(f"no operator {op}")


class Graph:
    """A graph being drawn: the arrays, and every node's value (to keep log's argument positive). A plain class:
    the grader imports this file without registering it as a module, which a dataclass needs."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.ops: list[int] = []
        self.left: list[int] = []
        self.right: list[int] = []

    def inputs(self, values: list[float]) -> list[int]:
        first = len(self.ops)
        for value in values:
            self.values.append(float(value))
            self.ops.append(INPUT)
            self.left.append(-1)
            self.right.append(-1)
        return list(range(first, len(self.ops)))

    def apply(self, op: int, a: int, b: int = -1) -> int:
        """Append `op(a, b)` (b: -1 for log and sin); its index."""
        self.values.append(value_of(op, self.values[a], self.values[b] if b >= 0 else 0.0))
        self.ops.append(op)
        self.left.append(a)
        self.right.append(b)
        return len(self.ops) - 1

    def safe(self, op: int, a: int, b: int = -1) -> int:
        """`op` where its value stays in range; else a stand-in of the same arity (sin for log, add for mul)."""
        if op == LOG and self.values[a] < LOG_FLOOR:
            op = SIN
        if op == MUL and abs(self.values[a] * self.values[b]) > MUL_CEILING:
            op = ADD
        return self.apply(op, a, b)

    def arrays(self, n_nodes: int, n_inputs: int) -> dict[str, np.ndarray]:
        inputs = sum(op == INPUT for op in self.ops)
        if len(self.ops) != n_nodes or inputs != n_inputs or self.ops[n_inputs - 1] != INPUT:
            raise ValueError(f"drew {len(self.ops)} nodes with {inputs} inputs; the case says n_nodes = {n_nodes}, "
                             f"n_inputs = {n_inputs} (inputs first)")
        return {"ops": np.array(self.ops, np.int32), "left": np.array(self.left, np.int32),
                "right": np.array(self.right, np.int32), "values": np.array(self.values[:n_inputs])}


def course_example() -> Graph:
    """The course's example, y = log(x1) + x1 x2 - sin(x2) at (2, 5), in the order its main.py builds it."""
    g = Graph()
    x1, x2 = g.inputs([2.0, 5.0])
    g.apply(SUB, g.apply(ADD, g.apply(LOG, x1), g.apply(MUL, x1, x2)), g.apply(SIN, x2))
    return g


def single_operator(rng: np.random.Generator) -> Graph:
    """y = x1 x2: one operator, the smallest graph (even a reversed order gets it right)."""
    g = Graph()
    x1, x2 = g.inputs(rng.uniform(0.5, 2.0, 2))
    g.apply(MUL, x1, x2)
    return g


def tree_no_sharing(rng: np.random.Generator) -> Graph:
    """y = (x1 + x2) sin(x3) - log(x4): every node used once (a tree), so nothing is ever summed."""
    g = Graph()
    x1, x2, x3, x4 = g.inputs(rng.uniform(0.5, 2.0, 4))
    g.apply(SUB, g.apply(MUL, g.apply(ADD, x1, x2), g.apply(SIN, x3)), g.apply(LOG, x4))
    return g


def diamond(rng: np.random.Generator) -> Graph:
    """u = x1 x2 used by sin(u) and by u u (one node as both parents), joined again: y = (sin(u) + u u - x1) log(x2)."""
    g = Graph()
    x1, x2 = g.inputs(rng.uniform(0.5, 1.5, 2))
    u = g.apply(MUL, x1, x2)
    joined = g.apply(SUB, g.apply(ADD, g.apply(SIN, u), g.apply(MUL, u, u)), x1)
    g.apply(MUL, joined, g.apply(LOG, x2))
    return g


def random_dag(rng: np.random.Generator, n_inputs: int, n_nodes: int, unused: int = 0, dead: int = 0) -> Graph:
    """A random DAG of exactly n_nodes whose output depends on every input but `unused` of them.

    Each node's first parent is, half the time, a node nothing uses yet ("open"), else any earlier node; a binary
    node's second parent is any earlier node, now and then the first one again (mul(a, a), add(a, a); never a - a, which is 0): nodes are
    shared, diamonds form. Once the open nodes, folded together pairwise, would make n_nodes, they are. `dead`
    nodes hang off the unused inputs and lead nowhere (a branch the output does not depend on).
    """
    g = Graph()
    inputs = g.inputs(rng.uniform(0.5, 2.0, n_inputs))
    left_out = {int(i) for i in rng.choice(n_inputs, unused, replace=False)} if unused else set()
    for _ in range(dead):
        g.safe(int(rng.choice([SIN, LOG])), int(rng.choice(sorted(left_out))))
    usable = [i for i in inputs if i not in left_out]
    open_nodes = list(usable)  # nodes no node uses yet: the fold at the end joins them into the output
    while len(g.ops) + len(open_nodes) - 1 < n_nodes:
        slack = n_nodes - (len(g.ops) + len(open_nodes) - 1)
        # With one node to spare, the next must use an open node, or the fold would need more than is left.
        a = open_nodes[int(rng.integers(len(open_nodes)))] if slack == 1 or rng.random() < 0.5 \
            else usable[int(rng.integers(len(usable)))]
        op = int(rng.choice([ADD, SUB, MUL, LOG, SIN], p=[0.25, 0.2, 0.25, 0.15, 0.15]))
        b = -1
        if op in BINARY:
            b = a if rng.random() < 0.1 else usable[int(rng.integers(len(usable)))]
            if b == a and op == SUB:
                op = ADD  # a - a is 0 exactly: a product with it would zero whole branches' gradients
        node = g.safe(op, a, b)
        open_nodes = [n for n in open_nodes if n not in (a, b)] + [node]
        usable.append(node)
    while len(open_nodes) > 1:
        a, b = open_nodes.pop(0), open_nodes.pop(0)
        open_nodes.append(g.safe(int(rng.choice([ADD, SUB, MUL])), a, b))
    return g


def deep_chain(rng: np.random.Generator, n_inputs: int, n_nodes: int) -> Graph:
    """s = x1, then s = s + x, s - x, s x (x near 1) or log(s), one node at a time: n_nodes deep.

    The inputs are used a thousand times each; half are near 1 (the factors), so that s is a random walk of a
    few hundred and the gradients stay finite."""
    g = Graph()
    terms = g.inputs(rng.uniform(0.5, 2.0, n_inputs - n_inputs // 2))
    factors = g.inputs(rng.uniform(0.98, 1.02, n_inputs // 2))
    s = terms[0]
    while len(g.ops) < n_nodes:
        pick = rng.random()
        if pick < 0.4:
            s = g.apply(ADD, s, terms[int(rng.integers(len(terms)))])
        elif pick < 0.7:
            s = g.apply(SUB, s, terms[int(rng.integers(len(terms)))])
        elif pick < 0.998 or g.values[s] < 1.0:
            s = g.apply(MUL, s, factors[int(rng.integers(len(factors)))])
        else:
            s = g.apply(LOG, s)
    return g


def deep_diamonds(rng: np.random.Generator, n_inputs: int, n_nodes: int) -> Graph:
    """Diamonds stacked n_nodes deep: u = sin(s), s = (s + u) - u (s and u each used twice, d s'/d s = 1), now
    and then s = s x (x near 1) or s + x. Every node's derivative is a sum of two paths, 3,000 levels down."""
    g = Graph()
    factors = g.inputs(rng.uniform(0.98, 1.02, n_inputs))
    s = factors[0]
    while len(g.ops) < n_nodes:
        if n_nodes - len(g.ops) >= 3 and rng.random() < 0.8:
            u = g.apply(SIN, s)
            s = g.apply(SUB, g.apply(ADD, s, u), u)
        else:
            x = factors[int(rng.integers(n_inputs))]
            s = g.apply(MUL if rng.random() < 0.5 else ADD, s, x)
    return g


def thousand_inputs(rng: np.random.Generator, n_inputs: int, n_nodes: int) -> Graph:
    """The evidence graph: the inputs joined pairwise up a tree (x op y, then sin, ten levels), then a trunk of a
    couple of hundred nodes mixing inputs in again, up to n_nodes. Every input reaches the trunk: a sweep per
    input walks ~200 nodes a thousand times, one reverse sweep walks each node once."""
    g = Graph()
    level = g.inputs(rng.uniform(0.5, 2.0, n_inputs))
    inputs = list(level)
    while len(level) > 1:
        joined = [g.apply(SIN, g.safe(int(rng.choice(BINARY)), a, b)) for a, b in zip(level[::2], level[1::2])]
        level = joined + ([level[-1]] if len(level) % 2 else [])
    s = level[0]
    while len(g.ops) < n_nodes:
        op = int(rng.choice([ADD, SUB, MUL, SIN], p=[0.35, 0.3, 0.3, 0.05]))
        s = g.safe(op, s, inputs[int(rng.integers(n_inputs))] if op in BINARY else -1)
    return g


def grown(rng: np.random.Generator, n_inputs: int, n_nodes: int, first_output: int) -> Graph:
    """A random DAG whose output is node first_output, then nodes added on top that use it twice: the case where
    backward is called on first_output, the graph grows, and backward is called on the new last node."""
    g = random_dag(rng, n_inputs, first_output + 1)
    y = first_output
    s = g.apply(MUL, g.apply(SIN, y), y)
    while len(g.ops) < n_nodes:
        s = g.safe(int(rng.choice(BINARY)), s, int(rng.integers(first_output + 1)))
    return g


def make_inputs(kernel: str, case: dict[str, int | float | str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The case's graph (`graph`: its shape) as ops, left, right and values; every kernel takes the same four."""
    if kernel not in ("gradients", "node_derivatives", "backward_again", "reverse_mode_evidence"):
        raise KeyError(f"autodiff-reverse has no kernel {kernel!r}")
    n_inputs, n_nodes = int(case["n_inputs"]), int(case["n_nodes"])
    shape = str(case["graph"])
    drawn = {
        "course-example": lambda: course_example(),
        "single-operator": lambda: single_operator(rng),
        "tree-no-sharing": lambda: tree_no_sharing(rng),
        "diamond": lambda: diamond(rng),
        "random": lambda: random_dag(rng, n_inputs, n_nodes),
        "unused-inputs": lambda: random_dag(rng, n_inputs, n_nodes, unused=int(case["unused"]),
                                            dead=int(case["dead"])),
        "deep-chain": lambda: deep_chain(rng, n_inputs, n_nodes),
        "deep-diamonds": lambda: deep_diamonds(rng, n_inputs, n_nodes),
        "thousand-inputs": lambda: thousand_inputs(rng, n_inputs, n_nodes),
        "grown": lambda: grown(rng, n_inputs, n_nodes, int(case["first_output"])),
    }
    if shape not in drawn:
        raise KeyError(f"no graph shape {shape!r}; expected one of {', '.join(drawn)}")
    return drawn[shape]().arrays(n_nodes, n_inputs)
