import numpy as np
from scipy.sparse import csr_matrix


def spmv(A, x):
    A_csr = csr_matrix(A)
    y = A_csr * x.reshape(-1, 1)
    return np.asarray(y).ravel()


def spgemm(A, B):
    A_csr = csr_matrix(A)
    B_csr = csr_matrix(B)
    C = A_csr * B_csr
    return C
