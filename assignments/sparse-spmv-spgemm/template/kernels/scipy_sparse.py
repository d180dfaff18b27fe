"""SpMV and SpGEMM with SciPy on the CPU.

`A` and `B` arrive as SciPy sparse matrices (`scipy.sparse.csr_matrix` or `coo_matrix`, the case says which), `x`
as a dense NumPy vector. Return the result; the grader's adapter (grading/adapter.py) writes it out.
Do not change the inputs in place, and never make a matrix dense (`.toarray()`, `.todense()`, `.A`): the grader finds
those, and some cases are too large for a dense matrix to fit in memory.
"""

import numpy as np
import scipy.sparse as sp


def spmv(A: sp.spmatrix, x: np.ndarray) -> np.ndarray:
    """Return y = A @ x as a dense NumPy vector of length A.shape[0]."""
    # TODO: your code here (any format conversion you need is part of the timed call).
    raise NotImplementedError("spmv is not written yet: return A @ x as a dense NumPy vector")


def spgemm(A: sp.spmatrix, B: sp.spmatrix) -> sp.spmatrix:
    """Return C = A @ B as a SciPy sparse matrix (any format)."""
    # TODO: your code here.
    raise NotImplementedError("spgemm is not written yet: return A @ B as a SciPy sparse matrix")
