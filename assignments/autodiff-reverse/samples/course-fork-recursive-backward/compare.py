"""Forward mode against my reverse mode on a random graph, as in my report."""

import random

from simpleautodiff import *

random.seed(1)
inputs = [Node(random.uniform(0.5, 2)) for _ in range(5)]
y = inputs[0]
for _ in range(50):
    y = random.choice([add, sub, mul])(y, random.choice(inputs))
reverse = backward(y)
for x in inputs:
    forward(x)
    print(x.name, y.partial_derivative, reverse[x.name])
