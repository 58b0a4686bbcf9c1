/*
 * fuzz_score_model.c — the fuzz_score harness's model of include/kvevict.h
 * for a kve_score call: which calls are valid (fz_score_valid), SPEC §3's
 * candidates recomputed, a float64 reference of each candidate's score, and
 * the checks of a call's status and outputs against them (fz_check_result).
 */
#include <math.h>

#include "fuzz_score.h"

void fz_fill_scores(float *sc, size_t from, size_t to, uint32_t flags)
{
    uint32_t canary = FZ_CANARY;
    for (size_t i = from; i < to; i++) {
        if (flags & KVE_SCORE_ACCUMULATE)
            sc[i] = (float)(i % 7) - 3.0f;
        else
            memcpy(&sc[i], &canary, 4);
    }
}

/* Whether slot @p s of table @p tab (@p n slots) is a candidate of SPEC §3:
 * a generated position (at or past prompt @p p) with at least @p w newer
 * generated positions in the table, so outside the window. */
static int fz_candidate(const int32_t *tab, uint32_t n, uint32_t p, uint32_t w, uint32_t s)
{
    if (tab[s] < 0 || (uint32_t)tab[s] < p)
        return 0;
    uint32_t newer = 0;
    for (uint32_t t = 0; t < n; t++)
        newer += tab[t] >= 0 && (uint32_t)tab[t] >= p && tab[t] > tab[s];
    return newer >= w;
}

size_t fz_dtype_size(kve_dtype t) { return t == KVE_DTYPE_F32 ? 4 : 2; }

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
    size_t e = (size_t)k->head_dim * fz_dtype_size(k->dtype), h = k->n_heads, ps = k->pages.page_size;
    int nhd = k->layout == KVE_LAYOUT_NHD;
    *sh = k->stride_head ? k->stride_head : nhd ? e : ps * e;
    *ss = k->stride_slot ? k->stride_slot : nhd ? h * e : e;
    *sp = k->stride_page ? k->stride_page : ps * h * e;
}

/* The INDPTR arrays as kve_cache_write's header asks: indptr[0] = 0, never
 * decreasing. */
static int fz_indptr_ok(const kve_key_cache *k)
{
    if (k->pages.indptr[0] != 0)
        return 0;
    for (uint32_t r = 0; r < k->pages.n_rows; r++)
        if (k->pages.indptr[r + 1] < k->pages.indptr[r])
            return 0;
    return 1;
}

/* Page and in-page slot of slot @p slot of page-table row @p row, as the
 * header finds them: 1, 0 when the page table does not hold that slot, -1
 * when the header leaves it open (a last_page_len outside 1..page_size, an
 * indptr against kve_cache_write's rule). @p row is valid for the table. */
static int fz_locate(const kve_key_cache *k, int32_t row, uint32_t slot, size_t *page, size_t *in)
{
    uint64_t ps = k->pages.page_size;
    *in = (size_t)(slot % ps);
    switch (k->pages.kind) {
    case KVE_PAGES_FLAT: {
        uint64_t flat = (uint64_t)row * ps + slot;
        *page = (size_t)(flat / ps);
        return flat / ps < k->pages.n_pages;
    }
    case KVE_PAGES_NONE:
        *page = (size_t)row;
        return slot < ps;
    case KVE_PAGES_BLOCK_TABLE: {
        if (slot / ps >= k->pages.blocks_per_row)
            return 0;
        int32_t pg = k->pages.block_table[(size_t)row * k->pages.blocks_per_row + slot / ps];
        *page = (size_t)pg;
        return pg >= 0 && (uint32_t)pg < k->pages.n_pages;
    }
    case KVE_PAGES_INDPTR: {
        if (!fz_indptr_ok(k))
            return -1;
        int32_t lo = k->pages.indptr[row], hi = k->pages.indptr[row + 1], last = k->pages.last_page_len[row];
        if (hi == lo)
            return 0;
        if (last < 1 || (uint32_t)last > ps)
            return -1;
        if ((uint64_t)slot >= (uint64_t)(hi - lo - 1) * ps + (uint64_t)last)
            return 0;
        int32_t pg = k->pages.indices[lo + slot / ps];
        *page = (size_t)pg;
        return pg >= 0 && (uint32_t)pg < k->pages.n_pages;
    }
    }
    return -1;
}

const unsigned char *fz_key_at(const kve_key_cache *k, size_t page, size_t in, uint32_t h)
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

/* The checks of fz_score_valid on the scorer, flags, weight and key cache,
 * up to the number of query heads a table scores: 1 when all pass. */
static int fz_key_cache_valid(const kve_score_desc *d)
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
    if ((unsigned)k->layout > KVE_LAYOUT_HND || (unsigned)k->pages.kind > KVE_PAGES_FLAT)
        return 0;
    if (!k->base || k->n_heads == 0 || k->pages.page_size == 0 || k->pages.n_pages == 0)
        return -1;
    if (k->pages.kind != KVE_PAGES_FLAT && k->pages.n_rows == 0)
        return -1;
    if (k->pages.kind == KVE_PAGES_NONE && k->pages.n_rows > k->pages.n_pages)
        return 0;
    if (k->pages.kind == KVE_PAGES_BLOCK_TABLE && (!k->pages.block_table || !k->pages.blocks_per_row))
        return -1;
    if (k->pages.kind == KVE_PAGES_INDPTR && (!k->pages.indptr || !k->pages.indices || !k->pages.last_page_len))
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
    return 1;
}

/* The checks of fz_score_valid on a TriAttention call's parameters (not
 * whether its statistics are numbers: that only makes the verdict open). */
static int fz_tri_params_valid(const kve_triattention_params *t)
{
    if (t->group == 0 || t->n_offsets > KVE_SCORE_MAX_OFFSETS)
        return 0;
    if (!t->omega && !(isfinite(t->rope_theta) && t->rope_theta > 1.0))
        return 0;
    if (t->offsets && !fz_finite_all(t->offsets, t->n_offsets))
        return 0;
    if (!t->q_mean || !t->q_abs_mean || !t->offsets != !t->n_offsets)
        return -1;
    return 1;
}

/* Whether the output rows of row @p i's tables meet one of an earlier row's
 * or an earlier table's of the same row: distinct tables' never may. */
static int fz_outputs_meet(const kve_score_desc *d, uint32_t i, uint32_t n_tables)
{
    const kve_score_row *r = &d->rows[i];
    for (uint32_t t = 0; t < n_tables && r->n_slots; t++) {
        uint64_t a0 = r->scores_offset + (uint64_t)t * d->scores_stride_table;
        for (uint32_t j = 0; j <= i; j++) {
            const kve_score_row *q = &d->rows[j];
            for (uint32_t u = 0; u < n_tables && q->n_slots && (j < i || u < t); u++) {
                uint64_t b0 = q->scores_offset + (uint64_t)u * d->scores_stride_table;
                if (a0 < b0 + q->n_slots && b0 < a0 + r->n_slots)
                    return 1;
            }
        }
    }
    return 0;
}

/* fz_score_valid's verdict on one table @p tab of row @p r: positions below
 * -1 are refused, and every candidate must be in the key cache. */
static int fz_table_valid(const kve_key_cache *k, const kve_score_row *r, const int32_t *tab)
{
    for (uint32_t s = 0; s < r->n_slots; s++)
        if (tab[s] < -1)
            return 0;
    int dup = fz_has_dup(tab, r->n_slots), sure = 1;
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
    return sure;
}

/* fz_score_valid's verdict on row @p i: its slot count, strides, cache row,
 * output rows and tables. */
static int fz_row_valid(const kve_score_desc *d, uint32_t i, uint32_t n_tables)
{
    const kve_key_cache *k = &d->keys;
    const kve_score_row *r = &d->rows[i];
    size_t ts = fz_table_stride(d, r);
    if (r->n_slots > INT32_MAX)
        return 0;
    if (n_tables > 1 && r->n_slots && (ts < r->n_slots || d->scores_stride_table < r->n_slots))
        return 0;
    if (k->pages.kind == KVE_PAGES_FLAT ? r->cache_row < 0
                                        : r->cache_row < 0 || (uint32_t)r->cache_row >= k->pages.n_rows)
        return 0;
    if (fz_outputs_meet(d, i, n_tables))
        return 0;
    int sure = 1;
    for (uint32_t t = 0; t < n_tables; t++) {
        int v = fz_table_valid(k, r, d->slot_pos + r->table_offset + t * ts);
        if (v == 0)
            return 0;
        if (v < 0)
            sure = -1;
    }
    return sure;
}

int fz_score_valid(const kve_score_desc *d)
{
    int v = fz_key_cache_valid(d);
    if (v != 1)
        return v;
    if (d->scorer == KVE_SCORER_TRIATTENTION && (v = fz_tri_params_valid(&d->tri)) != 1)
        return v;
    int sure = fz_tri_clean(d) ? 1 : -1;
    if (d->n_rows == 0)
        return sure;
    if (!d->rows || !d->slot_pos || !d->scores)
        return -1;
    uint32_t n_tables = d->keys.n_heads / fz_hpt(d);
    for (uint32_t i = 0; i < d->n_rows; i++) {
        v = fz_row_valid(d, i, n_tables);
        if (v == 0)
            return 0;
        if (v < 0)
            sure = -1;
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

/* Whether every candidate of table @p t of @p row has a modest number in
 * every element of each of the table's heads' keys. */
static int fz_table_tame(const kve_score_desc *d, const kve_score_row *row, uint32_t t,
                         const int32_t *tab)
{
    uint32_t hpt = fz_hpt(d);
    int tame = 1;
    for (uint32_t s = 0; s < row->n_slots && tame; s++)
        if (fz_candidate(tab, row->n_slots, row->prompt_len, row->window, s))
            for (uint32_t h = t * hpt; h < (t + 1) * hpt && tame; h++)
                tame = fz_key_tame(&d->keys, row->cache_row, s, h);
    return tame;
}

/* Candidate slot @p s of table @p t of row @p r scored @p got: the float64
 * reference (the best of the table's query heads, weighted, added to what
 * the element held @p was when accumulating) within docs/SCORERS.md's
 * tolerances. */
static void fz_check_reference(const kve_score_desc *d, uint32_t r, uint32_t t, uint32_t s,
                               float was, float got)
{
    const kve_score_row *row = &d->rows[r];
    int32_t pos = d->slot_pos[row->table_offset + t * fz_table_stride(d, row) + s];
    int acc = (d->flags & KVE_SCORE_ACCUMULATE) != 0;
    double w = d->weight != 0.0f ? (double)d->weight : 1.0;
    uint32_t hpt = fz_hpt(d), nq = d->scorer == KVE_SCORER_KNORM ? hpt : hpt * d->tri.group;
    double best = -INFINITY, tol = 0;
    for (uint32_t q = t * nq; q < (t + 1) * nq; q++) {
        double mag, v = fz_raw_ref(d, row, s, q, &mag);
        best = v > best ? v : best;
        tol = mag > tol ? mag : tol;
    }
    double want = (acc ? (double)was : 0.0) + w * best;
    double lim = 1e-4 * fabs(w) * (1.0 + tol) + 1e-6 * fabs(want) + 1e-6;
    FZ_CHECK(fabs((double)got - want) <= lim,
             "row %u table %u slot %u (position %d, %s): score %.9g, reference %.9g "
             "(tolerance %.3g)",
             r, t, s, pos, d->scorer == KVE_SCORER_KNORM ? "K-norm" : "TriAttention", got, want,
             lim);
}

/* Table @p t of row @p r of a KVE_OK call: non-candidates at 0 (untouched
 * when accumulating), candidates finite and, without ZNORM, equal to the
 * reference. @p clean: the TriAttention inputs are numbers all through. */
static void fz_check_table(const kve_score_desc *d, uint32_t r, uint32_t t, const float *before,
                           int clean)
{
    const kve_score_row *row = &d->rows[r];
    const int32_t *tab = d->slot_pos + row->table_offset + t * fz_table_stride(d, row);
    size_t o = row->scores_offset + t * d->scores_stride_table;
    int acc = (d->flags & KVE_SCORE_ACCUMULATE) != 0;
    /* A table holding a position twice is no keep-set table (SPEC §3):
     * which of the twins the window takes is not defined, so only
     * tables of distinct positions are held to the candidate rule. */
    if (fz_has_dup(tab, row->n_slots))
        return;
    /* Keys copied from a misaligned layout hold any bits: a table
     * with a key not a modest number has no value to check (its
     * z-scores share the candidates' moments). */
    int tame = fz_table_tame(d, row, t, tab);
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
        FZ_CHECK(isfinite(got), "row %u table %u slot %u (position %d): candidate score %g", r,
                 t, s, tab[s], got);
        if (!(d->flags & KVE_SCORE_ZNORM))
            fz_check_reference(d, r, t, s, before[o + s], got);
    }
}

/* A KVE_OK call's outputs against the header: each table's non-candidates
 * at 0 (untouched when accumulating), its candidates finite (written: a
 * storing call's buffer held NaNs) and, without ZNORM, equal to the float64
 * reference within docs/SCORERS.md's tolerances; no element outside the
 * output rows changed. */
static void fz_check_ok(const kve_score_desc *d, const float *before, size_t n)
{
    uint32_t n_tables = d->keys.n_heads / fz_hpt(d);
    uint8_t *in_row = (uint8_t *)calloc(n ? n : 1, 1);
    int clean = fz_tri_clean(d);
    for (uint32_t r = 0; r < d->n_rows; r++) {
        const kve_score_row *row = &d->rows[r];
        for (uint32_t t = 0; t < n_tables; t++) {
            size_t o = row->scores_offset + t * d->scores_stride_table;
            for (uint32_t s = 0; s < row->n_slots && in_row; s++)
                in_row[o + s] = 1;
            fz_check_table(d, r, t, before, clean);
        }
    }
    for (size_t i = 0; i < n && in_row; i++)
        FZ_CHECK(in_row[i] || memcmp(&d->scores[i], &before[i], 4) == 0,
                 "scores[%zu], in no output row, changed to %g", i, d->scores[i]);
    free(in_row);
}

void fz_check_result(const kve_score_desc *d, kve_status st, const float *before, size_t n,
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
