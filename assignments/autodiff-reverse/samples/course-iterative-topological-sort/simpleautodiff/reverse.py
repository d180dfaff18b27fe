def topological_order(output):
    # Like the course's topological_order, but from the output through parent_nodes, and with a stack of my own
    # instead of recursion (the deep graphs are 10,000 nodes). (node, True) means its parents are all done.
    visited = set()
    ordering = []
    stack = [(output, False)]
    while len(stack) > 0:
        node, parents_done = stack.pop()
        if parents_done:
            ordering.append(node)
            continue
        if node in visited:
            continue
        visited.add(node)
        stack.append((node, True))
        for parent in node.parent_nodes:
            if parent not in visited:
                stack.append((parent, False))
    return reversed(ordering)


def backward(output):
    ordering = list(topological_order(output))
    for node in ordering:
        node.partial_derivative = 0
    output.partial_derivative = 1
    for node in ordering:
        for i in range(len(node.parent_nodes)):
            dnode_dparent = node.grad_wrt_parents[i]
            doutput_dnode = node.partial_derivative
            node.parent_nodes[i].partial_derivative += dnode_dparent * doutput_dnode
