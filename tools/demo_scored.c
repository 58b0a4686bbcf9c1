/*
 * demo_scored.c — the scored arms of `kvevict demo`. TriAttention needs the
 * model's query statistics (docs/SCORERS.md "Calibration file"); the demo's
 * model is synthetic, so is its calibration: query head j of KV head h has
 * the mean pre-RoPE query q_f = (1 + j / 4) x the head's key vector pair f
 * (the vector its keys are drawn around, demo_run.c), and mean |q_f| = 1.25
 * |q_f|. That makes the queries look for the keys they resemble, so the
 * scores are not noise; it says nothing about a real model's accuracy.
 * K-norm needs no calibration.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "demo_scored.h"

int kve_demo_scored_available(kve_context *ctx, const char **why)
{
    static char msg[256];
    kve_score_desc d;
    memset(&d, 0, sizeof d);
    d.scorer = KVE_SCORER_KNORM;
    d.keys = (kve_key_cache){.base = &d, .dtype = KVE_DTYPE_F32, .head_dim = 2, .n_heads = 1,
                             .pages.page_size = 1, .pages.n_pages = 1, .pages.n_rows = 1};
    kve_status st = kve_score(ctx, &d); /* no rows: validation, then the backend's support */
    snprintf(msg, sizeof msg, "%s: %s", kve_status_string(st), kve_last_error());
    *why = msg;
    return st == KVE_OK;
}

/* The synthetic calibration (see the top): [layers][heads][group][dim/2][2]
 * and [layers][heads][group][dim/2], from the heads' key vectors. */
static kve_status kve_demo_calibrate(kve_demo_scorer *s, const kve_demo_opts *o, const float *vec)
{
    size_t heads = (size_t)o->layers * o->heads, half = o->entry / 4, nq = heads * KVE_DEMO_GROUP;
    float *qm = (float *)kve_cli_malloc("the query statistics", nq * half, 3 * sizeof(float));
    if (!qm)
        return KVE_ERR_NOMEM;
    float *qa = qm + nq * half * 2;
    for (size_t h = 0; h < heads; h++)
        for (size_t j = 0; j < KVE_DEMO_GROUP; j++)
            for (size_t f = 0; f < half; f++) {
                size_t q = (h * KVE_DEMO_GROUP + j) * half + f;
                float scale = 1.0f + (float)j / 4.0f, re = vec[h * 2 * half + f] * scale,
                      im = vec[h * 2 * half + half + f] * scale;
                qm[2 * q] = re;
                qm[2 * q + 1] = im;
                qa[q] = 1.25f * sqrtf(re * re + im * im);
            }
    kve_status st = kve_alloc(s->ctx, nq * half * 2 * sizeof(float), (void **)&s->q_mean);
    if (st == KVE_OK)
        st = kve_alloc(s->ctx, nq * half * sizeof(float), (void **)&s->q_abs);
    if (st == KVE_OK)
        st = kve_copy(s->ctx, s->q_mean, qm, nq * half * 2 * sizeof(float), KVE_COPY_HOST_TO_BACKEND);
    if (st == KVE_OK)
        st = kve_copy(s->ctx, s->q_abs, qa, nq * half * sizeof(float), KVE_COPY_HOST_TO_BACKEND);
    free(qm);
    return st;
}

float *kve_demo_head_vectors(const kve_demo_opts *o); /* demo_run.c */

kve_status kve_demo_scorer_init(kve_demo_scorer *s, kve_context *ctx, const kve_demo_opts *o,
                                kve_arm_kind kind, const void *k_cache, uint32_t capacity,
                                size_t tables)
{
    *s = (kve_demo_scorer){ctx, kind, k_cache, capacity, tables, NULL, NULL, NULL};
    kve_status st = kve_alloc(ctx, tables * capacity * sizeof(float), (void **)&s->scores);
    if (st == KVE_OK && kind == KVE_ARM_TRI) {
        float *vec = kve_demo_head_vectors(o);
        st = vec ? kve_demo_calibrate(s, o, vec) : KVE_ERR_NOMEM;
        free(vec);
    }
    return st;
}

void kve_demo_scorer_free(kve_demo_scorer *s)
{
    kve_free(s->ctx, s->q_mean);
    kve_free(s->ctx, s->q_abs);
    kve_free(s->ctx, s->scores);
}

kve_status kve_demo_score_due(kve_demo_scorer *s, kve_state *state, const kve_demo_opts *o,
                              kve_step_buffers *step, uint32_t n_new)
{
    uint32_t row = 0, due = 0;
    kve_status st = kve_state_rounds_due(state, 1, &row, &n_new, &due);
    step->scores = s->scores;
    step->scores_stride_table = s->capacity;
    step->scores_stride_row = s->tables * s->capacity;
    size_t row_bytes = (size_t)o->layers * o->heads * o->entry, half = o->entry / 4;
    for (uint32_t l = 0; st == KVE_OK && due && l < o->layers; l++) {
        kve_score_desc d;
        memset(&d, 0, sizeof d);
        d.scorer = s->kind == KVE_ARM_TRI ? KVE_SCORER_TRIATTENTION : KVE_SCORER_KNORM;
        d.flags = KVE_SCORE_ZNORM;
        d.weight = 1.0f;
        d.keys = (kve_key_cache){.base = (const char *)s->k_cache + (size_t)l * o->heads * o->entry,
                                 .dtype = KVE_DTYPE_BF16, .head_dim = (uint32_t)(o->entry / 2),
                                 .n_heads = o->heads, .layout = KVE_LAYOUT_NHD,
                                 .stride_page = row_bytes * s->capacity, .stride_slot = row_bytes,
                                 .stride_head = o->entry, .pages.page_size = s->capacity, .pages.n_pages = 1,
                                 .pages.kind = KVE_PAGES_NONE, .pages.n_rows = 1};
        if (s->kind == KVE_ARM_TRI) {
            size_t per_layer = (size_t)o->heads * KVE_DEMO_GROUP * half;
            d.tri.group = KVE_DEMO_GROUP;
            d.tri.q_mean = s->q_mean + l * per_layer * 2;
            d.tri.q_abs_mean = s->q_abs + l * per_layer;
            d.tri.rope_theta = 10000.0; /* the demo's RoPE (demo_run.c) */
        }
        st = kve_state_score(state, 1, &row, &n_new, l, &d, s->scores, step->scores_stride_row,
                             step->scores_stride_table);
    }
    return st;
}
