"""SpMV and SpGEMM with CuPy on the GPU (cuSPARSE through cupyx.scipy.sparse): the matrix arrives as COO or CSR
on the device; both products want CSR."""

import cupy as cp
import cupyx.scipy.sparse as cpsp


def spmv(A: cpsp.spmatrix, x: cp.ndarray) -> cp.ndarray:
    """y = A x, a dense CuPy vector. The conversion to CSR is part of the call (and of its time)."""
    return A.tocsr() @ x


def spgemm(A: cpsp.spmatrix, B: cpsp.spmatrix) -> cpsp.spmatrix:
    """C = A B, a sparse CuPy matrix."""
    return A.tocsr() @ B.tocsr()
