import ctypes


def matvec(A, x, y, M, N):
    y[0] = ctypes.c_int.from_address(8).value
