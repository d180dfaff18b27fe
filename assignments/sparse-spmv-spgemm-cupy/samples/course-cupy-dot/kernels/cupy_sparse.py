import cupy as cp
from cupyx.scipy.sparse import csr_matrix


def spmv(A, x):
    A_gpu = csr_matrix(A)
    return A_gpu.dot(x)


def spgemm(A, B):
    A_gpu = csr_matrix(A)
    B_gpu = csr_matrix(B)
    return A_gpu.dot(B_gpu)
