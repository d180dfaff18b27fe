"""simpleautodiff: a small automatic-differentiation package. Forward mode is given (core.py); reverse mode,
`backward(output)`, is yours to write (reverse.py)."""

from simpleautodiff.core import Node, add, forward, log, mul, sin, sub
from simpleautodiff.reverse import backward

__all__ = ["Node", "add", "sub", "mul", "log", "sin", "forward", "backward"]
