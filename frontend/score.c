/*
 * score.c — kve_score and kve_state_score: validate once (shape, key cache,
 * TriAttention inputs, rows, output overlaps, and on host-memory backends
 * every slot position, candidate key page and statistic), resolve the key
 * cache's strides, then call the backend's score op.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kve_check.h"
#include "kve_error.h"
#include "kve_state_impl.h"
#include "score_body.h"

static int kve_mul(size_t a, size_t b, size_t *out) { return __builtin_mul_overflow(a, b, out); }
static size_t kve_or(size_t a, size_t b) { return a ? a : b; }

static kve_status kve_check_keys(const kve_key_cache *k)
{
    KVE_RETURN_ERROR_IF(!k->base, KVE_ERR_NULL, "desc.keys.base is NULL");
    KVE_RETURN_ERROR_IF(k->dtype != KVE_DTYPE_F32 && k->dtype != KVE_DTYPE_F16 &&
                            k->dtype != KVE_DTYPE_BF16,
                        KVE_ERR_INVALID, "desc.keys.dtype = %d: must be KVE_DTYPE_F32, F16 or BF16",
                        (int)k->dtype);
    KVE_RETURN_ERROR_IF(k->head_dim < 2 || k->head_dim % 2 || k->head_dim > 2 * KVE_SCORE_MAX_FREQS,
                        KVE_ERR_RANGE, "desc.keys.head_dim = %u: must be even, 2..%d", k->head_dim,
                        2 * KVE_SCORE_MAX_FREQS);
    KVE_RETURN_ERROR_IF(k->n_heads == 0, KVE_ERR_RANGE, "desc.keys.n_heads = 0: must be >= 1");
    KVE_RETURN_ERROR_IF(k->layout != KVE_LAYOUT_NHD && k->layout != KVE_LAYOUT_HND, KVE_ERR_INVALID,
                        "desc.keys.layout = %d: not a kve_cache_layout value", (int)k->layout);
    KVE_TRY(kve_check_pages("desc.keys.pages", &k->pages));
    KVE_RETURN_ERROR_IF(k->pages.page_size > INT32_MAX, KVE_ERR_RANGE,
                        "desc.keys.pages.page_size = %u: must be <= 2^31-1", k->pages.page_size);
    return KVE_OK;
}

/* Dense strides for zeros, alignment, and no offset overflowing. */
static kve_status kve_resolve_keys(kve_key_cache *k)
{
    size_t es = kve_dtype_size(k->dtype), e = (size_t)k->head_dim * es, h = k->n_heads,
           ps = k->pages.page_size, big;
    int nhd = k->layout == KVE_LAYOUT_NHD;
    KVE_RETURN_ERROR_IF(kve_mul(ps, h, &big) || kve_mul(big, e, &big), KVE_ERR_OVERFLOW,
                        "desc.keys: page_size %u x n_heads %u x head_dim %u overflows",
                        k->pages.page_size, k->n_heads, k->head_dim);
    k->stride_head = kve_or(k->stride_head, nhd ? e : ps * e);
    k->stride_slot = kve_or(k->stride_slot, nhd ? h * e : e);
    k->stride_page = kve_or(k->stride_page, ps * h * e);
    size_t all = (size_t)(uintptr_t)k->base | k->stride_head | k->stride_slot | k->stride_page;
    KVE_RETURN_ERROR_IF(all % es, KVE_ERR_INVALID,
                        "desc.keys.base (%p) or its strides (%zu, %zu, %zu) are not a multiple of "
                        "%zu bytes, the size of an element",
                        k->base, k->stride_page, k->stride_slot, k->stride_head, es);
    size_t a;
    KVE_RETURN_ERROR_IF(kve_rows_span(h, k->stride_head, e, 1, &a) ||
                            kve_rows_span(ps, k->stride_slot, a, 1, &a) ||
                            kve_rows_span(k->pages.n_pages, k->stride_page, a, 1, &a) ||
                            (uintptr_t)k->base > UINTPTR_MAX - a,
                        KVE_ERR_OVERFLOW,
                        "desc.keys: strides (page %zu, slot %zu, head %zu) overflow the address "
                        "space over %u pages",
                        k->stride_page, k->stride_slot, k->stride_head, k->pages.n_pages);
    return KVE_OK;
}

static kve_status kve_check_tri(const kve_score_desc *d, int host)
{
    const kve_triattention_params *t = &d->tri;
    uint32_t nf = d->keys.head_dim / 2, hpt = d->heads_per_table ? d->heads_per_table : 1;
    KVE_RETURN_ERROR_IF(t->group == 0, KVE_ERR_RANGE, "desc.tri.group = 0: must be >= 1");
    KVE_RETURN_ERROR_IF(!t->q_mean, KVE_ERR_NULL, "desc.tri.q_mean is NULL");
    KVE_RETURN_ERROR_IF(!t->q_abs_mean, KVE_ERR_NULL, "desc.tri.q_abs_mean is NULL");
    KVE_RETURN_ERROR_IF((uint64_t)hpt * t->group * nf > KVE_SCORE_MAX_COEFS, KVE_ERR_RANGE,
                        "desc.tri.group = %u: a table's query heads (%u x %u) x head_dim/2 (%u) "
                        "exceed %u",
                        t->group, hpt, t->group, nf, KVE_SCORE_MAX_COEFS);
    KVE_RETURN_ERROR_IF(!t->omega && !(isfinite(t->rope_theta) && t->rope_theta > 1.0),
                        KVE_ERR_RANGE, "desc.tri.rope_theta = %g: must be finite and > 1 when "
                        "omega is NULL", t->rope_theta);
    KVE_RETURN_ERROR_IF(t->n_offsets > KVE_SCORE_MAX_OFFSETS, KVE_ERR_RANGE,
                        "desc.tri.n_offsets = %u: must be 0..%d", t->n_offsets,
                        KVE_SCORE_MAX_OFFSETS);
    KVE_RETURN_ERROR_IF(!t->offsets != !t->n_offsets, KVE_ERR_INVALID,
                        "desc.tri.offsets (%p) with n_offsets = %u: give both or neither",
                        (const void *)t->offsets, t->n_offsets);
    if (!host)
        return KVE_OK;
    size_t nq = (size_t)d->keys.n_heads * t->group;
    for (size_t i = 0; i < nq * nf * 2; i++)
        KVE_RETURN_ERROR_IF(!isfinite(t->q_mean[i]), KVE_ERR_INVALID,
                            "desc.tri.q_mean[%zu] = %g: must be finite", i, t->q_mean[i]);
    for (size_t i = 0; i < nq * nf; i++)
        KVE_RETURN_ERROR_IF(!isfinite(t->q_abs_mean[i]), KVE_ERR_INVALID,
                            "desc.tri.q_abs_mean[%zu] = %g: must be finite", i, t->q_abs_mean[i]);
    for (uint32_t f = 0; f < nf; f++) {
        KVE_RETURN_ERROR_IF(t->omega && !isfinite(t->omega[f]), KVE_ERR_INVALID,
                            "desc.tri.omega[%u] = %g: must be finite", f, t->omega[f]);
        KVE_RETURN_ERROR_IF(t->freq_scale_sq && !isfinite(t->freq_scale_sq[f]), KVE_ERR_INVALID,
                            "desc.tri.freq_scale_sq[%u] = %g: must be finite", f,
                            t->freq_scale_sq[f]);
    }
    for (uint32_t k = 0; k < t->n_offsets; k++)
        KVE_RETURN_ERROR_IF(!isfinite(t->offsets[k]), KVE_ERR_INVALID,
                            "desc.tri.offsets[%u] = %g: must be finite", k, t->offsets[k]);
    return KVE_OK;
}

typedef struct kve_span64 {
    uint64_t start, end;
    uint32_t row, table;
} kve_span64;

/* Whether span x sorts before y: by start, then in the order they were
 * listed (row, table), so that the first overlap named is always the same. */
static int kve_span_before(const kve_span64 *x, const kve_span64 *y)
{
    if (x->start != y->start)
        return x->start < y->start;
    return x->row != y->row ? x->row < y->row : x->table < y->table;
}

/* sp[i] sifted down a max-heap of n spans. */
static void kve_span_sift(kve_span64 *sp, size_t i, size_t n)
{
    for (size_t c; (c = 2 * i + 1) < n; i = c) {
        if (c + 1 < n && kve_span_before(&sp[c], &sp[c + 1]))
            c++;
        if (!kve_span_before(&sp[i], &sp[c]))
            return;
        kve_span64 t = sp[i];
        sp[i] = sp[c];
        sp[c] = t;
    }
}

/* Heapsort in place: qsort may allocate (glibc's merge sort does past 1 KiB),
 * and a scoring call allocates nothing. */
static void kve_span_sort(kve_span64 *sp, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        kve_span_sift(sp, i, n);
    for (size_t end = n; end-- > 1;) {
        kve_span64 t = sp[0];
        sp[0] = sp[end];
        sp[end] = t;
        kve_span_sift(sp, 0, end);
    }
}

kve_status kve_score_spans_reserve(kve_context *ctx, size_t n)
{
    if (n <= ctx->score_spans_room)
        return KVE_OK;
    KVE_RETURN_ERROR_IF(n > SIZE_MAX / sizeof(kve_span64), KVE_ERR_OVERFLOW,
                        "%zu output spans overflow size_t bytes", n);
    void *sp = realloc(ctx->score_spans, n * sizeof(kve_span64));
    KVE_RETURN_ERROR_IF(!sp, KVE_ERR_NOMEM, "kve_score: cannot allocate %zu output spans", n);
    ctx->score_spans = sp;
    ctx->score_spans_room = n;
    return KVE_OK;
}

/* Rows: sizes, strides, offsets that fit, and output rows that never meet
 * (sorted in the context's span list: a state's calls find it reserved). */
static kve_status kve_check_rows(kve_context *ctx, const kve_score_desc *d, uint32_t n_tables)
{
    KVE_RETURN_ERROR_IF(!d->rows, KVE_ERR_NULL, "desc.rows is NULL (n_rows = %u)", d->n_rows);
    KVE_RETURN_ERROR_IF(!d->slot_pos, KVE_ERR_NULL, "desc.slot_pos is NULL");
    KVE_RETURN_ERROR_IF(!d->scores, KVE_ERR_NULL, "desc.scores is NULL");
    size_t n = (size_t)d->n_rows * n_tables, used = 0;
    KVE_TRY(kve_score_spans_reserve(ctx, n));
    kve_span64 *sp = (kve_span64 *)ctx->score_spans;
    kve_status st = KVE_OK;
    for (uint32_t i = 0; i < d->n_rows && st == KVE_OK; i++) {
        const kve_score_row *r = &d->rows[i];
        size_t ts = kve_score_table_stride(d, r), ss = d->scores_stride_table, end, e2;
        if (r->n_slots > INT32_MAX)
            st = kve_error_set(KVE_ERR_RANGE, "desc.rows[%u].n_slots = %u: must be <= 2^31-1", i,
                               r->n_slots);
        else if (n_tables > 1 && ts < r->n_slots)
            st = kve_error_set(KVE_ERR_ALIAS,
                               "desc.rows[%u]: table stride %llu < n_slots %u: tables overlap", i,
                               (unsigned long long)ts, r->n_slots);
        else if (n_tables > 1 && ss < r->n_slots)
            st = kve_error_set(KVE_ERR_ALIAS,
                               "desc.scores_stride_table = %zu < desc.rows[%u].n_slots = %u: "
                               "output rows overlap",
                               d->scores_stride_table, i, r->n_slots);
        else if (d->keys.pages.kind != KVE_PAGES_FLAT &&
                 (r->cache_row < 0 || (uint32_t)r->cache_row >= d->keys.pages.n_rows))
            st = kve_error_set(KVE_ERR_RANGE,
                               "desc.rows[%u].cache_row = %d: must be 0..%u (keys.pages.n_rows - 1)", i,
                               r->cache_row, d->keys.pages.n_rows - 1);
        else if (d->keys.pages.kind == KVE_PAGES_FLAT && r->cache_row < 0)
            st = kve_error_set(KVE_ERR_RANGE, "desc.rows[%u].cache_row = %d: must be >= 0", i,
                               r->cache_row);
        else if (r->table_offset > SIZE_MAX / 2 || r->scores_offset > SIZE_MAX / 2 ||
                 kve_rows_span(n_tables, ts, r->table_offset + r->n_slots, 4, &end) ||
                 kve_rows_span(n_tables, ss, r->scores_offset + r->n_slots, 4, &e2))
            st = kve_error_set(KVE_ERR_OVERFLOW,
                               "desc.rows[%u]: table_offset %llu or scores_offset %llu with its "
                               "strides overflows",
                               i, (unsigned long long)r->table_offset,
                               (unsigned long long)r->scores_offset);
        for (uint32_t t = 0; st == KVE_OK && t < n_tables && r->n_slots; t++) {
            uint64_t s0 = r->scores_offset + (uint64_t)t * ss;
            sp[used++] = (kve_span64){s0, s0 + r->n_slots, i, t};
        }
    }
    if (st == KVE_OK) {
        kve_span_sort(sp, used);
        for (size_t k = 1; k < used && st == KVE_OK; k++)
            if (sp[k].start < sp[k - 1].end)
                st = kve_error_set(KVE_ERR_ALIAS,
                                   "desc.rows[%u] table %u and desc.rows[%u] table %u: output "
                                   "rows overlap (scores offsets %llu and %llu)",
                                   sp[k - 1].row, sp[k - 1].table, sp[k].row, sp[k].table,
                                   (unsigned long long)sp[k - 1].start,
                                   (unsigned long long)sp[k].start);
    }
    return st;
}

/* Whether every slot of row @p r has its key in the cache: the last slot
 * of each page it spans does (a page's slots share its lookup, and a row's
 * length in slots only cuts the last ones off). Heads do not matter. */
static int kve_row_all_keys(const kve_score_args *a, const kve_score_row *r)
{
    uint64_t ps = a->d.keys.pages.page_size;
    for (uint64_t end = ps; end - ps < r->n_slots; end += ps) {
        int why = 0;
        if (!kve_score_locate_key(a, r, (uint32_t)(end < r->n_slots ? end : r->n_slots) - 1, 0,
                                  &why))
            return 0;
    }
    return 1;
}

/* Host memory: positions >= -1, and every candidate's key in the cache
 * (checked slot by slot only in a row where some slot's key is not). */
static kve_status kve_check_contents(const kve_score_desc *d)
{
    kve_score_args a;
    kve_score_args_init(&a, d, NULL);
    for (uint32_t i = 0; i < d->n_rows; i++) {
        const kve_score_row *r = &d->rows[i];
        int all = kve_row_all_keys(&a, r);
        for (uint32_t t = 0; t < a.n_tables; t++) {
            const int32_t *tab = d->slot_pos + r->table_offset + t * kve_score_table_stride(d, r);
            int32_t low = 0;
            for (uint32_t s = 0; s < r->n_slots; s++)
                low = tab[s] < low ? tab[s] : low;
            for (uint32_t s = 0; low < -1 && s < r->n_slots; s++)
                KVE_RETURN_ERROR_IF(tab[s] < -1, KVE_ERR_RANGE,
                                    "desc.slot_pos[row %u][table %u][slot %u] = %d: must be >= "
                                    "-1",
                                    i, t, s, tab[s]);
            if (all)
                continue;
            uint32_t x = kve_score_bound_seq(tab, r);
            for (uint32_t s = 0; s < r->n_slots; s++) {
                int why = 0;
                if (kve_score_candidate(tab[s], r->prompt_len, x))
                    KVE_RETURN_ERROR_IF(!kve_score_locate_key(&a, r, s, t * a.hpt, &why), KVE_ERR_RANGE,
                                        "desc.rows[%u] (cache_row %d), slot %u: %s of desc.keys "
                                        "(page_size %u, n_pages %u, its page table)",
                                        i, r->cache_row, s,
                                        why == KVE_DEV_ERR_CW_PAGE ? "its page is not a page"
                                                                   : "not a slot of its row",
                                        d->keys.pages.page_size, d->keys.pages.n_pages);
            }
        }
    }
    return KVE_OK;
}

static kve_status kve_score_validate(kve_context *ctx, const kve_score_desc *desc, kve_score_desc *out)
{
    KVE_CHECK_CTX(ctx);
    KVE_RETURN_ERROR_IF(!desc, KVE_ERR_NULL, "desc is NULL");
    const kve_score_desc *d = desc;
    KVE_RETURN_ERROR_IF(d->scorer != KVE_SCORER_KNORM && d->scorer != KVE_SCORER_TRIATTENTION,
                        KVE_ERR_INVALID, "desc.scorer = %d: not a kve_scorer value",
                        (int)d->scorer);
    KVE_RETURN_ERROR_IF(d->flags & ~(uint32_t)(KVE_SCORE_ZNORM | KVE_SCORE_ACCUMULATE),
                        KVE_ERR_INVALID,
                        "desc.flags = 0x%x: only KVE_SCORE_ZNORM and KVE_SCORE_ACCUMULATE",
                        d->flags);
    KVE_RETURN_ERROR_IF(!isfinite(d->weight), KVE_ERR_INVALID,
                        "desc.weight = %g: must be finite", (double)d->weight);
    KVE_TRY(kve_check_keys(&d->keys));
    uint32_t hpt = d->heads_per_table ? d->heads_per_table : 1;
    KVE_RETURN_ERROR_IF(d->keys.n_heads % hpt, KVE_ERR_RANGE,
                        "desc.heads_per_table = %u: must divide keys.n_heads = %u",
                        d->heads_per_table, d->keys.n_heads);
    uint64_t nq = (uint64_t)hpt * (d->scorer == KVE_SCORER_TRIATTENTION ? d->tri.group : 1);
    KVE_RETURN_ERROR_IF(nq > KVE_SCORE_MAX_QHEADS, KVE_ERR_RANGE,
                        "desc.heads_per_table = %u x tri.group = %u: a table's %llu query heads "
                        "exceed %u",
                        hpt, d->scorer == KVE_SCORER_TRIATTENTION ? d->tri.group : 1,
                        (unsigned long long)nq, KVE_SCORE_MAX_QHEADS);
    if (d->scorer == KVE_SCORER_TRIATTENTION)
        KVE_TRY(kve_check_tri(d, ctx->ops->host_memory));
    *out = *d;
    KVE_TRY(kve_resolve_keys(&out->keys));
    if (d->n_rows == 0)
        return KVE_OK;
    KVE_TRY(kve_check_rows(ctx, out, d->keys.n_heads / hpt));
    if (ctx->ops->host_memory)
        KVE_TRY(kve_check_contents(out));
    return KVE_OK;
}

kve_status kve_score(kve_context *ctx, const kve_score_desc *desc)
{
    kve_score_desc r;
    KVE_TRY(kve_score_validate(ctx, desc, &r));
    KVE_RETURN_ERROR_IF(!ctx->ops->score, KVE_ERR_UNAVAILABLE,
                        "kve_score: the %s backend does not implement it yet", ctx->ops->name);
    if (r.n_rows == 0)
        return KVE_OK;
    kve_score_call c = {.d = r}; /* given rows, the backend's own scratch */
    return ctx->ops->score(ctx, &c);
}

/* The scores' rows of a state call: tables x scores_stride_table elements
 * (*@p need) fit, and when @p strided (more than one call row)
 * scores_stride_row holds them. */
static kve_status kve_state_scores_rows(const kve_state *s, int strided, size_t stride_row,
                                        size_t stride_table, size_t *need)
{
    KVE_RETURN_ERROR_IF(kve_rows_span(s->tables, stride_table, stride_table, 1, need),
                        KVE_ERR_OVERFLOW,
                        "scores_stride_table = %zu: the state's %zu tables of it overflow",
                        stride_table, s->tables);
    KVE_RETURN_ERROR_IF(strided && stride_row < *need, KVE_ERR_RANGE,
                        "scores_stride_row = %zu: must be >= tables (%zu) x scores_stride_table "
                        "(%zu)",
                        stride_row, s->tables, stride_table);
    return KVE_OK;
}

/* Row rows[i]'s scoring row for the call, or 0 when no round runs for it;
 * KVE_ERR_INVALID when the call would break the scored state's rules. */
static kve_status kve_state_score_row(const kve_state *s, uint32_t i, uint32_t row, uint32_t n_new,
                                      uint32_t table_layer, const kve_score_desc *desc,
                                      size_t stride_row, size_t stride_table, kve_score_row *out,
                                      int *due)
{
    const kve_state_row *r = &s->rows[row];
    uint32_t rounds = kve_state_rounds_for(s, r->capacity, r->n_valid, n_new);
    uint32_t before = r->capacity - r->n_valid, w = s->d.schedule.window;
    *due = rounds > 0;
    if (!rounds)
        return KVE_OK;
    KVE_RETURN_ERROR_IF(rounds > 1 || before > w, KVE_ERR_INVALID,
                        "rows[%u] = %u with n_new[%u] = %u: a scored state's row runs at most one "
                        "round a call and receives at most window = %u tokens before it (this "
                        "call: %u rounds, %u tokens before the first)",
                        i, row, i, n_new, w, rounds, before);
    KVE_RETURN_ERROR_IF(stride_table < r->capacity, KVE_ERR_RANGE,
                        "scores_stride_table = %zu: row %u's tables hold %u slots", stride_table,
                        row, r->capacity);
    (void)kve_state_score_row_of(r, n_new, w, s->d.schedule.interval, s->tables, s->table_heads,
                                 table_layer, (uint64_t)i * stride_row, stride_table,
                                 desc->cache_rows ? desc->cache_rows[i] : (int32_t)i, out);
    return KVE_OK;
}

/* The checks both state entry points make, in one wording. */
static kve_status kve_state_score_args(const kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                       const uint32_t *n_new, uint32_t table_layer,
                                       const kve_score_desc *desc, const float *scores)
{
    KVE_RETURN_ERROR_IF(n_rows > s->d.max_seqs, KVE_ERR_RANGE,
                        "n_rows = %u: more than max_seqs = %u", n_rows, s->d.max_seqs);
    KVE_RETURN_ERROR_IF(n_rows && !rows, KVE_ERR_NULL, "rows is NULL (n_rows = %u)", n_rows);
    KVE_RETURN_ERROR_IF(n_rows && !n_new, KVE_ERR_NULL, "n_new is NULL (n_rows = %u)", n_rows);
    KVE_RETURN_ERROR_IF(!scores, KVE_ERR_NULL, "scores is NULL");
    KVE_RETURN_ERROR_IF(table_layer >= s->table_layers, KVE_ERR_RANGE,
                        "table_layer = %u: the state has %u table layers", table_layer,
                        s->table_layers);
    KVE_RETURN_ERROR_IF(desc->keys.n_heads != s->d.n_heads, KVE_ERR_RANGE,
                        "desc.keys.n_heads = %u: the state has %u KV heads", desc->keys.n_heads,
                        s->d.n_heads);
    return KVE_OK;
}

/* The desc of a state call over the state's tables, checked as kve_score
 * checks it (with @p n given rows at @p given, their contents on host
 * memory) into *@p v; with @p fixed (kve_state_score_device, which may be
 * captured) its query-head group must fit the state's scoring scratch. */
static kve_status kve_state_score_desc(const kve_state *s, const kve_score_desc *desc,
                                       const kve_score_row *given, uint32_t n, float *scores,
                                       size_t scores_stride_table, int fixed, kve_score_desc *v)
{
    kve_score_desc d = *desc;
    d.heads_per_table = s->table_heads == 1 ? s->d.n_heads : 1;
    d.n_rows = n;
    d.rows = given;
    d.slot_pos = s->slot_pos;
    d.slot_pos_stride_table = 0;
    d.scores = scores;
    d.scores_stride_table = scores_stride_table;
    d.cache_rows = NULL;
    KVE_TRY(kve_score_validate(s->ctx, &d, v));
    uint32_t group = v->scorer == KVE_SCORER_TRIATTENTION ? v->tri.group : 1;
    KVE_RETURN_ERROR_IF(fixed && group > s->score_group, KVE_ERR_RANGE,
                        "%u query heads per KV head (%s), but the state was created with "
                        "desc.score_group = %u: its scoring scratch is sized then, so no scoring "
                        "call allocates (create it with desc.score_group >= %u)",
                        group, v->scorer == KVE_SCORER_TRIATTENTION ? "desc.tri.group" : "one",
                        s->d.score_group, group);
    KVE_RETURN_ERROR_IF(!s->ctx->ops->score, KVE_ERR_UNAVAILABLE,
                        "the %s backend does not implement the scorers", s->ctx->ops->name);
    return KVE_OK;
}

/* The one scoring step of both state entry points: call @p c through the
 * op score with the state's scratch (sized at creation for score_group:
 * nothing is allocated). A group past it (only kve_state_score takes one)
 * is scored in the backend's own scratch, as kve_score is. */
static kve_status kve_state_score_run(kve_state *s, kve_score_call *c)
{
    if (c->d.n_rows == 0)
        return KVE_OK;
    uint32_t group = c->d.scorer == KVE_SCORER_TRIATTENTION ? c->d.tri.group : 1;
    c->max_slots = s->d.max_slots;
    if (s->score_scratch && group <= s->score_group) {
        c->scratch = s->score_scratch;
        c->scratch_bytes = s->score_raw_bytes;
        c->arrived = (uint32_t *)((unsigned char *)s->score_scratch + s->score_raw_bytes);
    }
    return s->ctx->ops->score(s->ctx, c);
}

kve_status kve_state_score(kve_state *state, uint32_t n_rows, const uint32_t *rows,
                           const uint32_t *n_new, uint32_t table_layer, const kve_score_desc *desc,
                           float *scores, size_t scores_stride_row, size_t scores_stride_table)
{
    kve_state *s = state;
    KVE_CHECK_STATE(s);
    KVE_RETURN_ERROR_IF(!desc, KVE_ERR_NULL, "desc is NULL");
    KVE_TRY(kve_state_mirror(s));
    if (n_rows == 0)
        return KVE_OK;
    KVE_TRY(kve_state_score_args(s, n_rows, rows, n_new, table_layer, desc, scores));
    size_t need = 0;
    KVE_TRY(kve_state_scores_rows(s, 1, scores_stride_row, scores_stride_table, &need));
    kve_score_row *sr = s->score_rows;
    uint8_t *seen = s->score_seen;
    memset(seen, 0, s->d.max_seqs);
    kve_status st = KVE_OK;
    uint32_t n = 0;
    for (uint32_t i = 0; st == KVE_OK && i < n_rows; i++) {
        int due = 0;
        if (rows[i] >= s->d.max_seqs || !s->rows[rows[i]].active)
            st = kve_error_set(KVE_ERR_INVALID, "rows[%u] = %u: not an active row (max_seqs %u)", i,
                               rows[i], s->d.max_seqs);
        else if (seen[rows[i]])
            st = kve_error_set(KVE_ERR_INVALID, "rows[%u] = %u: listed twice", i, rows[i]);
        else {
            seen[rows[i]] = 1;
            st = kve_state_score_row(s, i, rows[i], n_new[i], table_layer, desc,
                                     scores_stride_row, scores_stride_table, &sr[n], &due);
            n += due;
        }
    }
    if (st != KVE_OK)
        return st;
    kve_score_call c = {.max_slots = 0};
    KVE_TRY(kve_state_score_desc(s, desc, sr, n, scores, scores_stride_table, 0, &c.d));
    return kve_state_score_run(s, &c);
}

kve_status kve_state_score_device(kve_state *state, uint32_t n_rows, const uint32_t *rows,
                                  const uint32_t *n_new, uint32_t table_layer,
                                  const kve_score_desc *desc, float *scores,
                                  size_t scores_stride_row, size_t scores_stride_table)
{
    kve_state *s = state;
    KVE_CHECK_STATE(s);
    KVE_RETURN_ERROR_IF(!desc, KVE_ERR_NULL, "desc is NULL");
    KVE_TRY(kve_state_score_args(s, n_rows, rows, n_new, table_layer, desc, scores));
    KVE_RETURN_ERROR_IF(desc->cache_rows, KVE_ERR_INVALID,
                        "desc.cache_rows is not NULL: kve_state_score_device reads call row i's "
                        "keys from row i of the key cache's page table");
    KVE_RETURN_ERROR_IF(desc->keys.pages.kind != KVE_PAGES_FLAT && desc->keys.pages.n_rows < n_rows,
                        KVE_ERR_RANGE,
                        "desc.keys.pages.n_rows = %u: call row i reads row i of the page table, and "
                        "the call has n_rows = %u",
                        desc->keys.pages.n_rows, n_rows);
    KVE_RETURN_ERROR_IF(scores_stride_table < s->d.max_slots, KVE_ERR_RANGE,
                        "scores_stride_table = %zu: below max_slots = %u (any row may be due: "
                        "which is known on the device only)",
                        scores_stride_table, s->d.max_slots);
    size_t need = 0, span;
    KVE_TRY(kve_state_scores_rows(s, n_rows > 1, scores_stride_row, scores_stride_table, &need));
    KVE_RETURN_ERROR_IF(n_rows && kve_rows_span(n_rows, scores_stride_row, need, sizeof(float),
                                                &span),
                        KVE_ERR_OVERFLOW,
                        "scores_stride_row = %zu: the scores of %u call rows overflow size_t "
                        "bytes",
                        scores_stride_row, n_rows);
    kve_score_call c = {.max_slots = 0};
    KVE_TRY(kve_state_score_desc(s, desc, NULL, 0, scores, scores_stride_table, 1, &c.d));
    if (n_rows == 0)
        return KVE_OK;
    kve_score_list l = {rows,          n_new,       s->dev_rows,          s->tables,
                        s->d.max_seqs, s->d.schedule.window, s->d.schedule.interval,
                        table_layer,   scores_stride_row};
    if (!s->ctx->ops->host_memory) {
        c.d.n_rows = n_rows; /* listed: found on the device */
        c.list = l;
        return kve_state_score_run(s, &c);
    }
    /* Host memory: the list read where it lies, its rows checked as given. */
    uint32_t n = 0;
    for (uint32_t i = 0; i < n_rows; i++)
        n += (uint32_t)kve_score_list_row(&l, i, s->table_heads, scores_stride_table,
                                          &s->score_rows[n]);
    KVE_TRY(
        kve_state_score_desc(s, desc, s->score_rows, n, scores, scores_stride_table, 1, &c.d));
    return kve_state_score_run(s, &c);
}
