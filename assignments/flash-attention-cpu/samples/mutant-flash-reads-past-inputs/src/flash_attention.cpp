// Algorithm 1 with an off-by-one in the size of the last key/value block: it writes every element of O,
// but where Bc does not divide N its last block takes one row more than K and V hold.
#include "flash_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d,
                     int Br, int Bc) {
    std::fill(O, O + static_cast<long>(N) * d, 0.0f);
    std::vector<float> row_sum(N, 0.0f), row_max(N, -INFINITY);
    std::vector<float> scores(static_cast<long>(Br) * Bc), weighted(d);

    for (int first_key = 0; first_key < N; first_key += Bc) {
        // MUTANT: "+ 1" turns the count of keys left into an inclusive bound: a partial last block
        // reads row N of K and V, just past their ends.
        const int keys = std::min(Bc, N - first_key + 1);
        for (int first_query = 0; first_query < N; first_query += Br) {
            const int queries = std::min(Br, N - first_query);
            for (int q = 0; q < queries; ++q) {
                const int row = first_query + q;
                float* s = &scores[static_cast<long>(q) * Bc];
                float tile_max = -INFINITY;
                for (int k = 0; k < keys; ++k) {
                    float dot = 0.0f;
                    for (int x = 0; x < d; ++x) dot += Q[row * d + x] * K[(first_key + k) * d + x];
                    s[k] = dot;
                    if (dot > tile_max) tile_max = dot;
                }
                float tile_sum = 0.0f;
                for (int k = 0; k < keys; ++k) {
                    s[k] = std::exp(s[k] - tile_max);
                    tile_sum += s[k];
                }
                std::fill(weighted.begin(), weighted.end(), 0.0f);
                for (int k = 0; k < keys; ++k)
                    for (int x = 0; x < d; ++x) weighted[x] += s[k] * V[(first_key + k) * d + x];

                const float new_max = std::max(row_max[row], tile_max);
                const float keep = std::exp(row_max[row] - new_max) * row_sum[row];
                const float add = std::exp(tile_max - new_max);
                const float new_sum = keep + add * tile_sum;
                for (int x = 0; x < d; ++x)
                    O[row * d + x] = (keep * O[row * d + x] + add * weighted[x]) / new_sum;
                row_sum[row] = new_sum;
                row_max[row] = new_max;
            }
        }
    }
}
