/*
 * score_cpu.c — the CPU backend's kve_score: OpenMP across (row, table)
 * items (static schedule, one thread per item, so results do not depend
 * on the thread count). The math is common/device/score_body.h's; a key
 * is converted to float once per slot and its |k_f| computed once for the
 * group of query heads reading it, then the ISA's kernel takes the dot
 * products (kve_score_kernels).
 */
#include <stdlib.h>
#include <string.h>

#include "device/score_body.h"
#include "kve_backend.h"
#include "kve_cpu_kernels.h"
#include "kve_cpu_threads.h"
#include "kve_error.h"

/* Per-thread scratch: coefficients (planar: per query head a_re[nf],
 * a_im[nf], b[nf]), a key, its |k_f|, the raw scores of every candidate
 * (z-normalization reads them twice), and per-head moments. */
typedef struct kve_score_scratch {
    float *coef, *key, *mag, *raw, *stats;
} kve_score_scratch;

/* Raw scores of the table's nq heads at slot @p s into @p raw; 0 when a
 * key lies outside the cache (the host checks make that impossible). */
static int kve_score_slot(const kve_score_args *a, const kve_score_kernels *kk,
                          const kve_score_row *r, uint32_t table, uint32_t s,
                          kve_score_scratch *w, float *raw)
{
    const kve_score_desc *d = &a->d;
    int tri = d->scorer == KVE_SCORER_TRIATTENTION;
    uint32_t group = tri ? d->tri.group : 1, dim = d->keys.head_dim;
    for (uint32_t hh = 0; hh < a->hpt; hh++) {
        int why = 0;
        const unsigned char *key = kve_score_locate_key(a, r, s, table * a->hpt + hh, &why);
        if (!key)
            return 0;
        kk->load(key, d->keys.dtype, dim, w->key);
        if (tri)
            kk->group(w->coef + (size_t)hh * group * 3 * a->nf, w->key, w->mag, a->nf, group,
                      raw + (size_t)hh * group);
        else
            raw[hh] = kk->knorm(w->key, dim);
    }
    return 1;
}

/* One (row, table) item. */
static int kve_score_item(const kve_score_args *a, const kve_score_kernels *kk, uint32_t ri,
                          uint32_t table, const double *phase, kve_score_scratch *w)
{
    const kve_score_desc *d = &a->d;
    const kve_score_row *r = &d->rows[ri];
    const int32_t *tab = d->slot_pos + r->table_offset + (size_t)table * kve_score_table_stride(d, r);
    float *out = d->scores + r->scores_offset + (size_t)table * d->scores_stride_table;
    int zn = (d->flags & KVE_SCORE_ZNORM) != 0, acc = (d->flags & KVE_SCORE_ACCUMULATE) != 0;
    uint32_t nq = a->nq;
    if (d->scorer == KVE_SCORER_TRIATTENTION)
        for (uint32_t j = 0; j < nq; j++)
            for (uint32_t f = 0; f < a->nf; f++) {
                float c[3];
                kve_score_coef(a, table, j, f, phase + 2 * ((size_t)ri * a->nf + f), c);
                for (int k = 0; k < 3; k++)
                    w->coef[((size_t)j * 3 + k) * a->nf + f] = c[k];
            }
    uint32_t x = kve_score_bound_seq(tab, r), n = 0;
    for (uint32_t s = 0; s < r->n_slots; s++) {
        if (!kve_score_candidate(tab[s], r->prompt_len, x))
            continue;
        if (!kve_score_slot(a, kk, r, table, s, w, w->raw + (size_t)n * nq))
            return 0;
        n++;
    }
    for (uint32_t j = 0; zn && j < nq; j++) {
        double s1 = 0, s2 = 0;
        for (uint32_t c = 0; c < n; c++) {
            double v = w->raw[(size_t)c * nq + j];
            s1 += v;
            s2 += v * v;
        }
        kve_score_moments(s1, s2, n, &w->stats[2 * j], &w->stats[2 * j + 1]);
    }
    uint32_t c = 0;
    for (uint32_t s = 0; s < r->n_slots; s++) {
        if (!kve_score_candidate(tab[s], r->prompt_len, x)) {
            if (!acc)
                out[s] = 0.0f;
            continue;
        }
        const float *v = w->raw + (size_t)c++ * nq;
        float best = 0.0f;
        for (uint32_t j = 0; j < nq; j++) {
            float z = zn ? (v[j] - w->stats[2 * j]) * w->stats[2 * j + 1] : v[j];
            best = j == 0 || z > best ? z : best;
        }
        kve_score_put(a, &out[s], best);
    }
    return 1;
}

static void kve_score_scratch_free(kve_score_scratch *w)
{
    free(w->coef);
    free(w->key);
    free(w->mag);
    free(w->raw);
    free(w->stats);
}

static int kve_score_scratch_alloc(kve_score_scratch *w, const kve_score_args *a,
                                   uint32_t max_slots)
{
    size_t nq = a->nq, nf = a->nf;
    w->coef = (float *)malloc((nq * nf * 3 + 16) * sizeof(float));
    w->key = (float *)malloc((2 * nf + 16) * sizeof(float));
    w->mag = (float *)malloc((nf + 16) * sizeof(float));
    w->raw = (float *)malloc(((size_t)max_slots * nq + 1) * sizeof(float));
    w->stats = (float *)malloc((2 * nq + 1) * sizeof(float));
    return w->coef && w->key && w->mag && w->raw && w->stats;
}

/* One kve_cpu_score call, shared by its threads. */
typedef struct {
    const kve_score_args *a;
    const kve_score_kernels *kk;
    uint32_t max_slots;
    const double *phase;
} kve_score_call;

enum { KVE_SCORE_NOMEM = 1, KVE_SCORE_BAD = 2 };

/* One thread's items (a table of a row each), with its own scratch. */
static int kve_score_range(void *arg, size_t lo, size_t hi, int thread)
{
    (void)thread;
    const kve_score_call *c = (const kve_score_call *)arg;
    kve_score_scratch w;
    int got = kve_score_scratch_alloc(&w, c->a, c->max_slots) ? 0 : KVE_SCORE_NOMEM;
    for (size_t it = lo; it < hi && !got; it++)
        if (!kve_score_item(c->a, c->kk, (uint32_t)(it / c->a->n_tables),
                            (uint32_t)(it % c->a->n_tables), c->phase, &w))
            got = KVE_SCORE_BAD;
    kve_score_scratch_free(&w);
    return got;
}

kve_status kve_cpu_score(kve_context *ctx, const kve_score_desc *d)
{
    kve_score_args a;
    kve_score_args_init(&a, d, NULL);
    uint32_t max_slots = 0;
    for (uint32_t i = 0; i < d->n_rows; i++)
        max_slots = d->rows[i].n_slots > max_slots ? d->rows[i].n_slots : max_slots;
    /* A row's phase factors serve all its tables. */
    double *phase = NULL;
    if (d->scorer == KVE_SCORER_TRIATTENTION) {
        phase = (double *)malloc((size_t)d->n_rows * a.nf * 2 * sizeof(double));
        KVE_RETURN_ERROR_IF(!phase, KVE_ERR_NOMEM, "kve_score: cannot allocate %u rows' phases",
                            d->n_rows);
        for (uint32_t i = 0; i < d->n_rows; i++)
            for (uint32_t f = 0; f < a.nf; f++)
                kve_score_phase(&a, f, d->rows[i].round_start, phase + 2 * ((size_t)i * a.nf + f));
    }
    kve_score_call c = {&a, kve_score_kernels_get(ctx->isa), max_slots, phase};
    int got = kve_cpu_parallel(ctx->threads, (size_t)d->n_rows * a.n_tables, kve_score_range, &c);
    free(phase);
    KVE_RETURN_ERROR_IF(got & KVE_SCORE_NOMEM, KVE_ERR_NOMEM,
                        "kve_score: cannot allocate the CPU scratch (%u slots x %u heads a thread)",
                        max_slots, a.nq);
    return got ? kve_error_set(KVE_ERR_INTERNAL, "kve_score: a checked key lies outside the cache")
               : KVE_OK;
}
