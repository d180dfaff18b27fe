"""simpleautodiff's forward mode: nodes of a computational graph, the operators that make them, and `forward`.

Every operator computes its value at once and records, on the node it makes:
  parent_nodes      the nodes it was computed from, in argument order (`mul(a, a)` lists `a` twice);
  grad_wrt_parents  d node / d parent for each of them, in the same order, evaluated at the parents' values;
and appends the new node to each parent's child_nodes (once per argument, so `mul(a, a)` appends it twice).
`partial_derivative` starts at 0; `forward(root)` leaves d node / d root in every node that depends on root.
"""

import math


class Node:
    """One value of the graph: an input (`Node(2.0)`) or the result of an operator."""

    def __init__(self, value, parent_nodes=None, grad_wrt_parents=None, operator="input"):
        self.value = value
        self.operator = operator
        self.parent_nodes = list(parent_nodes or [])  # a fresh list each: never shared between nodes
        self.grad_wrt_parents = list(grad_wrt_parents or [])
        self.child_nodes = []
        self.partial_derivative = 0.0

    def __repr__(self):
        return f"Node({self.operator}, value={self.value!r}, partial_derivative={self.partial_derivative!r})"


def _make(value, operator, parents, local_derivatives):
    node = Node(value, parents, local_derivatives, operator)
    for parent in parents:
        parent.child_nodes.append(node)
    return node


def add(node1, node2):
    return _make(node1.value + node2.value, "add", [node1, node2], [1.0, 1.0])


def sub(node1, node2):
    return _make(node1.value - node2.value, "sub", [node1, node2], [1.0, 1.0])


def mul(node1, node2):
    return _make(node1.value * node2.value, "mul", [node1, node2], [node2.value, node1.value])


def log(node):
    return _make(math.log(node.value), "log", [node], [1.0 / node.value])


def sin(node):
    return _make(math.sin(node.value), "sin", [node], [math.cos(node.value)])


def descendants_in_order(root):
    """root and every node that depends on it, each after all of its parents among them (a topological order).

    Iterative (a list as the stack), so that a graph 10,000 nodes deep needs no deep recursion: a node is placed
    once all of its children are, and the reversed placement order is topological."""
    order = []
    stack = [(root, iter(root.child_nodes))]
    seen = {id(root)}
    while stack:
        node, children = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            order.append(node)
        elif id(child) not in seen:
            seen.add(id(child))
            stack.append((child, iter(child.child_nodes)))
    order.reverse()
    return order


def forward(root):
    """Forward mode: leave d node / d root in the partial_derivative of root and of every node that depends on it.

    Nodes that do not depend on root keep their partial_derivative, and count as constants (d parent / d root = 0)
    where they are parents of nodes that do."""
    order = descendants_in_order(root)
    depends = {id(node) for node in order}
    root.partial_derivative = 1.0
    for node in order[1:]:
        total = 0.0
        for parent, local in zip(node.parent_nodes, node.grad_wrt_parents):
            if id(parent) in depends:
                total += local * parent.partial_derivative
        node.partial_derivative = total
