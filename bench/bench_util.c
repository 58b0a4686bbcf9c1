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
