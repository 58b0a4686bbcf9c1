/* check_rows.c — one head's content checks (kve_check_rows.h): fast passes
 * of the context's ISA clear the common tables (a prompt run, then sorted
 * or dense positions), and only a head they cannot clear runs the exact
 * search for its first problem. */
#include <stdlib.h>
#include <string.h>

#include "kve_check_rows.h"
#include "kve_cpu_kernels.h"
#include "kve_util.h"

/* The second slot holding the smallest repeated position of a sparse row
 * (positions too far apart for a bit map): a sorted copy in @p sorted. */
static int kve_sparse_problem(const int32_t *row, uint32_t n, int32_t *sorted, kve_slot_problem *p)
{
    size_t m = 0;
    for (uint32_t t = 0; t < n; t++)
        if (row[t] >= 0)
            sorted[m++] = row[t];
    qsort(sorted, m, sizeof *sorted, kve_cmp_i32);
    for (size_t i = 1; i < m; i++)
        if (sorted[i] == sorted[i - 1]) {
            int seen = 0;
            for (uint32_t t = 0; t < n; t++)
                if (row[t] == sorted[i] && seen++) {
                    p->slot = t;
                    break;
                }
            p->value = sorted[i];
            p->duplicate = 1;
            return 1;
        }
    return 0;
}

/* The exact first problem (kve_row_check's rule); @p scratch: n words. */
static int kve_exact_problem(const int32_t *row, uint32_t n, int check_dups, uint64_t *scratch,
                             kve_slot_problem *p)
{
    int32_t lo = INT32_MAX, hi = -1;
    for (uint32_t t = 0; t < n; t++) {
        int32_t v = row[t];
        if (v < -1) {
            *p = (kve_slot_problem){t, v, 0};
            return 1;
        }
        if (v >= 0) {
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
    }
    if (!check_dups || hi < 0)
        return 0;
    size_t span = (size_t)(hi - lo) + 1;
    if (span > (size_t)n * 64)
        return kve_sparse_problem(row, n, (int32_t *)scratch, p);
    memset(scratch, 0, (span + 63) / 64 * 8);
    for (uint32_t t = 0; t < n; t++) {
        if (row[t] < 0)
            continue;
        size_t bit = (size_t)(row[t] - lo);
        uint64_t m = 1ull << (bit & 63);
        if (scratch[bit >> 6] & m) {
            *p = (kve_slot_problem){t, row[t], 1};
            return 1;
        }
        scratch[bit >> 6] |= m;
    }
    return 0;
}

void kve_row_facts_tail(const int32_t *row, uint32_t t, uint32_t n, kve_row_facts *s)
{
    for (; t < n; t++) {
        int32_t v = row[t];
        s->min = v < s->min ? v : s->min;
        s->hi = v > s->hi ? v : s->hi;
        s->lo = (uint32_t)v < s->lo ? (uint32_t)v : s->lo; /* -1 is never the least */
        s->valid += v >= 0;
        s->unordered += t + 1 < n && row[t + 1] != -1 && (v < 0 || row[t + 1] <= v);
    }
}

void kve_row_facts_scalar(const int32_t *row, uint32_t n, kve_row_facts *s)
{
    *s = (kve_row_facts){INT32_MAX, -1, UINT32_MAX, 0, 0};
    kve_row_facts_tail(row, 0, n, s);
}

uint32_t kve_row_run_tail(const int32_t *row, uint32_t t, uint32_t n)
{
    while (t < n && (int64_t)row[t] == (int64_t)row[0] + t)
        t++;
    return t;
}

uint32_t kve_row_run_scalar(const int32_t *row, uint32_t n)
{
    return row[0] < 0 ? 0 : kve_row_run_tail(row, 0, n);
}

uint32_t kve_row_run_room(int32_t first, uint32_t n)
{
    uint64_t room = (uint64_t)INT32_MAX - (uint64_t)first + 1;
    return room < n ? (uint32_t)room : n;
}

int kve_row_distinct_scalar(const int32_t *row, uint32_t n, int32_t lo, size_t span, uint32_t valid,
                            void *buf)
{
    unsigned char *map = (unsigned char *)buf;
    size_t words = (span + 7) / 8;
    memset(map, 0, words * 8);
    for (uint32_t t = 0; t < n; t++)
        map[row[t] >= 0 ? (size_t)(row[t] - lo) : words * 8] = 1; /* one spare byte */
    uint64_t count = 0;
    for (size_t i = 0; i < words; i++) {
        uint64_t w;
        memcpy(&w, map + 8 * i, 8);
        count += (w * 0x0101010101010101ull) >> 56;
    }
    return count == valid;
}

/* Whether the @p valid valid positions of row[0..n) are distinct, however
 * far apart: each goes into an open-addressed set of 2^k words in @p map
 * (KVE_CHECK_MAP_BYTES), at least 4 x valid where the map holds them (a
 * probe past a position's first word is a branch the CPU mispredicts; on
 * G1, 2 x valid cost about 1.5 us a head more), else 2 x valid, probed
 * linearly from a multiplicative hash. 1: distinct; 0: a repeat; -1: not
 * settled here (more positions than the map holds, or more probes than 8
 * a position on average: positions chosen to collide), for the exact
 * search. */
static int kve_row_distinct_hashed(const int32_t *row, uint32_t n, uint32_t valid, void *map)
{
    uint32_t bits = 1;
    while (((uint64_t)1 << bits) < 4 * (uint64_t)valid)
        bits++;
    bits -= ((size_t)4 << bits) > KVE_CHECK_MAP_BYTES;
    if (((size_t)4 << bits) > KVE_CHECK_MAP_BYTES)
        return -1;
    uint32_t *set = (uint32_t *)map, mask = (1u << bits) - 1;
    memset(set, 0, (size_t)4 << bits);
    uint64_t probes = 0, limit = 8 * (uint64_t)valid;
    for (uint32_t t = 0; t < n; t++) {
        if (row[t] < 0)
            continue;
        uint32_t key = (uint32_t)row[t] + 1; /* 1 .. 2^31: 0 marks a free word */
        uint32_t h = (key * 0x9e3779b1u) >> (32 - bits);
        for (; set[h]; h = (h + 1) & mask) {
            if (set[h] == key)
                return 0;
            if (++probes > limit)
                return -1;
        }
        set[h] = key;
    }
    return 1;
}

/* Valid slots of a row holding a position in [a, b]. */
static uint32_t kve_row_inside(const int32_t *row, uint32_t n, int32_t a, int32_t b)
{
    uint32_t c = 0;
    for (uint32_t t = 0; t < n; t++)
        c += row[t] >= a && row[t] <= b;
    return c;
}

/* Clears a row without the exact search when it can: 0 = no problem, 1 = a
 * problem (or maybe one). */
static int kve_row_suspect(const kve_cpu_kernels *k, const int32_t *row, uint32_t n, int check_dups,
                           void *map)
{
    kve_row_facts q;
    if (!check_dups) {
        k->row_facts(row, n, &q);
        return q.min < -1;
    }
    /* The prompt usually fills the first slots in order: distinct, and only
     * the rest of the row can repeat one of them or itself. */
    uint32_t r = k->row_run(row, n);
    const int32_t *rest = row + r;
    k->row_facts(rest, n - r, &q);
    if (q.min < -1)
        return 1;
    if (!q.unordered && (!r || r == n || rest[0] == -1 || rest[0] > row[r - 1]))
        return 0; /* ascending positions are distinct */
    if (r && q.valid && (int64_t)q.lo <= row[r - 1] && q.hi >= row[0] &&
        kve_row_inside(rest, n - r, row[0], row[r - 1]))
        return 1;
    if (q.valid <= 1)
        return 0;
    size_t span = (size_t)(q.hi - (int32_t)q.lo) + 1;
    if (span * k->row_map_bytes > KVE_CHECK_MAP_BYTES) /* too far apart for a map of them */
        return kve_row_distinct_hashed(rest, n - r, q.valid, map) != 1;
    return !k->row_distinct(rest, n - r, (int32_t)q.lo, span, q.valid, map);
}

int kve_row_check(const kve_cpu_kernels *k, const int32_t *row, uint32_t n, int check_dups,
                  void *map, uint64_t *scratch, kve_slot_problem *p)
{
    if (n == 0 || !kve_row_suspect(k, row, n, check_dups, map))
        return 0;
    return kve_exact_problem(row, n, check_dups, scratch, p);
}
