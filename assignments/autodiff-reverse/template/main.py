"""The course's example: y = log(x1) + x1 x2 - sin(x2) at (2, 5), by forward mode, one input at a time."""

from simpleautodiff import *

Node.verbose = True
x1 = Node(2)
x2 = Node(5)
y = sub(add(log(x1), mul(x1, x2)), sin(x2))

for x in (x1, x2):
    forward(x)
    print("dy/d%s = %g" % (x.name, y.partial_derivative))
