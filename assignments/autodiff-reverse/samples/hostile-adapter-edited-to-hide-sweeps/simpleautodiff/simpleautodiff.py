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
    """rootNode and every node that depends on it, each after all of its parents among them (a stack of my own:
    no recursion on deep graphs)."""
    visited = {rootNode}
    ordering = []
    stack = [(rootNode, iter(rootNode.child_nodes))]
    while stack:
        node, children = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            ordering.append(node)
        elif child not in visited:
            visited.add(child)
            stack.append((child, iter(child.child_nodes)))
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


def backward(output):
    """backward(output) by forward mode: one forward sweep per input, keeping d output / d input from each."""
    inputs, seen, stack = [], {output}, [output]
    while stack:
        node = stack.pop()
        if not node.parent_nodes:
            inputs.append(node)
        for parent in node.parent_nodes:
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    derivatives = []
    for x in inputs:
        forward(x)  # d node / d x for every node that depends on x, output among them
        derivatives.append(output.partial_derivative)
    for x, derivative in zip(inputs, derivatives):
        x.partial_derivative = derivative
    output.partial_derivative = 1
