from kernels.rows import dot


def matvec(A, x, y, M, N):
    for i in range(M):
        y[i] = dot(A[i], x, N)
