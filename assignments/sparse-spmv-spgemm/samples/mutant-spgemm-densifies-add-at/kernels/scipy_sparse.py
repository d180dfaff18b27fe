"""SpMV and SpGEMM with SciPy; the product scattered into a dense M x N array, then made sparse again."""

import numpy as np
import scipy.sparse as sp


def spmv(A, x):
    return A.tocsr() @ x


def spgemm(A, B):
    # Every product a_ik * b_kj, vectorised: each entry of A meets the entries of B's row k.
    A = sp.coo_matrix(A)
    B = sp.csr_matrix(B)
    counts = np.diff(B.indptr)[A.col]
    starts = np.repeat(B.indptr[A.col], counts)
    firsts = np.repeat(np.cumsum(counts) - counts, counts)
    at = starts + np.arange(counts.sum()) - firsts
    rows = np.repeat(A.row, counts)
    cols = B.indices[at]
    values = np.repeat(A.data, counts) * B.data[at]
    # Sum the products that land on the same (i, j): np.add.at adds repeated indices, where C[rows, cols] += would not.
    C = np.zeros((A.shape[0], B.shape[1]))
    np.add.at(C, (rows, cols), values)
    return sp.csr_matrix(C)
