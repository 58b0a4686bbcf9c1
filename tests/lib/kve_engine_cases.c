/* kve_engine_cases.c — random kve_cache_write problems. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kve_engine_cases.h"

#define CW_ROWS 4
#define CW_HEADS 8
#define CW_LEN 64 /* slots a row may hold: 4 blocks of 16 */

/* Buffers after the caches: slots, token_row, then pages (block table or
 * indices), indptr, last_page_len, and the fp8 scales [cache][CW_HEADS]. */
enum { CW_SLOTS, CW_TOKEN_ROW, CW_PAGES, CW_INDPTR, CW_LAST, CW_SCALES };

static size_t kve_cw_buf(const kve_cache_write_desc *d, int which)
{
    return 2 * (size_t)d->n_caches + (size_t)which;
}

/* A random base offset: mostly aligned, sometimes not. */
static size_t kve_cw_offset(uint64_t *rng)
{
    static const size_t offsets[] = {0, 0, 0, 16, 8, 4, 2, 1};
    return offsets[kve_rand_below(rng, 8)];
}

/* Padding of a stride, in multiples of @p align (a typed cache's element). */
static size_t kve_cw_pad_of(uint64_t *rng, size_t align)
{
    return align * (kve_chance(rng, 50) ? 16 * kve_rand_below(rng, 3) : kve_rand_below(rng, 5));
}
#define kve_cw_pad(rng) kve_cw_pad_of(rng, a)

/* Page tables: fills pages/indptr/last and each row's length. */
typedef struct {
    int32_t pages[CW_ROWS * 4 + 4], indptr[CW_ROWS + 1], last[CW_ROWS];
    uint32_t n_pt, len[CW_ROWS];
} kve_cw_pages;

static void kve_cw_page_table(uint64_t *rng, kve_cache_write_desc *d, kve_cw_pages *p)
{
    uint32_t ps = d->pages.page_size, R = d->pages.n_rows;
    uint32_t perm[CW_ROWS * 4 + 4];
    memset(p, 0, sizeof *p);
    if (d->pages.kind == KVE_PAGES_NONE) {
        d->pages.n_pages = R + kve_rand_below(rng, 3);
        for (uint32_t r = 0; r < R; r++)
            p->len[r] = ps;
        return;
    }
    if (d->pages.kind == KVE_PAGES_BLOCK_TABLE) {
        d->pages.blocks_per_row = 1 + kve_rand_below(rng, 4);
        p->n_pt = R * d->pages.blocks_per_row;
    } else {
        for (uint32_t r = 0; r < R; r++) {
            uint32_t k = kve_rand_below(rng, 4);
            p->indptr[r + 1] = p->indptr[r] + (int32_t)k;
            p->last[r] = k ? 1 + (int32_t)kve_rand_below(rng, ps) : (int32_t)kve_rand_below(rng, 3);
            p->len[r] = k ? (k - 1) * ps + (uint32_t)p->last[r] : 0;
        }
        p->n_pt = (uint32_t)p->indptr[R];
    }
    d->pages.n_pages = p->n_pt + kve_rand_below(rng, 3) + (p->n_pt == 0);
    kve_rand_perm(rng, perm, d->pages.n_pages); /* distinct pages: no two rows share one */
    memcpy(p->pages, perm, p->n_pt * sizeof *perm);
    for (uint32_t r = 0; r < R && d->pages.kind == KVE_PAGES_BLOCK_TABLE; r++) {
        /* some rows use fewer blocks; the rest of their table is padding */
        uint32_t used =
            kve_chance(rng, 30) ? kve_rand_below(rng, d->pages.blocks_per_row + 1) : d->pages.blocks_per_row;
        for (uint32_t b = used; b < d->pages.blocks_per_row; b++)
            p->pages[r * d->pages.blocks_per_row + b] = -1;
        p->len[r] = used * ps;
    }
}

/* Slots: each (row, head) takes distinct slots below its row's length;
 * shared heads (stride 0) take one per (row); some -1. */
static void kve_cw_slots(uint64_t *rng, const kve_cache_write_desc *d, const kve_cw_pages *p,
                         int64_t *slots, int32_t *token_row)
{
    uint32_t heads = d->slots_stride_head ? d->n_heads : 1;
    static uint32_t perm[CW_ROWS][CW_HEADS][CW_LEN];
    uint32_t used[CW_ROWS][CW_HEADS];
    memset(used, 0, sizeof used);
    for (uint32_t r = 0; r < d->pages.n_rows; r++)
        for (uint32_t h = 0; h < heads; h++)
            kve_rand_perm(rng, perm[r][h], p->len[r]);
    for (uint32_t t = 0; t < d->n_tokens; t++) {
        uint32_t r = kve_rand_below(rng, d->pages.n_rows);
        token_row[t] = (int32_t)r;
        for (uint32_t h = 0; h < heads; h++) {
            uint32_t i = used[r][h]++;
            int64_t s = i < p->len[r] ? (int64_t)perm[r][h][i] : -1;
            slots[t * d->slots_stride_token + h * d->slots_stride_head] =
                kve_chance(rng, 10) ? -1 : s;
        }
    }
}

/* Source strides of entries of @p e bytes: dense (0), padded token-major,
 * or head-major; the span. */
static size_t kve_cw_src_span(uint64_t *rng, const kve_cache_write_desc *d, size_t e, size_t a,
                              size_t *stride_token, size_t *stride_head)
{
    size_t T = d->n_tokens, H = d->n_heads;
    uint32_t mode = kve_rand_below(rng, 3);
    *stride_head = mode == 1 ? e + kve_cw_pad(rng) : 0;
    *stride_token = mode == 1 ? H * *stride_head + kve_cw_pad(rng) : 0;
    if (mode == 2) {
        *stride_token = e + kve_cw_pad(rng);
        *stride_head = T * *stride_token + kve_cw_pad(rng);
    }
    size_t st = mode ? *stride_token : H * e, sh = mode ? *stride_head : e;
    return (T - 1) * st + (H - 1) * sh + e;
}

/* A destination cache's strides. */
typedef struct kve_cw_dst_strides {
    size_t page, slot, head, elem; /* elem 0: dense entries */
} kve_cw_dst_strides;

/* Destination strides of entries of @p e bytes: dense (0) or padded, in
 * the layout's order; with @p pair, pages of two caches side by side
 * (FlashInfer's [pages][2][...]): the page stride doubled, *half = the
 * second cache's offset. The span. */
static size_t kve_cw_dst_span(uint64_t *rng, const kve_cache_write_desc *d, size_t e, size_t a,
                              int pair, int elems, kve_cw_dst_strides *st, size_t *half)
{
    size_t H = d->n_heads, ps = d->pages.page_size;
    int nhd = d->layout == KVE_LAYOUT_NHD;
    st->elem = 0;
    if (!pair && kve_chance(rng, 50)) {
        st->page = st->slot = st->head = 0;
        return d->pages.n_pages * ps * H * e;
    }
    if (elems && e / a > 1 && kve_chance(rng, 30)) {
        /* vLLM's CPU K: a (page, head) block of [elements][page_size] */
        st->slot = a;
        st->elem = ps * a + (kve_chance(rng, 50) ? 0 : a * kve_rand_below(rng, 3));
        st->head = (e / a - 1) * st->elem + ps * a + kve_cw_pad(rng);
        st->page = H * st->head + kve_cw_pad(rng);
        *half = st->page;
        return (d->pages.n_pages - 1) * st->page + (H - 1) * st->head + st->head;
    }
    if (nhd) {
        st->head = e + kve_cw_pad(rng);
        st->slot = H * st->head + kve_cw_pad(rng);
        st->page = ps * st->slot + kve_cw_pad(rng);
    } else {
        st->slot = e + kve_cw_pad(rng);
        st->head = ps * st->slot + kve_cw_pad(rng);
        st->page = H * st->head + kve_cw_pad(rng);
    }
    *half = st->page;
    if (pair)
        st->page *= 2;
    return (d->pages.n_pages - 1) * st->page + (ps - 1) * st->slot + (H - 1) * st->head + e +
           (pair ? *half : 0);
}

/* Element types of a typed case's cache: a source, a cache, converted or
 * not, and its scale (0 none, 1 per tensor, 2 per head; fp8 caches). */
static const struct {
    kve_dtype st, dt;
    uint32_t convert, scale;
} kve_cw_types[] = {
    {KVE_DTYPE_F16, KVE_DTYPE_F16, 0, 0},       {KVE_DTYPE_F32, KVE_DTYPE_F16, 1, 0},
    {KVE_DTYPE_F32, KVE_DTYPE_BF16, 1, 0},      {KVE_DTYPE_F16, KVE_DTYPE_BF16, 1, 0},
    {KVE_DTYPE_BF16, KVE_DTYPE_FP8_E4M3, 1, 1}, {KVE_DTYPE_F16, KVE_DTYPE_FP8_E5M2, 1, 2},
    {KVE_DTYPE_F32, KVE_DTYPE_FP8_E4M3, 1, 0},  {KVE_DTYPE_FP8_E5M2, KVE_DTYPE_F32, 1, 0},
    {KVE_DTYPE_BF16, KVE_DTYPE_F16, 1, 0},      {KVE_DTYPE_FP8_E4M3, KVE_DTYPE_BF16, 1, 0},
    {KVE_DTYPE_F32, KVE_DTYPE_F32, 1, 0},       {KVE_DTYPE_BF16, KVE_DTYPE_FP8_E4M3, 1, 2},
};

static uint32_t kve_cw_size(kve_dtype t)
{
    return t == KVE_DTYPE_F32 ? 4 : (t == KVE_DTYPE_F16 || t == KVE_DTYPE_BF16) ? 2 : 1;
}

/* Give cache @p k a typed part: types, its own dim; the scales' buffer. */
static void kve_cw_typed_part(uint64_t *rng, kve_cache_write_desc *d, uint32_t k)
{
    static const uint32_t dims[] = {1, 2, 3, 4, 5, 8, 16, 33, 64, 128};
    uint32_t i = kve_rand_below(rng, sizeof kve_cw_types / sizeof *kve_cw_types);
    kve_cache_part *p = &d->part[k];
    p->src_dtype = kve_cw_types[i].st;
    p->dst_dtype = kve_cw_types[i].dt;
    p->convert = kve_cw_types[i].convert;
    p->dim = dims[kve_rand_below(rng, sizeof dims / sizeof *dims)];
    p->scale = kve_cw_types[i].scale ? (const float *)(uintptr_t)1 : NULL; /* bound later */
    p->scale_per_head = kve_cw_types[i].scale == 2;
}

/* Flat slots (vLLM's slot_mapping): each row's slot through its block
 * table to page * page_size + offset. */
static void kve_cw_flatten(kve_cache_write_desc *d, const kve_cw_pages *p, int64_t *slots,
                           const int32_t *token_row)
{
    uint32_t heads = d->slots_stride_head ? d->n_heads : 1;
    for (uint32_t t = 0; t < d->n_tokens; t++)
        for (uint32_t h = 0; h < heads; h++) {
            int64_t *s = &slots[t * d->slots_stride_token + h * d->slots_stride_head];
            if (*s >= 0)
                *s = (int64_t)p->pages[(size_t)token_row[t] * d->pages.blocks_per_row +
                                       (size_t)(*s / d->pages.page_size)] *
                         d->pages.page_size +
                     *s % d->pages.page_size;
        }
    d->pages.kind = KVE_PAGES_FLAT;
}

/* vLLM's padding: a token with no slot may carry any row. */
static void kve_cw_pad_rows(uint64_t *rng, const kve_cache_write_desc *d, const int64_t *slots,
                            int32_t *token_row)
{
    uint32_t heads = d->slots_stride_head ? d->n_heads : 1;
    for (uint32_t t = 0; t < d->n_tokens; t++) {
        int any = 0;
        for (uint32_t h = 0; h < heads; h++)
            any |= slots[t * d->slots_stride_token + h * d->slots_stride_head] != -1;
        if (!any && kve_chance(rng, 60))
            token_row[t] = kve_chance(rng, 50) ? -1 - (int32_t)kve_rand_below(rng, 1000)
                                               : (int32_t)(d->pages.n_rows + kve_rand_below(rng, 9));
    }
}

/* Break one thing the host checks: a row, a slot, a page id, indptr or
 * last_page_len (never so that a read leaves its array). */
static void kve_cw_break(uint64_t *rng, const kve_cache_write_desc *d, const kve_cw_pages *p,
                         kve_case *c)
{
    int32_t *token_row = (int32_t *)c->master[kve_cw_buf(d, CW_TOKEN_ROW)];
    int64_t *slots = (int64_t *)c->master[kve_cw_buf(d, CW_SLOTS)];
    int32_t *pages = (int32_t *)c->master[kve_cw_buf(d, CW_PAGES)];
    uint32_t t = kve_rand_below(rng, d->n_tokens), R = d->pages.n_rows, what = kve_rand_below(rng, 4);
    if (what == 0) {
        token_row[t] = kve_chance(rng, 50) ? -1 - (int32_t)kve_rand_below(rng, 3)
                                           : (int32_t)(R + kve_rand_below(rng, 3));
    } else if (what == 1 || d->pages.kind == KVE_PAGES_NONE) {
        static const int64_t low[] = {-2, -3, -17, -1000, INT64_MIN / 2};
        uint32_t h = d->slots_stride_head ? kve_rand_below(rng, d->n_heads) : 0;
        int64_t *s = &slots[t * d->slots_stride_token + h * d->slots_stride_head];
        int64_t len = d->pages.kind == KVE_PAGES_FLAT ? (int64_t)d->pages.n_pages * d->pages.page_size
                                                      : (int64_t)p->len[token_row[t]];
        *s = kve_chance(rng, 50) ? low[kve_rand_below(rng, 5)] : len + kve_rand_below(rng, 3);
    } else if (what == 2 && p->n_pt) {
        pages[kve_rand_below(rng, p->n_pt)] = kve_chance(rng, 50)
                                                  ? -1 - (int32_t)kve_rand_below(rng, 3)
                                                  : (int32_t)(d->pages.n_pages + kve_rand_below(rng, 3));
    } else if (d->pages.kind == KVE_PAGES_INDPTR) {
        int32_t *indptr = (int32_t *)c->master[kve_cw_buf(d, CW_INDPTR)];
        int32_t *last = (int32_t *)c->master[kve_cw_buf(d, CW_LAST)];
        uint32_t r = kve_rand_below(rng, R);
        if (kve_chance(rng, 50))
            last[r] = kve_chance(rng, 50) ? 0 : (int32_t)(d->pages.page_size + 1);
        else
            indptr[r + 1] = indptr[r] - 1; /* descending; every read stays in indices */
    }
}

/* The call's shape: tokens, heads, entry, caches, layout, page table
 * (*flat: block-table slots to translate), rows and slot strides: [token]
 * [head] padded, [head][token], or one per token (shared heads). Returns
 * the slots array's length. */
static size_t kve_cw_shape(kve_cache_write_desc *d, uint64_t *rng, const kve_cw_limits *lim,
                           kve_cw_pages *p, int *flat)
{
    static const size_t entry_sizes[] = {1, 2, 3, 4, 6, 8, 12, 16, 32, 48, 64, 130, 256};
    uint32_t max_heads = lim->max_heads < CW_HEADS ? lim->max_heads : CW_HEADS;
    d->n_tokens = 1 + kve_rand_below(rng, lim->max_tokens);
    d->n_heads = 1 + kve_rand_below(rng, max_heads);
    d->entry_bytes = entry_sizes[kve_rand_below(rng, sizeof entry_sizes / sizeof *entry_sizes)];
    d->n_caches = 1 + kve_rand_below(rng, 3);
    d->layout = kve_chance(rng, 50) ? KVE_LAYOUT_NHD : KVE_LAYOUT_HND;
    /* flat slots are made as block-table ones, then translated */
    *flat = kve_chance(rng, 20);
    d->pages.kind = *flat ? KVE_PAGES_BLOCK_TABLE : (kve_page_kind)kve_rand_below(rng, 3);
    d->pages.page_size = kve_chance(rng, 20) ? 16 : 1 + kve_rand_below(rng, 6);
    d->pages.n_rows = 1 + kve_rand_below(rng, CW_ROWS);
    kve_cw_page_table(rng, d, p);
    int shared = kve_chance(rng, 25), by_head = !shared && kve_chance(rng, 20);
    d->slots_stride_head = shared ? 0 : by_head ? d->n_tokens + kve_rand_below(rng, 3) : 1;
    d->slots_stride_token = by_head ? 1 : (shared ? 1 : d->n_heads) + kve_rand_below(rng, 3);
    return (d->n_tokens - 1) * d->slots_stride_token +
           (shared ? 0 : d->n_heads - 1) * d->slots_stride_head + 1;
}

/* How the caches are laid out: typed (each cache its own types, dim and
 * strides), pair (caches 0 and 1 in one tensor [pages][2][...]: the same
 * strides, so the same types); the spans of the sources, then of the
 * destinations, and where cache 1 starts in cache 0's tensor. */
typedef struct kve_cw_layout {
    int typed, pair;
    size_t span[2 * KVE_MAX_CACHES];
    size_t pair_offset;
} kve_cw_layout;

/* Cache @p k's destination strides (and span), written where the desc
 * takes them: desc-wide for an untyped cache 0, else its part. */
static void kve_cw_dst_part(uint64_t *rng, kve_cache_write_desc *d, kve_cw_layout *l, uint32_t k,
                            size_t de, size_t a, int wide)
{
    kve_cw_dst_strides st;
    size_t half = 0;
    kve_cache_part *q = &d->part[k];
    /* strided elements in a part of their own (not desc-wide, not a pair) */
    int elems = l->typed && !l->pair;
    l->span[d->n_caches + k] = kve_cw_dst_span(rng, d, de, a, l->pair && k == 0, elems, &st, &half);
    if (!l->typed && !l->pair && k > 0 && !st.page) { /* dense, spelled out */
        int nhd = d->layout == KVE_LAYOUT_NHD;
        st.head = nhd ? de : d->pages.page_size * de;
        st.slot = nhd ? d->n_heads * de : de;
        st.page = d->pages.page_size * d->n_heads * de;
    }
    if (wide && !l->pair)
        d->dst_stride_page = st.page, d->dst_stride_slot = st.slot, d->dst_stride_head = st.head;
    else
        q->dst_stride_page = st.page, q->dst_stride_slot = st.slot, q->dst_stride_head = st.head;
    q->dst_stride_elem = st.elem;
    if (k == 0)
        l->pair_offset = half;
}

/* Every cache's types and strides, and the spans they give. */
static void kve_cw_caches(uint64_t *rng, kve_cache_write_desc *d, kve_cw_layout *l)
{
    for (uint32_t k = 0; k < d->n_caches; k++) {
        kve_cache_part *q = &d->part[k];
        if (l->typed)
            kve_cw_typed_part(rng, d, k);
        if (l->pair && k == 1)
            *q = d->part[0]; /* one tensor: one type, one set of strides */
        if (!l->typed && !l->pair && k > 0 && kve_chance(rng, 50)) {
            l->span[k] = l->span[0]; /* a zeroed part: cache 0's (desc-wide) strides */
            l->span[d->n_caches + k] = l->span[d->n_caches];
            continue;
        }
        size_t se = l->typed ? q->dim * kve_cw_size(q->src_dtype) : d->entry_bytes;
        size_t de = l->typed ? q->dim * kve_cw_size(q->dst_dtype) : d->entry_bytes;
        size_t a = l->typed ? kve_cw_size(q->src_dtype) : 1;
        int wide = !l->typed && k == 0; /* untyped cache 0: the desc-wide strides */
        size_t *sst = wide ? &d->src_stride_token : &q->src_stride_token,
               *ssh = wide ? &d->src_stride_head : &q->src_stride_head;
        l->span[k] = kve_cw_src_span(rng, d, se, a, sst, ssh);
        if (!l->typed && !wide && !*sst) /* dense, spelled out: 0 would take cache 0's */
            *ssh = se, *sst = d->n_heads * se;
        if (l->pair && k == 1) {
            l->span[d->n_caches + k] = 0; /* inside cache 0's buffer */
            continue;
        }
        kve_cw_dst_part(rng, d, l, k, de, l->typed ? kve_cw_size(q->dst_dtype) : 1, wide);
    }
}

/* The caches' buffers (sources random, at random aligned offsets), then
 * slots, token_row, pages, indptr, last_page_len and scales; the desc's
 * cache pointers are the offsets until bound. 0, or -1. */
static int kve_cw_buffers(kve_case *c, uint64_t *rng, const kve_cw_layout *l,
                          const kve_cw_pages *p, size_t n_slots)
{
    kve_cache_write_desc *d = &c->cw;
    size_t src_off[KVE_MAX_CACHES], dst_off[KVE_MAX_CACHES];
    for (uint32_t k = 0; k < 2 * d->n_caches; k++) {
        size_t al = 1;
        if (l->typed) {
            const kve_cache_part *q = &d->part[k % d->n_caches];
            al = kve_cw_size(k < d->n_caches ? q->src_dtype : q->dst_dtype);
        }
        size_t off = (kve_cw_offset(rng) + al - 1) / al * al;
        *(k < d->n_caches ? &src_off[k] : &dst_off[k - d->n_caches]) = off;
        if (kve_case_add(c, l->span[k] ? off + l->span[k] : 0))
            return -1;
        for (size_t i = 0; i < c->bytes[k] && k < d->n_caches; i++)
            c->master[k][i] = (unsigned char)kve_splitmix64(rng);
    }
    if (l->pair)
        dst_off[1] = dst_off[0] + l->pair_offset;
    for (uint32_t k = 0; k < d->n_caches; k++) {
        d->src[k] = (const void *)(uintptr_t)src_off[k];
        d->dst[k] = (void *)(uintptr_t)dst_off[k];
    }
    if (kve_case_add(c, n_slots * 8) || kve_case_add(c, d->n_tokens * 4) ||
        kve_case_add(c, (p->n_pt + 1) * 4) || kve_case_add(c, (d->pages.n_rows + 1) * 4) ||
        kve_case_add(c, d->pages.n_rows * 4) || kve_case_add(c, d->n_caches * CW_HEADS * 4))
        return -1;
    float *scales = (float *)c->master[kve_cw_buf(d, CW_SCALES)];
    for (uint32_t i = 0; i < d->n_caches * CW_HEADS; i++) /* 2^-8 .. 2^7, odd mantissas */
        scales[i] =
            (float)(1 + 2 * kve_rand_below(rng, 64)) / (float)(1u << kve_rand_below(rng, 15));
    return 0;
}

/* The case's parameters, for failure messages. */
static void kve_cw_label(kve_case *c)
{
    static const char *const tables[] = {"none", "block_table", "indptr", "flat"};
    const kve_cache_write_desc *d = &c->cw;
    int at = snprintf(c->label, sizeof c->label,
                      "cache_write: %u tokens x %u heads, entry %zu, %u caches%s, %s, pages %s "
                      "(size %u, %u rows, %u pages), slots strides %zu/%zu, src strides %zu/%zu, "
                      "dst strides %zu/%zu/%zu",
                      d->n_tokens, d->n_heads, d->entry_bytes, d->n_caches,
                      c->cw_pair ? " (0 and 1 in one tensor)" : "",
                      d->layout == KVE_LAYOUT_NHD ? "NHD" : "HND", tables[d->pages.kind],
                      d->pages.page_size, d->pages.n_rows, d->pages.n_pages, d->slots_stride_token,
                      d->slots_stride_head, d->src_stride_token, d->src_stride_head,
                      d->dst_stride_page, d->dst_stride_slot, d->dst_stride_head);
    for (uint32_t k = 0; k < d->n_caches && at > 0 && (size_t)at < sizeof c->label; k++) {
        const kve_cache_part *q = &d->part[k];
        at += snprintf(c->label + at, sizeof c->label - (size_t)at,
                       "; part %u: types %d->%d%s dim %u scale %s, strides %zu/%zu %zu/%zu/%zu/%zu",
                       k,
                       q->src_dtype, q->dst_dtype, q->convert ? " converted" : "", q->dim,
                       q->scale ? (q->scale_per_head ? "per head" : "per tensor") : "none",
                       q->src_stride_token, q->src_stride_head, q->dst_stride_page,
                       q->dst_stride_slot, q->dst_stride_head, q->dst_stride_elem);
    }
}

int kve_case_cache_write(kve_case *c, uint64_t *rng, const kve_cw_limits *lim)
{
    memset(c, 0, sizeof *c);
    c->is_cache_write = 1;
    kve_cache_write_desc *d = &c->cw;
    kve_cw_pages p;
    int flat;
    size_t n_slots = kve_cw_shape(d, rng, lim, &p, &flat);
    kve_cw_layout l;
    memset(&l, 0, sizeof l);
    l.typed = kve_chance(rng, 40);
    l.pair = d->n_caches >= 2 && kve_chance(rng, 20);
    kve_cw_caches(rng, d, &l);
    if (kve_cw_buffers(c, rng, &l, &p, n_slots))
        return -1;
    c->cw_pair = l.pair;
    int64_t *slots = (int64_t *)c->master[kve_cw_buf(d, CW_SLOTS)];
    int32_t *token_row = (int32_t *)c->master[kve_cw_buf(d, CW_TOKEN_ROW)];
    memset(slots, 0xff, n_slots * 8);
    kve_cw_slots(rng, d, &p, slots, token_row);
    if (flat)
        kve_cw_flatten(d, &p, slots, token_row);
    memcpy(c->master[kve_cw_buf(d, CW_PAGES)], p.pages, p.n_pt * 4);
    memcpy(c->master[kve_cw_buf(d, CW_INDPTR)], p.indptr, (d->pages.n_rows + 1) * 4);
    memcpy(c->master[kve_cw_buf(d, CW_LAST)], p.last, d->pages.n_rows * 4);
    uint32_t breaks = lim->errors ? 1 + kve_rand_below(rng, 2) : 0;
    for (uint32_t i = 0; i < breaks; i++)
        kve_cw_break(rng, d, &p, c);
    kve_cw_pad_rows(rng, d, slots, token_row);
    kve_cw_label(c);
    return 0;
}

void kve_case_bind_cache_write(const kve_case *c, const kve_case_bufs *bufs,
                               kve_cache_write_desc *d)
{
    *d = c->cw;
    for (uint32_t k = 0; k < d->n_caches; k++) {
        d->src[k] = bufs->p[k] + (uintptr_t)c->cw.src[k];
        d->dst[k] = bufs->p[d->n_caches + (c->cw_pair && k == 1 ? 0 : k)] + (uintptr_t)c->cw.dst[k];
        if (d->part[k].scale)
            d->part[k].scale = (const float *)bufs->p[kve_cw_buf(d, CW_SCALES)] + k * CW_HEADS;
    }
    d->slots = (const int64_t *)bufs->p[kve_cw_buf(d, CW_SLOTS)];
    d->token_row = d->pages.kind == KVE_PAGES_FLAT
                       ? NULL
                       : (const int32_t *)bufs->p[kve_cw_buf(d, CW_TOKEN_ROW)];
    const int32_t *pages = (const int32_t *)bufs->p[kve_cw_buf(d, CW_PAGES)];
    if (d->pages.kind == KVE_PAGES_BLOCK_TABLE)
        d->pages.block_table = pages;
    if (d->pages.kind == KVE_PAGES_INDPTR) {
        d->pages.indices = pages;
        d->pages.indptr = (const int32_t *)bufs->p[kve_cw_buf(d, CW_INDPTR)];
        d->pages.last_page_len = (const int32_t *)bufs->p[kve_cw_buf(d, CW_LAST)];
    }
}

long long kve_message_token(const char *msg)
{
    const char *p = strstr(msg, "[token ");
    if (p)
        return strtoll(p + 7, NULL, 10);
    p = strstr(msg, "token_row[");
    return p ? strtoll(p + 10, NULL, 10) : -1;
}

/* kve_cache_write on the CPU, over fresh host copies, of tokens [0, n)
 * when @p n > 0; else of token @p t alone, with the slots of its heads in
 * [h0, h1) and -1 for the others (its row is checked when a slot is kept). */
static kve_status kve_cw_probe(kve_context *cpu, const kve_case *c, uint32_t n, uint32_t t,
                               uint32_t h0, uint32_t h1)
{
    kve_case_bufs bufs;
    if (kve_case_host_copy(c, &bufs))
        return KVE_ERR_NOMEM;
    kve_cache_write_desc d;
    kve_case_bind_cache_write(c, &bufs, &d);
    int64_t one[CW_HEADS];
    if (n) {
        d.n_tokens = n;
    } else {
        for (uint32_t k = 0; k < d.n_caches; k++) {
            const kve_cache_part *q = &d.part[k];
            size_t st = q->src_stride_token  ? q->src_stride_token
                        : d.src_stride_token ? d.src_stride_token
                                             : d.n_heads * (q->dim ? q->dim * kve_cw_size(
                                                                                 q->src_dtype)
                                                                   : d.entry_bytes);
            d.src[k] = (const unsigned char *)d.src[k] + t * st;
        }
        for (uint32_t h = 0; h < CW_HEADS; h++)
            one[h] = h >= h0 && h < h1 && h < d.n_heads
                         ? d.slots[t * d.slots_stride_token + h * d.slots_stride_head]
                         : -1;
        if (d.token_row)
            d.token_row += t;
        d.slots = one;
        d.n_tokens = 1;
        d.slots_stride_token = CW_HEADS;
        d.slots_stride_head = d.slots_stride_head ? 1 : 0;
    }
    kve_status st = kve_cache_write(cpu, &d);
    kve_case_host_free(c, &bufs);
    return st;
}

int kve_cw_check_blame(kve_context *cpu, const kve_case *c, const char *msg, char *why,
                       size_t why_bytes)
{
    long long t = kve_message_token(msg);
    const char *h_at = strstr(msg, "[head ");
    long long h = h_at ? strtoll(h_at + 6, NULL, 10) : -1;
    const kve_cache_write_desc *d = &c->cw;
    if (t < 0 || t >= d->n_tokens || h >= (long long)d->n_heads ||
        (h > 0 && !d->slots_stride_head)) {
        snprintf(why, why_bytes, "\"%s\": names no entry of the call", msg);
        return 1;
    }
    uint32_t tt = (uint32_t)t, hh = h < 0 ? 0 : (uint32_t)h;
    /* A decreasing indptr is one check of the whole call on the host, before
     * any token; the device, which cannot read indptr from the host, meets
     * it as some token's slot beyond its row's length. */
    if (d->pages.kind == KVE_PAGES_INDPTR) {
        const int32_t *ip = (const int32_t *)c->master[kve_cw_buf(d, CW_INDPTR)];
        for (uint32_t r = 0; r < d->pages.n_rows; r++)
            if (ip[r + 1] < ip[r])
                return 0;
    }
    if (t > 0 && kve_cw_probe(cpu, c, tt, 0, 0, 0) != KVE_OK) {
        snprintf(why, why_bytes, "\"%s\": the CPU rejects an earlier token (%s)", msg,
                 kve_last_error());
        return 1;
    }
    /* a row error needs a slot (padding reads no row): all of the token's */
    if (kve_cw_probe(cpu, c, 0, tt, h < 0 ? 0 : hh, h < 0 ? CW_HEADS : hh + 1) == KVE_OK) {
        snprintf(why, why_bytes, "\"%s\": the CPU accepts that entry", msg);
        return 1;
    }
    if (hh > 0 && kve_cw_probe(cpu, c, 0, tt, 0, hh) != KVE_OK) {
        snprintf(why, why_bytes, "\"%s\": the CPU rejects an earlier head of the token (%s)", msg,
                 kve_last_error());
        return 1;
    }
    return 0;
}
