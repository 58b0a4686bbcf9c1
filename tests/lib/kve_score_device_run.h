/*
 * kve_score_device_run.h — issue 39's scored step planned on a device,
 * shared by the emulator (tests/emu/test_emu_score_device.c) and the GPU
 * suites (tests/gpu/test_gpu_engine.c): random scored states (K-norm and
 * TriAttention, z-normalized or not, GQA, shared heads, f32 and bf16 keys,
 * contiguous and block-table caches) and random calls with padding rows,
 * rows not due and rows the scored rules refuse. sd_run checks that
 * kve_state_score_device's scores equal, byte for byte over the whole
 * buffer, the eager kve_state_score of exactly the due rows on the same
 * device; that the planned scored append with them equals the CPU's
 * host-API append with the same scores (tables, infos, digests); and that a
 * call the rules refuse is refused on the device (reason 7), changing
 * nothing. One translation unit per program (static functions).
 */
#ifndef KVE_SCORE_DEVICE_RUN_H
#define KVE_SCORE_DEVICE_RUN_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kve_cases.h"
#include "kve_test_util.h"
#include "kvevict.h"

enum { SD_DIM_MAX = 16, SD_ROWS_MAX = 6, SD_LAYERS_MAX = 3, SD_HEADS_MAX = 4 };

/* One configuration: the state's shape and schedule, the scorer. */
typedef struct sd_cfg {
    uint32_t rows, layers, heads, dim, group, flags, sched_flags;
    uint32_t budget, window, interval, max_slots, prompt_max;
    kve_scorer scorer;
    kve_dtype dtype;
    kve_page_kind pages;
} sd_cfg;

/* A state on a context with its key cache, TriAttention inputs, call
 * buffers and scores (backend memory). */
typedef struct sd_rig {
    kve_context *ctx;
    const char *(*msg)(void); /* the context's message after a failed synchronize */
    kve_state *st;
    sd_cfg c;
    void *keys;
    int32_t *bt;
    float *q_mean, *q_abs;
    uint32_t *rows, *n_new;
    float *scores;
    size_t stride_row, stride_table, scores_elems;
    kve_step_buffers out;
} sd_rig;

static float sd_unit(uint64_t *rng) { return (float)kve_rand_below(rng, 2001) / 1000.0f - 1.0f; }

static size_t sd_key_bytes(const sd_cfg *c) { return c->dtype == KVE_DTYPE_F32 ? 4 : 2; }

/* Pages: one of max_slots a row (NONE), or pages of 4 slots, scattered. */
static uint32_t sd_page(const sd_cfg *c) { return c->pages == KVE_PAGES_NONE ? c->max_slots : 4; }
static uint32_t sd_bpr(const sd_cfg *c) { return (c->max_slots + 3) / 4; }

static uint32_t sd_pages(const sd_cfg *c)
{
    return c->pages == KVE_PAGES_NONE ? c->rows : c->rows * sd_bpr(c);
}

static size_t sd_cache_bytes(const sd_cfg *c)
{
    return (size_t)sd_pages(c) * sd_page(c) * c->heads * c->dim * sd_key_bytes(c);
}

static void sd_random_cfg(uint64_t *rng, sd_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->rows = 1 + kve_rand_below(rng, SD_ROWS_MAX);
    c->layers = 1 + kve_rand_below(rng, SD_LAYERS_MAX);
    c->heads = 1u << kve_rand_below(rng, 3);
    c->dim = kve_rand_below(rng, 2) ? 8 : SD_DIM_MAX;
    c->scorer = kve_rand_below(rng, 2) ? KVE_SCORER_TRIATTENTION : KVE_SCORER_KNORM;
    c->group = c->scorer == KVE_SCORER_TRIATTENTION ? 1 + kve_rand_below(rng, 3) : 1;
    c->flags = kve_rand_below(rng, 2) ? KVE_SCORE_ZNORM : 0;
    c->sched_flags = KVE_SCORED | (kve_rand_below(rng, 4) == 0 ? KVE_SHARED_HEADS : 0);
    c->dtype = kve_rand_below(rng, 2) ? KVE_DTYPE_BF16 : KVE_DTYPE_F32;
    c->pages = kve_rand_below(rng, 2) ? KVE_PAGES_BLOCK_TABLE : KVE_PAGES_NONE;
    c->window = 1 + kve_rand_below(rng, 3);
    c->interval = 1 + kve_rand_below(rng, 4);
    c->budget = c->window + 2 + kve_rand_below(rng, 6);
    c->prompt_max = 1 + kve_rand_below(rng, 5);
    kve_schedule s = {1, c->sched_flags, c->budget, c->window, c->interval};
    ck_assert_int_eq(kve_schedule_capacity(&s, c->prompt_max, &c->max_slots), KVE_OK);
}

static void sd_rig_init(sd_rig *g, kve_context *ctx, const char *(*msg)(void), const sd_cfg *c,
                        uint64_t seed)
{
    memset(g, 0, sizeof *g);
    g->ctx = ctx;
    g->msg = msg;
    g->c = *c;
    kve_state_desc d = {{seed, c->sched_flags, c->budget, c->window, c->interval},
                        c->rows, c->layers, c->heads, 0, 0, c->max_slots, 0, 0, c->group};
    ck_assert_int_eq(kve_state_create(ctx, &d, NULL, 0, &g->st), KVE_OK);
    uint32_t table_heads = (c->sched_flags & KVE_SHARED_HEADS) ? 1 : c->heads;
    g->stride_table = c->max_slots + 1; /* not dense: the stride is honoured */
    g->stride_row = (size_t)c->layers * table_heads * g->stride_table + 3;
    g->scores_elems = (size_t)c->rows * g->stride_row;
    g->scores = (float *)kt_alloc(ctx, g->scores_elems * 4);
    g->keys = kt_alloc(ctx, sd_cache_bytes(c));
    g->rows = (uint32_t *)kt_alloc(ctx, c->rows * 4);
    g->n_new = (uint32_t *)kt_alloc(ctx, c->rows * 4);
    size_t nq = (size_t)c->heads * c->group, nf = c->dim / 2;
    g->q_mean = (float *)kt_alloc(ctx, nq * nf * 2 * 4);
    g->q_abs = (float *)kt_alloc(ctx, nq * nf * 4);
    g->bt = (int32_t *)kt_alloc(ctx, (size_t)c->rows * sd_bpr(c) * 4);
    g->out.scores = g->scores;
    g->out.scores_stride_row = g->stride_row;
    g->out.scores_stride_table = g->stride_table;
}

/* The same keys, page table and statistics in every rig of a run. */
static void sd_rig_fill(sd_rig *g, uint64_t seed)
{
    const sd_cfg *c = &g->c;
    uint64_t rng = seed;
    size_t n = sd_cache_bytes(c) / sd_key_bytes(c);
    unsigned char *k = (unsigned char *)malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        float v = sd_unit(&rng);
        if (c->dtype == KVE_DTYPE_F32) {
            memcpy(k + 4 * i, &v, 4);
        } else {
            uint32_t b;
            memcpy(&b, &v, 4);
            uint16_t h = (uint16_t)(b >> 16);
            memcpy(k + 2 * i, &h, 2);
        }
    }
    kt_put(g->ctx, g->keys, k, n * sd_key_bytes(c));
    free(k);
    size_t nq = (size_t)c->heads * c->group, nf = c->dim / 2;
    float *q = (float *)malloc(nq * nf * 3 * 4);
    for (size_t i = 0; i < nq * nf * 3; i++)
        q[i] = sd_unit(&rng) + (i >= nq * nf * 2 ? 1.0f : 0.0f);
    kt_put(g->ctx, g->q_mean, q, nq * nf * 2 * 4);
    kt_put(g->ctx, g->q_abs, q + nq * nf * 2, nq * nf * 4);
    free(q);
    size_t nb = (size_t)c->rows * sd_bpr(c);
    int32_t *bt = (int32_t *)malloc(nb * 4);
    for (size_t i = 0; i < nb; i++) /* a permutation of the pages */
        bt[i] = (int32_t)((i * 5 + 3) % nb);
    if (nb % 5 == 0)
        for (size_t i = 0; i < nb; i++)
            bt[i] = (int32_t)(nb - 1 - i);
    kt_put(g->ctx, g->bt, bt, nb * 4);
    free(bt);
}

static void sd_rig_fini(sd_rig *g)
{
    void *bufs[] = {g->scores, g->keys, g->rows, g->n_new, g->q_mean, g->q_abs, g->bt};
    ck_assert_int_eq(kve_context_synchronize(g->ctx), KVE_OK);
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        ck_assert_int_eq(kve_free(g->ctx, bufs[i]), KVE_OK);
    ck_assert_int_eq(kve_state_destroy(g->st), KVE_OK);
}

/* The scoring desc of layer @p l (its keys are the layer's: one cache a
 * rig, read for every layer, is enough for the scores' addressing). */
static kve_score_desc sd_desc(const sd_rig *g)
{
    const sd_cfg *c = &g->c;
    kve_score_desc d;
    memset(&d, 0, sizeof d);
    d.scorer = c->scorer;
    d.flags = c->flags;
    d.weight = 1.0f;
    d.keys.base = g->keys;
    d.keys.dtype = c->dtype;
    d.keys.head_dim = c->dim;
    d.keys.n_heads = c->heads;
    d.keys.layout = KVE_LAYOUT_NHD;
    d.keys.pages.page_size = sd_page(c);
    d.keys.pages.n_pages = sd_pages(c);
    d.keys.pages.kind = c->pages;
    d.keys.pages.n_rows = c->rows;
    if (c->pages == KVE_PAGES_BLOCK_TABLE) {
        d.keys.pages.block_table = g->bt;
        d.keys.pages.blocks_per_row = sd_bpr(c);
    }
    d.tri.group = c->group;
    d.tri.q_mean = g->q_mean;
    d.tri.q_abs_mean = g->q_abs;
    d.tri.rope_theta = 10000.0;
    return d;
}

static void sd_fill_scores(sd_rig *g, float v)
{
    float *h = (float *)malloc(g->scores_elems * 4);
    for (size_t i = 0; i < g->scores_elems; i++)
        h[i] = v + (float)(i % 7);
    kt_put(g->ctx, g->scores, h, g->scores_elems * 4);
    free(h);
}

/* Whether a call row is due and allowed (the host's view of the rule). */
static int sd_due(const kve_state_seq_info *info, const sd_cfg *c, uint32_t n)
{
    if (!n || !info->active)
        return 0;
    uint32_t room = info->capacity - info->n_valid;
    if (n <= room)
        return 0;
    uint32_t k = (n - room + c->interval - 1) / c->interval;
    return k == 1 && room <= c->window;
}

/* Eager reference: kve_state_score of each due call row alone, at its
 * place in the buffer (its key cache row i). */
static void sd_score_eager(sd_rig *g, uint32_t n_rows, const uint32_t *rows, const uint32_t *n_new,
                           uint32_t tl)
{
    for (uint32_t i = 0; i < n_rows; i++) {
        kve_state_seq_info info;
        ck_assert_int_eq(kve_state_get_seq(g->st, rows[i], &info), KVE_OK);
        if (!sd_due(&info, &g->c, n_new[i]))
            continue;
        kve_score_desc d = sd_desc(g);
        int32_t cr = (int32_t)i;
        d.cache_rows = &cr;
        kve_status st = kve_state_score(g->st, 1, &rows[i], &n_new[i], tl, &d,
                                        g->scores + i * g->stride_row, g->stride_row,
                                        g->stride_table);
        ck_assert_msg(st == KVE_OK, "kve_state_score: %s", kve_last_error());
    }
}

static void sd_score_device(sd_rig *g, uint32_t n_rows, uint32_t tl)
{
    kve_score_desc d = sd_desc(g);
    kve_status st = kve_state_score_device(g->st, n_rows, g->rows, g->n_new, tl, &d, g->scores,
                                           g->stride_row, g->stride_table);
    ck_assert_msg(st == KVE_OK, "kve_state_score_device: %s", kve_last_error());
}

/* Host copies of a state: infos, tables, digests. */
typedef struct sd_snap {
    kve_state_seq_info info[SD_ROWS_MAX];
    int32_t *slots;
    uint64_t digest[SD_ROWS_MAX];
} sd_snap;

static void sd_snap_take(sd_rig *g, sd_snap *s)
{
    kve_status sync = kve_context_synchronize(g->ctx);
    ck_assert_msg(sync == KVE_OK, "synchronize: %s",
                  g->msg());
    size_t per = (size_t)g->c.layers * g->c.heads * g->c.max_slots;
    memset(s->info, 0, sizeof s->info);
    memset(s->digest, 0, sizeof s->digest);
    s->slots = (int32_t *)calloc(per * g->c.rows, 4);
    for (uint32_t i = 0; i < g->c.rows; i++) {
        ck_assert_int_eq(kve_state_get_seq(g->st, i, &s->info[i]), KVE_OK);
        if (!s->info[i].active)
            continue;
        ck_assert_int_eq(kve_state_read_slots(g->st, i, s->slots + i * per, per), KVE_OK);
        ck_assert_int_eq(kve_state_read_digest(g->st, i, &s->digest[i]), KVE_OK);
    }
}

static void sd_snap_eq(const sd_rig *g, const sd_snap *a, const sd_snap *b, const char *what)
{
    size_t per = (size_t)g->c.layers * g->c.heads * g->c.max_slots;
    ck_assert_msg(!memcmp(a->info, b->info, sizeof a->info), "%s: infos", what);
    ck_assert_msg(!memcmp(a->slots, b->slots, per * g->c.rows * 4), "%s: tables", what);
    ck_assert_msg(!memcmp(a->digest, b->digest, sizeof a->digest), "%s: digests", what);
}

/* Rows admitted (or readmitted) now and then, prompts appended host-side. */
static void sd_lifecycle(uint64_t *rng, sd_rig *const *rigs, int n_rigs, uint64_t *next_seq)
{
    uint32_t rows = rigs[0]->c.rows;
    for (uint32_t i = 0; i < rows; i++) {
        kve_state_seq_info info;
        ck_assert_int_eq(kve_state_get_seq(rigs[0]->st, i, &info), KVE_OK);
        int retire = info.active && kve_rand_below(rng, 30) == 0;
        int admit = !info.active && kve_rand_below(rng, 2) == 0;
        uint32_t p = kve_rand_below(rng, rigs[0]->c.prompt_max + 1);
        for (int k = 0; k < n_rigs; k++) {
            if (retire)
                ck_assert_int_eq(kve_state_retire(rigs[k]->st, i), KVE_OK);
            if (admit) {
                ck_assert_int_eq(kve_state_admit(rigs[k]->st, i, *next_seq, p), KVE_OK);
                if (p)
                    ck_assert_int_eq(kve_state_append(rigs[k]->st, 1, &i, &p, NULL), KVE_OK);
            }
        }
        *next_seq += admit;
    }
}

/* One random run: A (emulator: device list, planned append), R (emulator:
 * eager kve_state_score reference) and C (CPU: host-API append with A's
 * scores) over @p steps calls. */
static void sd_run(kve_context *dev, const char *(*dev_msg)(void), kve_context *cpu_ctx,
                   uint64_t seed, uint32_t steps, uint32_t *due_rows, uint32_t *refusals)
{
    uint64_t rng = seed;
    sd_cfg c;
    sd_random_cfg(&rng, &c);
    sd_rig a, r, cpu;
    sd_rig_init(&a, dev, dev_msg, &c, seed);
    sd_rig_init(&r, dev, dev_msg, &c, seed);
    sd_rig_init(&cpu, cpu_ctx, kve_last_error, &c, seed);
    sd_rig_fill(&a, seed);
    sd_rig_fill(&r, seed);
    sd_rig *const rigs[3] = {&a, &r, &cpu};
    uint64_t next_seq = 1;
    float *ha = (float *)malloc(a.scores_elems * 4), *hr = (float *)malloc(a.scores_elems * 4);
    uint32_t table_layers = (c.sched_flags & KVE_SHARED_LAYERS) ? 1 : c.layers;
    for (uint32_t step = 0; step < steps; step++) {
        sd_lifecycle(&rng, rigs, 3, &next_seq);
        /* a call: a permutation of the rows, some padding, some counts past
         * the scored rules */
        uint32_t rows[SD_ROWS_MAX], n_new[SD_ROWS_MAX], n_rows = c.rows, bad = 0;
        for (uint32_t i = 0; i < n_rows; i++)
            rows[i] = i;
        for (uint32_t i = n_rows; i-- > 1;) {
            uint32_t j = kve_rand_below(&rng, i + 1), t = rows[i];
            rows[i] = rows[j];
            rows[j] = t;
        }
        for (uint32_t i = 0; i < n_rows; i++) {
            kve_state_seq_info info;
            ck_assert_int_eq(kve_state_get_seq(a.st, rows[i], &info), KVE_OK);
            uint32_t pick = kve_rand_below(&rng, 10);
            n_new[i] = !info.active || pick < 2 ? 0
                       : pick < 8               ? 1 + kve_rand_below(&rng, 2)
                                                : 1 + kve_rand_below(&rng, c.window + 2 * c.interval + 2);
            if (n_new[i] && info.active) {
                uint32_t room = info.capacity - info.n_valid;
                uint32_t k = n_new[i] <= room ? 0 : (n_new[i] - room + c.interval - 1) / c.interval;
                bad |= k > 1 || (k == 1 && room > c.window);
                *due_rows += sd_due(&info, &c, n_new[i]);
            }
        }
        kt_put(dev, a.rows, rows, n_rows * 4);
        kt_put(dev, a.n_new, n_new, n_rows * 4);
        sd_fill_scores(&a, 0.5f);
        sd_fill_scores(&r, 0.5f);
        for (uint32_t tl = 0; tl < table_layers; tl++) {
            sd_score_device(&a, n_rows, tl);
            sd_score_eager(&r, n_rows, rows, n_new, tl);
        }
        kt_get(dev, ha, a.scores, a.scores_elems * 4);
        kt_get(dev, hr, r.scores, a.scores_elems * 4);
        ck_assert_msg(!memcmp(ha, hr, a.scores_elems * 4),
                      "seed %llx step %u: device list scores differ from kve_state_score",
                      (unsigned long long)seed, step);
        sd_snap before, after, want;
        sd_snap_take(&a, &before);
        kve_status st = kve_state_append_device(a.st, n_rows, a.rows, a.n_new, 2 * c.interval + c.window + 4,
                                                &a.out);
        ck_assert_int_eq(st, KVE_OK);
        kve_status sync = kve_context_synchronize(dev);
        if (bad) { /* refused on the device: nothing changed */
            ck_assert_int_eq(sync, KVE_ERR_INVALID);
            ck_assert_msg(strstr(dev_msg(), "reason 7"), "%s",
                          dev_msg());
            sd_snap_take(&a, &after);
            sd_snap_eq(&a, &before, &after, "refused call");
            ++*refusals;
        } else {
            ck_assert_msg(sync == KVE_OK, "%s", dev_msg());
            /* R and the CPU: the host API with A's scores */
            uint32_t rr[SD_ROWS_MAX], rn[SD_ROWS_MAX], m = 0;
            for (uint32_t i = 0; i < n_rows; i++) /* padding rows are left out */
                if (n_new[i]) {
                    rr[m] = rows[i];
                    rn[m++] = n_new[i];
                }
            /* the host API's call row k is A's call row of rows rr[k]: lay
             * the scores out so */
            float *cs2 = (float *)malloc(a.scores_elems * 4);
            memcpy(cs2, ha, a.scores_elems * 4);
            for (uint32_t i = 0, k = 0; i < n_rows; i++)
                if (n_new[i])
                    memcpy(cs2 + (size_t)k++ * a.stride_row, ha + (size_t)i * a.stride_row,
                           a.stride_row * 4);
            kt_put(cpu_ctx, cpu.scores, cs2, a.scores_elems * 4);
            kt_put(dev, r.scores, cs2, a.scores_elems * 4);
            free(cs2);
            ck_assert_msg(kve_state_append(cpu.st, m, rr, rn, &cpu.out) == KVE_OK, "cpu: %s",
                          kve_last_error());
            /* R on odd steps with the scores alone, no mapping or move
             * lists: a caller keeping its entries by the tables
             * (kvevict.hf's scored arms on a GPU) */
            kve_step_buffers bare = {.scores = r.out.scores,
                                     .scores_stride_row = r.out.scores_stride_row,
                                     .scores_stride_table = r.out.scores_stride_table};
            ck_assert_msg(kve_state_append(r.st, m, rr, rn, step % 2 ? &bare : &r.out) == KVE_OK,
                          "R: %s", kve_last_error());
            sd_snap_take(&a, &after);
            sd_snap_take(&cpu, &want);
            sd_snap_eq(&a, &after, &want, "planned scored append vs CPU host API");
            free(want.slots);
            sd_snap_take(&r, &want);
            sd_snap_eq(&a, &after, &want, "planned scored append vs eager (emulator)");
            free(want.slots);
        }
        free(before.slots);
        free(after.slots);
    }
    free(ha);
    free(hr);
    sd_rig_fini(&a);
    sd_rig_fini(&r);
    sd_rig_fini(&cpu);
}

/* A NaN at a candidate of a planned scored append on @p dev: the planner
 * refuses the call (KVE_PLAN_NAN), reported at synchronize as
 * KVE_ERR_INVALID naming it, the CPU's status for the same call. Like every
 * refusal it changes nothing (the state equals the CPU's, which ran no
 * call), maps the shape to -1 and empties the move lists. */
static void sd_nan_run(kve_context *dev, const char *(*dev_msg)(void), kve_context *cpu_ctx)
{
    sd_cfg c = {2, 1, 2, 8, 1, 0, KVE_SCORED, 6, 2, 2, 0, 3,
                KVE_SCORER_KNORM, KVE_DTYPE_F32, KVE_PAGES_NONE};
    kve_schedule s = {1, c.sched_flags, c.budget, c.window, c.interval};
    ck_assert_int_eq(kve_schedule_capacity(&s, c.prompt_max, &c.max_slots), KVE_OK);
    sd_rig a, w;
    sd_rig_init(&a, dev, dev_msg, &c, 3);
    sd_rig_init(&w, cpu_ctx, kve_last_error, &c, 3);
    uint32_t rows[2] = {0, 1}, ones[2] = {1, 1}, fill = c.max_slots;
    for (int k = 0; k < 2; k++) {
        sd_rig *g = k ? &w : &a;
        for (uint32_t i = 0; i < 2; i++) {
            ck_assert_int_eq(kve_state_admit(g->st, i, 10 + i, c.prompt_max), KVE_OK);
            ck_assert_int_eq(kve_state_append(g->st, 1, &i, &fill, NULL), KVE_OK); /* full */
        }
    }
    float *h = (float *)malloc(a.scores_elems * 4);
    for (size_t e = 0; e < a.scores_elems; e++)
        h[e] = (float)((e * 37) % 11) - 5.0f;
    /* slot 4 of row 0's table 1 holds position 4: a candidate (P = 3, the
     * window's 2 newest are 6 and 7) */
    size_t at = 1 * a.stride_table + 4;
    h[at] = NAN;
    kt_put(dev, a.scores, h, a.scores_elems * 4);
    kt_put(dev, a.rows, rows, 8);
    kt_put(dev, a.n_new, ones, 8);
    free(h);
    /* the step's outputs hold a previous step's values: the refusal maps
     * the shape (2 rows x max_new 1, both table layers) to -1 and empties
     * every move list (docs/INTEGRATION.md "CUDA graphs") */
    enum { NM = 1 * 2 * 2, NL = NM * 2 * 2 }; /* layers x (tokens, rows) x heads; x moves x 2 */
    int64_t map[NM];
    int32_t mv[NL];
    uint32_t n_mv[NM];
    for (int i = 0; i < NM; i++) {
        map[i] = 5;
        n_mv[i] = 2;
    }
    a.out.slot_mapping = (int64_t *)kt_alloc(dev, sizeof map);
    a.out.max_tokens = 2;
    a.out.moves = (int32_t *)kt_alloc(dev, sizeof mv);
    a.out.n_moves = (uint32_t *)kt_alloc(dev, sizeof n_mv);
    a.out.max_rows = 2;
    a.out.max_moves = 2;
    kt_put(dev, a.out.slot_mapping, map, sizeof map);
    kt_put(dev, a.out.n_moves, n_mv, sizeof n_mv);
    ck_assert_int_eq(kve_state_append_device(a.st, 2, a.rows, a.n_new, 1, &a.out), KVE_OK);
    ck_assert_int_eq(kve_context_synchronize(dev), KVE_ERR_INVALID);
    ck_assert_msg(strstr(dev_msg(), "has a NaN in out->scores at a candidate of its round"), "%s",
                  dev_msg());
    kt_get(dev, map, a.out.slot_mapping, sizeof map);
    kt_get(dev, n_mv, a.out.n_moves, sizeof n_mv);
    for (int i = 0; i < NM; i++) {
        ck_assert_msg(map[i] == -1, "slot_mapping[%d] = %lld after the refusal", i, (long long)map[i]);
        ck_assert_msg(n_mv[i] == 0, "n_moves[%d] = %u after the refusal", i, n_mv[i]);
    }
    sd_snap sa, sw; /* refused: the state as the CPU's, which ran no call */
    sd_snap_take(&a, &sa);
    sd_snap_take(&w, &sw);
    sd_snap_eq(&a, &sa, &sw, "the device's NaN refusal vs no call on the CPU");
    ck_assert_uint_eq(sa.info[0].round, 0);
    free(sa.slots);
    free(sw.slots);
    void *bufs[] = {a.out.slot_mapping, a.out.moves, a.out.n_moves};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(kve_free(dev, bufs[i]), KVE_OK);
    sd_rig_fini(&a);
    sd_rig_fini(&w);
}

#endif /* KVE_SCORE_DEVICE_RUN_H */
