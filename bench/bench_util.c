/* bench_util.c — see bench_util.h. */
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

uint64_t bench_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void bench_fill_tables(int32_t *slots, size_t heads, uint32_t n_slots, uint32_t prompt,
                       uint64_t *rng)
{
    for (size_t i = 0; i < heads; i++) {
        int32_t *row = slots + i * n_slots;
        for (uint32_t t = 0; t < n_slots; t++)
            row[t] = (int32_t)t;
        for (uint32_t t = n_slots - 1; t > prompt; t--) {
            uint32_t j = prompt + (uint32_t)(bench_splitmix64(rng) % (t - prompt + 1));
            int32_t x = row[t];
            row[t] = row[j];
            row[j] = x;
        }
    }
}

void bench_fail(const char *prog, const char *what, kve_status st)
{
    fprintf(stderr, "%s: %s: %s: %s\n", prog, what, kve_status_string(st), kve_last_error());
    exit(2);
}

void bench_cpu_model(char *out, size_t size)
{
    snprintf(out, size, "unknown CPU");
    FILE *ci = fopen("/proc/cpuinfo", "r");
    for (char line[512]; ci && fgets(line, sizeof line, ci);)
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(out, size, "%s", strchr(line, ':') + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    if (ci)
        fclose(ci);
}

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

/* Four 64-byte loads a step into four sums (independent adds: the loads
 * are what is timed). */
__attribute__((target("avx512f"))) static uint64_t bench_read64(const unsigned char *p, size_t n)
{
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        a = _mm512_add_epi64(a, _mm512_loadu_si512(p + i));
        b = _mm512_add_epi64(b, _mm512_loadu_si512(p + i + 64));
        c = _mm512_add_epi64(c, _mm512_loadu_si512(p + i + 128));
        d = _mm512_add_epi64(d, _mm512_loadu_si512(p + i + 192));
    }
    uint64_t s = (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a, b),
                                                                   _mm512_add_epi64(c, d)));
    for (; i < n; i++)
        s += p[i];
    return s;
}

/* The same with 16-byte loads (SSE2: every x86-64). */
static uint64_t bench_read16(const unsigned char *p, size_t n)
{
    __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a = _mm_add_epi64(a, _mm_loadu_si128((const __m128i *)(p + i)));
        b = _mm_add_epi64(b, _mm_loadu_si128((const __m128i *)(p + i + 16)));
        c = _mm_add_epi64(c, _mm_loadu_si128((const __m128i *)(p + i + 32)));
        d = _mm_add_epi64(d, _mm_loadu_si128((const __m128i *)(p + i + 48)));
    }
    a = _mm_add_epi64(_mm_add_epi64(a, b), _mm_add_epi64(c, d));
    uint64_t s = (uint64_t)_mm_cvtsi128_si64(a) + (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(a, a));
    for (; i < n; i++)
        s += p[i];
    return s;
}

int bench_read_width(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? 64 : 16;
}

uint64_t bench_read(const void *p, size_t bytes)
{
    static int width;
    if (!width)
        width = bench_read_width();
    return width == 64 ? bench_read64((const unsigned char *)p, bytes)
                       : bench_read16((const unsigned char *)p, bytes);
}
#else
int bench_read_width(void) { return 8; }

uint64_t bench_read(const void *p, size_t bytes)
{
    const unsigned char *c = (const unsigned char *)p;
    uint64_t s = 0, w;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        memcpy(&w, c + i, 8);
        s += w;
    }
    for (; i < bytes; i++)
        s += c[i];
    return s;
}
#endif
