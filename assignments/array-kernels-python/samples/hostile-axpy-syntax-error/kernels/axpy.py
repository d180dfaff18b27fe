def axpy(a, x, y, out, n):
    for i in range(n):
        out[i] = (a * x[i] + y[i]
