/* kve_cpu_test.h — what the CPU suites share: a context for every ISA this
 * machine runs x {1,2,3} threads, and a plain reference of kve_evict's
 * content checks (kernels_cpu/check_rows.c) that every ISA's fused check
 * and eviction are held to. */
#ifndef KVE_CPU_TEST_H
#define KVE_CPU_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kve_test_util.h"

static const int kThreads[] = {1, 2, 3};
enum { N_THREADS = 3 };

/* Contexts for every available ISA x {1,2,3} threads; [0] is scalar, 1 thread. */
typedef struct {
    kve_context *ctx[3 * N_THREADS];
    char name[3 * N_THREADS][24];
    int n;
} isa_set;

static inline void isa_set_open(isa_set *s)
{
    memset(s, 0, sizeof *s);
    for (int isa = KVE_CPU_ISA_SCALAR; isa <= KVE_CPU_ISA_AVX512; isa++) {
        int avail = 0;
        KT_OK(kve_cpu_isa_available((kve_cpu_isa)isa, &avail));
        if (!avail)
            continue;
        for (int t = 0; t < N_THREADS; t++) {
            kve_context *c = NULL;
            KT_OK(kve_context_create(KVE_BACKEND_CPU, &c));
            KT_OK(kve_context_set_cpu_isa(c, (kve_cpu_isa)isa));
            KT_OK(kve_context_set_threads(c, kThreads[t]));
            kve_cpu_isa got;
            KT_OK(kve_context_get_cpu_isa(c, &got));
            ck_assert_int_eq(got, isa);
            snprintf(s->name[s->n], sizeof s->name[0], "%s/%dt", kve_cpu_isa_name(got), kThreads[t]);
            s->ctx[s->n++] = c;
        }
    }
    ck_assert_int_ge(s->n, N_THREADS);
}

static inline void isa_set_close(isa_set *s)
{
    for (int i = 0; i < s->n; i++)
        kve_context_destroy(s->ctx[i]);
}

/* The report kve_evict must give for a batch (kve_check_rows.h's rule): the
 * first bad head; in it, the first slot below -1; else, positions within
 * 64 x n_slots of each other, the first slot repeating an earlier one; else
 * the second slot of the smallest repeated position. 0 when valid. */
static inline kve_status kve_check_reference(const kve_batch *b, size_t heads, char *msg, size_t len)
{
    uint32_t n = b->n_slots;
    for (size_t i = 0; n && i < heads; i++) {
        const int32_t *row = b->slot_pos + i * b->slot_pos_stride;
        int32_t lo = INT32_MAX, hi = -1;
        for (uint32_t t = 0; t < n; t++) {
            if (row[t] < -1) {
                snprintf(msg, len, "batch.slot_pos[head %zu][slot %u] = %d:", i, t, row[t]);
                return KVE_ERR_RANGE;
            }
            if (row[t] >= 0) {
                lo = row[t] < lo ? row[t] : lo;
                hi = row[t] > hi ? row[t] : hi;
            }
        }
        if (b->flags & KVE_TRUSTED_SLOTS || hi < 0)
            continue;
        int dense = (uint64_t)(hi - lo) + 1 <= 64ull * n;
        int64_t best_value = -1;
        uint32_t best_slot = 0;
        for (uint32_t t = 0; t < n; t++) /* O(n^2): plain on purpose */
            for (uint32_t u = 0; u < t && row[t] >= 0; u++)
                if (row[u] == row[t]) {
                    if (dense) {
                        snprintf(msg, len, "batch.slot_pos[head %zu][slot %u] = %d:", i, t, row[t]);
                        return KVE_ERR_DUPLICATE;
                    }
                    if (best_value < 0 || row[t] < best_value) {
                        best_value = row[t];
                        best_slot = t;
                    }
                    break;
                }
        if (best_value >= 0) {
            uint32_t second = 0;
            for (uint32_t t = 0, seen = 0; t < n; t++)
                if (row[t] == best_value && seen++) {
                    second = t;
                    break;
                }
            (void)best_slot;
            snprintf(msg, len, "batch.slot_pos[head %zu][slot %u] = %d:", i, second, (int)best_value);
            return KVE_ERR_DUPLICATE;
        }
    }
    return KVE_OK;
}

/* A decode's start: @p heads tables of @p n slots, slot t holding position t. */
static inline int32_t *kt_decode_tables(size_t heads, uint32_t n)
{
    int32_t *slots = (int32_t *)malloc(heads * n * sizeof *slots);
    for (size_t i = 0; i < heads * n; i++)
        slots[i] = (int32_t)(i % n);
    return slots;
}

/* Slot reuse after a round: each head's freed slots, in slot order, take
 * the positions next, next + 1, ...; returns next + what head 0 evicted. */
static inline uint32_t kt_refill_freed(int32_t *slots, size_t heads, uint32_t n, const kt_out *o,
                                       uint32_t next)
{
    for (size_t h = 0; h < heads; h++)
        for (uint32_t e = 0; e < o->n_evicted[h]; e++)
            slots[h * n + kt_ev(o, h)[e]] = (int32_t)(next + e);
    return next + o->n_evicted[0];
}

/* Whether every output of @p a equals @p b's (rows up to their counts). */
static inline int kt_out_same(const kt_out *a, const kt_out *b)
{
    if (memcmp(a->n_evicted, b->n_evicted, a->heads * 4) || memcmp(a->n_kept, b->n_kept, a->heads * 4) ||
        memcmp(a->flags, b->flags, a->heads) || memcmp(a->digest, b->digest, a->heads * 8) ||
        memcmp(a->run, b->run, a->seqs * 8))
        return 0;
    for (size_t i = 0; i < a->heads; i++)
        if (memcmp(kt_ev(a, i), kt_ev(b, i), (size_t)a->n_evicted[i] * 4) ||
            memcmp(kt_kept(a, i), kt_kept(b, i), (size_t)a->n_kept[i] * 4))
            return 0;
    return 1;
}

/* kve_evict of @p b on each of @p n contexts (ISAs x thread counts) gives
 * the reference's status, a message starting as the reference's, and the
 * same whole message on every context; when it succeeds, every context's
 * outputs equal those of ctx[0] (the scalar reference kernel, one thread),
 * unless a KVE_TRUSTED_SLOTS table breaks its promise (then they may not). */
static inline void kve_check_contexts(kve_context *const *ctx, const char (*names)[24], int n,
                                      const kve_batch *b, const char *label)
{
    size_t heads = (size_t)b->n_seqs * b->n_layers * b->n_heads;
    char want[160], first[512];
    kve_status expect = kve_check_reference(b, heads, want, sizeof want);
    kve_batch strict = *b;
    strict.flags &= ~(uint32_t)KVE_TRUSTED_SLOTS;
    char unused[160];
    int comparable = expect == KVE_OK && kve_check_reference(&strict, heads, unused, sizeof unused) == KVE_OK;
    kt_out ref;
    memset(&ref, 0, sizeof ref);
    for (int k = 0; k < n; k++) {
        kt_out o;
        kve_status st = kt_evict(ctx[k], b, &o);
        const char *got = kve_last_error();
        ck_assert_msg(st == expect, "%s, %s: %s, expected %s (%s)", label, names[k],
                      kve_status_string(st), kve_status_string(expect), got);
        ck_assert_msg(st == KVE_OK || !strncmp(got, want, strlen(want)),
                      "%s, %s: message \"%s\", expected it to start \"%s\"", label, names[k], got,
                      want);
        if (k == 0)
            snprintf(first, sizeof first, "%s", got);
        ck_assert_msg(!strcmp(first, got), "%s: %s says \"%s\", %s \"%s\"", label, names[k], got,
                      names[0], first);
        if (comparable && k > 0)
            ck_assert_msg(kt_out_same(&ref, &o), "%s: %s's outputs differ from %s's", label, names[k],
                          names[0]);
        if (comparable && k == 0)
            ref = o;
        else
            kt_out_free(&o);
    }
    if (comparable && n > 0)
        kt_out_free(&ref);
}

#endif
