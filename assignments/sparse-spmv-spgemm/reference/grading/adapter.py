"""The grader's adapter for the SciPy half (provided: the grader's copy replaces yours; do not edit).

The grader calls kernels with C-style signatures, arrays in and outputs written in place. This module is that
kernel for `spmv` and `spgemm` of kernels/scipy_sparse.py: it builds the case's matrices as SciPy matrices in the
case's format (`csr` 1: csr_matrix from data, indices, indptr; 0: coo_matrix from data, row, indices), calls your
function on them, and writes what it returns into the output arrays:

- spmv: your y = A @ x (a dense vector of length M) into `y`;
- spgemm: your C = A @ B (a SciPy sparse matrix, M x N, any format) in canonical CSR (grading/canonical.py).

The matrices share the grader's arrays (no copy): a function that changes its inputs in place (`A.data[...] =`,
`A.eliminate_zeros()`) changes the case's inputs, and the case fails for it. A call's time is this whole function:
your call, and the adapter's work around it (microseconds for SpMV; for SpGEMM the canonical form, linear in the
product's entries).
"""

import numpy as np
import scipy.sparse as sp

from grading.canonical import write_canonical
from kernels import scipy_sparse as student


def matrix(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, row: np.ndarray, shape: tuple[int, int],
           csr: int) -> sp.spmatrix:
    """The case's matrix in its format, sharing the arrays."""
    if csr:
        return sp.csr_matrix((data, indices, indptr), shape=shape, copy=False)
    return sp.coo_matrix((data, (row, indices)), shape=shape, copy=False)


def dense_vector(result: object, length: int) -> np.ndarray:
    """spmv's result as a flat array of `length`, or an error that says what it returned instead."""
    if result is None:
        raise TypeError("spmv returned None; it must return A @ x as a dense vector (a NumPy array)")
    if sp.issparse(result):
        raise TypeError(f"spmv returned a sparse {type(result).__name__}; it must return a dense NumPy vector")
    vector = np.asarray(result, dtype=np.float64)
    if vector.size != length or max(vector.shape, default=1) != length:
        raise ValueError(f"spmv returned an array of shape {vector.shape}; expected ({length},)")
    return vector.reshape(length)


def sparse_result(C: object, shape: tuple[int, int]) -> sp.csr_matrix:
    """spgemm's result as CSR (its own arrays where it converts), or an error that says what it returned instead."""
    if not sp.issparse(C):
        raise TypeError(f"spgemm returned {type(C).__name__}; it must return A @ B as a SciPy sparse matrix")
    if C.shape != shape:
        raise ValueError(f"spgemm returned a {C.shape[0]} x {C.shape[1]} matrix; expected {shape[0]} x {shape[1]}")
    return C.tocsr()


def spmv(A_data, A_indices, A_indptr, A_row, x, y, M, N, nnz, csr):
    A = matrix(A_data, A_indices, A_indptr, A_row, (M, N), csr)
    y[:] = dense_vector(student.spmv(A, x), M)


def spgemm(A_data, A_indices, A_indptr, A_row, B_data, B_indices, B_indptr, B_row, C_indptr, C_indices, C_data,
           C_nnz, M, K, N, nnzA, nnzB, cap, csr):
    A = matrix(A_data, A_indices, A_indptr, A_row, (M, K), csr)
    B = matrix(B_data, B_indices, B_indptr, B_row, (K, N), csr)
    C = sparse_result(student.spgemm(A, B), (M, N))
    write_canonical(C.indptr, C.indices, C.data, (M, N), C_indptr, C_indices, C_data, C_nnz)
