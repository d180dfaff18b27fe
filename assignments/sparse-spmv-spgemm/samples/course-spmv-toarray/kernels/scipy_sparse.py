import numpy as np
import scipy.sparse as sp


def spmv(A, x):
    dense = A.toarray()
    return dense @ x


def spgemm(A, B):
    return A.tocsr() @ B.tocsr()
