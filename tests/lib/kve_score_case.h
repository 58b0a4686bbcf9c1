/*
 * kve_score_case.h — random kve_score problems (keys in every layout, page
 * table and element type, head_dim 2 .. 256 with 128 among them, slot
 * tables with empty slots, TriAttention's inputs), shared by the scorers'
 * emulator test (tests/emu/test_emu_score.c), device test
 * (tests/gpu/test_gpu_score.c) and CPU kernels' test
 * (tests/cpu/test_score_kernels.c).
 * Header-only; one translation unit per program includes it.
 */
#ifndef KVE_SCORE_CASE_H
#define KVE_SCORE_CASE_H

#include <stdlib.h>
#include <string.h>

#include "kvevict.h"

typedef struct kve_score_case {
    kve_score_desc d;
    kve_score_row rows[6];
    unsigned char *keys;
    int32_t *tabs, *pages, *indptr, *last;
    float *q_mean, *q_abs, *omega, *s2, *offsets, *scores;
    size_t n_scores;
} kve_score_case;

static inline uint64_t kve_sc_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static inline uint32_t kve_sc_below(uint64_t *x, uint32_t n) { return n ? (uint32_t)(kve_sc_next(x) % n) : 0; }

static inline float kve_sc_unit(uint64_t *x) { return (float)(kve_sc_next(x) % 2001) / 1000.0f - 1.0f; }

/* A key element of @p t from a float (f16/bf16 rounded by truncation: any
 * finite value of the type will do). */
static inline void kve_sc_store(unsigned char *p, kve_dtype t, float v)
{
    uint32_t b;
    memcpy(&b, &v, 4);
    if (t == KVE_DTYPE_F32)
        memcpy(p, &v, 4);
    else if (t == KVE_DTYPE_BF16) {
        uint16_t h = (uint16_t)(b >> 16);
        memcpy(p, &h, 2);
    } else { /* f16 of a value in [-2, 2]: sign, exponent, 10 mantissa bits */
        uint32_t s = b >> 31, e = (b >> 23) & 255, m = (b >> 13) & 1023;
        uint16_t h = (uint16_t)(s << 15);
        if (e >= 127 - 14)
            h |= (uint16_t)(((e - 127 + 15) << 10) | m);
        memcpy(p, &h, 2);
    }
}

/* Positions 0..n_tok-1 spread over a table of @p n slots, some empty. */
static inline void kve_sc_table(uint64_t *x, int32_t *tab, uint32_t n, uint32_t n_tok)
{
    for (uint32_t s = 0; s < n; s++)
        tab[s] = -1;
    for (uint32_t p = 0; p < n_tok; p++) {
        if (kve_sc_below(x, 4) == 0 && p + 4 < n_tok)
            continue; /* evicted earlier */
        uint32_t s = kve_sc_below(x, n);
        for (uint32_t k = 0; k < n && tab[s] >= 0; k++)
            s = (s + 1) % n;
        if (tab[s] < 0)
            tab[s] = (int32_t)p;
    }
}

static inline void kve_score_case_free(kve_score_case *c)
{
    free(c->keys);
    free(c->tabs);
    free(c->pages);
    free(c->indptr);
    free(c->last);
    free(c->q_mean);
    free(c->q_abs);
    free(c->omega);
    free(c->s2);
    free(c->offsets);
    free(c->scores);
    memset(c, 0, sizeof *c);
}

/* Fills the case's key cache with the rows' keys at their slots' pages. */
static inline void kve_sc_keys(kve_score_case *c, uint64_t *x, uint32_t max_slots)
{
    kve_key_cache *k = &c->d.keys;
    size_t es = k->dtype == KVE_DTYPE_F32 ? 4 : 2, e = k->head_dim * es;
    size_t ps = k->pages.page_size, h = k->n_heads, bytes = (size_t)k->pages.n_pages * ps * h * e;
    c->keys = (unsigned char *)malloc(bytes);
    for (size_t i = 0; i < bytes / es; i++)
        kve_sc_store(c->keys + i * es, k->dtype, 2.0f * kve_sc_unit(x));
    k->base = c->keys;
    int nhd = k->layout == KVE_LAYOUT_NHD;
    k->stride_head = nhd ? e : ps * e;
    k->stride_slot = nhd ? h * e : e;
    k->stride_page = ps * h * e;
    uint32_t blocks = (max_slots + k->pages.page_size - 1) / k->pages.page_size;
    blocks = blocks ? blocks : 1;
    uint32_t n = c->d.n_rows;
    if (k->pages.kind == KVE_PAGES_BLOCK_TABLE) {
        c->pages = (int32_t *)malloc((size_t)n * blocks * 4);
        for (size_t i = 0; i < (size_t)n * blocks; i++)
            c->pages[i] = (int32_t)((i * 7 + 3) % k->pages.n_pages);
        k->pages.block_table = c->pages;
        k->pages.blocks_per_row = blocks;
        k->pages.n_rows = n;
    } else if (k->pages.kind == KVE_PAGES_INDPTR) {
        c->pages = (int32_t *)malloc((size_t)n * blocks * 4);
        c->indptr = (int32_t *)malloc((n + 1) * 4);
        c->last = (int32_t *)malloc(n * 4);
        for (size_t i = 0; i < (size_t)n * blocks; i++)
            c->pages[i] = (int32_t)((i * 5 + 1) % k->pages.n_pages);
        for (uint32_t r = 0; r <= n; r++)
            c->indptr[r] = (int32_t)(r * blocks);
        for (uint32_t r = 0; r < n; r++)
            c->last[r] = (int32_t)k->pages.page_size;
        k->pages.indices = c->pages;
        k->pages.indptr = c->indptr;
        k->pages.last_page_len = c->last;
        k->pages.n_rows = n;
    } else if (k->pages.kind == KVE_PAGES_NONE) {
        k->pages.n_rows = n;
    }
}

/* TriAttention's parameters (K-norm ignores them): query statistics,
 * RoPE base, and, a third of the time each, omega, frequency scales and
 * offsets. */
static inline void kve_sc_tri_params(kve_score_case *c, uint64_t *x)
{
    kve_score_desc *d = &c->d;
    const kve_key_cache *k = &d->keys;
    uint32_t group = 1 + kve_sc_below(x, 8), nf = k->head_dim / 2; /* 4 and 8: the CPU's 4-head kernels */
    uint32_t hpt = d->heads_per_table ? d->heads_per_table : 1, most = 3072 / (hpt * nf);
    group = group < most ? group : most; /* a table's query heads x nf: at most 3072 */
    size_t nq = (size_t)k->n_heads * group;
    kve_triattention_params *t = &d->tri;
    t->group = group;
    c->q_mean = (float *)malloc(nq * nf * 2 * 4);
    c->q_abs = (float *)malloc(nq * nf * 4);
    for (size_t i = 0; i < nq * nf; i++) {
        c->q_mean[2 * i] = kve_sc_unit(x);
        c->q_mean[2 * i + 1] = kve_sc_unit(x);
        c->q_abs[i] = 1.5f + kve_sc_unit(x);
    }
    t->q_mean = c->q_mean;
    t->q_abs_mean = c->q_abs;
    t->rope_theta = kve_sc_below(x, 2) ? 10000.0 : 1e6;
    if (kve_sc_below(x, 3) == 0) {
        c->omega = (float *)malloc(nf * 4);
        for (uint32_t f = 0; f < nf; f++)
            c->omega[f] = 0.5f + kve_sc_unit(x) * 0.49f;
        t->omega = c->omega;
    }
    if (kve_sc_below(x, 3) == 0) {
        c->s2 = (float *)malloc(nf * 4);
        for (uint32_t f = 0; f < nf; f++)
            c->s2[f] = 1.0f + 0.5f * kve_sc_unit(x);
        t->freq_scale_sq = c->s2;
    }
    if (kve_sc_below(x, 3) == 0) {
        t->n_offsets = 1 + kve_sc_below(x, 8);
        c->offsets = (float *)malloc(t->n_offsets * 4);
        for (uint32_t i = 0; i < t->n_offsets; i++)
            c->offsets[i] = (float)(1u << kve_sc_below(x, 12));
        t->offsets = c->offsets;
    }
}

/* A random case: @p tri picks the scorer; every pointer is host memory. */
static inline void kve_score_case_make(kve_score_case *c, uint64_t seed, int tri)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    memset(c, 0, sizeof *c);
    kve_score_desc *d = &c->d;
    static const uint32_t dims[] = {2, 8, 16, 32, 64, 128, 256};
    static const kve_dtype types[] = {KVE_DTYPE_F32, KVE_DTYPE_F16, KVE_DTYPE_BF16};
    d->scorer = tri ? KVE_SCORER_TRIATTENTION : KVE_SCORER_KNORM;
    d->flags = kve_sc_below(&x, 4);
    d->weight = kve_sc_below(&x, 2) ? 0.0f : 0.25f + kve_sc_unit(&x);
    kve_key_cache *k = &d->keys;
    k->dtype = types[kve_sc_below(&x, 3)];
    k->head_dim = dims[kve_sc_below(&x, 7)];
    k->n_heads = 1 + kve_sc_below(&x, 4);
    k->layout = kve_sc_below(&x, 2) ? KVE_LAYOUT_NHD : KVE_LAYOUT_HND;
    k->pages.kind = (kve_page_kind)kve_sc_below(&x, 4);
    d->heads_per_table = kve_sc_below(&x, 3) == 0 ? k->n_heads : kve_sc_below(&x, 2);
    uint32_t hpt = d->heads_per_table ? d->heads_per_table : 1, tables = k->n_heads / hpt;
    d->n_rows = 1 + kve_sc_below(&x, 5);
    uint32_t max_slots = 0, n_slot[6];
    for (uint32_t r = 0; r < d->n_rows; r++) {
        n_slot[r] = kve_sc_below(&x, 8) == 0 ? 0 : 1 + kve_sc_below(&x, 180);
        max_slots = n_slot[r] > max_slots ? n_slot[r] : max_slots;
    }
    k->pages.page_size = k->pages.kind == KVE_PAGES_NONE ? (max_slots ? max_slots : 1)
                                                   : 1 + kve_sc_below(&x, 24);
    uint32_t blocks = (max_slots + k->pages.page_size - 1) / k->pages.page_size;
    k->pages.n_pages = k->pages.kind == KVE_PAGES_NONE ? d->n_rows
                 : k->pages.kind == KVE_PAGES_FLAT ? d->n_rows * (blocks ? blocks : 1)
                                                   : 3 + kve_sc_below(&x, 40);
    size_t stride = max_slots + kve_sc_below(&x, 5), per_row = stride * tables;
    c->tabs = (int32_t *)malloc((per_row * d->n_rows + 1) * 4);
    c->n_scores = per_row * d->n_rows + 1;
    c->scores = (float *)malloc(c->n_scores * 4);
    for (size_t i = 0; i < c->n_scores; i++)
        c->scores[i] = kve_sc_unit(&x);
    for (uint32_t r = 0; r < d->n_rows; r++) {
        kve_score_row *row = &c->rows[r];
        uint32_t n_tok = n_slot[r] + kve_sc_below(&x, n_slot[r] + 1);
        row->table_offset = row->scores_offset = r * per_row;
        row->n_slots = n_slot[r];
        row->prompt_len = kve_sc_below(&x, n_tok / 2 + 1);
        row->window = kve_sc_below(&x, 3) ? kve_sc_below(&x, 20) : 0;
        row->round_start = n_tok + kve_sc_below(&x, 3) * 1000003u;
        row->cache_row = k->pages.kind == KVE_PAGES_FLAT ? (int32_t)(r * (blocks ? blocks : 1))
                                                         : (int32_t)r;
        for (uint32_t t = 0; t < tables; t++)
            kve_sc_table(&x, c->tabs + r * per_row + t * stride, n_slot[r], n_tok);
    }
    d->rows = c->rows;
    d->slot_pos = c->tabs;
    d->slot_pos_stride_table = stride;
    d->scores = c->scores;
    d->scores_stride_table = stride;
    kve_sc_keys(c, &x, max_slots);
    kve_sc_tri_params(c, &x);
}

#endif
