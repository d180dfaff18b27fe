"""The grader's adapter for the CuPy half (provided: the grader's copy replaces yours; do not edit).

The grader calls kernels with C-style signatures, arrays in and outputs written in place (host NumPy arrays). This
module is that kernel for `spmv` and `spgemm` of kernels/cupy_sparse.py: it copies the case's arrays to the GPU,
builds the matrices as cupyx.scipy.sparse matrices in the case's format (`csr` 1: csr_matrix from data, indices,
indptr; 0: coo_matrix from data, row, indices), calls your function on them, and copies what it returns back:

- spmv: your y = A @ x (a dense CuPy vector of length M) into `y`;
- spgemm: your C = A @ B (a cupyx sparse matrix, M x N, any format) in canonical CSR (grading/canonical.py).

A result on the host (a NumPy array, a SciPy matrix) is refused: the GPU half computes on the GPU. A call's time is
this whole function, which ends when the device has finished (the copy back synchronises): the copies to the GPU
and back, your call, and for SpGEMM the canonical form on the host, linear in the product's entries. The project's
rule: "include all necessary setup costs, such as format conversions or initialization".
"""

import cupy as cp
import cupyx.scipy.sparse as cpsp
import numpy as np

from grading.canonical import write_canonical
from kernels import cupy_sparse as student


def matrix(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, row: np.ndarray, shape: tuple[int, int],
           csr: int) -> cpsp.spmatrix:
    """The case's matrix in its format, on the GPU."""
    if csr:
        return cpsp.csr_matrix((cp.asarray(data), cp.asarray(indices), cp.asarray(indptr)), shape=shape)
    return cpsp.coo_matrix((cp.asarray(data), (cp.asarray(row), cp.asarray(indices))), shape=shape)


def dense_vector(result: object, length: int) -> np.ndarray:
    """spmv's result copied to the host as a flat array of `length`, or an error that says what it was instead."""
    if not isinstance(result, cp.ndarray):
        raise TypeError(f"spmv returned {type(result).__module__}.{type(result).__name__}; it must return A @ x as a "
                        "dense CuPy vector, computed on the GPU")
    if result.size != length or max(result.shape, default=1) != length:
        raise ValueError(f"spmv returned an array of shape {result.shape}; expected ({length},)")
    return cp.asnumpy(result.astype(cp.float64, copy=False)).reshape(length)


def sparse_result(C: object, shape: tuple[int, int]) -> cpsp.csr_matrix:
    """spgemm's result as CSR on the GPU, or an error that says what it returned instead."""
    if not cpsp.issparse(C):
        raise TypeError(f"spgemm returned {type(C).__module__}.{type(C).__name__}; it must return A @ B as a "
                        "cupyx.scipy.sparse matrix, computed on the GPU")
    if C.shape != shape:
        raise ValueError(f"spgemm returned a {C.shape[0]} x {C.shape[1]} matrix; expected {shape[0]} x {shape[1]}")
    return C.tocsr()


def spmv(A_data, A_indices, A_indptr, A_row, x, y, M, N, nnz, csr):
    A = matrix(A_data, A_indices, A_indptr, A_row, (M, N), csr)
    y[:] = dense_vector(student.spmv(A, cp.asarray(x)), M)


def spgemm(A_data, A_indices, A_indptr, A_row, B_data, B_indices, B_indptr, B_row, C_indptr, C_indices, C_data,
           C_nnz, M, K, N, nnzA, nnzB, cap, csr):
    A = matrix(A_data, A_indices, A_indptr, A_row, (M, K), csr)
    B = matrix(B_data, B_indices, B_indptr, B_row, (K, N), csr)
    C = sparse_result(student.spgemm(A, B), (M, N))
    write_canonical(C.indptr.get(), C.indices.get(), C.data.get(), (M, N), C_indptr, C_indices, C_data, C_nnz)
