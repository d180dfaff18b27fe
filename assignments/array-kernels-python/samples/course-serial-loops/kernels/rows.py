def dot(row, x, N):
    total = 0.0
    for j in range(N):
        total += row[j] * x[j]
    return total
