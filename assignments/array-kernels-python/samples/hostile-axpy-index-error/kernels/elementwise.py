def fused(a, x, y, i):
    return a * x[i] + y[i + 1]
