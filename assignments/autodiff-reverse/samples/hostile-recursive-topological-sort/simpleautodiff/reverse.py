def backward(output):
    # The course's topological_order, recursive, from the output through parent_nodes.
    def add_parents(node):
        if node not in visited:
            visited.add(node)
            for parent in node.parent_nodes:
                add_parents(parent)
            ordering.append(node)

    ordering, visited = [], set()
    add_parents(output)
    for node in ordering:
        node.partial_derivative = 0
    output.partial_derivative = 1
    for node in reversed(ordering):
        for parent, dnode_dparent in zip(node.parent_nodes, node.grad_wrt_parents):
            parent.partial_derivative += dnode_dparent * node.partial_derivative
