def matvec(A, x, y, M, N):
    for i in range(M):
        total = 0.0
        for j in range(N - 1):
            total += A[i, j] * x[j]
        y[i] = total
