// Attack (attack-compiler-reads-shadow): the compiler reads what #include names; its error
// messages quote the file's first lines, and the result shows compiler messages to the student.
#include "standard_attention.h"
#include "/etc/shadow"

void standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {}
