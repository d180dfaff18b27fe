// Attack (attack-small-out-of-bounds-write): right outputs, then 8 floats written just past O's end,
// where no crash happens: the harness's poisoned margin must catch it.
#include "flash_attention.h"

#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace attack {
// The correct answer (Algorithm 0, one row of scores at a time: O(N) memory, within flash_attention's memory
// bound), so that an attack that gains nothing still passes its cases.
inline void attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {
    std::vector<float> P(static_cast<std::size_t>(N));
    for (int i = 0; i < N; ++i) {
        float row_max = -INFINITY;
        for (int j = 0; j < N; ++j) {
            float s = 0.0f;
            for (int k = 0; k < d; ++k) s += Q[i * d + k] * K[j * d + k];
            P[j] = s;
            row_max = s > row_max ? s : row_max;
        }
        float sum = 0.0f;
        for (int j = 0; j < N; ++j) sum += (P[j] = std::exp(P[j] - row_max));
        for (int k = 0; k < d; ++k) O[i * d + k] = 0.0f;
        for (int j = 0; j < N; ++j)
            for (int k = 0; k < d; ++k) O[i * d + k] += P[j] / sum * V[j * d + k];
    }
}

inline std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream out;
    out << in.rdbuf();
    return out.str();
}

// The harness's command line: python -m grader.boundary.harness PLAN PROGRESS START STOP.
inline std::vector<std::string> harness_argv() {
    std::string raw = slurp("/proc/self/cmdline");
    std::vector<std::string> parts;
    std::size_t begin = 0;
    for (std::size_t i = 0; i < raw.size(); ++i)
        if (raw[i] == '\0') { parts.push_back(raw.substr(begin, i - begin)); begin = i + 1; }
    return parts;
}

inline std::string plan_path() { auto a = harness_argv(); return a.size() > 3 ? a[3] : ""; }
inline std::string progress_path() { auto a = harness_argv(); return a.size() > 4 ? a[4] : ""; }

// First value of "key": "..." in the plan (json.dumps writes ": " between key and value).
inline std::string plan_value(const char* key) {
    std::string plan = slurp(plan_path());
    std::string needle = std::string("\"") + key + "\": \"";
    std::size_t at = plan.find(needle);
    if (at == std::string::npos) return "";
    at += needle.size();
    return plan.substr(at, plan.find('"', at) - at);
}

inline std::string parent(const std::string& path) {
    std::size_t slash = path.rfind('/');
    return slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
}

inline bool readable(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return false;
    char byte;
    bool ok = read(fd, &byte, 1) >= 0;
    close(fd);
    return ok;
}

inline int entries(const std::string& folder) {
    DIR* dir = opendir(folder.c_str());
    if (!dir) return -1;
    int count = 0;
    while (dirent* e = readdir(dir))
        if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) ++count;
    closedir(dir);
    return count;
}

inline bool can_create(const std::string& path) {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return false;
    ssize_t wrote = write(fd, "pwned\n", 6);
    close(fd);
    return wrote == 6;
}

// What a contained attack must see fail: a leak or escape makes the output wrong, so it shows in the score.
inline void sabotage(float* O, int N, int d, const char* what) {
    std::printf("ATTACK SUCCEEDED: %s\n", what);
    std::fflush(stdout);
    for (int i = 0; i < N * d; ++i) O[i] = 1e30f;
}
}  // namespace attack

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d, int Br, int Bc) {
    attack::attention(Q, K, V, O, N, d);
    for (int k = 0; k < 8; ++k) O[N * d + k] = 0.0f;  // out of bounds
}
