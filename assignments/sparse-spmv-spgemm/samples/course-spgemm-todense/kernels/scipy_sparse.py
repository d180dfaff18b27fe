import numpy as np
import scipy.sparse as sp


def spmv(A, x):
    return A.tocsr() @ x


def spgemm(A, B):
    left = np.asarray(A.todense())
    right = np.asarray(B.todense())
    return sp.csr_matrix(left @ right)
