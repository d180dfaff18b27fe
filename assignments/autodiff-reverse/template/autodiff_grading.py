"""The grader's adapter for autodiff-reverse: graphs as arrays in, your simpleautodiff out. Do not edit it: the
grader replaces it with its own copy (the assignment's `provided` file), whatever your repository holds.

Each kernel gets a graph as arrays (inputs.py in the grader's assignment folder): `ops` (one opcode per node:
0 input, 1 add, 2 sub, 3 mul, 4 log, 5 sin), `left` and `right` (the parents' indices, -1 for none), `values` (the
inputs' values, nodes 0 .. n_inputs-1); the output is the last node. The adapter builds the graph with your Node and
operators, calls your forward/backward as the kernel says, and writes each input's partial_derivative into `grads`.

- gradients: a fresh graph, backward(output) once.
- backward_again (`scenario`): 1, forward(x1) and forward(x2) first, then backward(y), as the course's main.py;
  2, backward(y) twice; 3, backward(y) on node first_output, then more nodes added on top of it, then
  backward(new output). Each time the answer is the last backward's, as on a fresh graph.
- reverse_mode_evidence: a graph of 1,000 inputs, backward(output) once, and `sweeps`: how many times that call
  went over the graph. The adapter counts the visits backward makes: each read of a node's parent_nodes,
  child_nodes or grad_wrt_parents, and each product taken with one of its local derivatives (the entries of
  grad_wrt_parents count their products). One sweep is VISITS_PER_NODE visits per node of the graph: room for a
  topological sort, a reset and the accumulation, as separate loops. Reverse mode makes one sweep whatever the
  number of inputs; a forward sweep per input makes one per input (its products with the local derivatives repeat
  per input, even from copies of the graph), so it gets the numbers right and the sweeps wrong.
"""

import math
import sys

from simpleautodiff import Node, add, backward, forward, log, mul, sin, sub

OPERATORS = {1: add, 2: sub, 3: mul, 4: log, 5: sin}  # the opcodes of inputs.py; 0 is an input
UNARY = (4, 5)
LINKS = ("parent_nodes", "child_nodes", "grad_wrt_parents")  # what the evidence counts reads of
VISITS_PER_NODE = 16


def built(ops, left, right, values, nodes, upto):
    """nodes (the inputs first) extended with the operators' nodes up to index `upto`, exclusive."""
    if not nodes:
        nodes.extend(Node(float(value)) for value in values.tolist())
    ops, left, right = ops.tolist(), left.tolist(), right.tolist()
    for index in range(len(nodes), upto):
        operator = OPERATORS[ops[index]]
        if ops[index] in UNARY:
            nodes.append(operator(nodes[left[index]]))
        else:
            nodes.append(operator(nodes[left[index]], nodes[right[index]]))
    return nodes


def called(function, node, n_nodes):
    """function(node), a RecursionError told in words: a graph here can be deeper than Python's recursion limit."""
    try:
        function(node)
    except RecursionError as error:
        error.add_note(f"{function.__name__}() recursed deeper than Python allows ({sys.getrecursionlimit():,} "
                       f"frames) on this graph of {n_nodes:,} nodes: walk the graph with a loop and a list as the "
                       "stack instead of recursion")
        raise


def write_gradients(nodes, grads, n_inputs):
    for index in range(n_inputs):
        value = nodes[index].partial_derivative
        try:
            grads[index] = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"input {index}'s partial_derivative is {value!r}, not a number") from None


def gradients(ops, left, right, values, grads, n_nodes, n_inputs):
    nodes = built(ops, left, right, values, [], n_nodes)
    called(backward, nodes[-1], n_nodes)
    write_gradients(nodes, grads, n_inputs)


def backward_again(ops, left, right, values, grads, n_nodes, n_inputs, scenario, first_output):
    nodes = built(ops, left, right, values, [], first_output + 1)
    if scenario == 1:
        for root in nodes[:min(2, n_inputs)]:
            called(forward, root, n_nodes)
    called(backward, nodes[first_output], n_nodes)
    built(ops, left, right, values, nodes, n_nodes)  # scenario 3's nodes on top; none for the others
    if scenario in (2, 3):
        called(backward, nodes[-1], n_nodes)
    write_gradients(nodes, grads, n_inputs)


class Visits:
    """The visits counted while backward runs."""

    def __init__(self):
        self.count = 0
        self.counting = False

    def add(self):
        if self.counting:
            self.count += 1


def counting_class(base, visits):
    """A subclass of the student's node class whose LINKS count their reads (properties over the same entries of
    the node's __dict__: a data descriptor comes before the instance's own attribute)."""

    def link(name):
        def read(node):
            visits.add()
            return node.__dict__[name]

        def write(node, value):
            node.__dict__[name] = value

        return property(read, write)

    return type(base.__name__, (base,), {name: link(name) for name in LINKS})


def counting_derivative(visits):
    class LocalDerivative(float):
        """A local derivative that counts the products it is taken in (float's own arithmetic otherwise)."""

        def __mul__(self, other):
            visits.add()
            return float.__mul__(self, other)

        def __rmul__(self, other):
            visits.add()
            return float.__rmul__(self, other)

    return LocalDerivative


def counted(nodes, visits):
    """Every node's LINKS counted from now on: its class swapped for a counting subclass, its local derivatives for
    counting floats."""
    derivative = counting_derivative(visits)
    classes = {}
    for node in nodes:
        state = getattr(node, "__dict__", {})
        missing = [name for name in LINKS if name not in state]
        if missing:
            raise TypeError(f"a {type(node).__name__} keeps no attribute {', '.join(missing)} of its own: the "
                            "evidence counts reads of parent_nodes, child_nodes and grad_wrt_parents, as the course's "
                            "Node has them")
        state["grad_wrt_parents"] = [derivative(local) for local in state["grad_wrt_parents"]]
        base = type(node)
        node.__class__ = classes.setdefault(base, counting_class(base, visits))


def reverse_mode_evidence(ops, left, right, values, grads, sweeps, n_nodes, n_inputs):
    nodes = built(ops, left, right, values, [], n_nodes)
    visits = Visits()
    counted(nodes, visits)
    visits.counting = True
    try:
        called(backward, nodes[-1], n_nodes)
    finally:
        visits.counting = False
    write_gradients(nodes, grads, n_inputs)
    sweeps[0] = math.ceil(visits.count / (VISITS_PER_NODE * n_nodes))
    print(f"kernel-grader: one backward call made {visits.count:,} visits on {n_nodes:,} nodes and {n_inputs:,} "
          f"inputs ({visits.count / n_nodes:.1f} per node; one sweep is {VISITS_PER_NODE} per node): "
          f"{int(sweeps[0])} sweep(s)", file=sys.stderr, flush=True)
