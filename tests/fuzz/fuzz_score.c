/*
 * fuzz_score — kve_score over every layout, page table and key type, with
 * out-of-range rows, slots, pages, strides and TriAttention inputs, in
 * exact-size buffers; the same call again over a re-strided copy of its keys
 * (with omega, freq_scale_sq, cache_rows and TriAttention statistics varied
 * sometimes); kve_state_score on a small KVE_SCORED state driven by appends;
 * and kve_triattention_stats_load on the input's tail written to a file, or
 * on a calibration file written from decoded sizes and values, well formed
 * or damaged. An error must come with a message and leave the scores as
 * they were; a call the harness can tell valid from include/kvevict.h must
 * be accepted; a KVE_OK must leave every non-candidate slot (SPEC §3,
 * recomputed here) at 0, or untouched when accumulating, every element
 * outside the output rows untouched, and give each candidate a finite score
 * equal, within docs/SCORERS.md's tolerances, to a float64 reference of the
 * formula (K-norm; TriAttention without ZNORM).
 *
 * This file decodes the kve_score calls and drives the harness; the model
 * and checks, the kve_state_score part and the calibration files are in
 * fuzz_score_model.c, fuzz_score_state.c and fuzz_score_stats.c.
 */
#include <math.h>

#include "fuzz_score.h"

/* Every buffer of the kve_score calls, freed together by fz_free. */
typedef struct {
    void *keys;
    int32_t *tabs, *pages, *indptr, *last;
    float *q_mean, *q_abs, *offsets, *scores, *before;
    float *omega, *fsq, *first; /* the second call's omega and s_f^2; the first call's scores */
    void *keys2;                /* the second call's re-strided keys */
    kve_score_row rows[4];
} fz_score_bufs;

static void fz_free(fz_score_bufs *f)
{
    free(f->keys);
    free(f->tabs);
    free(f->pages);
    free(f->indptr);
    free(f->last);
    free(f->q_mean);
    free(f->q_abs);
    free(f->offsets);
    free(f->scores);
    free(f->before);
    free(f->omega);
    free(f->fsq);
    free(f->first);
    free(f->keys2);
}

/* The key cache and its page table; 0 when a size is absurd. */
static int fz_keys(fz_bytes *in, kve_score_desc *d, fz_score_bufs *f, uint64_t *mix)
{
    kve_key_cache *k = &d->keys;
    uint8_t sel = fz_u8(in);
    static const kve_dtype types[] = {KVE_DTYPE_F32, KVE_DTYPE_F16, KVE_DTYPE_BF16};
    k->dtype = sel < 250 ? types[sel % 3] : (kve_dtype)(sel & 7);
    k->head_dim = fz_u8(in) < 248 ? 2 * (1 + fz_below(in, 8)) : fz_count(in, 600);
    k->n_heads = fz_u8(in) < 250 ? 1 + fz_below(in, 3) : 0;
    k->layout = (kve_cache_layout)(fz_u8(in) < 252 ? fz_below(in, 2) : 2);
    k->pages.kind = (kve_page_kind)(fz_u8(in) < 252 ? fz_below(in, 4) : 4);
    k->pages.page_size = fz_u8(in) < 250 ? 1 + fz_below(in, 12) : 0;
    k->pages.n_pages = fz_u8(in) < 250 ? 1 + fz_below(in, 8) : 0;
    k->pages.n_rows = fz_u8(in) < 250 ? 1 + fz_below(in, 4) : 0;
    size_t es = k->dtype == KVE_DTYPE_F32 ? 4 : 2;
    size_t e = (size_t)k->head_dim * es, ps = k->pages.page_size, h = k->n_heads;
    if ((size_t)k->pages.n_pages * ps * h * e > ((size_t)1 << 22))
        return 0;
    if (fz_u8(in) > 240)
        k->stride_slot = fz_below(in, 64);
    /* Exactly the header's extent: (n_pages-1) stride_page + (page_size-1)
     * stride_slot + (n_heads-1) stride_head + one key, strides resolved. */
    int nhd = k->layout == KVE_LAYOUT_NHD;
    size_t sp = ps * h * e, ss = k->stride_slot ? k->stride_slot : nhd ? h * e : e,
           sh = nhd ? e : ps * e;
    size_t bytes = k->pages.n_pages && ps && h && e
                       ? (k->pages.n_pages - 1) * sp + (ps - 1) * ss + (h - 1) * sh + e
                       : 0;
    f->keys = fz_alloc(bytes, 0);
    for (size_t i = 0; f->keys && i < bytes; i++) /* small finite values, sometimes any bits */
        ((uint8_t *)f->keys)[i] = (uint8_t)(i % es == es - 1 ? 0x3c ^ (fz_mix(mix) & 0x81)
                                                             : fz_mix(mix));
    k->base = f->keys;
    size_t n_ids = (size_t)k->pages.n_rows * 4;
    f->pages = (int32_t *)fz_alloc(n_ids * 4, 0);
    for (size_t i = 0; f->pages && i < n_ids; i++)
        f->pages[i] = fz_u8(in) < 250 ? (int32_t)fz_below(in, k->pages.n_pages) : -1;
    if (k->pages.kind == KVE_PAGES_BLOCK_TABLE) {
        k->pages.block_table = f->pages;
        k->pages.blocks_per_row = fz_u8(in) < 250 ? 4 : 0;
    } else if (k->pages.kind == KVE_PAGES_INDPTR) {
        f->indptr = (int32_t *)fz_alloc((k->pages.n_rows + 1) * 4, 0);
        f->last = (int32_t *)fz_alloc(k->pages.n_rows * 4, 0);
        for (uint32_t r = 0; r <= k->pages.n_rows; r++)
            f->indptr[r] = (int32_t)(r * 4) - (fz_u8(in) > 250);
        for (uint32_t r = 0; r < k->pages.n_rows; r++)
            f->last[r] = (int32_t)fz_below(in, k->pages.page_size + 2);
        k->pages.indices = f->pages;
        k->pages.indptr = f->indptr;
        k->pages.last_page_len = f->last;
    }
    return f->keys && f->pages;
}

/* Rows, tables and scores in exact-size buffers. */
static int fz_rows(fz_bytes *in, kve_score_desc *d, fz_score_bufs *f, size_t *n_scores)
{
    uint32_t hpt = d->heads_per_table ? d->heads_per_table : 1;
    uint32_t tables = d->keys.n_heads && d->keys.n_heads % hpt == 0 ? d->keys.n_heads / hpt : 1;
    d->n_rows = fz_below(in, 4);
    size_t stride = 1 + fz_below(in, 40), per_row = stride * tables;
    f->tabs = (int32_t *)fz_alloc(per_row * d->n_rows * 4, 0);
    *n_scores = per_row * d->n_rows;
    f->scores = (float *)fz_alloc(*n_scores * 4, 0);
    if (!f->tabs || !f->scores)
        return 0;
    for (size_t i = 0; i < per_row * d->n_rows; i++)
        f->tabs[i] = fz_u8(in) < 200 ? (int32_t)fz_below(in, 64) : fz_u8(in) < 250 ? -1 : -2;
    fz_fill_scores(f->scores, 0, *n_scores, d->flags);
    for (uint32_t r = 0; r < d->n_rows; r++) {
        kve_score_row *row = &f->rows[r];
        row->table_offset = r * per_row;
        row->scores_offset = fz_u8(in) < 250 ? r * per_row : 0;
        row->n_slots = fz_u8(in) < 250 ? (uint32_t)fz_below(in, (uint32_t)stride + 1)
                                       : (uint32_t)stride + 1;
        row->prompt_len = fz_below(in, 40);
        row->window = fz_below(in, 20);
        row->round_start = fz_u32(in);
        row->cache_row = fz_u8(in) < 250 ? (int32_t)fz_below(in, d->keys.pages.n_rows + 1) : -1;
        if (row->n_slots > stride)
            row->table_stride = (uint32_t)stride; /* with several tables: refused (overlap) */
    }
    /* A row with one table and n_slots = stride + 1 is valid: the header asks
     * slot_pos and scores to hold table_offset (scores_offset) + (tables - 1)
     * x stride + n_slots elements for each row, so grow both to exactly that. */
    size_t need_t = per_row * d->n_rows, need_s = *n_scores;
    for (uint32_t r = 0; r < d->n_rows; r++) {
        const kve_score_row *row = &f->rows[r];
        size_t ts = row->table_stride ? row->table_stride : stride;
        size_t et = row->table_offset + (tables - 1) * ts + row->n_slots;
        size_t es = row->scores_offset + (tables - 1) * stride + row->n_slots;
        need_t = et > need_t ? et : need_t;
        need_s = es > need_s ? es : need_s;
    }
    if (need_t > per_row * d->n_rows) {
        int32_t *t = (int32_t *)realloc(f->tabs, need_t * 4);
        if (!t)
            return 0;
        for (size_t i = per_row * d->n_rows; i < need_t; i++)
            t[i] = -1;
        f->tabs = t;
    }
    if (need_s > *n_scores) {
        float *sc = (float *)realloc(f->scores, need_s * 4);
        if (!sc)
            return 0;
        fz_fill_scores(sc, *n_scores, need_s, d->flags);
        f->scores = sc;
        *n_scores = need_s;
    }
    d->rows = f->rows;
    d->slot_pos = f->tabs;
    d->slot_pos_stride_table = stride;
    d->scores = f->scores;
    d->scores_stride_table = stride;
    return 1;
}

/* The TriAttention inputs: statistics for every query head (one group when
 * the group is absurd), rope_theta, offsets sometimes. */
static int fz_tri(fz_bytes *in, kve_score_desc *d, fz_score_bufs *f)
{
    kve_triattention_params *t = &d->tri;
    t->group = fz_u8(in) < 250 ? 1 + fz_below(in, 3) : fz_count(in, 400);
    size_t nq = (size_t)d->keys.n_heads * (t->group < 400 ? t->group : 1);
    size_t nf = d->keys.head_dim / 2 < 300 ? d->keys.head_dim / 2 : 0;
    f->q_mean = (float *)fz_alloc(nq * nf * 8, 0);
    f->q_abs = (float *)fz_alloc(nq * nf * 4, 0);
    if (!f->q_mean || !f->q_abs)
        return 0;
    for (size_t i = 0; i < nq * nf * 2; i++)
        f->q_mean[i] = (float)(int8_t)fz_u8(in) / 64.0f;
    for (size_t i = 0; i < nq * nf; i++)
        f->q_abs[i] = (float)fz_u8(in) / 64.0f;
    t->q_mean = fz_u8(in) < 252 ? f->q_mean : NULL;
    t->q_abs_mean = f->q_abs;
    t->rope_theta = fz_u8(in) < 250 ? 10000.0 : (double)fz_below(in, 3);
    if (fz_u8(in) > 200) {
        t->n_offsets = 1 + fz_below(in, 4);
        f->offsets = (float *)fz_alloc(t->n_offsets * 4, 0);
        for (uint32_t i = 0; f->offsets && i < t->n_offsets; i++)
            f->offsets[i] = (float)fz_u32(in);
        t->offsets = f->offsets;
    }
    return 1;
}

/* Copies every key of @p d's cache into f->keys2, a buffer of exactly the
 * header's extent under padded strides (sometimes misaligned, a dense one
 * sometimes given as 0), as @p d2's keys; @p d2's cache_rows sometimes set
 * (kve_score ignores them). 0 when the extent is too large. */
static int fz_restride_keys(fz_bytes *in, const kve_score_desc *d, kve_score_desc *d2,
                            fz_score_bufs *f, uint64_t *mix)
{
    static const int32_t cache_rows[4] = {-7, 99, -1, 3};
    kve_key_cache *k = &d2->keys;
    size_t es = fz_dtype_size(k->dtype), e = (size_t)k->head_dim * es, h = k->n_heads,
           ps = k->pages.page_size;
    uint8_t pads = fz_u8(in);
    size_t p_in = (pads & 3) * es, p_mid = ((pads >> 2) & 3) * es, p_page = ((pads >> 4) & 3) * es;
    if (pads >= 0xfc)
        p_in += 1; /* misaligned: the header does not say */
    size_t ss, sh, sp;
    if (k->layout == KVE_LAYOUT_NHD) {
        sh = e + p_in;
        ss = h * sh + p_mid;
        sp = ps * ss + p_page;
    } else {
        ss = e + p_in;
        sh = ps * ss + p_mid;
        sp = h * sh + p_page;
    }
    size_t bytes = (k->pages.n_pages - 1) * sp + (ps - 1) * ss + (h - 1) * sh + e;
    if (bytes > ((size_t)1 << 23))
        return 0;
    f->keys2 = fz_alloc(bytes, 0);
    if (!f->keys2)
        return 0;
    for (size_t i = 0; i < bytes; i++)
        ((uint8_t *)f->keys2)[i] = (uint8_t)fz_mix(mix); /* gaps: any bits */
    for (size_t pg = 0; pg < k->pages.n_pages; pg++)
        for (size_t sl = 0; sl < ps; sl++)
            for (uint32_t hd = 0; hd < h; hd++)
                memcpy((uint8_t *)f->keys2 + pg * sp + sl * ss + hd * sh,
                       fz_key_at(&d->keys, pg, sl, hd), e);
    uint8_t dense = fz_u8(in);
    size_t dsh = k->layout == KVE_LAYOUT_NHD ? e : ps * e, dss = k->layout == KVE_LAYOUT_NHD ? h * e : e;
    k->stride_head = (dense & 1) && sh == dsh ? 0 : sh;
    k->stride_slot = (dense & 2) && ss == dss ? 0 : ss;
    k->stride_page = (dense & 4) && sp == ps * h * e ? 0 : sp;
    k->base = f->keys2;
    d2->cache_rows = (dense & 8) ? cache_rows : NULL;
    return 1;
}

/* Sometimes varies @p d2's TriAttention inputs: the caller's omega (a
 * non-finite one sometimes), freq_scale_sq (a NaN sometimes), a statistic
 * that is no number, or no q_abs_mean. Returns 1 when nothing varied. */
static int fz_vary_tri(fz_bytes *in, const kve_score_desc *d, kve_score_desc *d2, fz_score_bufs *f)
{
    uint8_t tv = fz_u8(in);
    uint32_t nf = d->keys.head_dim / 2 <= KVE_SCORE_MAX_FREQS ? d->keys.head_dim / 2 : 0;
    if (d2->scorer != KVE_SCORER_TRIATTENTION || !nf || !(tv & 0x0f))
        return 1;
    if (tv & 1) { /* the caller's angles; rope_theta is then unused */
        f->omega = (float *)fz_alloc(nf * 4, 0);
        for (uint32_t i = 0; f->omega && i < nf; i++)
            f->omega[i] = (float)(int8_t)fz_u8(in) / 32.0f;
        if (f->omega && tv >= 0xf8)
            f->omega[fz_below(in, nf)] = (tv & 0x10) ? NAN : INFINITY;
        d2->tri.omega = f->omega;
        if (tv & 0x20)
            d2->tri.rope_theta = (double)fz_below(in, 3); /* <= 1: ignored with omega */
    }
    if (tv & 2) {
        f->fsq = (float *)fz_alloc(nf * 4, 0);
        for (uint32_t i = 0; f->fsq && i < nf; i++)
            f->fsq[i] = (float)fz_u8(in) / 64.0f;
        if (f->fsq && (tv & 0xf0) == 0xe0)
            f->fsq[fz_below(in, nf)] = NAN;
        d2->tri.freq_scale_sq = f->fsq;
    }
    if ((tv & 0x0c) == 0x0c && f->q_mean && d->tri.group < 400) {
        size_t nq = (size_t)d->keys.n_heads * d->tri.group;
        if (nq && nf) /* one statistic that is no number */
            f->q_mean[fz_below(in, (uint32_t)(nq * nf * 2))] = (tv & 0x40) ? INFINITY : NAN;
    } else if ((tv & 0x0c) == 0x08) {
        d2->tri.q_abs_mean = NULL;
    }
    return 0;
}

/* The first call @p d (status @p st1) again over re-strided keys, its
 * TriAttention inputs varied sometimes. When only the strides changed and
 * both are aligned, status and scores must equal the first call's bit for
 * bit. */
static void fz_second_call(fz_bytes *in, kve_context *ctx, const kve_score_desc *d,
                           fz_score_bufs *f, size_t n_scores, kve_status st1, uint64_t *mix)
{
    kve_score_desc d2 = *d;
    const kve_key_cache *k = &d2.keys;
    if (fz_u8(in) < 64 || !k->pages.n_pages || !k->pages.page_size || !k->n_heads || !k->head_dim)
        return;
    if (!fz_restride_keys(in, d, &d2, f, mix))
        return;
    int same = fz_vary_tri(in, d, &d2, f);
    memcpy(f->first, f->scores, n_scores * 4);
    memcpy(f->scores, f->before, n_scores * 4);
    int valid2 = fz_score_valid(&d2);
    kve_status st2 = kve_score(ctx, &d2);
    fz_check_result(&d2, st2, f->before, n_scores, valid2);
    size_t es = fz_dtype_size(k->dtype);
    int aligned1 = (d->keys.stride_slot | d->keys.stride_page | d->keys.stride_head) % es == 0,
        aligned2 = (k->stride_slot | k->stride_page | k->stride_head) % es == 0;
    if (same && aligned1 && aligned2) {
        FZ_CHECK(st1 == st2, "re-strided keys: %s, first call %s", kve_status_string(st2),
                 kve_status_string(st1));
        FZ_CHECK(st1 != KVE_OK || memcmp(f->first, f->scores, n_scores * 4) == 0,
                 "re-strided keys changed the scores");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_bytes in = {data, size};
    kve_context *ctx = fz_context(&in);
    kve_score_desc d;
    memset(&d, 0, sizeof d);
    fz_score_bufs f;
    memset(&f, 0, sizeof f);
    uint64_t mix = fz_u64(&in);
    uint8_t sel = fz_u8(&in);
    d.scorer = sel < 250 ? (kve_scorer)(1 + (sel & 1)) : (kve_scorer)(sel & 3) * 3;
    d.flags = fz_u8(&in) < 250 ? fz_below(&in, 4) : fz_u32(&in);
    d.weight = fz_u8(&in) < 240 ? (float)fz_below(&in, 5) * 0.5f : (float)(fz_u32(&in) | 0x7f800000u);
    size_t n_scores = 0;
    kve_status st1 = KVE_OK;
    int called = 0;
    if (fz_keys(&in, &d, &f, &mix)) {
        d.heads_per_table = fz_u8(&in) < 200 ? 0 : fz_u8(&in) < 200 ? d.keys.n_heads : fz_below(&in, 4);
        if (fz_rows(&in, &d, &f, &n_scores) && fz_tri(&in, &d, &f)) {
            f.before = (float *)fz_dup(f.scores, n_scores * 4);
            f.first = (float *)fz_dup(f.scores, n_scores * 4);
            int valid = fz_score_valid(&d);
            st1 = kve_score(ctx, &d);
            fz_check_result(&d, st1, f.before, n_scores, valid);
            called = f.before && f.first;
        }
    }
    fz_stats_file(&in, &mix);
    if (called)
        fz_second_call(&in, ctx, &d, &f, n_scores, st1, &mix);
    fz_free(&f);
    fz_scored_state_run(&in, ctx, &mix);
    return 0;
}
