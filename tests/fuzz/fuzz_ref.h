/*
 * fuzz_ref.h — a plain reference of docs/SPEC.md §2 (keys, through
 * libxxhash and the finisher), §3 (one head's eviction) and §12 (scored
 * selection: float comparison, not the library's key), written from the text and
 * sharing no code with the library: the harnesses hold every KVE_OK
 * against it.
 */
#ifndef KVE_FUZZ_REF_H
#define KVE_FUZZ_REF_H

#include <stdint.h>
#include <stdlib.h>
#include <xxhash.h>

#include "kve_test_base.h"
#include "kvevict.h"

static inline uint64_t ref_key(uint64_t seed, uint32_t flags, uint64_t seq_id, uint32_t layer,
                               uint32_t head, uint32_t pos, uint32_t round)
{
    uint8_t id[8], msg[16];
    for (int i = 0; i < 8; i++)
        id[i] = (uint8_t)(seq_id >> (8 * i));
    uint64_t seq_seed = XXH3_64bits_withSeed(id, 8, seed);
    uint32_t f[4] = {flags & KVE_SHARED_LAYERS ? 0xFFFFFFFFu : layer,
                     flags & KVE_SHARED_HEADS ? 0xFFFFFFFFu : head, pos,
                     flags & KVE_PERSISTENT ? 0xFFFFFFFFu : round};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 4; i++)
            msg[4 * k + i] = (uint8_t)(f[k] >> (8 * i));
    uint64_t m = XXH3_64bits_withSeed(msg, 16, seq_seed) * 0x9E3779B1u; /* v2's finisher */
    return m ^ (m >> 32);
}

/* The coordinates one head draws with. */
typedef struct {
    uint64_t seed, seq_id;
    uint32_t flags, layer, head, round;
    uint32_t prompt, window, budget;
    const float *scores; /* §12: the head's scores; NULL: keys */
} ref_head;

typedef struct {
    uint64_t key;
    int32_t pos;
    uint32_t slot;
    float score;
} ref_cand;

static int ref_cand_cmp(const void *a, const void *b)
{
    const ref_cand *x = (const ref_cand *)a, *y = (const ref_cand *)b;
    if (x->score != y->score) /* all 0 with keys; -0.0 == +0.0 */
        return x->score > y->score ? -1 : 1;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static int ref_pos_desc(const void *a, const void *b)
{
    const ref_cand *x = (const ref_cand *)a, *y = (const ref_cand *)b;
    return (x->pos < y->pos) - (x->pos > y->pos);
}

/*
 * SPEC §3 on a valid table row[0..n) (entries -1 or distinct >= 0). Writes
 * evict[slot] = 1 for each evicted slot (evict has n entries, zeroed
 * here) and returns the over-budget status; *n_evicted, *n_kept as counts.
 * Scored (h->scores): -1, nothing evicted, when a candidate's score is NaN.
 */
static inline int ref_evict_head(const ref_head *h, const int32_t *row, uint32_t n, uint8_t *evict,
                                 uint32_t *n_evicted, uint32_t *n_kept)
{
    uint32_t valid = 0, prefix = 0, n_gen = 0;
    for (uint32_t t = 0; t < n; t++) {
        evict[t] = 0;
        if (row[t] >= 0) {
            valid++;
            if ((uint32_t)row[t] < h->prompt)
                prefix++;
        }
    }
    *n_evicted = 0;
    *n_kept = valid;
    if (valid <= h->budget)
        return 0; /* step 1 */
    ref_cand *gen = (ref_cand *)malloc((valid - prefix + 1) * sizeof *gen);
    if (!gen)
        abort();
    for (uint32_t t = 0; t < n; t++)
        if (row[t] >= 0 && (uint32_t)row[t] >= h->prompt)
            gen[n_gen++] = (ref_cand){0, row[t], t, 0.0f};
    /* Window: the W largest generated positions; candidates follow them. */
    qsort(gen, n_gen, sizeof *gen, ref_pos_desc);
    uint32_t win = h->window < n_gen ? h->window : n_gen;
    ref_cand *cand = gen + win;
    uint32_t n_cand = n_gen - win;
    int64_t keep = (int64_t)h->budget - prefix - win;
    if (keep < 0)
        keep = 0;
    if (keep > n_cand)
        keep = n_cand;
    for (uint32_t i = 0; i < n_cand; i++) {
        if (h->scores) {
            cand[i].score = h->scores[cand[i].slot];
            if (cand[i].score != cand[i].score) {
                free(gen);
                return -1;
            }
            continue;
        }
        cand[i].key = ref_key(h->seed, h->flags, h->seq_id, h->layer, h->head,
                              (uint32_t)cand[i].pos, h->round);
    }
    qsort(cand, n_cand, sizeof *cand, ref_cand_cmp);
    for (uint32_t i = (uint32_t)keep; i < n_cand; i++)
        evict[cand[i].slot] = 1;
    *n_evicted = n_cand - (uint32_t)keep;
    *n_kept = valid - *n_evicted;
    free(gen);
    return prefix + win > h->budget;
}

/* 0 when row[0..n) is a valid table, else 1 (an entry < -1) or 2 (a
 * repeated position), the first found scanning positions in order. */
static inline int ref_table_problem(const int32_t *row, uint32_t n)
{
    for (uint32_t t = 0; t < n; t++)
        if (row[t] < -1)
            return 1;
    int32_t *s = (int32_t *)malloc((n + 1) * sizeof *s);
    if (!s)
        abort();
    uint32_t m = 0;
    for (uint32_t t = 0; t < n; t++)
        if (row[t] >= 0)
            s[m++] = row[t];
    qsort(s, m, sizeof *s, kve_test_cmp_i32);
    int dup = 0;
    for (uint32_t i = 1; i < m; i++)
        dup |= s[i] == s[i - 1];
    free(s);
    return dup ? 2 : 0;
}

#endif
