/* The timing harness's counting allocator (LD_PRELOAD): malloc and its kin counted, then handed to glibc's own.
 *
 * The harness calls kg_alloc_reset() just before a kernel's call and kg_alloc_peak() just after: the most bytes the
 * call held at once beyond what was held when it began (its peak extra heap memory, the allocator's usable sizes).
 * Counting by allocation, not by resident pages, sees an O(N) buffer of a few KiB that peak RSS (page-grained, its
 * counters synced every 64 faults, heap holes reused) cannot. Built by grader.timing.alloc_counter. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stddef.h>
#include <stdatomic.h>
#include <errno.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static _Atomic long long held, peak;

static void grew(void *p) {
    if (!p) return;
    long long now = atomic_fetch_add(&held, (long long)malloc_usable_size(p)) + (long long)malloc_usable_size(p);
    long long top = atomic_load(&peak);
    while (now > top && !atomic_compare_exchange_weak(&peak, &top, now)) {}
}

static void shrank(void *p) {
    if (p) atomic_fetch_sub(&held, (long long)malloc_usable_size(p));
}

void kg_alloc_reset(void) { atomic_store(&held, 0); atomic_store(&peak, 0); }
long long kg_alloc_peak(void) { return atomic_load(&peak); }

void *malloc(size_t size) { void *p = __libc_malloc(size); grew(p); return p; }
void *calloc(size_t n, size_t size) { void *p = __libc_calloc(n, size); grew(p); return p; }
void free(void *p) { shrank(p); __libc_free(p); }
void *realloc(void *old, size_t size) {
    size_t before = old ? malloc_usable_size(old) : 0;
    void *p = __libc_realloc(old, size);
    if (p || size == 0) {
        atomic_fetch_sub(&held, (long long)before);
        grew(p);
    }
    return p;
}
void *memalign(size_t alignment, size_t size) { void *p = __libc_memalign(alignment, size); grew(p); return p; }
void *aligned_alloc(size_t alignment, size_t size) { return memalign(alignment, size); }
int posix_memalign(void **out, size_t alignment, size_t size) {
    void *p = memalign(alignment, size);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
void *valloc(size_t size) { return memalign(4096, size); }
