"""SpMV and SpGEMM with SciPy on the CPU: the matrix arrives as COO or CSR; both products want CSR."""

import numpy as np
import scipy.sparse as sp


def spmv(A: sp.spmatrix, x: np.ndarray) -> np.ndarray:
    """y = A x, a dense vector. The conversion to CSR is part of the call (and of its time)."""
    return A.tocsr() @ x


def spgemm(A: sp.spmatrix, B: sp.spmatrix) -> sp.spmatrix:
    """C = A B, a sparse matrix."""
    return A.tocsr() @ B.tocsr()
