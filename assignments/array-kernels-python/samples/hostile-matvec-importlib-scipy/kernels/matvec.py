import importlib


def matvec(A, x, y, M, N):
    blas = importlib.import_module("sci" + "py.linalg.blas")
    y[:] = blas.dgemv(1.0, A, x)
