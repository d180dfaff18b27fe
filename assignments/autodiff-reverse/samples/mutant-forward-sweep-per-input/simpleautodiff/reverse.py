"""backward(output) by forward mode: one forward sweep per input, keeping d output / d input from each."""

from simpleautodiff.core import forward


def backward(output):
    # The inputs output depends on (nodes without parents among its ancestors).
    inputs, seen, stack = [], {id(output)}, [output]
    while stack:
        node = stack.pop()
        if not node.parent_nodes:
            inputs.append(node)
        for parent in node.parent_nodes:
            if id(parent) not in seen:
                seen.add(id(parent))
                stack.append(parent)
    derivatives = []
    for x in inputs:
        forward(x)  # d node / d x for every node that depends on x, output among them
        derivatives.append(output.partial_derivative)
    for x, derivative in zip(inputs, derivatives):
        x.partial_derivative = derivative
    output.partial_derivative = 1.0
