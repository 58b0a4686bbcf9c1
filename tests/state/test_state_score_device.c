/* test_state_score_device.c — kve_state_score_device and a KVE_SCORED
 * state's kve_state_append_device on the CPU backend, against the host API
 * (issue 39): thousands of random scored states (shared heads and layers,
 * GQA groups, f32 / f16 / bf16 keys in every page table and layout, K-norm
 * and TriAttention, ZNORM and ACCUMULATE) driven by random calls with
 * padding rows, free rows, rows not due and rows past the scored rules.
 * Each table layer's scores equal, bit for bit over the whole buffer, those
 * of kve_state_score called row by row for the rows that are valid and due
 * (every other byte left as it was); the planned append with those scores
 * leaves the state exactly as kve_state_append leaves a twin state with the
 * reference scores (tables, counts, running digests, slot mapping, move
 * lists), or is refused as the twin is, naming the row and the reason, the
 * state unchanged. The argument errors are tests/core/test_errors_state.c's. */
#include <math.h>
#include <stdio.h>

#include "kve_score_case.h"
#include "kve_state_test.h"

enum { MAX_ROWS = 4, MAX_PROMPT = 8 };

typedef struct {
    kve_context *ctx;
    kve_state *a, *b; /* a: the planned (device) path; b: its twin, the host API */
    kve_state_desc sd;
    kve_state_layout lay;
    kve_score_case kc; /* the key cache and TriAttention inputs; kc.d the call's desc */
    size_t tables;
    uint64_t next_id;
} sdv_case;

/* Counts over a run, so that the test cannot pass on calls that never
 * score, never append or never refuse. */
typedef struct {
    unsigned scored_rows, skipped_rows, padding_rows, appends, refusals, scored_refusals, rounds;
} sdv_seen;

static void sdv_admit(sdv_case *c, uint32_t row, uint64_t *rng)
{
    uint32_t p = kt_below(rng, MAX_PROMPT + 1);
    uint64_t id = c->next_id++;
    KT_OK(kve_state_admit(c->a, row, id, p));
    KT_OK(kve_state_admit(c->b, row, id, p));
}

/* A random scored state, twice, and its key cache: rows of up to max_slots
 * slots, page-table row r for call row r. */
static void sdv_open(sdv_case *c, kve_context *ctx, uint64_t *rng)
{
    memset(c, 0, sizeof *c);
    c->ctx = ctx;
    uint32_t flags = KVE_SCORED | (kt_below(rng, 3) == 0 ? KVE_SHARED_HEADS : 0) |
                     (kt_below(rng, 3) == 0 ? KVE_SHARED_LAYERS : 0);
    uint32_t B = kt_below(rng, 13), W = kt_below(rng, 6), R = 1 + kt_below(rng, 4), cap = 0;
    c->sd = ks_desc(flags, 1 + kt_below(rng, MAX_ROWS), 1 + kt_below(rng, 3),
                    1 + kt_below(rng, 4), B, W, R, 0);
    c->sd.schedule.seed = kt_next(rng);
    KT_OK(kve_schedule_capacity(&c->sd.schedule, MAX_PROMPT, &cap));
    c->sd.max_slots = cap + kt_below(rng, 3);
    c->sd.score_group = 8; /* kve_sc_tri_params' largest TriAttention group */
    c->a = ks_create(c->ctx, &c->sd, &c->lay);
    KT_OK(kve_state_create(c->ctx, &c->sd, NULL, 0, &c->b));
    c->tables = (size_t)c->lay.table_layers * c->lay.table_heads;
    c->next_id = 1000;
    for (uint32_t r = 0; r < c->sd.max_seqs; r++)
        if (kt_below(rng, 4))
            sdv_admit(c, r, rng);

    kve_score_desc *d = &c->kc.d;
    static const uint32_t dims[] = {2, 4, 8, 16, 32};
    static const kve_dtype types[] = {KVE_DTYPE_F32, KVE_DTYPE_F16, KVE_DTYPE_BF16};
    d->scorer = kt_below(rng, 2) ? KVE_SCORER_KNORM : KVE_SCORER_TRIATTENTION;
    d->flags = kt_below(rng, 4); /* ZNORM, ACCUMULATE */
    d->weight = kt_below(rng, 2) ? 0.0f : 0.25f + (float)kt_below(rng, 8) * 0.125f;
    kve_key_cache *k = &d->keys;
    k->dtype = types[kt_below(rng, 3)];
    k->head_dim = dims[kt_below(rng, 5)];
    k->n_heads = c->sd.n_heads;
    k->layout = kt_below(rng, 2) ? KVE_LAYOUT_NHD : KVE_LAYOUT_HND;
    k->pages.kind = (kve_page_kind)kt_below(rng, 4);
    int paged = k->pages.kind == KVE_PAGES_BLOCK_TABLE || k->pages.kind == KVE_PAGES_INDPTR;
    k->pages.page_size = paged ? 1 + kt_below(rng, 8) : c->sd.max_slots;
    k->pages.n_pages = paged ? 3 + kt_below(rng, 20) : c->sd.max_seqs;
    d->n_rows = c->sd.max_seqs; /* the page table's rows (kve_sc_keys) */
    uint64_t x = kt_next(rng) | 1;
    kve_sc_keys(&c->kc, &x, c->sd.max_slots);
    kve_sc_tri_params(&c->kc, &x);
    d->n_rows = 0;
    d->rows = NULL;
}

static void sdv_close(sdv_case *c)
{
    kve_state_destroy(c->a);
    kve_state_destroy(c->b);
    kve_score_case_free(&c->kc);
}

/* Rounds a row runs for @p n more tokens, and whether the scored rules
 * (one round, at most W tokens before it) allow them: the header's rule,
 * written out here. */
static uint32_t sdv_rounds(const kve_state_seq_info *q, uint32_t n, uint32_t R)
{
    uint32_t room = q->capacity - q->n_valid;
    return n <= room ? 0 : (n - room + R - 1) / R;
}

static int sdv_fits(const kve_state_seq_info *q, uint32_t n, const kve_schedule *s)
{
    uint32_t k = sdv_rounds(q, n, s->interval);
    return k == 0 || (k == 1 && q->capacity - q->n_valid <= s->window);
}

/* A call: distinct rows in random order, some padding (n_new 0, a row id
 * that is never read), some free rows; most rows' tokens within the scored
 * rules (and often due), some past them. */
static uint32_t sdv_call(const sdv_case *c, uint64_t *rng, const kve_state_seq_info *info,
                         uint32_t *rows, uint32_t *n_new)
{
    uint32_t m = c->sd.max_seqs, n = 1 + kt_below(rng, m), perm[MAX_ROWS];
    const kve_schedule *s = &c->sd.schedule;
    for (uint32_t r = 0; r < m; r++)
        perm[r] = r;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i + kt_below(rng, m - i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
        rows[i] = perm[i];
        const kve_state_seq_info *q = &info[rows[i]];
        uint32_t room = q->capacity - q->n_valid, kind = kt_below(rng, 8);
        if (kind == 0 || (!q->active && kind < 6)) { /* padding */
            n_new[i] = 0;
            rows[i] = kt_below(rng, 2) ? UINT32_MAX : rows[i];
        } else if (kind == 1 || !q->active) { /* anything: past the rules, a free row */
            n_new[i] = 1 + kt_below(rng, q->capacity + 2 * s->interval + 1);
        } else { /* within the rules: up to the round's r tokens when due */
            uint32_t most = room <= s->window ? room + s->interval : room;
            n_new[i] = 1 + kt_below(rng, most ? most : 1);
        }
    }
    return n;
}

/* Call row @p i's scores in @p ref (just written by kve_state_score) are
 * kve_score's over its round as the header describes it, from the row's
 * info (not the library's row rule): its tables of layer tl as they are,
 * the window less the tokens before the round, t0 the triggering token. */
static void sdv_expect_round_row(const sdv_case *c, uint32_t i, const kve_state_seq_info *q,
                                 uint32_t tl, const float *ref, size_t s_row, size_t s_tab)
{
    uint32_t th = c->lay.table_heads, before = q->capacity - q->n_valid;
    kve_score_row r = {q->table_offset + (uint64_t)tl * th * q->capacity,
                       (uint64_t)tl * th * s_tab, q->capacity, q->prompt_len,
                       c->sd.schedule.window - before, q->n_tokens + before, (int32_t)i,
                       q->capacity};
    kve_score_desc d = c->kc.d;
    d.heads_per_table = th == 1 ? c->sd.n_heads : 1;
    d.n_rows = 1;
    d.rows = &r;
    d.slot_pos = c->lay.slot_pos;
    d.slot_pos_stride_table = 0;
    d.scores_stride_table = s_tab;
    size_t n = (size_t)(tl + 1) * th * s_tab;
    float *own = (float *)malloc(n * 4);
    for (size_t e = 0; e < n; e++) /* the buffer before kve_state_score's call */
        own[e] = (float)((int)((i * s_row + e) % 61) - 30) * 0.375f;
    memcpy(own, ref + i * s_row, (size_t)tl * th * s_tab * 4); /* earlier layers' */
    d.scores = own;
    KT_OK(kve_score(c->ctx, &d));
    ck_assert_msg(memcmp(own, ref + i * s_row, n * 4) == 0,
                  "call row %u, table layer %u: kve_state_score differs from kve_score over the "
                  "round's row", i, tl);
    free(own);
}

/* The reference: call row i alone through kve_state_score (its keys page-
 * table row i) at scores + i * stride_row, for every row with tokens. The
 * status must be the header's: KVE_ERR_INVALID exactly for a free row or
 * one past the scored rules. Returns the rows scored (valid and due). */
static uint32_t sdv_reference(sdv_case *c, uint32_t n, const uint32_t *rows, const uint32_t *n_new,
                              const kve_state_seq_info *info, uint32_t tl, float *ref,
                              size_t s_row, size_t s_tab, uint8_t *due)
{
    kve_score_desc d = c->kc.d;
    uint32_t scored = 0;
    for (uint32_t i = 0; i < n; i++) {
        due[i] = 0;
        if (!n_new[i])
            continue;
        int32_t cache_row = (int32_t)i;
        d.cache_rows = &cache_row;
        kve_status st = kve_state_score(c->b, 1, &rows[i], &n_new[i], tl, &d, ref + i * s_row,
                                        s_row, s_tab);
        const kve_state_seq_info *q = &info[rows[i]];
        int ok = q->active && sdv_fits(q, n_new[i], &c->sd.schedule);
        ck_assert_msg(st == (ok ? KVE_OK : KVE_ERR_INVALID),
                      "kve_state_score of call row %u (row %u, n_new %u): %s %s", i, rows[i],
                      n_new[i], kve_status_string(st), kve_last_error());
        due[i] = ok && sdv_rounds(q, n_new[i], c->sd.schedule.interval) == 1;
        scored += due[i];
        if (due[i])
            sdv_expect_round_row(c, i, q, tl, ref, s_row, s_tab);
    }
    return scored;
}

/* Every table layer scored by kve_state_score_device into @p dev and by the
 * reference into @p ref, both pre-filled with one pattern: equal bit for
 * bit over the whole buffer; call rows not scored are left as they were. */
static void sdv_scores(sdv_case *c, uint32_t n, const uint32_t *rows, const uint32_t *n_new,
                       const kve_state_seq_info *info, float *dev, float *ref, size_t len,
                       size_t s_row, size_t s_tab, sdv_seen *seen, int iter)
{
    uint8_t due[MAX_ROWS];
    for (size_t e = 0; e < len; e++)
        dev[e] = ref[e] = (float)((int)(e % 61) - 30) * 0.375f;
    for (uint32_t tl = 0; tl < c->lay.table_layers; tl++) {
        KT_OK(kve_state_score_device(c->a, n, rows, n_new, tl, &c->kc.d, dev, s_row, s_tab));
        uint32_t k = sdv_reference(c, n, rows, n_new, info, tl, ref, s_row, s_tab, due);
        if (tl == 0)
            seen->scored_rows += k;
        size_t e = 0; /* (one assertion a buffer: Check reports each passing one) */
        while (e < len && memcmp(&dev[e], &ref[e], 4) == 0)
            e++;
        ck_assert_msg(e == len,
                      "iter %d, table layer %u: element %zu (call row %zu) is %a, reference %a "
                      "(scorer %d, flags %u, page table %d, dtype %d)",
                      iter, tl, e, e / s_row, (double)dev[e % len], (double)ref[e % len],
                      (int)c->kc.d.scorer, c->kc.d.flags, (int)c->kc.d.keys.pages.kind,
                      (int)c->kc.d.keys.dtype);
    }
    for (uint32_t i = 0; i < n; i++) {
        seen->padding_rows += !n_new[i];
        seen->skipped_rows += n_new[i] && !due[i];
        size_t e = i * s_row;
        while (!due[i] && e < (i + 1) * s_row && dev[e] == (float)((int)(e % 61) - 30) * 0.375f)
            e++;
        ck_assert_msg(due[i] || e == (i + 1) * s_row,
                      "iter %d: call row %u is not scored, but element %zu changed", iter, i, e);
    }
}

/* Every row of the two states alike: infos, and for live rows tables and
 * running digests. */
static void sdv_expect_twins(sdv_case *c)
{
    for (uint32_t r = 0; r < c->sd.max_seqs; r++) {
        kve_state_seq_info p, q;
        KT_OK(kve_state_get_seq(c->a, r, &p));
        KT_OK(kve_state_get_seq(c->b, r, &q));
        ck_assert_msg(memcmp(&p, &q, sizeof p) == 0, "row %u: the twins' infos differ", r);
        if (p.active)
            ks_expect_same(c->a, r, c->b, r);
    }
}

/* The planned append's outputs equal the twin's (whose call has the
 * padding rows left out: call row i is its row @p to[i]). */
static void sdv_expect_outputs(const sdv_case *c, const ks_step *sa, const ks_step *sb,
                               uint32_t n, const uint32_t *n_new, const uint32_t *to,
                               uint32_t tokens)
{
    const kve_step_buffers *x = &sa->b, *y = &sb->b;
    uint32_t th = c->lay.table_heads;
    for (uint32_t l = 0; l < c->lay.table_layers; l++) {
        size_t at = (size_t)l * x->max_tokens * th;
        ck_assert_msg(memcmp(x->slot_mapping + at, y->slot_mapping + at, (size_t)tokens * th * 8) == 0,
                      "layer %u: slot mappings differ", l);
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t h = 0; h < th; h++) {
                size_t li = ((size_t)l * x->max_rows + i) * th + h;
                if (!n_new[i]) {
                    ck_assert_msg(x->n_moves[li] == 0, "padding call row %u has moves", i);
                    continue;
                }
                size_t lj = ((size_t)l * y->max_rows + to[i]) * th + h;
                ck_assert_uint_eq(x->n_moves[li], y->n_moves[lj]);
                ck_assert(memcmp(x->moves + li * x->max_moves * 2, y->moves + lj * y->max_moves * 2,
                                 (size_t)x->n_moves[li] * 8) == 0);
            }
    }
}

/* The first call row the planner refuses, and why (0: none; 2: free row;
 * 7: the scored rules), as the header orders the checks. */
static uint32_t sdv_refusal(const sdv_case *c, uint32_t n, const uint32_t *n_new,
                            const uint32_t *rows, const kve_state_seq_info *info, uint32_t *at)
{
    for (uint32_t i = 0; i < n; i++) {
        if (!n_new[i])
            continue;
        *at = i;
        if (!info[rows[i]].active)
            return 2;
        if (!sdv_fits(&info[rows[i]], n_new[i], &c->sd.schedule))
            return 7;
    }
    return 0;
}

/* One step: scores of every table layer, then the planned append on a and
 * kve_state_append on b (the padding rows left out, the reference scores). */
static void sdv_step(sdv_case *c, uint64_t *rng, sdv_seen *seen, int iter)
{
    kve_state_seq_info info[MAX_ROWS];
    for (uint32_t r = 0; r < c->sd.max_seqs; r++)
        KT_OK(kve_state_get_seq(c->b, r, &info[r]));
    uint32_t rows[MAX_ROWS], n_new[MAX_ROWS];
    uint32_t n = sdv_call(c, rng, info, rows, n_new);
    size_t s_tab = c->sd.max_slots + kt_below(rng, 3), s_row = c->tables * s_tab + kt_below(rng, 3);
    size_t len = n * s_row + 5;
    float *dev = (float *)malloc(len * 4), *ref = (float *)malloc(len * 4);
    sdv_scores(c, n, rows, n_new, info, dev, ref, len, s_row, s_tab, seen, iter);

    uint32_t max_new = 0, tokens = 0, nb = 0, to[MAX_ROWS], rows_b[MAX_ROWS], new_b[MAX_ROWS];
    float *ref_b = (float *)malloc(len * 4);
    for (uint32_t i = 0; i < n; i++) {
        max_new = n_new[i] > max_new ? n_new[i] : max_new;
        tokens += n_new[i];
        if (!n_new[i])
            continue;
        to[i] = nb;
        rows_b[nb] = rows[i];
        new_b[nb] = n_new[i];
        memcpy(ref_b + nb * s_row, ref + i * s_row, s_row * 4);
        nb++;
    }
    max_new += kt_below(rng, 2);
    ks_step sa, sb;
    ks_step_init(&sa, c->a, tokens + 1, n, max_new);
    ks_step_init(&sb, c->b, tokens + 1, nb ? nb : 1, max_new);
    sa.b.scores = dev;
    sb.b.scores = ref_b;
    sa.b.scores_stride_row = sb.b.scores_stride_row = s_row;
    sa.b.scores_stride_table = sb.b.scores_stride_table = s_tab;
    uint32_t at = 0, why = sdv_refusal(c, n, n_new, rows, info, &at);
    kve_status st = kve_state_append_device(c->a, n, rows, n_new, max_new, &sa.b);
    if (why == 0) {
        ck_assert_msg(st == KVE_OK, "iter %d: a valid planned append: %s", iter, kve_last_error());
        KT_OK(kve_state_append(c->b, nb, rows_b, new_b, &sb.b));
        sdv_expect_outputs(c, &sa, &sb, n, n_new, to, tokens);
        seen->appends++;
        for (uint32_t i = 0; i < n; i++)
            seen->rounds += n_new[i] && sdv_rounds(&info[rows[i]], n_new[i], c->sd.schedule.interval);
    } else {
        char want[200];
        snprintf(want, sizeof want, "kve_state_append_device: rows[%u] = %u (n_new[%u] = %u) %s",
                 at, rows[at], at, n_new[at],
                 why == 2 ? "holds no sequence" : "would run two rounds, or take more than the "
                                                  "window W of its tokens before its round");
        EXPECT_ERR(st, KVE_ERR_INVALID, want);
        ck_assert_int_ne(kve_state_append(c->b, nb, rows_b, new_b, &sb.b), KVE_OK);
        seen->refusals++;
        seen->scored_refusals += why == 7;
    }
    sdv_expect_twins(c); /* a refused call changed neither */
    for (uint32_t r = 0; r < c->sd.max_seqs; r++) { /* unchanged where refused */
        kve_state_seq_info q;
        KT_OK(kve_state_get_seq(c->a, r, &q));
        if (why)
            ck_assert_msg(memcmp(&q, &info[r], sizeof q) == 0, "a refused call changed row %u", r);
    }
    ks_step_free(&sa);
    ks_step_free(&sb);
    free(dev);
    free(ref);
    free(ref_b);
}

START_TEST(score_device_against_host)
{
    uint64_t rng = 0x39d0 + (uint64_t)_i * 7919;
    sdv_seen seen;
    memset(&seen, 0, sizeof seen);
    kve_context *ctx = ks_context();
    for (int iter = 0; iter < 700; iter++) {
        sdv_case c;
        sdv_open(&c, ctx, &rng);
        for (int step = 0; step < 10; step++) {
            sdv_step(&c, &rng, &seen, iter);
            uint32_t r = kt_below(&rng, c.sd.max_seqs);
            kve_state_seq_info q;
            KT_OK(kve_state_get_seq(c.a, r, &q));
            if (kt_below(&rng, 8) == 0) { /* a row retired, or a free row admitted */
                if (q.active) {
                    KT_OK(kve_state_retire(c.a, r));
                    KT_OK(kve_state_retire(c.b, r));
                } else {
                    sdv_admit(&c, r, &rng);
                }
            }
        }
        sdv_close(&c);
    }
    kve_context_destroy(ctx);
    ck_assert_uint_gt(seen.scored_rows, 2000);
    ck_assert_uint_gt(seen.skipped_rows, 4000);
    ck_assert_uint_gt(seen.padding_rows, 3000);
    ck_assert_uint_gt(seen.appends, 4500);
    ck_assert_uint_gt(seen.rounds, 1700);
    ck_assert_uint_gt(seen.scored_refusals, 500);
    ck_assert_uint_gt(seen.refusals, seen.scored_refusals);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_LOOP_TEST(score_device, score_device_against_host, 0, 3),
    };
    const kve_suite_spec spec = {"state_score_device", 600, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
