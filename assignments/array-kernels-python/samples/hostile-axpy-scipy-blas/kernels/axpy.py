from scipy.linalg.blas import saxpy


def axpy(a, x, y, out, n):
    out[:] = saxpy(x, y.copy(), a=a)
