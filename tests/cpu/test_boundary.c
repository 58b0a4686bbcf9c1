/* test_boundary.c — the SIMD eviction's boundary on the keys' high halves
 * (kve_cpu_kernels.boundary32: a bracket ranked in registers, else the
 * interpolation search) on every SIMD table this machine runs, held to a
 * sort: uniform values (the bracket's case), narrow ranges (equal values at
 * and around the boundary), clusters the interpolation misses, and the ends
 * (want 0 and m, top 2^32 - 1). Reaches the kernel table, so it links the
 * static library. */
#include <stdlib.h>
#include <string.h>

#include "kve_cpu_kernels.h"
#include "kve_suite.h"
#include "kve_test_util.h"

static int cmp_desc(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* m values in [lo, top], shaped by kind. */
static void fill(uint64_t *rng, uint32_t *k, uint32_t m, uint32_t lo, uint32_t top, int kind)
{
    uint64_t span = (uint64_t)top - lo + 1;
    uint32_t narrow = 1 + kt_below(rng, m + 2);
    for (uint32_t i = 0; i < m; i++) {
        uint64_t r = kt_next(rng);
        switch (kind) {
        case 0: /* uniform */
            k[i] = lo + (uint32_t)(r % span);
            break;
        case 1: /* a few distinct values: ties everywhere */
            k[i] = lo + (uint32_t)(r % (narrow < span ? narrow : span));
            break;
        case 2: /* two clusters at the ends */
            k[i] = r & 1 ? lo + (uint32_t)(r >> 40) % 64 : top - (uint32_t)(r >> 40) % 64;
            if (k[i] < lo || k[i] > top)
                k[i] = lo;
            break;
        default: /* uniform with one planted repeat */
            k[i] = i && r % 7 == 0 ? k[kt_below(rng, i)] : lo + (uint32_t)(r % span);
        }
    }
}

static void check_one(const kve_cpu_kernels *kt, const uint32_t *k, uint32_t m, uint32_t want,
                      uint32_t lo, uint32_t top, uint32_t *sorted)
{
    uint32_t tmp[32];
    uint64_t t = 0;
    int got = kt->boundary32(k, m, want, lo, top, tmp, &t);
    memcpy(sorted, k, (size_t)m * 4);
    qsort(sorted, m, 4, cmp_desc);
    int exists = want == m || (want == 0 ? top < UINT32_MAX : sorted[want - 1] > sorted[want]);
    ck_assert_msg(got == exists, "isa %d m %u want %u lo %u top %u: got %d, a boundary %s", kt->isa,
                  m, want, lo, top, got, exists ? "exists" : "does not exist");
    if (!got)
        return;
    uint32_t ge = 0;
    for (uint32_t i = 0; i < m; i++)
        ge += k[i] >= t;
    ck_assert_msg(ge == want && t >= lo && t <= (uint64_t)top + 1,
                  "isa %d m %u want %u: t %llu has %u at or above it", kt->isa, m, want,
                  (unsigned long long)t, ge);
}

START_TEST(boundary_matches_sort)
{
    ck_assert_ptr_null(kve_cpu_kernels_scalar.boundary32);
    uint64_t rng = 2609;
    uint32_t k[300], sorted[300];
    int tables = 0;
    for (int isa = KVE_CPU_ISA_AVX2; isa <= KVE_CPU_ISA_AVX512; isa++) {
        int avail = 0;
        KT_OK(kve_cpu_isa_available((kve_cpu_isa)isa, &avail));
        if (!avail)
            continue;
        const kve_cpu_kernels *kt = kve_cpu_kernels_get((kve_cpu_isa)isa);
        ck_assert_ptr_nonnull(kt->boundary32);
        tables++;
        for (int iter = 0; iter < 20000; iter++) {
            uint32_t m = 1 + kt_below(&rng, iter % 4 ? 140 : 300);
            uint32_t lo = iter % 3 == 0 ? 0 : (uint32_t)kt_next(&rng);
            uint32_t top = iter % 5 == 0 ? UINT32_MAX : lo + (uint32_t)(kt_next(&rng) % ((uint64_t)UINT32_MAX - lo + 1));
            fill(&rng, k, m, lo, top, iter % 4);
            uint32_t want = iter % 11 == 0 ? (iter % 2 ? m : 0) : kt_below(&rng, m + 1);
            check_one(kt, k, m, want, lo, top, sorted);
        }
    }
    /* Not a skip: a machine without AVX2 fails here rather than pass with nothing run. */
    ck_assert_int_ge(tables, 1);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(boundary, boundary_matches_sort),
    };
    const kve_suite_spec spec = {"cpu_boundary", 600, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
