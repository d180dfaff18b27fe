"""The canonical form a SpGEMM result is graded in (provided: the grader's copy replaces yours; do not edit).

Canonical CSR: the nonzero entries only (a stored zero, and a product that sums to exactly zero, are not entries:
SciPy drops zero sums, cuSPARSE keeps them), duplicates summed, each row's column indices ascending; `C_indices`
and `C_data` padded past the entries to the case's `cap` with -1 and 0.0, and `C_nnz` the entry count. NumPy only,
so that SciPy's and CuPy's results go through the same code. A result with more entries than `cap` writes the first
`cap` of them, and its count says how many it had.
"""

import numpy as np

PAD_INDEX, PAD_VALUE = -1, 0.0


def write_canonical(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, shape: tuple[int, int],
                    C_indptr: np.ndarray, C_indices: np.ndarray, C_data: np.ndarray, C_nnz: np.ndarray) -> None:
    """A CSR matrix's arrays (host NumPy, any order, duplicates and zeros allowed) into the output arrays."""
    M, N = shape
    rows = np.repeat(np.arange(M, dtype=np.int64), np.diff(np.asarray(indptr, np.int64)))
    keys, where = np.unique(rows * N + np.asarray(indices, np.int64), return_inverse=True)
    sums = np.bincount(where.reshape(-1), weights=np.asarray(data, np.float64), minlength=len(keys))
    nonzero = sums != 0
    keys, sums = keys[nonzero], sums[nonzero]
    kept = min(len(keys), len(C_indices))
    C_indptr[0] = 0
    np.cumsum(np.bincount(keys // N, minlength=M), out=C_indptr[1:])
    C_indices[:kept], C_indices[kept:] = keys[:kept] % N, PAD_INDEX
    C_data[:kept], C_data[kept:] = sums[:kept], PAD_VALUE
    C_nnz[0] = len(keys)
