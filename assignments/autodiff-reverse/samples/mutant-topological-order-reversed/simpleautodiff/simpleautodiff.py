"""simpleautodiff: a small automatic-differentiation package, forward mode.

A computational graph is made of Nodes. An input is `Node(value)`; every operator (add, sub, mul, log, sin) makes
a new Node from its parents and records on it
  parent_nodes      the nodes it was computed from, in argument order (mul(a, a) lists a twice),
  grad_wrt_parents  d node / d parent for each of them, in the same order, at the parents' values,
and appends the new node to each parent's child_nodes. partial_derivative starts at 0.

forward(rootNode) is forward mode: afterwards every node that depends on rootNode holds d node / d rootNode in
its partial_derivative.
"""

import math


class Node:
    verbose = False  # True: forward prints every step
    input_count = 0
    intermediate_count = 0

    def __init__(self, value, parent_nodes=[], operator="input"):
        self.value = value
        self.parent_nodes = list(parent_nodes)
        self.child_nodes = []
        self.operator = operator
        self.grad_wrt_parents = []
        self.partial_derivative = 0
        if operator == "input":
            Node.input_count += 1
            self.name = "x%d" % Node.input_count
        else:
            Node.intermediate_count += 1
            self.name = "v%d" % Node.intermediate_count

    def __repr__(self):
        return "%s = %s(%s) = %g" % (self.name, self.operator,
                                     ", ".join(p.name for p in self.parent_nodes), self.value)


def new_node(value, parents, operator, grads):
    node = Node(value, parents, operator)
    node.grad_wrt_parents = grads
    for parent in parents:
        parent.child_nodes.append(node)
    return node


def add(node1, node2):
    return new_node(node1.value + node2.value, [node1, node2], "add", [1, 1])


def sub(node1, node2):
    return new_node(node1.value - node2.value, [node1, node2], "sub", [1, -1])


def mul(node1, node2):
    return new_node(node1.value * node2.value, [node1, node2], "mul", [node2.value, node1.value])


def log(node):
    return new_node(math.log(node.value), [node], "log", [1 / node.value])


def sin(node):
    return new_node(math.sin(node.value), [node], "sin", [math.cos(node.value)])


def topological_order(rootNode):
    """rootNode and every node that depends on it, each after all of its parents among them."""
    visited = set()
    ordering = []

    def visit(node):
        if node not in visited:
            visited.add(node)
            for child in node.child_nodes:
                visit(child)
            ordering.append(node)

    visit(rootNode)
    return list(reversed(ordering))


def forward(rootNode):
    """Forward mode: d node / d rootNode into the partial_derivative of every node that depends on rootNode (the
    nodes that don't count as constants)."""
    ordering = topological_order(rootNode)
    depends = set(ordering)
    rootNode.partial_derivative = 1
    for node in ordering[1:]:
        partial_derivative = 0
        for parent, grad in zip(node.parent_nodes, node.grad_wrt_parents):
            if parent in depends:
                partial_derivative += grad * parent.partial_derivative
        node.partial_derivative = partial_derivative
        if Node.verbose:
            print("d%s/d%s = %g" % (node.name, rootNode.name, partial_derivative))
    return ordering


def reverse_topological_order(output):
    """output and every node it depends on, each before all of its parents (output first).

    A depth-first search over parent_nodes with a list as the stack (no recursion: graphs 10,000 nodes deep are
    graded): a node is placed once all of its parents are, and the placement order turned around has every node
    before the nodes it was computed from."""
    ordering = []
    visited = {output}
    stack = [(output, iter(output.parent_nodes))]
    while stack:
        node, parents = stack[-1]
        parent = next(parents, None)
        if parent is None:
            stack.pop()
            ordering.append(node)
        elif parent not in visited:
            visited.add(parent)
            stack.append((parent, iter(parent.parent_nodes)))
    return ordering  # placement order: parents first, the output last


def backward(output):
    """Reverse mode: one call leaves d output / d node in the partial_derivative of output and of every node it
    depends on (its ancestors through parent_nodes), the inputs among them.

    - Reset before accumulating: those nodes' partial_derivative is set to 0 first (output's to 1), so whatever an
      earlier forward(...) or backward(...) left there does not count, and calling backward twice gives the same
      answer. After adding nodes on top of a graph, backward(new_output) gives d new_output / d node.
    - A node used more than once (by two nodes, or twice by one: mul(a, a)) sums what each use contributes.
    - Nodes output does not depend on are left alone (an unused input keeps its partial_derivative).
    """
    ordering = reverse_topological_order(output)
    for node in ordering:
        node.partial_derivative = 0
    output.partial_derivative = 1
    for node in ordering:  # every use of a node comes before it: its derivative is whole when it passes it on
        for parent, grad in zip(node.parent_nodes, node.grad_wrt_parents):
            parent.partial_derivative += node.partial_derivative * grad
        if Node.verbose:
            print("d%s/d%s = %g" % (output.name, node.name, node.partial_derivative))
