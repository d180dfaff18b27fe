import scipy.sparse as sp


def spmv(A, x):
    return x @ A.tocsr()


def spgemm(A, B):
    return A.tocsr() @ B.tocsr()
