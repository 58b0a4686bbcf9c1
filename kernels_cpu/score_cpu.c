/*
 * score_cpu.c — the CPU's scorer kernel (the op score is backends/cpu.c's):
 * OpenMP across (row, table)
 * items (static schedule, one thread per item, so results do not depend
 * on the thread count). The math is common/score_body.h's. An item
 * finds its candidates first (score_window.c), looks their keys up one
 * page at a time, then streams over the keys (the ISA's knorm_keys /
 * group_keys: bf16 / f16 / f32 widened in registers, prefetched ahead, the
 * per-key kernels' exact operations), then z-normalizes and writes.
 * Nothing is allocated: each thread carves its buffers from the caller's
 * scratch (a state's, sized at creation, or the driver's own), and the
 * rotation's phase factors are computed per thread when the row's round
 * start changes (the same values a per-row table held).
 */
#include <string.h>

#include "kve_cpu_kernels.h"
#include "kve_cpu_threads.h"
#include "kve_error.h"
#include "kve_jobs.h"
#include "score_body.h"

/* Per-thread scratch: coefficients (planar: per query head a_re[nf],
 * a_im[nf], b[nf]), a key, its |k_f|, the raw scores of every candidate
 * (z-normalization reads them three times), per-head moments, the phase
 * factors of the round start t0 (when has_t0), the candidates' slots,
 * generated positions and select scratch, and their keys' addresses. */
typedef struct kve_score_scratch {
    float *coef, *key, *mag, *raw;
    double *stats, *phase;
    uint32_t *cand, *gen, *tmp;
    const unsigned char **kp;
    uint32_t t0, has_t0;
} kve_score_scratch;

enum { KVE_SCORE_PIECES = 10 };

/* The bytes of each piece of kve_score_scratch (in its order) for nq query
 * heads, nf frequencies and rows of up to max_slots slots; a TriAttention
 * table has at most KVE_SCORE_MAX_COEFS coefficients, K-norm none. */
static void kve_score_pieces(uint64_t nq, uint64_t nf, uint64_t max_slots,
                             uint64_t bytes[KVE_SCORE_PIECES])
{
    uint64_t coefs = nq * nf < KVE_SCORE_MAX_COEFS ? nq * nf : KVE_SCORE_MAX_COEFS,
             ns = max_slots + 16;
    bytes[0] = (coefs * 3 + 16) * sizeof(float);
    bytes[1] = (2 * nf + 16) * sizeof(float);
    bytes[2] = (nf + 16) * sizeof(float);
    bytes[3] = (max_slots * nq + 1) * sizeof(float);
    bytes[4] = (2 * nq + 1) * sizeof(double);
    bytes[5] = (2 * nf + 1) * sizeof(double);
    bytes[6] = bytes[7] = bytes[8] = ns * sizeof(uint32_t);
    bytes[9] = ns * sizeof(const unsigned char *);
}

size_t kve_cpu_score_thread_bytes(uint32_t nq, uint32_t nf, uint32_t max_slots)
{
    uint64_t bytes[KVE_SCORE_PIECES], sum = 0;
    kve_score_pieces(nq, nf, max_slots, bytes);
    for (int k = 0; k < KVE_SCORE_PIECES; k++)
        sum += KVE_ALIGN_UP(bytes[k], 64);
    return sum > SIZE_MAX / 2 ? SIZE_MAX : (size_t)sum;
}

/* Thread @p thread's buffers in @p base (kve_cpu_score_thread_bytes each). */
static void kve_score_scratch_at(kve_score_scratch *w, char *base, const kve_score_args *a,
                                 uint32_t max_slots)
{
    uint64_t bytes[KVE_SCORE_PIECES];
    void *at[KVE_SCORE_PIECES];
    kve_score_pieces(a->nq, a->nf, max_slots, bytes);
    for (int k = 0; k < KVE_SCORE_PIECES; k++) {
        at[k] = base;
        base += KVE_ALIGN_UP(bytes[k], 64);
    }
    w->coef = (float *)at[0];
    w->key = (float *)at[1];
    w->mag = (float *)at[2];
    w->raw = (float *)at[3];
    w->stats = (double *)at[4];
    w->phase = (double *)at[5];
    w->cand = (uint32_t *)at[6];
    w->gen = (uint32_t *)at[7];
    w->tmp = (uint32_t *)at[8];
    w->kp = (const unsigned char **)at[9];
    w->has_t0 = 0;
}

/* The addresses of KV head @p h's keys at slots cand[0..n) (ascending) of
 * row @p r into kp: one page lookup per page the slots touch, the rest by
 * the slot stride (a page's slots lie at base + in * stride_slot, and a
 * page starts at a multiple of page_size, FLAT's row offset included); 0
 * when a looked-up key lies outside the cache (the host checks make that
 * impossible, and they checked every candidate). */
static int kve_score_addresses(const kve_score_args *a, const kve_score_row *r, uint32_t h,
                               const uint32_t *cand, uint32_t n, const unsigned char **kp)
{
    uint64_t ps = a->d.keys.pages.page_size, end = 0;
    const unsigned char *base = NULL;
    uint32_t first = 0;
    for (uint32_t c = 0; c < n; c++) {
        uint32_t s = cand[c];
        if (!base || s >= end) {
            int why = 0;
            base = kve_score_locate_key(a, r, s, h, &why);
            if (!base)
                return 0;
            first = s;
            end = (s / ps + 1) * ps;
        }
        kp[c] = base + (size_t)(s - first) * a->stride_slot;
    }
    return 1;
}

/* Raw scores of the table's nq heads at its n candidates, raw[c * nq + j]:
 * the ISA's streaming kernels, or its per-key ones where it has none. */
static void kve_score_stream(const kve_score_args *a, const kve_score_kernels *kk,
                             const unsigned char *const *kp, uint32_t n, kve_score_scratch *w)
{
    const kve_score_desc *d = &a->d;
    int tri = d->scorer == KVE_SCORER_TRIATTENTION;
    uint32_t group = tri ? d->tri.group : 1, dim = d->keys.head_dim, nq = a->nq;
    for (uint32_t hh = 0; hh < a->hpt; hh++) {
        size_t off = (size_t)hh * a->stride_head;
        const float *coef = w->coef + (size_t)hh * group * 3 * a->nf;
        float *raw = w->raw + (size_t)hh * group;
        if (tri && kk->group_keys)
            kk->group_keys(coef, kp, off, n, d->keys.dtype, a->nf, group, w->key, w->mag, raw, nq);
        else if (!tri && kk->knorm_keys)
            kk->knorm_keys(kp, off, n, d->keys.dtype, dim, raw, nq);
        else
            for (uint32_t c = 0; c < n; c++) {
                kk->load(kp[c] + off, d->keys.dtype, dim, w->key);
                if (tri)
                    kk->group(coef, w->key, w->mag, a->nf, group, raw + (size_t)c * nq);
                else
                    raw[(size_t)c * nq] = kk->knorm(w->key, dim);
            }
    }
}

/* Mean and 1/std of @p m (1..4) query heads j0 .. j0 + m - 1 over raw[c *
 * nq + j], c < n, into stats: score_body.h's two passes, sums in double in
 * candidate order, the heads' sums side by side in registers (the adds are
 * what takes time; inlined with m = 4, the loops over k are unrolled). */
static inline void kve_score_sums_of(const float *raw, uint32_t n, uint32_t nq, uint32_t j0,
                                     uint32_t m, double *stats)
{
    double s[4] = {0, 0, 0, 0}, mean[4], ss[4] = {0, 0, 0, 0};
    for (uint32_t c = 0; c < n; c++)
        for (uint32_t k = 0; k < m; k++)
            s[k] += raw[(size_t)c * nq + j0 + k];
    for (uint32_t k = 0; k < m; k++)
        mean[k] = kve_score_mean(s[k], n);
    for (uint32_t c = 0; c < n; c++)
        for (uint32_t k = 0; k < m; k++) {
            double dv = (double)raw[(size_t)c * nq + j0 + k] - mean[k];
            ss[k] += dv * dv;
        }
    for (uint32_t k = 0; k < m; k++) {
        stats[2 * (j0 + k)] = mean[k];
        stats[2 * (j0 + k) + 1] = kve_score_inv_std(ss[k], n);
    }
}

/* kve_score_sums_of for the heads j0 .. j0 + 3 below nq. */
static void kve_score_sums(const float *raw, uint32_t n, uint32_t nq, uint32_t j0, double *stats)
{
    if (nq - j0 >= 4)
        kve_score_sums_of(raw, n, nq, j0, 4, stats);
    else
        kve_score_sums_of(raw, n, nq, j0, nq - j0, stats);
}

/* One (row, table) item: candidates, their keys' raw scores, the moments
 * (per head, two passes of sums in double in candidate order), the outputs. */
static int kve_score_item(const kve_score_args *a, const kve_score_kernels *kk, uint32_t ri,
                          uint32_t table, kve_score_scratch *w)
{
    const kve_score_desc *d = &a->d;
    const kve_score_row *r = &d->rows[ri];
    const int32_t *tab = d->slot_pos + r->table_offset + (size_t)table * kve_score_table_stride(d, r);
    float *out = d->scores + r->scores_offset + (size_t)table * d->scores_stride_table;
    int zn = (d->flags & KVE_SCORE_ZNORM) != 0, acc = (d->flags & KVE_SCORE_ACCUMULATE) != 0;
    uint32_t nq = a->nq;
    if (d->scorer == KVE_SCORER_TRIATTENTION && (!w->has_t0 || w->t0 != r->round_start)) {
        /* a row's phase factors serve all its tables, and every row whose
         * round starts at the same position (a batch decoding in step) */
        for (uint32_t f = 0; f < a->nf; f++)
            kve_score_phase(a, f, r->round_start, w->phase + 2 * f);
        w->t0 = r->round_start;
        w->has_t0 = 1;
    }
    if (d->scorer == KVE_SCORER_TRIATTENTION)
        for (uint32_t j = 0; j < nq; j++)
            for (uint32_t f = 0; f < a->nf; f++) {
                float c[3];
                kve_score_coef(a, table, j, f, w->phase + 2 * f, c);
                for (int k = 0; k < 3; k++)
                    w->coef[((size_t)j * 3 + k) * a->nf + f] = c[k];
            }
    uint32_t n = kk->cands(tab, r, w->gen, w->cand, w->tmp);
    if (!kve_score_addresses(a, r, table * a->hpt, w->cand, n, w->kp))
        return 0;
    kve_score_stream(a, kk, w->kp, n, w);
    for (uint32_t j = 0; zn && j < nq; j += 4)
        kve_score_sums(w->raw, n, nq, j, w->stats);
    if (!acc)
        memset(out, 0, (size_t)r->n_slots * sizeof *out);
    if (nq == 1) { /* one head: its z-score (K-norm's per-head tables) */
        double mean = zn ? w->stats[0] : 0.0, inv = zn ? w->stats[1] : 1.0;
        for (uint32_t c = 0; c < n; c++)
            kve_score_put(a, &out[w->cand[c]], zn ? kve_score_z(w->raw[c], mean, inv) : w->raw[c]);
        return 1;
    }
    for (uint32_t c = 0; c < n; c++) {
        const float *v = w->raw + (size_t)c * nq;
        float best = 0.0f;
        for (uint32_t j = 0; j < nq; j++) {
            float z = zn ? kve_score_z(v[j], w->stats[2 * j], w->stats[2 * j + 1]) : v[j];
            best = j == 0 || z > best ? z : best;
        }
        kve_score_put(a, &out[w->cand[c]], best);
    }
    return 1;
}

/* One kve_cpu_score_run call, shared by its threads. */
typedef struct {
    const kve_score_args *a;
    const kve_score_kernels *kk;
    uint32_t max_slots;
    char *scratch;
    size_t per; /* bytes of a thread's scratch */
} kve_cpu_score_job;

/* One thread's items (a table of a row each), with its own scratch. */
static int kve_score_range(void *arg, size_t lo, size_t hi, int thread)
{
    const kve_cpu_score_job *c = (const kve_cpu_score_job *)arg;
    kve_score_scratch w;
    kve_score_scratch_at(&w, c->scratch + (size_t)thread * c->per, c->a, c->max_slots);
    for (size_t it = lo; it < hi; it++)
        if (!kve_score_item(c->a, c->kk, (uint32_t)(it / c->a->n_tables),
                            (uint32_t)(it % c->a->n_tables), &w))
            return 1;
    return 0;
}

/* The longest of the call's rows. */
static uint32_t kve_score_max_slots(const kve_score_desc *d)
{
    uint32_t max_slots = 0;
    for (uint32_t i = 0; i < d->n_rows; i++)
        max_slots = d->rows[i].n_slots > max_slots ? d->rows[i].n_slots : max_slots;
    return max_slots;
}

size_t kve_cpu_score_call_bytes(const kve_score_call *call)
{
    kve_score_args a;
    kve_score_args_init(&a, &call->d, NULL);
    return kve_cpu_score_thread_bytes(a.nq, a.nf, kve_score_max_slots(&call->d));
}

kve_status kve_cpu_score_run(const kve_score_call *call, kve_cpu_isa isa, int threads,
                             void *scratch, size_t scratch_bytes)
{
    /* host memory: the front end gives every row (it reads a state's list
     * where it lies, and checks the rows' contents) */
    KVE_RETURN_ERROR_IF(call->list.rows, KVE_ERR_INTERNAL, "kve_score: a listed call on the CPU");
    const kve_score_desc *d = &call->d;
    kve_score_args a;
    kve_score_args_init(&a, d, NULL);
    uint32_t max_slots = kve_score_max_slots(d);
    kve_cpu_score_job c = {&a, kve_score_kernels_get(isa), max_slots,
                           (char *)KVE_ALIGN_UP((uintptr_t)scratch, 64),
                           kve_cpu_score_thread_bytes(a.nq, a.nf, max_slots)};
    size_t room = scratch_bytes - ((uintptr_t)c.scratch - (uintptr_t)scratch);
    KVE_RETURN_ERROR_IF(!scratch || scratch_bytes < 64 || c.per == SIZE_MAX || room < c.per,
                        KVE_ERR_INTERNAL,
                        "kve_score: %zu bytes of CPU scratch, a thread needs %zu", scratch_bytes,
                        c.per);
    size_t fit = room / c.per;
    int got = kve_cpu_parallel(fit < (size_t)threads ? (int)fit : threads,
                               (size_t)d->n_rows * a.n_tables, kve_score_range, &c);
    return got ? kve_error_set(KVE_ERR_INTERNAL, "kve_score: a checked key lies outside the cache")
               : KVE_OK;
}
