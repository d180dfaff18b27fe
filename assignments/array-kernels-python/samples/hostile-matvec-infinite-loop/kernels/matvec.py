def matvec(A, x, y, M, N):
    i = 0
    while i < M:
        y[i] = A[i] @ x
