/* kve_test_util.h — shared helpers of the Check suites (tests/lib): a seeded RNG,
 * the status assertions (KT_OK, EXPECT_ERR), random slot tables, the scored
 * tests' small batch, and one-call eviction into host buffers. */
#ifndef KVE_TEST_UTIL_H
#define KVE_TEST_UTIL_H

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "kve_test_base.h"
#include "kvevict.h"

static inline uint64_t kt_next(uint64_t *s) { return kve_splitmix64(s); }

static inline uint32_t kt_below(uint64_t *s, uint32_t n) { return n ? (uint32_t)(kve_splitmix64(s) % n) : 0; }

#define KT_OK(expr)                                                                              \
    do {                                                                                         \
        kve_status kt_st_ = (expr);                                                              \
        ck_assert_msg(kt_st_ == KVE_OK, "%s -> %s: %s", #expr, kve_status_string(kt_st_),       \
                      kve_last_error());                                                         \
    } while (0)

/* Backend memory of @p ctx for a test, and copies in and out of it: each
 * asserts success. */
static inline void *kt_alloc(kve_context *ctx, size_t bytes)
{
    void *p = NULL;
    ck_assert_int_eq(kve_alloc(ctx, bytes, &p), KVE_OK);
    return p;
}

static inline void kt_put(kve_context *ctx, void *dst, const void *src, size_t bytes)
{
    ck_assert_int_eq(kve_copy(ctx, dst, src, bytes, KVE_COPY_HOST_TO_BACKEND), KVE_OK);
}

static inline void kt_get(kve_context *ctx, void *dst, const void *src, size_t bytes)
{
    ck_assert_int_eq(kve_copy(ctx, dst, src, bytes, KVE_COPY_BACKEND_TO_HOST), KVE_OK);
}

/* @p expr returns @p st with a message naming @p needle. */
#define EXPECT_ERR(expr, st, needle)                                                             \
    do {                                                                                         \
        kve_status got_ = (expr);                                                                \
        ck_assert_msg(got_ == (st), "%s -> %s (%s), expected %s", #expr,                        \
                      kve_status_string(got_), kve_last_error(), kve_status_string(st));         \
        ck_assert_msg(strstr(kve_last_error(), (needle)) != NULL,                                \
                      "%s: message \"%s\" does not name \"%s\"", #expr, kve_last_error(),         \
                      (needle));                                                                 \
    } while (0)

/* The KVE_SCORED tests' small batch: one sequence (id 1, prompt 4) of one
 * layer, @p heads heads of @p n slots holding positions 0..n-1, scores
 * (i * 7) % 5 (ties), budget 8, window 2; slots and sc hold heads * n. */
static inline kve_batch kt_scored_batch(kve_seq *seq, int32_t *slots, float *sc, uint32_t heads,
                                        uint32_t n)
{
    for (uint32_t i = 0; i < heads * n; i++) {
        slots[i] = (int32_t)(i % n);
        sc[i] = (float)(i * 7 % 5);
    }
    *seq = (kve_seq){1, 4, 0};
    return (kve_batch){9, KVE_SCORED, 1, seq, 1, heads, 0, 0, n, 8, 2, slots, n, sc, n};
}

/* Host outputs of one eviction, sized for a batch. */
typedef struct {
    size_t heads, ev_stride, kept_stride;
    int32_t *evicted, *kept;
    uint32_t *n_evicted, *n_kept;
    uint8_t *flags;
    uint64_t *digest; /* round_digest per head (SPEC §11) */
    uint64_t *run;    /* run_digest per sequence, from 0, weight 3 */
    size_t seqs;
} kt_out;

static inline void kt_out_init(kt_out *o, const kve_batch *b)
{
    o->heads = (size_t)b->n_seqs * b->n_layers * b->n_heads;
    o->ev_stride = b->n_slots > b->budget ? b->n_slots - b->budget : 1;
    o->kept_stride = b->n_slots ? b->n_slots : 1;
    size_t h = o->heads ? o->heads : 1;
    o->evicted = (int32_t *)calloc(h * o->ev_stride, 4);
    o->kept = (int32_t *)calloc(h * o->kept_stride, 4);
    o->n_evicted = (uint32_t *)calloc(h, 4);
    o->n_kept = (uint32_t *)calloc(h, 4);
    o->flags = (uint8_t *)calloc(h, 1);
    o->digest = (uint64_t *)calloc(h, 8);
    o->seqs = b->n_seqs;
    o->run = (uint64_t *)calloc(b->n_seqs ? b->n_seqs : 1, 8);
}

static inline void kt_out_free(kt_out *o)
{
    free(o->evicted);
    free(o->kept);
    free(o->n_evicted);
    free(o->n_kept);
    free(o->flags);
    free(o->digest);
    free(o->run);
}

static inline kve_evict_out kt_out_view(const kt_out *o)
{
    kve_evict_out v = {.evicted = o->evicted, .evicted_stride = o->ev_stride,
                       .n_evicted = o->n_evicted, .n_kept = o->n_kept, .head_flags = o->flags,
                       .kept = o->kept, .kept_stride = o->kept_stride, .round_digest = o->digest,
                       .run_digest = o->run, .run_digest_weight = 3};
    return v;
}

static inline kve_status kt_evict(kve_context *ctx, const kve_batch *b, kt_out *o)
{
    kt_out_init(o, b);
    kve_evict_out v = kt_out_view(o);
    return kve_evict(ctx, b, &v, NULL, 0);
}

/* Head i's evicted and kept rows. */
static inline const int32_t *kt_ev(const kt_out *o, size_t i) { return o->evicted + i * o->ev_stride; }
static inline const int32_t *kt_kept(const kt_out *o, size_t i) { return o->kept + i * o->kept_stride; }

/* A random slot table: `valid` distinct positions below `span` (>= valid)
 * scattered over n slots, the rest -1. */
static inline void kt_random_table(uint64_t *rng, int32_t *row, uint32_t n, uint32_t valid,
                                   uint32_t span)
{
    for (uint32_t t = 0; t < n; t++)
        row[t] = -1;
    /* Choose `valid` distinct positions (Floyd), then random distinct slots. */
    uint32_t placed = 0;
    while (placed < valid) {
        int32_t p = (int32_t)kt_below(rng, span);
        int dup = 0;
        for (uint32_t t = 0; t < n && !dup; t++)
            dup = row[t] == p;
        if (dup)
            continue;
        uint32_t slot;
        do
            slot = kt_below(rng, n);
        while (row[slot] >= 0);
        row[slot] = p;
        placed++;
    }
}

/* Ascending, in range, disjoint: a canonical list of slots. */
static inline int kt_ascending(const int32_t *v, uint32_t n, uint32_t n_slots)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] < 0 || (uint32_t)v[i] >= n_slots || (i && v[i] <= v[i - 1]))
            return 0;
    return 1;
}

#endif
