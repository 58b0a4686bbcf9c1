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
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <unistd.h>

#include "fuzz_common.h"

static int fz_candidate(const int32_t *tab, uint32_t n, uint32_t p, uint32_t w, uint32_t s)
{
    if (tab[s] < 0 || (uint32_t)tab[s] < p)
        return 0;
    uint32_t newer = 0;
    for (uint32_t t = 0; t < n; t++)
        newer += tab[t] >= 0 && (uint32_t)tab[t] >= p && tab[t] > tab[s];
    return newer >= w;
}

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

/* What an output element holds before a storing (not accumulating) call: a
 * NaN, so a candidate's finite score after it was written by the call. */
#define FZ_CANARY 0x7fa5a5a5u

static void fz_fill_scores(float *sc, size_t from, size_t to, uint32_t flags)
{
    uint32_t canary = FZ_CANARY;
    for (size_t i = from; i < to; i++) {
        if (flags & KVE_SCORE_ACCUMULATE)
            sc[i] = (float)(i % 7) - 3.0f;
        else
            memcpy(&sc[i], &canary, 4);
    }
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
    k->page_table = (kve_page_table)(fz_u8(in) < 252 ? fz_below(in, 4) : 4);
    k->page_size = fz_u8(in) < 250 ? 1 + fz_below(in, 12) : 0;
    k->n_pages = fz_u8(in) < 250 ? 1 + fz_below(in, 8) : 0;
    k->n_rows = fz_u8(in) < 250 ? 1 + fz_below(in, 4) : 0;
    size_t es = k->dtype == KVE_DTYPE_F32 ? 4 : 2;
    size_t e = (size_t)k->head_dim * es, ps = k->page_size, h = k->n_heads;
    if ((size_t)k->n_pages * ps * h * e > ((size_t)1 << 22))
        return 0;
    if (fz_u8(in) > 240)
        k->stride_slot = fz_below(in, 64);
    /* Exactly the header's extent: (n_pages-1) stride_page + (page_size-1)
     * stride_slot + (n_heads-1) stride_head + one key, strides resolved. */
    int nhd = k->layout == KVE_LAYOUT_NHD;
    size_t sp = ps * h * e, ss = k->stride_slot ? k->stride_slot : nhd ? h * e : e,
           sh = nhd ? e : ps * e;
    size_t bytes = k->n_pages && ps && h && e
                       ? (k->n_pages - 1) * sp + (ps - 1) * ss + (h - 1) * sh + e
                       : 0;
    f->keys = fz_alloc(bytes, 0);
    for (size_t i = 0; f->keys && i < bytes; i++) /* small finite values, sometimes any bits */
        ((uint8_t *)f->keys)[i] = (uint8_t)(i % es == es - 1 ? 0x3c ^ (fz_mix(mix) & 0x81)
                                                             : fz_mix(mix));
    k->base = f->keys;
    size_t n_ids = (size_t)k->n_rows * 4;
    f->pages = (int32_t *)fz_alloc(n_ids * 4, 0);
    for (size_t i = 0; f->pages && i < n_ids; i++)
        f->pages[i] = fz_u8(in) < 250 ? (int32_t)fz_below(in, k->n_pages) : -1;
    if (k->page_table == KVE_PAGES_BLOCK_TABLE) {
        k->block_table = f->pages;
        k->blocks_per_row = fz_u8(in) < 250 ? 4 : 0;
    } else if (k->page_table == KVE_PAGES_INDPTR) {
        f->indptr = (int32_t *)fz_alloc((k->n_rows + 1) * 4, 0);
        f->last = (int32_t *)fz_alloc(k->n_rows * 4, 0);
        for (uint32_t r = 0; r <= k->n_rows; r++)
            f->indptr[r] = (int32_t)(r * 4) - (fz_u8(in) > 250);
        for (uint32_t r = 0; r < k->n_rows; r++)
            f->last[r] = (int32_t)fz_below(in, k->page_size + 2);
        k->indices = f->pages;
        k->indptr = f->indptr;
        k->last_page_len = f->last;
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
        row->cache_row = fz_u8(in) < 250 ? (int32_t)fz_below(in, d->keys.n_rows + 1) : -1;
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

/* ------------------------------------------------------------------ */
/* The header's model of a kve_score call                              */
/* ------------------------------------------------------------------ */

static size_t fz_dtype_size(kve_dtype t) { return t == KVE_DTYPE_F32 ? 4 : 2; }

/* An element of a key as a double (f16 and bf16 exactly). */
static double fz_elem(const unsigned char *p, kve_dtype t)
{
    if (t == KVE_DTYPE_F32) {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    if (t == KVE_DTYPE_BF16) {
        uint32_t b = (uint32_t)h << 16;
        float v;
        memcpy(&v, &b, 4);
        return v;
    }
    uint32_t e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp((double)m, -24)
                      : e == 31 ? (m ? NAN : INFINITY) : ldexp((double)(m + 1024), (int)e - 25);
    return h >> 15 ? -v : v;
}

/* The key cache's byte strides, zeros resolved to the layout's dense ones. */
static void fz_strides(const kve_key_cache *k, size_t *sp, size_t *ss, size_t *sh)
{
    size_t e = (size_t)k->head_dim * fz_dtype_size(k->dtype), h = k->n_heads, ps = k->page_size;
    int nhd = k->layout == KVE_LAYOUT_NHD;
    *sh = k->stride_head ? k->stride_head : nhd ? e : ps * e;
    *ss = k->stride_slot ? k->stride_slot : nhd ? h * e : e;
    *sp = k->stride_page ? k->stride_page : ps * h * e;
}

/* The INDPTR arrays as kve_cache_write's header asks: indptr[0] = 0, never
 * decreasing. */
static int fz_indptr_ok(const kve_key_cache *k)
{
    if (k->indptr[0] != 0)
        return 0;
    for (uint32_t r = 0; r < k->n_rows; r++)
        if (k->indptr[r + 1] < k->indptr[r])
            return 0;
    return 1;
}

/* Page and in-page slot of slot @p slot of page-table row @p row, as the
 * header finds them: 1, 0 when the page table does not hold that slot, -1
 * when the header leaves it open (a last_page_len outside 1..page_size, an
 * indptr against kve_cache_write's rule). @p row is valid for the table. */
static int fz_locate(const kve_key_cache *k, int32_t row, uint32_t slot, size_t *page, size_t *in)
{
    uint64_t ps = k->page_size;
    *in = (size_t)(slot % ps);
    switch (k->page_table) {
    case KVE_PAGES_FLAT: {
        uint64_t flat = (uint64_t)row * ps + slot;
        *page = (size_t)(flat / ps);
        return flat / ps < k->n_pages;
    }
    case KVE_PAGES_NONE:
        *page = (size_t)row;
        return slot < ps;
    case KVE_PAGES_BLOCK_TABLE: {
        if (slot / ps >= k->blocks_per_row)
            return 0;
        int32_t pg = k->block_table[(size_t)row * k->blocks_per_row + slot / ps];
        *page = (size_t)pg;
        return pg >= 0 && (uint32_t)pg < k->n_pages;
    }
    case KVE_PAGES_INDPTR: {
        if (!fz_indptr_ok(k))
            return -1;
        int32_t lo = k->indptr[row], hi = k->indptr[row + 1], last = k->last_page_len[row];
        if (hi == lo)
            return 0;
        if (last < 1 || (uint32_t)last > ps)
            return -1;
        if ((uint64_t)slot >= (uint64_t)(hi - lo - 1) * ps + (uint64_t)last)
            return 0;
        int32_t pg = k->indices[lo + slot / ps];
        *page = (size_t)pg;
        return pg >= 0 && (uint32_t)pg < k->n_pages;
    }
    }
    return -1;
}

static const unsigned char *fz_key_at(const kve_key_cache *k, size_t page, size_t in, uint32_t h)
{
    size_t sp, ss, sh;
    fz_strides(k, &sp, &ss, &sh);
    return (const unsigned char *)k->base + page * sp + in * ss + (size_t)h * sh;
}

static int fz_finite_all(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return 0;
    return 1;
}

static int fz_has_dup(const int32_t *tab, uint32_t n)
{
    for (uint32_t a = 0; a < n; a++)
        for (uint32_t b = a + 1; b < n && tab[a] >= 0; b++)
            if (tab[a] == tab[b])
                return 1;
    return 0;
}

static uint32_t fz_hpt(const kve_score_desc *d) { return d->heads_per_table ? d->heads_per_table : 1; }

static size_t fz_table_stride(const kve_score_desc *d, const kve_score_row *r)
{
    return r->table_stride ? r->table_stride : d->slot_pos_stride_table;
}

/* Whether the TriAttention inputs are numbers all through (what the value
 * checks need). */
static int fz_tri_clean(const kve_score_desc *d)
{
    const kve_triattention_params *t = &d->tri;
    if (d->scorer != KVE_SCORER_TRIATTENTION)
        return 1;
    size_t nq = (size_t)d->keys.n_heads * t->group, nf = d->keys.head_dim / 2;
    return fz_finite_all(t->q_mean, nq * nf * 2) && fz_finite_all(t->q_abs_mean, nq * nf) &&
           (!t->omega || fz_finite_all(t->omega, nf)) &&
           (!t->freq_scale_sq || fz_finite_all(t->freq_scale_sq, nf));
}

/* What the header says of @p d: 1 valid (must be accepted), 0 invalid (must
 * be refused), -1 where the header leaves it open or the harness does not
 * model it. */
static int fz_score_valid(const kve_score_desc *d)
{
    const kve_key_cache *k = &d->keys;
    if (d->scorer != KVE_SCORER_KNORM && d->scorer != KVE_SCORER_TRIATTENTION)
        return 0;
    if (d->flags & ~(uint32_t)(KVE_SCORE_ZNORM | KVE_SCORE_ACCUMULATE))
        return 0;
    if (!isfinite(d->weight))
        return 0;
    if (k->dtype != KVE_DTYPE_F32 && k->dtype != KVE_DTYPE_F16 && k->dtype != KVE_DTYPE_BF16)
        return 0;
    if (k->head_dim < 2 || k->head_dim % 2 || k->head_dim > 2 * KVE_SCORE_MAX_FREQS)
        return 0;
    if ((unsigned)k->layout > KVE_LAYOUT_HND || (unsigned)k->page_table > KVE_PAGES_FLAT)
        return 0;
    if (!k->base || k->n_heads == 0 || k->page_size == 0 || k->n_pages == 0)
        return -1;
    if (k->page_table != KVE_PAGES_FLAT && k->n_rows == 0)
        return -1;
    if (k->page_table == KVE_PAGES_NONE && k->n_rows > k->n_pages)
        return 0;
    if (k->page_table == KVE_PAGES_BLOCK_TABLE && (!k->block_table || !k->blocks_per_row))
        return -1;
    if (k->page_table == KVE_PAGES_INDPTR && (!k->indptr || !k->indices || !k->last_page_len))
        return -1;
    size_t es = fz_dtype_size(k->dtype);
    if ((k->stride_page | k->stride_slot | k->stride_head) % es)
        return -1; /* misaligned strides: the header does not say */
    uint32_t hpt = fz_hpt(d), nf = k->head_dim / 2;
    if (k->n_heads % hpt)
        return 0;
    uint64_t nq = (uint64_t)hpt * (d->scorer == KVE_SCORER_TRIATTENTION ? d->tri.group : 1);
    if (nq > 256 || nq * nf > 3072)
        return 0;
    int sure = 1;
    if (d->scorer == KVE_SCORER_TRIATTENTION) {
        const kve_triattention_params *t = &d->tri;
        if (t->group == 0 || t->n_offsets > KVE_SCORE_MAX_OFFSETS)
            return 0;
        if (!t->omega && !(isfinite(t->rope_theta) && t->rope_theta > 1.0))
            return 0;
        if (t->offsets && !fz_finite_all(t->offsets, t->n_offsets))
            return 0;
        if (!t->q_mean || !t->q_abs_mean || !t->offsets != !t->n_offsets)
            return -1;
        if (!fz_tri_clean(d))
            sure = -1;
    }
    if (d->n_rows == 0)
        return sure;
    if (!d->rows || !d->slot_pos || !d->scores)
        return -1;
    uint32_t n_tables = k->n_heads / hpt;
    for (uint32_t i = 0; i < d->n_rows; i++) {
        const kve_score_row *r = &d->rows[i];
        size_t ts = fz_table_stride(d, r);
        if (r->n_slots > INT32_MAX)
            return 0;
        if (n_tables > 1 && r->n_slots && (ts < r->n_slots || d->scores_stride_table < r->n_slots))
            return 0;
        if (k->page_table == KVE_PAGES_FLAT ? r->cache_row < 0
                                            : r->cache_row < 0 || (uint32_t)r->cache_row >= k->n_rows)
            return 0;
        /* Output rows of distinct tables never meet. */
        for (uint32_t t = 0; t < n_tables && r->n_slots; t++) {
            uint64_t a0 = r->scores_offset + (uint64_t)t * d->scores_stride_table;
            for (uint32_t j = 0; j <= i; j++) {
                const kve_score_row *q = &d->rows[j];
                for (uint32_t u = 0; u < n_tables && q->n_slots && (j < i || u < t); u++) {
                    uint64_t b0 = q->scores_offset + (uint64_t)u * d->scores_stride_table;
                    if (a0 < b0 + q->n_slots && b0 < a0 + r->n_slots)
                        return 0;
                }
            }
        }
        for (uint32_t t = 0; t < n_tables; t++) {
            const int32_t *tab = d->slot_pos + r->table_offset + t * ts;
            for (uint32_t s = 0; s < r->n_slots; s++)
                if (tab[s] < -1)
                    return 0;
            int dup = fz_has_dup(tab, r->n_slots);
            for (uint32_t s = 0; s < r->n_slots; s++) {
                /* With a position twice the candidates are not defined:
                 * every generated slot must then be in the cache. */
                int cand = dup ? tab[s] >= 0 && (uint32_t)tab[s] >= r->prompt_len
                               : fz_candidate(tab, r->n_slots, r->prompt_len, r->window, s);
                size_t pg, in;
                int at = cand ? fz_locate(k, r->cache_row, s, &pg, &in) : 1;
                if (at < 0 || (at == 0 && dup))
                    sure = -1;
                else if (at == 0)
                    return 0;
            }
        }
    }
    return sure;
}

/* Whether key (row, slot, head) is a modest number in every element. */
static int fz_key_tame(const kve_key_cache *k, int32_t row, uint32_t slot, uint32_t h)
{
    size_t pg = 0, in = 0, es = fz_dtype_size(k->dtype);
    if (fz_locate(k, row, slot, &pg, &in) != 1)
        return 0;
    const unsigned char *key = fz_key_at(k, pg, in, h);
    for (uint32_t i = 0; i < k->head_dim; i++) {
        double x = fz_elem(key + i * es, k->dtype);
        if (!(fabs(x) <= 1e15))
            return 0;
    }
    return 1;
}

/* A candidate's raw score of query head @p q (K-norm: KV head q) in float64,
 * and the sum of its terms' magnitudes (for the tolerance). */
static double fz_raw_ref(const kve_score_desc *d, const kve_score_row *r, uint32_t slot, uint32_t q,
                         double *mag)
{
    const kve_key_cache *k = &d->keys;
    const kve_triattention_params *t = &d->tri;
    uint32_t nf = k->head_dim / 2, kh = d->scorer == KVE_SCORER_KNORM ? q : q / t->group;
    size_t pg = 0, in = 0, es = fz_dtype_size(k->dtype);
    fz_locate(k, r->cache_row, slot, &pg, &in);
    const unsigned char *key = fz_key_at(k, pg, in, kh);
    if (d->scorer == KVE_SCORER_KNORM) {
        double s2 = 0;
        for (uint32_t i = 0; i < k->head_dim; i++) {
            double x = fz_elem(key + i * es, k->dtype);
            s2 += x * x;
        }
        *mag = sqrt(s2);
        return -sqrt(s2);
    }
    double sum = 0, m = 0;
    uint32_t n_off = t->offsets ? t->n_offsets : 17;
    for (uint32_t f = 0; f < nf; f++) {
        double w = t->omega ? (double)t->omega[f]
                            : pow(t->rope_theta, -2.0 * (double)f / (double)k->head_dim);
        double s2 = t->freq_scale_sq ? (double)t->freq_scale_sq[f] : 1.0, cr = 0, ci = 0;
        for (uint32_t o = 0; o < n_off; o++) {
            double dl = t->offsets ? (double)t->offsets[o] : (double)(1u << o);
            cr += cos(w * dl);
            ci += sin(w * dl);
        }
        cr /= n_off;
        ci /= n_off;
        double c0 = cos(w * (double)r->round_start), s0 = sin(w * (double)r->round_start);
        double pr = c0 * cr - s0 * ci, pi = c0 * ci + s0 * cr;
        double qr = t->q_mean[((size_t)q * nf + f) * 2], qi = t->q_mean[((size_t)q * nf + f) * 2 + 1];
        double ar = s2 * (qr * pr - qi * pi), ai = s2 * (qr * pi + qi * pr);
        double b = s2 * ((double)t->q_abs_mean[(size_t)q * nf + f] - sqrt(qr * qr + qi * qi));
        double kr = fz_elem(key + f * es, k->dtype), ki = fz_elem(key + (f + nf) * es, k->dtype);
        double kk = sqrt(kr * kr + ki * ki);
        sum += ar * kr + ai * ki + b * kk;
        m += fabs(ar * kr) + fabs(ai * ki) + fabs(b * kk);
    }
    *mag = m;
    return sum;
}

/* A KVE_OK call's outputs against the header: each table's non-candidates
 * at 0 (untouched when accumulating), its candidates finite (written: a
 * storing call's buffer held NaNs) and, without ZNORM, equal to the float64
 * reference within docs/SCORERS.md's tolerances; no element outside the
 * output rows changed. */
static void fz_check_ok(const kve_score_desc *d, const float *before, size_t n)
{
    uint32_t hpt = fz_hpt(d), n_tables = d->keys.n_heads / hpt;
    uint8_t *in_row = (uint8_t *)calloc(n ? n : 1, 1);
    int clean = fz_tri_clean(d), acc = (d->flags & KVE_SCORE_ACCUMULATE) != 0;
    double w = d->weight != 0.0f ? (double)d->weight : 1.0;
    for (uint32_t r = 0; r < d->n_rows; r++) {
        const kve_score_row *row = &d->rows[r];
        for (uint32_t t = 0; t < n_tables; t++) {
            const int32_t *tab = d->slot_pos + row->table_offset + t * fz_table_stride(d, row);
            size_t o = row->scores_offset + t * d->scores_stride_table;
            for (uint32_t s = 0; s < row->n_slots && in_row; s++)
                in_row[o + s] = 1;
            /* A table holding a position twice is no keep-set table (SPEC §3):
             * which of the twins the window takes is not defined, so only
             * tables of distinct positions are held to the candidate rule. */
            if (fz_has_dup(tab, row->n_slots))
                continue;
            /* Keys copied from a misaligned layout hold any bits: a table
             * with a key not a modest number has no value to check (its
             * z-scores share the candidates' moments). */
            int tame = 1;
            for (uint32_t s = 0; s < row->n_slots && tame; s++)
                if (fz_candidate(tab, row->n_slots, row->prompt_len, row->window, s))
                    for (uint32_t h = t * hpt; h < (t + 1) * hpt && tame; h++)
                        tame = fz_key_tame(&d->keys, row->cache_row, s, h);
            for (uint32_t s = 0; s < row->n_slots; s++) {
                float got = d->scores[o + s];
                if (!fz_candidate(tab, row->n_slots, row->prompt_len, row->window, s)) {
                    float want = acc ? before[o + s] : 0.0f;
                    FZ_CHECK(memcmp(&got, &want, 4) == 0,
                             "row %u table %u slot %u: not a candidate, score %g", r, t, s, got);
                    continue;
                }
                if (!clean || !tame)
                    continue;
                FZ_CHECK(isfinite(got), "row %u table %u slot %u (position %d): candidate score %g",
                         r, t, s, tab[s], got);
                if (d->flags & KVE_SCORE_ZNORM)
                    continue;
                uint32_t nq = d->scorer == KVE_SCORER_KNORM ? hpt : hpt * d->tri.group;
                double best = -INFINITY, tol = 0;
                for (uint32_t q = t * nq; q < (t + 1) * nq; q++) {
                    double mag, v = fz_raw_ref(d, row, s, q, &mag);
                    best = v > best ? v : best;
                    tol = mag > tol ? mag : tol;
                }
                double want = (acc ? (double)before[o + s] : 0.0) + w * best;
                double lim = 1e-4 * fabs(w) * (1.0 + tol) + 1e-6 * fabs(want) + 1e-6;
                FZ_CHECK(fabs((double)got - want) <= lim,
                         "row %u table %u slot %u (position %d, %s): score %.9g, reference %.9g "
                         "(tolerance %.3g)",
                         r, t, s, tab[s], d->scorer == KVE_SCORER_KNORM ? "K-norm" : "TriAttention",
                         got, want, lim);
            }
        }
    }
    for (size_t i = 0; i < n && in_row; i++)
        FZ_CHECK(in_row[i] || memcmp(&d->scores[i], &before[i], 4) == 0,
                 "scores[%zu], in no output row, changed to %g", i, d->scores[i]);
    free(in_row);
}

static void fz_check_result(const kve_score_desc *d, kve_status st, const float *before, size_t n,
                            int valid)
{
    if (valid == 1)
        FZ_CHECK(st == KVE_OK, "a valid kve_score call was refused: %s", kve_status_string(st));
    if (valid == 0)
        FZ_CHECK(st != KVE_OK, "an invalid kve_score call was accepted");
    if (st != KVE_OK) {
        FZ_CHECK_ERROR_MESSAGE(st);
        FZ_CHECK(memcmp(before, d->scores, n * 4) == 0, "an error changed the scores");
        return;
    }
    fz_check_ok(d, before, n);
}

/* ------------------------------------------------------------------ */
/* The same call over re-strided keys, TriAttention inputs varied       */
/* ------------------------------------------------------------------ */

/* Copies every key of @p d's cache into a buffer of exactly the header's
 * extent under new strides (padded, sometimes misaligned, a dense one
 * sometimes given as 0) and varies omega, freq_scale_sq, q_abs_mean and
 * cache_rows; runs @p d again on it. When only the strides changed and both
 * are aligned, status and scores must equal the first call's bit for bit. */
static void fz_second_call(fz_bytes *in, kve_context *ctx, kve_score_desc *d, fz_score_bufs *f,
                           size_t n_scores, kve_status st1, uint64_t *mix)
{
    static const int32_t cache_rows[4] = {-7, 99, -1, 3}; /* kve_score ignores them */
    kve_score_desc d2 = *d;
    kve_key_cache *k = &d2.keys;
    if (fz_u8(in) < 64 || !k->n_pages || !k->page_size || !k->n_heads || !k->head_dim)
        return;
    size_t es = fz_dtype_size(k->dtype), e = (size_t)k->head_dim * es, h = k->n_heads,
           ps = k->page_size;
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
    size_t bytes = (k->n_pages - 1) * sp + (ps - 1) * ss + (h - 1) * sh + e;
    if (bytes > ((size_t)1 << 23))
        return;
    f->keys2 = fz_alloc(bytes, 0);
    if (!f->keys2)
        return;
    for (size_t i = 0; i < bytes; i++)
        ((uint8_t *)f->keys2)[i] = (uint8_t)fz_mix(mix); /* gaps: any bits */
    for (size_t pg = 0; pg < k->n_pages; pg++)
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
    d2.cache_rows = (dense & 8) ? cache_rows : NULL;
    int same = 1;
    uint8_t tv = fz_u8(in);
    uint32_t nf = d->keys.head_dim / 2 <= KVE_SCORE_MAX_FREQS ? d->keys.head_dim / 2 : 0;
    if (d2.scorer == KVE_SCORER_TRIATTENTION && nf && (tv & 0x0f)) {
        same = 0;
        if (tv & 1) { /* the caller's angles; rope_theta is then unused */
            f->omega = (float *)fz_alloc(nf * 4, 0);
            for (uint32_t i = 0; f->omega && i < nf; i++)
                f->omega[i] = (float)(int8_t)fz_u8(in) / 32.0f;
            if (f->omega && tv >= 0xf8)
                f->omega[fz_below(in, nf)] = (tv & 0x10) ? NAN : INFINITY;
            d2.tri.omega = f->omega;
            if (tv & 0x20)
                d2.tri.rope_theta = (double)fz_below(in, 3); /* <= 1: ignored with omega */
        }
        if (tv & 2) {
            f->fsq = (float *)fz_alloc(nf * 4, 0);
            for (uint32_t i = 0; f->fsq && i < nf; i++)
                f->fsq[i] = (float)fz_u8(in) / 64.0f;
            if (f->fsq && (tv & 0xf0) == 0xe0)
                f->fsq[fz_below(in, nf)] = NAN;
            d2.tri.freq_scale_sq = f->fsq;
        }
        if ((tv & 0x0c) == 0x0c && f->q_mean && d->tri.group < 400) {
            size_t nq = (size_t)d->keys.n_heads * d->tri.group;
            if (nq && nf) /* one statistic that is no number */
                f->q_mean[fz_below(in, (uint32_t)(nq * nf * 2))] = (tv & 0x40) ? INFINITY : NAN;
        } else if ((tv & 0x0c) == 0x08) {
            d2.tri.q_abs_mean = NULL;
        }
    }
    memcpy(f->first, f->scores, n_scores * 4);
    memcpy(f->scores, f->before, n_scores * 4);
    int valid2 = fz_score_valid(&d2);
    kve_status st2 = kve_score(ctx, &d2);
    fz_check_result(&d2, st2, f->before, n_scores, valid2);
    int aligned1 = (d->keys.stride_slot | d->keys.stride_page | d->keys.stride_head) % es == 0,
        aligned2 = (k->stride_slot | k->stride_page | k->stride_head) % es == 0;
    if (same && aligned1 && aligned2) {
        FZ_CHECK(st1 == st2, "re-strided keys: %s, first call %s", kve_status_string(st2),
                 kve_status_string(st1));
        FZ_CHECK(st1 != KVE_OK || memcmp(f->first, f->scores, n_scores * 4) == 0,
                 "re-strided keys changed the scores");
    }
}

/* ------------------------------------------------------------------ */
/* kve_state_score on a small KVE_SCORED state                          */
/* ------------------------------------------------------------------ */

/* The header's timing: rounds a row of capacity @p c with @p v valid slots
 * runs over @p n new tokens (a token that finds it full first evicts r),
 * and the tokens the call brings before the first. */
static uint32_t fz_rounds(uint32_t c, uint32_t v, uint32_t n, uint32_t r, uint32_t *before)
{
    uint32_t rounds = 0;
    *before = c - v;
    for (uint32_t i = 0; i < n; i++) {
        if (v == c) {
            rounds++;
            v = c - r;
        }
        v++;
    }
    return rounds;
}

typedef struct {
    kve_state *st;
    kve_state_layout lay;
    kve_schedule sch;
    uint32_t n_heads;
    kve_score_desc d;
    void *keys;
    int32_t *blocks;
    float *q_mean, *q_abs;
} fz_scored_state;

/* A scored state of a few rows, layers and heads, and a key cache holding
 * max_seqs page-table rows of max_slots slots (sometimes one slot or page
 * short, sometimes a bad page id). 0 when the input asks for none. */
static int fz_state_setup(fz_bytes *in, kve_context *ctx, fz_scored_state *s, uint64_t *mix)
{
    uint8_t go = fz_u8(in);
    if (go < 64)
        return 0;
    kve_state_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.schedule.seed = fz_mix(mix);
    sd.schedule.flags = KVE_SCORED | (go & 1 ? KVE_SHARED_HEADS : 0) | (go & 2 ? KVE_SHARED_LAYERS : 0);
    sd.schedule.budget = fz_below(in, 7);
    sd.schedule.window = fz_below(in, 5);
    sd.schedule.interval = 1 + fz_below(in, 3);
    sd.max_seqs = 1 + fz_below(in, 3);
    sd.n_layers = 1 + fz_below(in, 2);
    sd.n_heads = 1 + fz_below(in, 2);
    uint32_t pw = 5 + sd.schedule.window; /* prompts of at most 5 tokens */
    sd.max_slots = (sd.schedule.budget > pw ? sd.schedule.budget : pw) + sd.schedule.interval;
    kve_status st = kve_state_create(ctx, &sd, NULL, 0, &s->st);
    FZ_CHECK(st == KVE_OK, "kve_state_create of a valid scored state: %s", kve_status_string(st));
    FZ_CHECK(kve_state_get_layout(s->st, &s->lay) == KVE_OK, "kve_state_get_layout");
    s->sch = sd.schedule;
    s->n_heads = sd.n_heads;

    kve_score_desc *d = &s->d;
    kve_key_cache *k = &d->keys;
    static const kve_dtype types[] = {KVE_DTYPE_F32, KVE_DTYPE_F16, KVE_DTYPE_BF16};
    d->scorer = go & 4 ? KVE_SCORER_TRIATTENTION : KVE_SCORER_KNORM;
    d->flags = fz_below(in, 4);
    d->weight = (float)fz_below(in, 3) * 0.5f;
    k->dtype = types[fz_below(in, 3)];
    k->head_dim = 2 * (1 + fz_below(in, 4));
    k->n_heads = sd.n_heads + (fz_u8(in) > 250); /* not the state's: the header does not say */
    k->layout = (kve_cache_layout)fz_below(in, 2);
    uint8_t pt = fz_u8(in);
    uint32_t short_by = pt >= 240; /* a slot or a page short: some candidates not in the cache */
    k->n_rows = sd.max_seqs;
    if (pt % 3 == 1) {
        k->page_table = KVE_PAGES_BLOCK_TABLE;
        k->page_size = 1 + fz_below(in, 4);
        k->blocks_per_row = (sd.max_slots + k->page_size - 1) / k->page_size - short_by;
        if (!k->blocks_per_row)
            k->blocks_per_row = 1;
        k->n_pages = k->n_rows * k->blocks_per_row;
        s->blocks = (int32_t *)fz_alloc((size_t)k->n_pages * 4, 0);
        for (uint32_t i = 0; i < k->n_pages; i++)
            s->blocks[i] = (int32_t)(fz_mix(mix) % k->n_pages);
        if (pt >= 230 && pt < 240)
            s->blocks[fz_below(in, k->n_pages)] = (int32_t)k->n_pages; /* not a page */
        k->block_table = s->blocks;
    } else {
        k->page_table = pt % 3 ? KVE_PAGES_FLAT : KVE_PAGES_NONE;
        k->page_size = sd.max_slots - (short_by && sd.max_slots > 1);
        k->n_pages = k->n_rows;
    }
    size_t es = fz_dtype_size(k->dtype), bytes = (size_t)k->n_pages * k->page_size * k->n_heads *
                                                   k->head_dim * es;
    s->keys = fz_alloc(bytes, 0);
    for (size_t i = 0; i < bytes; i++)
        ((uint8_t *)s->keys)[i] =
            (uint8_t)(i % es == es - 1 ? 0x3c ^ (fz_mix(mix) & 0x81) : fz_mix(mix));
    k->base = s->keys;
    kve_triattention_params *t = &d->tri;
    t->group = 1 + fz_below(in, 2);
    size_t nq = (size_t)k->n_heads * t->group, nf = k->head_dim / 2;
    s->q_mean = (float *)fz_alloc(nq * nf * 8, 0);
    s->q_abs = (float *)fz_alloc(nq * nf * 4, 0);
    for (size_t i = 0; i < nq * nf; i++) {
        s->q_mean[2 * i] = (float)((int)(fz_mix(mix) % 257) - 128) / 64.0f;
        s->q_mean[2 * i + 1] = (float)((int)(fz_mix(mix) % 257) - 128) / 64.0f;
        s->q_abs[i] = (float)(fz_mix(mix) % 257) / 64.0f;
    }
    t->q_mean = s->q_mean;
    t->q_abs_mean = s->q_abs;
    t->rope_theta = 10000.0;
    for (uint32_t r = 0; r < sd.max_seqs; r++)
        if (fz_u8(in) < 220) {
            st = kve_state_admit(s->st, r, 1000 + r, fz_below(in, 6));
            FZ_CHECK(st == KVE_OK, "kve_state_admit of row %u: %s", r, kve_status_string(st));
        }
    return 1;
}

static void fz_state_free(fz_scored_state *s)
{
    kve_state_destroy(s->st);
    free(s->keys);
    free(s->blocks);
    free(s->q_mean);
    free(s->q_abs);
}

/* One step: kve_state_score for a table layer (exactly sized, bad arguments
 * sometimes) against the header, its due rows equal to kve_score over the
 * same tables, rows and keys; then the scores of every table layer and the
 * append that uses them. */
static void fz_state_step(fz_bytes *in, kve_context *ctx, fz_scored_state *s)
{
    kve_state *st = s->st;
    uint32_t max_seqs = s->lay.max_seqs, th_n = s->lay.table_heads, tl_n = s->lay.table_layers;
    size_t tables = (size_t)tl_n * th_n;
    uint32_t active[3], n_active = 0;
    kve_state_seq_info info[3];
    for (uint32_t r = 0; r < max_seqs; r++) {
        FZ_CHECK(kve_state_get_seq(st, r, &info[r]) == KVE_OK, "kve_state_get_seq");
        if (info[r].active)
            active[n_active++] = r;
    }
    if (!n_active)
        return;
    uint32_t rows[4], n_new[4], n_call = 1 + fz_below(in, n_active);
    for (uint32_t i = 0; i < n_call; i++) {
        uint32_t j = fz_below(in, n_active - i);
        rows[i] = active[j];
        active[j] = active[n_active - i - 1];
        active[n_active - i - 1] = rows[i];
    }
    uint8_t bad = fz_u8(in);
    int invalid = 0, unsure = 0;
    uint32_t tl = fz_below(in, tl_n);
    if (bad > 240) {
        invalid = 1;
        switch (bad & 3) {
        case 0:
            rows[n_call > 1 ? n_call - 1 : 0] = n_call > 1 ? rows[0] : max_seqs; /* twice, or no row */
            break;
        case 1: { /* a free row, or none */
            rows[0] = max_seqs + (bad & 4);
            for (uint32_t r = 0; r < max_seqs; r++)
                if (!info[r].active)
                    rows[0] = r;
            break;
        }
        case 2: tl = tl_n + (bad & 4); break;
        default: break; /* a NULL below */
        }
    }
    uint32_t max_cap = 0, due[4], before[4];
    for (uint32_t i = 0; i < n_call; i++) {
        const kve_state_seq_info *q = rows[i] < max_seqs ? &info[rows[i]] : &info[0];
        n_new[i] = fz_u8(in) < 160 ? 1 + fz_below(in, s->sch.window + 1)
                                   : 1 + fz_below(in, q->capacity + 2);
        uint32_t k = fz_rounds(q->capacity, q->n_valid, n_new[i], s->sch.interval, &before[i]);
        due[i] = k;
        unsure |= k > 1 || (k && before[i] > s->sch.window);
        max_cap = q->capacity > max_cap ? q->capacity : max_cap;
    }
    uint8_t sz = fz_u8(in);
    size_t stride_t = max_cap + (sz & 3), stride_r = tables * stride_t + ((sz >> 2) & 3);
    if (sz >= 0xf0 && stride_t)
        stride_t = max_cap - 1, unsure = 1; /* below a row's capacity */
    if (sz >= 0xe0 && sz < 0xf0 && stride_r)
        stride_r = tables * stride_t - 1, unsure = 1;
    kve_score_desc d = s->d;
    int32_t cache_rows[4];
    uint8_t cr = fz_u8(in);
    if (cr & 1) { /* each call row's keys in page-table row rows[i] */
        for (uint32_t i = 0; i < n_call; i++)
            cache_rows[i] = (int32_t)(rows[i] < max_seqs ? rows[i] : 0);
        d.cache_rows = cache_rows;
    }
    d.flags = (d.flags & ~(uint32_t)3) | ((cr >> 1) & 3);
    /* The header: desc's heads_per_table, rows, slot_pos, scores and strides
     * are ignored (the state's and the call's are used). */
    d.heads_per_table = (cr >> 3) & 3;
    d.n_rows = cr >> 5;
    d.scores_stride_table = d.slot_pos_stride_table = (cr >> 5) & 1;
    unsure |= d.keys.n_heads != s->n_heads;
    /* The extent the header lets the call write: due rows, table layer tl. */
    size_t ext = 0;
    for (uint32_t i = 0; i < n_call && !invalid; i++)
        if (due[i]) {
            size_t e = i * stride_r + ((size_t)(tl + 1) * th_n - 1) * stride_t + info[rows[i]].capacity;
            ext = e > ext ? e : ext;
        }
    float *buf = (float *)fz_alloc(ext * 4, 0), *was = NULL, *ref = NULL;
    if (!buf)
        return;
    fz_fill_scores(buf, 0, ext, d.flags);
    was = (float *)fz_dup(buf, ext * 4);
    const uint32_t *a_rows = rows, *a_new = n_new;
    const kve_score_desc *a_desc = &d;
    float *a_buf = buf;
    kve_state *a_st = st;
    if (bad > 240 && (bad & 3) == 3) {
        switch ((bad >> 2) & 3) {
        case 0: a_rows = NULL; break;
        case 1: a_new = NULL; break;
        case 2: a_buf = NULL; break;
        default: a_desc = (bad & 16) ? NULL : a_desc, a_st = (bad & 16) ? a_st : NULL; break;
        }
    }
    /* kve_score's rows for the due rows, as the header describes them. */
    kve_score_row sr[4];
    kve_score_desc rd = d;
    rd.heads_per_table = th_n == 1 ? s->n_heads : 1;
    rd.n_rows = 0;
    rd.rows = sr;
    rd.slot_pos = s->lay.slot_pos;
    rd.slot_pos_stride_table = 0;
    rd.scores_stride_table = stride_t;
    rd.cache_rows = NULL;
    for (uint32_t i = 0; i < n_call && !invalid; i++) {
        if (!due[i])
            continue;
        const kve_state_seq_info *q = &info[rows[i]];
        kve_score_row *r = &sr[rd.n_rows++];
        memset(r, 0, sizeof *r);
        r->table_offset = q->table_offset + (uint64_t)tl * th_n * q->capacity;
        r->scores_offset = (uint64_t)i * stride_r + (uint64_t)tl * th_n * stride_t;
        r->n_slots = q->capacity;
        r->table_stride = q->capacity;
        r->prompt_len = q->prompt_len;
        r->window = s->sch.window - (before[i] < s->sch.window ? before[i] : s->sch.window);
        r->round_start = q->n_tokens + before[i];
        r->cache_row = d.cache_rows ? d.cache_rows[i] : (int32_t)i;
    }
    int valid = invalid ? 0 : unsure ? -1 : rd.n_rows ? fz_score_valid(&rd) : 1;
    kve_status rc = kve_state_score(a_st, n_call, a_rows, a_new, tl, a_desc, a_buf, stride_r, stride_t);
    if (valid == 1)
        FZ_CHECK(rc == KVE_OK, "a valid kve_state_score call was refused: %s", kve_status_string(rc));
    if (valid == 0)
        FZ_CHECK(rc != KVE_OK, "an invalid kve_state_score call was accepted");
    if (rc != KVE_OK) {
        FZ_CHECK_ERROR_MESSAGE(rc);
        FZ_CHECK(memcmp(buf, was, ext * 4) == 0, "a refused kve_state_score changed the scores");
    } else if (rd.n_rows && !unsure) {
        ref = (float *)fz_dup(was, ext * 4);
        rd.scores = ref;
        kve_status rr = kve_score(ctx, &rd);
        FZ_CHECK(rr == KVE_OK, "kve_state_score accepted rows kve_score refuses: %s",
                 kve_status_string(rr));
        fz_check_result(&rd, rr, was, ext, valid);
        FZ_CHECK(memcmp(buf, ref, ext * 4) == 0,
                 "kve_state_score differs from kve_score over the same rows and keys");
    } else if (!rd.n_rows) {
        FZ_CHECK(memcmp(buf, was, ext * 4) == 0, "kve_state_score wrote rows whose round is not due");
    }
    free(buf);
    free(was);
    free(ref);
    if (invalid || unsure)
        return;
    /* The append these scores are for: every table layer scored, then used. */
    size_t sr_full = tables * max_cap, n_full = n_call * sr_full;
    float *full = (float *)fz_alloc(n_full * 4, 0);
    if (!full)
        return;
    d.flags &= ~(uint32_t)KVE_SCORE_ACCUMULATE;
    int all_ok = 1;
    for (uint32_t l = 0; l < tl_n && all_ok; l++)
        all_ok = kve_state_score(st, n_call, rows, n_new, l, &d, full, sr_full, max_cap) == KVE_OK;
    if (all_ok) {
        kve_step_buffers out;
        memset(&out, 0, sizeof out);
        out.max_rows = n_call;
        out.scores = full;
        out.scores_stride_row = sr_full;
        out.scores_stride_table = max_cap;
        kve_status ra = kve_state_append(st, n_call, rows, n_new, &out);
        FZ_CHECK(ra == KVE_OK || valid != 1, "the append of scored rows was refused: %s",
                 kve_status_string(ra));
    }
    free(full);
}

/* ------------------------------------------------------------------ */
/* kve_triattention_stats_load                                          */
/* ------------------------------------------------------------------ */

static void fz_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* @p n bytes at @p p in a fresh file of this process; its path in @p path
 * ("" when none could be made). */
static void fz_write_file(char *path, size_t cap, const unsigned char *p, size_t n)
{
    snprintf(path, cap, "/tmp/fuzz_score_%d_XXXXXX", (int)getpid());
    int fd = mkstemp(path);
    if (fd < 0) {
        path[0] = '\0';
        return;
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, p + done, n - done);
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    close(fd);
}

/* A finite float32 of any bits (subnormals, -0, huge ones among them). */
static float fz_any_finite(uint64_t *mix, int nonneg)
{
    uint32_t b = (uint32_t)fz_mix(mix);
    if (((b >> 23) & 255) == 255)
        b &= ~(1u << 30);
    if (nonneg)
        b &= 0x7fffffffu;
    float v;
    memcpy(&v, &b, 4);
    return v;
}

/* A calibration file from decoded sizes and values (docs/SCORERS.md), well
 * formed or damaged one way: a well-formed one loads with exactly its sizes,
 * rope_theta and values; a damaged one is refused with a message and no
 * arrays. */
static void fz_stats_written(fz_bytes *in, uint64_t *mix)
{
    uint32_t nl = 1 + fz_below(in, 3), nh = 1 + fz_below(in, 4), hd = 2 * (1 + fz_below(in, 8));
    uint8_t tsel = fz_u8(in), damage = fz_u8(in);
    static const double thetas[] = {0.0, 10000.0, 500000.0, 1e6, 0.5, 1.0, 1e300, 5e-324};
    double theta = thetas[tsel & 7];
    size_t per = (size_t)nl * nh * (hd / 2), total = 32 + per * 12;
    unsigned char *file = (unsigned char *)calloc(total + 16, 1);
    float *vals = (float *)malloc(per * 12);
    if (!file || !vals) {
        free(file);
        free(vals);
        return;
    }
    for (size_t i = 0; i < per * 3; i++)
        vals[i] = fz_any_finite(mix, i >= per * 2);
    memcpy(file, "KVETRIST", 8);
    fz_put32(file + 8, 1);
    fz_put32(file + 12, nl);
    fz_put32(file + 16, nh);
    fz_put32(file + 20, hd);
    uint64_t tb;
    memcpy(&tb, &theta, 8);
    fz_put32(file + 24, (uint32_t)tb);
    fz_put32(file + 28, (uint32_t)(tb >> 32));
    for (size_t i = 0; i < per * 3; i++) {
        uint32_t b;
        memcpy(&b, &vals[i], 4);
        fz_put32(file + 32 + 4 * i, b);
    }
    size_t len = total;
    int good = 1; /* 1 must load, 0 must be refused, -1 the docs leave it open */
    uint32_t k = damage % 12;
    switch (damage < 96 ? 99 : k) {
    case 0: /* truncated, the header's promise unkept */
        len = fz_below(in, (uint32_t)total);
        good = 0;
        break;
    case 1: /* bytes after the statistics */
        len = total + 1 + fz_below(in, 16);
        for (size_t i = total; i < len; i++)
            file[i] = (unsigned char)fz_mix(mix);
        good = 0;
        break;
    case 2: { /* a size that does not match the statistics */
        uint32_t which = fz_below(in, 3), at = 12 + 4 * which;
        uint32_t v = which == 0 ? nl : which == 1 ? nh : hd;
        v = fz_u8(in) & 1 && v > (which == 2 ? 2u : 1u) ? v - (which == 2 ? 2 : 1)
                                                         : v + (which == 2 ? 2 : 1);
        fz_put32(file + at, v);
        good = 0;
        break;
    }
    case 3: /* bad magic */
        file[fz_below(in, 8)] ^= (unsigned char)(1 + fz_below(in, 255));
        good = 0;
        break;
    case 4: /* bad version */
        fz_put32(file + 8, fz_u8(in) & 1 ? 0 : 2 + fz_u32(in) % 0xfffffffdu);
        good = 0;
        break;
    case 5: { /* a size out of range */
        static const uint32_t bad_sizes[] = {0, 65537, 0xffffffffu, 0x80000000u};
        uint32_t which = fz_below(in, 3);
        uint32_t v = which == 2 ? (fz_u8(in) & 1 ? 514 + 2 * fz_below(in, 8) : hd + 1)
                                : bad_sizes[fz_below(in, 4)];
        if (which == 2 && fz_u8(in) < 64)
            v = 0;
        fz_put32(file + 12 + 4 * which, v);
        good = 0;
        break;
    }
    case 6: { /* sizes at the top of their range, a file far too short */
        fz_put32(file + 12, 65536);
        fz_put32(file + 16, 65536);
        fz_put32(file + 20, 512);
        good = 0;
        break;
    }
    case 7: { /* a q_mean that is no number */
        uint32_t b = fz_u8(in) & 1 ? 0x7f800000u : 0xffc00001u;
        fz_put32(file + 32 + 4 * fz_below(in, (uint32_t)(per * 2)), b);
        good = 0;
        break;
    }
    case 8: { /* a q_abs_mean below 0 or no number */
        static const uint32_t bad_abs[] = {0xbf800000u, 0x80000001u, 0x7fc00000u, 0xff800000u,
                                           0x80000000u};
        uint32_t sel = fz_below(in, 5);
        fz_put32(file + 32 + 4 * (per * 2 + fz_below(in, (uint32_t)per)), bad_abs[sel]);
        good = sel == 4 ? -1 : 0; /* -0.0: ">= 0" as a number, but the docs do not say */
        break;
    }
    case 9: { /* a rope_theta that is no number, or negative */
        static const uint64_t bad_theta[] = {0x7ff8000000000000ull, 0x7ff0000000000000ull,
                                             0xfff0000000000000ull, 0xbff0000000000000ull};
        uint32_t sel = fz_below(in, 4);
        fz_put32(file + 24, (uint32_t)bad_theta[sel]);
        fz_put32(file + 28, (uint32_t)(bad_theta[sel] >> 32));
        good = sel == 3 ? -1 : 0; /* negative: the docs do not say */
        break;
    }
    case 10: /* shorter than the header */
        len = fz_below(in, 32);
        good = 0;
        break;
    default: /* well formed */
        break;
    }
    char path[64];
    fz_write_file(path, sizeof path, file, len);
    if (path[0]) {
        kve_triattention_stats s;
        memset(&s, 0x5a, sizeof s);
        kve_status st = kve_triattention_stats_load(path, &s);
        if (good == 1) {
            FZ_CHECK(st == KVE_OK, "a well-formed calibration file (%u x %u x %u) was refused: %s",
                     nl, nh, hd, kve_status_string(st));
        } else if (good == 0) {
            FZ_CHECK(st != KVE_OK, "a damaged calibration file (damage %u) was accepted", k);
        }
        if (st == KVE_OK) {
            FZ_CHECK(s.n_layers == nl && s.n_q_heads == nh && s.head_dim == hd,
                     "loaded sizes %u x %u x %u, written %u x %u x %u", s.n_layers, s.n_q_heads,
                     s.head_dim, nl, nh, hd);
            FZ_CHECK(s.q_mean && s.q_abs_mean, "a load without arrays");
            if (good == 1) {
                FZ_CHECK(memcmp(&s.rope_theta, &theta, 8) == 0, "rope_theta %g, written %g",
                         s.rope_theta, theta);
                FZ_CHECK(memcmp(s.q_mean, vals, per * 8) == 0, "q_mean differs from the file's");
                FZ_CHECK(memcmp(s.q_abs_mean, vals + per * 2, per * 4) == 0,
                         "q_abs_mean differs from the file's");
            }
        } else {
            FZ_CHECK_ERROR_MESSAGE(st);
            FZ_CHECK(!s.q_mean && !s.q_abs_mean, "a failed load left arrays");
        }
        kve_triattention_stats_free(&s);
        unlink(path);
    }
    free(file);
    free(vals);
}

/* The first byte picks: the input's tail as the file (after a valid header
 * prefix or not; the tail stays unread for what follows), or a file written
 * from decoded sizes and values. */
static void fz_stats_file(fz_bytes *in, uint64_t *mix)
{
    uint8_t sel = fz_u8(in);
    if (sel >= 192) {
        fz_stats_written(in, mix);
        return;
    }
    size_t n = in->n + 12;
    unsigned char *buf = (unsigned char *)malloc(n);
    if (!buf)
        return;
    size_t at = 0;
    if (sel < 128) {
        memcpy(buf, "KVETRIST\x01\0\0\0", 12);
        at = 12;
    }
    if (in->n)
        memcpy(buf + at, in->p, in->n);
    char path[64];
    fz_write_file(path, sizeof path, buf, at + in->n);
    free(buf);
    if (!path[0])
        return;
    kve_triattention_stats s;
    kve_status st = kve_triattention_stats_load(path, &s);
    if (st != KVE_OK) {
        FZ_CHECK_ERROR_MESSAGE(st);
        FZ_CHECK(!s.q_mean && !s.q_abs_mean, "a failed load left arrays");
    } else {
        size_t n_st = (size_t)s.n_layers * s.n_q_heads * (s.head_dim / 2);
        FZ_CHECK(at + in->n == 32 + n_st * 12, "a load of %zu bytes for %zu statistics",
                 at + in->n, n_st * 3);
        volatile float sink = 0;
        for (size_t i = 0; i < n_st; i++)
            sink += s.q_mean[2 * i] + s.q_mean[2 * i + 1] + s.q_abs_mean[i];
        (void)sink;
    }
    kve_triattention_stats_free(&s);
    unlink(path);
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
    fz_scored_state s;
    memset(&s, 0, sizeof s);
    if (fz_state_setup(&in, ctx, &s, &mix)) {
        uint32_t steps = 1 + fz_below(&in, 8);
        for (uint32_t i = 0; i < steps; i++)
            fz_state_step(&in, ctx, &s);
        fz_state_free(&s);
    }
    return 0;
}
