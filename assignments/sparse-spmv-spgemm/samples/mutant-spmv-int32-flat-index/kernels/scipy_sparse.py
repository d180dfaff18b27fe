import numpy as np
import scipy.sparse as sp


def coo_to_csr(A):
    """CSR from COO by hand: sort the entries by their position in row-major order, then find where rows start."""
    A = A.tocoo()
    M, N = A.shape
    position = A.row * N + A.col
    order = np.argsort(position, kind="stable")
    indptr = np.searchsorted(position[order], np.arange(M + 1) * N)
    return sp.csr_matrix((A.data[order], A.col[order], indptr), shape=A.shape)


def spmv(A, x):
    return coo_to_csr(A) @ x


def spgemm(A, B):
    return A.tocsr() @ B.tocsr()
