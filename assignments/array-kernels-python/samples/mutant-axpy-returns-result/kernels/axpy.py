def axpy(a, x, y, out, n):
    out = a * x + y
    return out
