"""The grader's adapter for autodiff-reverse: graphs as arrays in, your simpleautodiff out. Do not edit it: the
grader replaces it with its own copy (the assignment's `provided` file), whatever your repository holds.

What it uses of your package, as the handout (readme.md) says: `simpleautodiff.Node`, `add`, `sub`, `mul`, `log`,
`sin` and `forward` (the course's), and `simpleautodiff.backward(output)` (yours); what it reads is each node's
`partial_derivative`. Where one of those is missing, the case says so in those words (`HandoutMismatch`).

Each kernel gets a graph as arrays (inputs.py in the grader's assignment folder): `ops` (one opcode per node:
0 input, 1 add, 2 sub, 3 mul, 4 log, 5 sin), `left` and `right` (the parents' indices, -1 for none), `values` (the
inputs' values, nodes 0 .. n_inputs-1); the output is the last node. The adapter builds the graph with your Node and
operators, calls your forward/backward as the kernel says, and writes each input's partial_derivative into `grads`.

- gradients: a fresh graph, backward(output) once.
- node_derivatives: a fresh graph, backward(output) once, and every node's partial_derivative into `derivatives`
  (d output / d node: the intermediate nodes' and output's own, 1, as well as the inputs').
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

import functools
import math
import numbers
import sys

import simpleautodiff

OPERATOR_NAMES = {1: "add", 2: "sub", 3: "mul", 4: "log", 5: "sin"}  # the opcodes of inputs.py; 0 is an input
UNARY = (4, 5)
LINKS = ("parent_nodes", "child_nodes", "grad_wrt_parents")  # what the evidence counts reads of
VISITS_PER_NODE = 16
OTHER_NAMES = ("reverse", "reverse_mode")  # what public forks named backward: the message names the one it finds


class HandoutMismatch(Exception):
    """The package lacks what the handout says the grader calls, or left the answer where the grader does not read."""


def told(kernel):
    """The kernel, a HandoutMismatch raised with none of this file's frames below it: its words are the whole story."""

    @functools.wraps(kernel)
    def graded(*arguments):
        try:
            return kernel(*arguments)
        except HandoutMismatch as mismatch:
            raise mismatch.with_traceback(None) from None

    return graded


def package(name):
    """simpleautodiff.<name>, as the handout names it; HandoutMismatch, in those words, where the package has none."""
    found = getattr(simpleautodiff, name, None)
    if callable(found):
        return found
    if name != "backward":
        raise HandoutMismatch(f"simpleautodiff has no `{name}`: the assignment builds its graphs with the course's "
                              "`simpleautodiff.Node`, `add`, `sub`, `mul`, `log` and `sin`, and calls `forward`")
    other = next((n for n in OTHER_NAMES if callable(getattr(simpleautodiff, n, None))), None)
    renamed = (f" (it has `{other}`: the handout names the function `backward`; rename it, or add "
               f"`backward = {other}` below it)") if other else ""
    raise HandoutMismatch(f"simpleautodiff has no `backward`: the assignment calls `simpleautodiff.backward(output)`"
                          f"{renamed}")


def built(ops, left, right, values, nodes, upto):
    """nodes (the inputs first) extended with the operators' nodes up to index `upto`, exclusive."""
    if not nodes:
        node = package("Node")
        nodes.extend(node(float(value)) for value in values.tolist())
    ops, left, right = ops.tolist(), left.tolist(), right.tolist()
    operators = {op: package(name) for op, name in OPERATOR_NAMES.items()}
    for index in range(len(nodes), upto):
        operator = operators[ops[index]]
        if ops[index] in UNARY:
            nodes.append(operator(nodes[left[index]]))
        else:
            nodes.append(operator(nodes[left[index]], nodes[right[index]]))
    return nodes


def called(name, node, n_nodes):
    """simpleautodiff.<name>(node), a RecursionError told in words: a graph here can be deeper than Python's recursion
    limit. What it returned."""
    try:
        return package(name)(node)
    except RecursionError as error:
        error.add_note(f"{name}() recursed deeper than Python allows ({sys.getrecursionlimit():,} frames) on this "
                       f"graph of {n_nodes:,} nodes: walk the graph with a loop and a list as the stack instead of "
                       "recursion")
        raise


def numbers_of(node):
    """The node's own attributes that hold a number (the places a backward could have left its results)."""
    return {name: value for name, value in getattr(node, "__dict__", {}).items()
            if isinstance(value, numbers.Number) and not isinstance(value, bool)}


def first_backward(output, nodes, n_inputs, n_nodes):
    """backward(output), the first on this graph (`nodes`, the inputs first). Where it changed no node's
    partial_derivative (not even output's), HandoutMismatch saying where the assignment reads the answer, and which
    of the inputs' attributes did change instead, if any, or what backward returned."""
    was = [getattr(node, "partial_derivative", None) for node in nodes]
    before = [numbers_of(node) for node in nodes[:n_inputs]]
    returned = called("backward", output, n_nodes)
    if any(getattr(node, "partial_derivative", None) != value for node, value in zip(nodes, was)):
        return
    still = "still 0 after" if set(was[:n_inputs]) == {0} else "unchanged by"
    after = [numbers_of(node) for node in nodes[:n_inputs]]
    elsewhere = sorted({name for b, a in zip(before, after) for name in a
                        if name != "partial_derivative" and b.get(name) != a[name]})
    why = f"; backward changed {', '.join(f'`{n}`' for n in elsewhere)} on the inputs instead" if elsewhere else ""
    if returned is not None:
        why += f"; backward returned a {type(returned).__name__}, which the assignment does not read"
    raise HandoutMismatch(f"`partial_derivative` of every input is {still} `backward(output)`: the assignment reads "
                          f"d output / d node from each node's `partial_derivative`{why}")


def write_derivatives(nodes, out, count, what="input"):
    """The first `count` nodes' partial_derivative into `out`."""
    for index in range(count):
        value = nodes[index].partial_derivative
        try:
            out[index] = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{what} {index}'s partial_derivative is {value!r}, not a number") from None


@told
def gradients(ops, left, right, values, grads, n_nodes, n_inputs):
    nodes = built(ops, left, right, values, [], n_nodes)
    first_backward(nodes[-1], nodes, n_inputs, n_nodes)
    write_derivatives(nodes, grads, n_inputs)


@told
def node_derivatives(ops, left, right, values, derivatives, n_nodes, n_inputs):
    nodes = built(ops, left, right, values, [], n_nodes)
    first_backward(nodes[-1], nodes, n_inputs, n_nodes)
    write_derivatives(nodes, derivatives, n_nodes, "node")


@told
def backward_again(ops, left, right, values, grads, n_nodes, n_inputs, scenario, first_output):
    nodes = built(ops, left, right, values, [], first_output + 1)
    if scenario == 1:
        for root in nodes[:min(2, n_inputs)]:
            called("forward", root, n_nodes)
    first_backward(nodes[first_output], nodes, n_inputs, n_nodes)
    built(ops, left, right, values, nodes, n_nodes)  # scenario 3's nodes on top; none for the others
    if scenario in (2, 3):
        called("backward", nodes[-1], n_nodes)
    write_derivatives(nodes, grads, n_inputs)


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


@told
def reverse_mode_evidence(ops, left, right, values, grads, sweeps, n_nodes, n_inputs):
    nodes = built(ops, left, right, values, [], n_nodes)
    visits = Visits()
    counted(nodes, visits)
    visits.counting = True
    try:
        first_backward(nodes[-1], nodes, n_inputs, n_nodes)  # its checks read __dict__ alone: nothing is counted
    finally:
        visits.counting = False
    write_derivatives(nodes, grads, n_inputs)
    sweeps[0] = math.ceil(visits.count / (VISITS_PER_NODE * n_nodes))
    print(f"kernel-grader: one backward call made {visits.count:,} visits on {n_nodes:,} nodes and {n_inputs:,} "
          f"inputs ({visits.count / n_nodes:.1f} per node; one sweep is {VISITS_PER_NODE} per node): "
          f"{int(sweeps[0])} sweep(s)", file=sys.stderr, flush=True)
