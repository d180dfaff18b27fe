"""The course's example: y = log(x1) + x1 x2 - sin(x2) at (2, 5), by forward mode one input at a time, then by
reverse mode, every derivative from one backward call."""

from simpleautodiff import *

x1 = Node(2)
x2 = Node(5)
y = sub(add(log(x1), mul(x1, x2)), sin(x2))

for x in (x1, x2):
    forward(x)
    print("forward:  dy/d%s = %g" % (x.name, y.partial_derivative))

backward(y)
for x in (x1, x2):
    print("backward: dy/d%s = %g" % (x.name, x.partial_derivative))
