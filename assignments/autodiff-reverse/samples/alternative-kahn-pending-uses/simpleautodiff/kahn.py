"""How many uses each node has among the nodes an output depends on (Kahn's algorithm counts them first)."""


def uses_among_ancestors(output):
    """(the nodes output depends on, output first; {node: its uses among them}), mul(a, a) counting a twice."""
    uses = {output: 0}
    nodes = [output]
    stack = [output]
    while stack:
        node = stack.pop()
        for parent in node.parent_nodes:
            if parent not in uses:
                uses[parent] = 0
                nodes.append(parent)
                stack.append(parent)
            uses[parent] += 1
    return nodes, uses
