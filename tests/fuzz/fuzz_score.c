/*
 * fuzz_score — kve_score over every layout, page table and key type, with
 * out-of-range rows, slots, pages, strides and TriAttention inputs, in
 * exact-size buffers; kve_state_score on a small state; and
 * kve_triattention_stats_load on the input's tail written to a file. An
 * error must come with a message and leave the scores as they were; a
 * KVE_OK must leave every non-candidate slot (SPEC §3, recomputed here) at
 * 0, or untouched when accumulating.
 */
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
    for (size_t i = 0; i < *n_scores; i++)
        f->scores[i] = (float)(i % 7) - 3.0f;
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
        for (size_t i = *n_scores; i < need_s; i++)
            sc[i] = (float)(i % 7) - 3.0f;
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

static void fz_check_result(const kve_score_desc *d, kve_status st, const float *before,
                            size_t n)
{
    if (st != KVE_OK) {
        FZ_CHECK_ERROR_MESSAGE(st);
        FZ_CHECK(memcmp(before, d->scores, n * 4) == 0, "an error changed the scores");
        return;
    }
    uint32_t hpt = d->heads_per_table ? d->heads_per_table : 1;
    for (uint32_t r = 0; r < d->n_rows; r++) {
        const kve_score_row *row = &d->rows[r];
        for (uint32_t t = 0; t < d->keys.n_heads / hpt; t++) {
            size_t ts = row->table_stride ? row->table_stride : d->slot_pos_stride_table;
            const int32_t *tab = d->slot_pos + row->table_offset + t * ts;
            size_t o = row->scores_offset + t * d->scores_stride_table;
            /* A table holding a position twice is no keep-set table (SPEC §3):
             * which of the twins the window takes is not defined, so only
             * tables of distinct positions are held to the candidate rule. */
            int dup = 0;
            for (uint32_t a = 0; a < row->n_slots && !dup; a++)
                for (uint32_t b = a + 1; b < row->n_slots && tab[a] >= 0; b++)
                    dup |= tab[a] == tab[b];
            for (uint32_t s = 0; s < row->n_slots && !dup; s++) {
                if (fz_candidate(tab, row->n_slots, row->prompt_len, row->window, s))
                    continue;
                float want = (d->flags & KVE_SCORE_ACCUMULATE) ? before[o + s] : 0.0f;
                FZ_CHECK(memcmp(&d->scores[o + s], &want, 4) == 0,
                         "row %u table %u slot %u: not a candidate, score %g", r, t, s,
                         d->scores[o + s]);
            }
        }
    }
}

static void fz_stats_file(fz_bytes *in)
{
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/fuzz_score_%d.bin", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    if (fz_u8(in) < 128)
        fwrite("KVETRIST\x01\0\0\0", 1, 12, f);
    fwrite(in->p, 1, in->n, f);
    fclose(f);
    kve_triattention_stats s;
    kve_status st = kve_triattention_stats_load(path, &s);
    if (st != KVE_OK) {
        FZ_CHECK_ERROR_MESSAGE(st);
        FZ_CHECK(!s.q_mean && !s.q_abs_mean, "a failed load left arrays");
    } else {
        size_t n = (size_t)s.n_layers * s.n_q_heads * (s.head_dim / 2);
        volatile float sink = 0;
        for (size_t i = 0; i < n; i++)
            sink += s.q_mean[2 * i] + s.q_mean[2 * i + 1] + s.q_abs_mean[i];
        (void)sink;
    }
    kve_triattention_stats_free(&s);
    remove(path);
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
    if (fz_keys(&in, &d, &f, &mix)) {
        d.heads_per_table = fz_u8(&in) < 200 ? 0 : fz_u8(&in) < 200 ? d.keys.n_heads : fz_below(&in, 4);
        if (fz_rows(&in, &d, &f, &n_scores) && fz_tri(&in, &d, &f)) {
            f.before = (float *)fz_dup(f.scores, n_scores * 4);
            kve_status st = kve_score(ctx, &d);
            fz_check_result(&d, st, f.before, n_scores);
        }
    }
    fz_free(&f);
    fz_stats_file(&in);
    return 0;
}
