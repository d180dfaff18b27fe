"""Reverse mode for simpleautodiff: `backward(output)`."""


def backward(output):
    """Reverse mode: one call leaves d output / d node in the partial_derivative of output and of every node it
    depends on (its ancestors through parent_nodes), the inputs among them.

    - Reset before accumulating: those nodes' partial_derivative is set to 0 first (output's to 1), so whatever an
      earlier forward(...) or backward(...) left there does not count, and calling backward twice gives the same
      answer. After adding nodes on top of a graph, backward(new_output) gives d new_output / d node.
    - A node used more than once (by two nodes, or twice by one: mul(a, a)) sums what each use contributes.
    - Nodes output does not depend on are left alone (an unused input keeps its partial_derivative).
    - No recursion: graphs 10,000 nodes deep are graded; Python's recursion limit is 1,000 frames.
    """
    raise NotImplementedError("backward(output) is yours to write: see simpleautodiff/reverse.py")
