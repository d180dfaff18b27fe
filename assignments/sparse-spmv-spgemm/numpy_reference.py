"""Float64 truth for sparse-spmv-spgemm, in NumPy alone (no SciPy: the truth does not come from a library graded).

The SpGEMM result is written in the canonical CSR form the grader's adapters write (grading/canonical.py): the
nonzero entries only (a product that sums to exactly zero, and a stored zero, are not entries), each row's column
indices ascending, no duplicates; `C_indices` and `C_data` padded to the case's `cap` with -1 and 0.0, and
`C_nnz` the entry count. Two libraries that store the same matrix differently (SciPy drops zero sums, cuSPARSE
keeps them) compare equal; a missing or extra entry shifts every later one, and `C_nnz` says how many.
"""

import numpy as np

PAD_INDEX, PAD_VALUE = -1, 0.0  # what the canonical form holds past its entries, up to `cap`


def spmv(A_data: np.ndarray, A_indices: np.ndarray, A_row: np.ndarray, x: np.ndarray, M: int, **_) -> dict:
    """y = A x: every stored entry's product added into its row (COO and CSR cases alike: `row` is given)."""
    return {"y": np.bincount(A_row, weights=A_data * x[A_indices], minlength=M)}


def canonical(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, M: int, N: int, cap: int) -> dict:
    """Entries (duplicates summed) as canonical CSR, padded to `cap` (see the module's docstring)."""
    keys, where = np.unique(rows.astype(np.int64) * N + cols, return_inverse=True)
    sums = np.bincount(where, weights=values, minlength=len(keys))
    keys, sums = keys[sums != 0], sums[sums != 0]
    nnz = len(keys)
    if nnz > cap:
        raise ValueError(f"the product has {nnz} entries, more than the case's cap {cap}: raise cap")
    indptr = np.zeros(M + 1, np.int64)
    np.cumsum(np.bincount(keys // N, minlength=M), out=indptr[1:])
    indices = np.full(cap, PAD_INDEX, np.int64)
    data = np.full(cap, PAD_VALUE)
    indices[:nnz], data[:nnz] = keys % N, sums
    return {"C_indptr": indptr, "C_indices": indices, "C_data": data, "C_nnz": np.array([nnz], np.int64)}


def spgemm(A_data: np.ndarray, A_indices: np.ndarray, A_row: np.ndarray, B_data: np.ndarray, B_indices: np.ndarray,
           B_row: np.ndarray, M: int, K: int, N: int, cap: int, **_) -> dict:
    """C = A B: each stored A[i, k] times each stored B[k, j], summed per (i, j)."""
    order = np.argsort(B_row, kind="stable")  # B's entries grouped by row
    b_col, b_val = B_indices[order].astype(np.int64), B_data[order]
    counts = np.bincount(B_row, minlength=K)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    per_a = counts[A_indices]  # how many B entries each A entry meets
    total = int(per_a.sum())
    first = np.repeat(np.cumsum(per_a) - per_a, per_a)
    picked = np.repeat(starts[A_indices], per_a) + (np.arange(total) - first)
    rows = np.repeat(A_row.astype(np.int64), per_a)
    values = np.repeat(A_data, per_a) * b_val[picked]
    return canonical(rows, b_col[picked], values, M, N, cap)
