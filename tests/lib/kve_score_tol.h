/*
 * kve_score_tol.h — the agreement docs/SCORERS.md "Agreement and
 * tolerances" states between a backend's kve_score and the CPU's scalar ISA,
 * per output slot of a kve_score_case (tests/lib/kve_score_case.h).
 *
 * A backend whose raw scores may differ from the scalar ISA's by up to
 * rho = rel x S per query head (S: the largest, over the table's
 * candidates, of the sum of the magnitudes of a raw score's terms; K-norm's
 * is |raw|) gives z-scores within
 *     (2 + |z|) x rho / (sd - rho) + 1e-5 x (1 + |z|)
 * of the scalar ISA's, where z and sd = max(std, 1e-6) are the scalar ISA's
 * (a perturbation of at most rho moves a raw score, the mean and the std by
 * at most rho each); where sd <= 2 rho the candidates are equal to within
 * that rounding and only |z| <= sqrt(n - 1) holds on both sides, so the
 * bound is 2 sqrt(n - 1) + 1e-5 x (1 + |z|). Raw scores (no
 * KVE_SCORE_ZNORM): within rho. The output is weight x the max over the
 * table's query heads (or added to the slot), so a slot's bound is |weight|
 * x the largest of its query heads' bounds plus 2^-22 x (1 + |output|) for
 * the output's roundings. Non-candidates: exact (bound 0).
 *
 * The scalar ISA's raw scores are recomputed here with the per-key functions
 * of score_body.h and score_grid_body.h (its float operations in its order, bit for bit), so
 * that every query head's are seen (the output holds only their max).
 * Header-only; include after kve_score_case.h, one translation unit per
 * program; needs common/ and kernels_cuda/ on the include path.
 */
#ifndef KVE_SCORE_TOL_H
#define KVE_SCORE_TOL_H

#include <math.h>
#include <stdlib.h>

#include "kve_score_case.h"
#include "score_body.h"
#include "score_grid_body.h" /* kve_score_tri_pass, kve_score_knorm_key */

/* rel of the CPU's AVX2 / AVX-512 kernels and a GPU's fused multiply-adds:
 * each within 1e-5 x S of the exact raw score (docs/SCORERS.md). */
#define KVE_SCORE_VEC_REL 2e-5

/* Raw scalar-ISA scores of query head @p j (table @p t) at the @p n
 * candidate slots @p cand of row @p r into raw, and S (the largest sum of
 * the terms' magnitudes) returned. */
static double kve_sc_tol_head(const kve_score_args *a, const kve_score_row *r, uint32_t t,
                              uint32_t j, const double *ph, const uint32_t *cand, uint32_t n,
                              float *co, float *raw)
{
    const kve_score_desc *d = &a->d;
    uint32_t h = t * a->hpt + j / a->group, dt = d->keys.dtype, nf = a->nf;
    int tri = d->scorer == KVE_SCORER_TRIATTENTION;
    for (uint32_t f = 0; tri && f < nf; f++)
        kve_score_coef(a, t, j, f, ph + 2 * f, co + 3 * f);
    double big = 0;
    for (uint32_t c = 0; c < n; c++) {
        int why = 0;
        const unsigned char *key = kve_score_locate_key(a, r, cand[c], h, &why);
        double s = 0;
        if (!tri) {
            raw[c] = kve_score_knorm_key(key, dt, d->keys.head_dim, 0);
            s = fabs((double)raw[c]);
        } else {
            float acc[KVE_SCORE_HEADS_PER_PASS];
            kve_score_tri_pass(co, key, dt, nf, 0, 1, acc);
            raw[c] = acc[0];
            for (uint32_t f = 0; f < nf; f++) {
                double kr = kve_score_elem(key, dt, f), ki = kve_score_elem(key, dt, f + nf);
                s += fabs(co[3 * f] * kr) + fabs(co[3 * f + 1] * ki) +
                     fabs(co[3 * f + 2]) * sqrt(kr * kr + ki * ki);
            }
        }
        big = s > big ? s : big;
    }
    return big;
}

/* Fills tol[0 .. c->n_scores) with each output slot's bound against the
 * scalar ISA's output @p want, for raw scores that agree within @p rel x S
 * (0: bit for bit). */
static void kve_score_case_tol(const kve_score_case *c, const float *want, double rel,
                               double *tol)
{
    kve_score_args a;
    kve_score_args_init(&a, &c->d, NULL);
    const kve_score_desc *d = &c->d;
    int zn = (d->flags & KVE_SCORE_ZNORM) != 0;
    double w = fabs(d->weight != 0.0f ? (double)d->weight : 1.0);
    uint32_t ms = 1, nf = a.nf, nq = a.nq;
    for (uint32_t r = 0; r < d->n_rows; r++)
        ms = d->rows[r].n_slots > ms ? d->rows[r].n_slots : ms;
    uint32_t *cand = (uint32_t *)malloc(ms * sizeof *cand);
    float *raw = (float *)malloc(ms * sizeof *raw), *co = (float *)malloc(nf * 3 * sizeof *co);
    double *ph = (double *)malloc(nf * 2 * sizeof *ph), *worst = (double *)malloc(ms * sizeof *worst);
    for (size_t i = 0; i < c->n_scores; i++)
        tol[i] = 0;
    for (uint32_t ri = 0; ri < d->n_rows; ri++) {
        const kve_score_row *r = &d->rows[ri];
        for (uint32_t f = 0; d->scorer == KVE_SCORER_TRIATTENTION && f < nf; f++)
            kve_score_phase(&a, f, r->round_start, ph + 2 * f);
        for (uint32_t t = 0; t < a.n_tables && r->n_slots; t++) {
            const int32_t *tab = d->slot_pos + r->table_offset + (size_t)t * kve_score_table_stride(d, r);
            uint32_t x = kve_score_bound_seq(tab, r), n = 0;
            for (uint32_t s = 0; s < r->n_slots; s++)
                if (kve_score_candidate(tab[s], r->prompt_len, x))
                    cand[n++] = s;
            for (uint32_t k = 0; k < n; k++)
                worst[k] = 0;
            for (uint32_t j = 0; j < nq && n; j++) {
                double rho = rel * kve_sc_tol_head(&a, r, t, j, ph, cand, n, co, raw), s1 = 0, ss = 0;
                for (uint32_t k = 0; k < n; k++)
                    s1 += raw[k];
                double mean = s1 / n;
                for (uint32_t k = 0; k < n; k++)
                    ss += ((double)raw[k] - mean) * ((double)raw[k] - mean);
                double sd = fmax(sqrt(ss / n), (double)KVE_SCORE_STD_MIN);
                for (uint32_t k = 0; k < n; k++) {
                    double z = ((double)raw[k] - mean) / sd, b = rho;
                    if (zn)
                        b = (sd > 2 * rho ? (2 + fabs(z)) * rho / (sd - rho) : 2 * sqrt(n - 1.0)) +
                            1e-5 * (1 + fabs(z));
                    worst[k] = b > worst[k] ? b : worst[k];
                }
            }
            size_t o = r->scores_offset + (size_t)t * d->scores_stride_table;
            for (uint32_t k = 0; k < n; k++)
                tol[o + cand[k]] = w * worst[k] + ldexp(1 + fabs((double)want[o + cand[k]]), -22);
        }
    }
    free(cand);
    free(raw);
    free(co);
    free(ph);
    free(worst);
}

#endif
