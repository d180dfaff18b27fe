"""Input generators for sparse-spmv-spgemm: random sparse matrices as the arrays of their COO and CSR forms.

Every matrix is given by four arrays of its `nnz` stored entries, so that one case can hand the student either
format (the case's `csr`): `data` (float64), `indices` (int32 column indices), `indptr` (int32, M + 1: the CSR
row pointer) and `row` (int32 row indices). A CSR case stores the entries in row-major order (`data`, `indices`,
`indptr` are the CSR arrays); a COO case stores them shuffled (`data`, `row`, `indices` are the COO arrays; its
`indptr` is still the row pointer of the sorted entries, which the adapter does not use).

Case knobs: `nnz` stored entries at distinct positions, drawn uniformly; `empty_rows` (a share of the rows that
hold no entry); `explicit_zeros` (a share of the stored entries whose value is exactly 0.0: stored, but zero).
Values are uniform in [0.5, 1.5] with a random sign, so that no product's sum cancels to zero by chance.
"""

import numpy as np

INDEX = np.int32  # SciPy's index dtype for these sizes: what a student's index arithmetic overflows in


def positions(M: int, N: int, nnz: int, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`nnz` distinct flat positions (row * N + col, int64) of an M x N matrix, in the allowed `rows`, sorted."""
    if nnz > len(rows) * N:
        raise ValueError(f"{nnz} entries do not fit in {len(rows)} rows of {N} columns")
    chosen = np.empty(0, np.int64)
    while len(chosen) < nnz:  # draw, drop repeats, draw again: sparse cases need one round, dense ones a few
        want = nnz - len(chosen)
        drawn = rows[rng.integers(0, len(rows), 2 * want)].astype(np.int64) * N + rng.integers(0, N, 2 * want)
        chosen = np.unique(np.concatenate([chosen, drawn]))
        if len(chosen) > nnz:
            chosen = np.sort(rng.choice(chosen, nnz, replace=False))
    return chosen


def sparse_matrix(M: int, N: int, nnz: int, case: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The four arrays of a random M x N matrix with `nnz` stored entries, in the case's format's order."""
    all_rows = np.arange(M, dtype=np.int64)
    empty = int(round(float(case.get("empty_rows", 0.0)) * M))
    rows = np.sort(rng.choice(all_rows, M - empty, replace=False)) if empty else all_rows
    flat = positions(M, N, nnz, rows, rng)
    row, col = (flat // N).astype(INDEX), (flat % N).astype(INDEX)
    data = rng.uniform(0.5, 1.5, nnz) * rng.choice([-1.0, 1.0], nnz)
    zeros = int(round(float(case.get("explicit_zeros", 0.0)) * nnz))
    if zeros:
        data[rng.choice(nnz, zeros, replace=False)] = 0.0
    indptr = np.zeros(M + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=M), out=indptr[1:])
    if not int(case.get("csr", 1)):
        order = rng.permutation(nnz)
        row, col, data = row[order], col[order], data[order]
    return {"data": data, "indices": col, "indptr": indptr.astype(INDEX), "row": row}


def make_inputs(kernel: str, case: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """spmv: A (M x N) and x (N); spgemm: A (M x K) and B (K x N), drawn in that order."""
    if kernel == "spmv":
        M, N = int(case["M"]), int(case["N"])
        A = sparse_matrix(M, N, int(case["nnz"]), case, rng)
        return {**{f"A_{k}": v for k, v in A.items()}, "x": rng.uniform(-1.0, 1.0, N)}
    if kernel == "spgemm":
        M, K, N = int(case["M"]), int(case["K"]), int(case["N"])
        A = sparse_matrix(M, K, int(case["nnzA"]), case, rng)
        B = sparse_matrix(K, N, int(case["nnzB"]), case, rng)
        return {**{f"A_{k}": v for k, v in A.items()}, **{f"B_{k}": v for k, v in B.items()}}
    raise KeyError(f"sparse-spmv-spgemm has no kernel {kernel!r}; expected spmv or spgemm")
