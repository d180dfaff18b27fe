"""SpMV and SpGEMM with CuPy on the GPU (cupyx.scipy.sparse, which calls cuSPARSE).

`A` and `B` arrive as `cupyx.scipy.sparse` matrices on the GPU (`csr_matrix` or `coo_matrix`, the case says which),
`x` as a dense CuPy vector. Return the result on the GPU (a CuPy array, a cupyx sparse matrix); the grader's adapter
(grading/adapter.py of sparse-spmv-spgemm-cupy) copies it back. Never make a matrix dense (`.toarray()`,
`.todense()`, `.A`), and do not move the work to the CPU.
"""

import cupy as cp
import cupyx.scipy.sparse as cpsp


def spmv(A: cpsp.spmatrix, x: cp.ndarray) -> cp.ndarray:
    """Return y = A @ x as a dense CuPy vector of length A.shape[0]."""
    # TODO: your code here (any format conversion you need is part of the timed call).
    raise NotImplementedError("spmv is not written yet: return A @ x as a dense CuPy vector")


def spgemm(A: cpsp.spmatrix, B: cpsp.spmatrix) -> cpsp.spmatrix:
    """Return C = A @ B as a cupyx.scipy.sparse matrix (any format)."""
    # TODO: your code here.
    raise NotImplementedError("spgemm is not written yet: return A @ B as a cupyx.scipy.sparse matrix")
