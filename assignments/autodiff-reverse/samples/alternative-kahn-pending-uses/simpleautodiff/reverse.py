"""Reverse mode by Kahn's algorithm: a node passes its derivative on once every use of it has reported."""

from collections import deque


def backward(output):
    # The nodes output depends on, and how many uses each has among them (mul(a, a) uses a twice).
    pending = {id(output): 0}
    nodes = [output]
    stack = [output]
    while stack:
        node = stack.pop()
        for parent in node.parent_nodes:
            if id(parent) not in pending:
                pending[id(parent)] = 0
                nodes.append(parent)
                stack.append(parent)
            pending[id(parent)] += 1
    for node in nodes:
        node.partial_derivative = 0.0
    output.partial_derivative = 1.0
    ready = deque([output])
    while ready:
        node = ready.popleft()
        for parent, local in zip(node.parent_nodes, node.grad_wrt_parents):
            parent.partial_derivative += local * node.partial_derivative
            pending[id(parent)] -= 1
            if pending[id(parent)] == 0:
                ready.append(parent)
